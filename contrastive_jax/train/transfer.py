"""Training from a pretrained network: the linear-evaluation and fine-tuning protocols.

A linear evaluation or a fine-tuning is a training run (:func:`contrastive_jax.train.loop.train`)
whose model starts from a pretraining checkpoint. Four fields of ``config.model``
(:class:`TransferSpec`) say how:

* ``init_from``: a pretraining work directory (its newest readable checkpoint), a checkpoint
  directory ``<workdir>/checkpoints/<step>``, or a weights file (``.safetensors``, ``.pth``,
  ``.pt``: a ``flax`` export, or a torchvision ResNet ``state_dict`` read into
  ``config.model.encoder``; :mod:`contrastive_jax.models.weights`); the encoder's parameters
  and batch-norm statistics are restored from it
  (:func:`contrastive_jax.train.pretrained.initialise`). Empty: no initialisation;
* ``trainable``: ``"all"`` (fine-tuning) or ``"head"`` (linear evaluation): the encoder is
  frozen: its features are ``stop_gradient``-ed (no gradient flows into it), its parameters
  are left out of the optimiser (``optax.set_to_zero``, no optimiser state) and kept as they
  were, and it runs in inference mode (batch norm on the checkpoint's running statistics,
  which stay as restored; no dropout), as SimCLR's ``model.py`` (``model_train_mode = False``
  with ``fine_tune_after_block >= 4``). ``frozen_encoder_bn="batch"`` normalises
  with each batch's statistics instead (over ``bn_axis_name``, global batch norm when it is
  ``"data"``) and still keeps the running statistics as restored: the SupCon TF code's stage
  2 (``--stage_2_update_encoder_batch_norm=False``: one training-mode graph serves both
  stages, and the stage-2 train op runs without the batch-norm update ops,
  ``supcon/launcher.py``, ``update_ops=[]``);
* ``init_head_layers``: the hidden layers (Linear, batch norm) of the pretrained MLP
  projection head that initialise the new head's first hidden layers: SimCLR v2's
  fine-tuning "from the first layer of the projection head" (Chen et al. 2020b, Sec. 2;
  google-research/simclr ``--ft_proj_selector=1``) is a head ``simclr_v2`` with
  ``num_hidden_layers=1``, ``out_features=num_classes`` and ``init_head_layers=1``.

The encoder config must be the pretraining run's (checked, naming the first difference).
Every setting is checked by :func:`contrastive_jax.train.spec.parse`; the checkpoint is read
by :func:`contrastive_jax.train.pretrained.initialise` in
:func:`~contrastive_jax.train.loop.train` before the work directory is created, so a missing
or unreadable ``init_from`` is a ConfigError that leaves nothing behind. This module holds
what the step needs of these settings (which leaves are frozen, and keeping them so); it
reads no checkpoint.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from contrastive_jax.errors import ConfigError

#: ``config.model.trainable``: what the optimiser trains.
TRAINABLE = ("all", "head")
#: ``config.model.frozen_encoder_bn``: the statistics a frozen encoder's batch norm uses.
FROZEN_ENCODER_BN = ("running", "batch")
#: The path of the encoder in the model's state (``PretrainModel.network.encoder``).
ENCODER_PATH = ("network", "encoder")


@dataclasses.dataclass(frozen=True)
class TransferSpec:
    """``config.model.init_from``, ``trainable`` and ``init_head_layers``: where the model
    starts from and what trains (module docstring)."""

    init_from: str = ""  # a pretraining workdir, <workdir>/checkpoints/<step> or weights file; "": none
    trainable: str = "all"  # "all" | "head" (the encoder frozen: linear evaluation)
    init_head_layers: int = 0  # hidden layers of the pretrained head copied into the new head
    # The frozen encoder's batch norm: "running" (the checkpoint's statistics) or "batch" (each
    # batch's statistics, the moving averages kept as restored: the SupCon TF code's stage 2).
    frozen_encoder_bn: str = "running"

    def __post_init__(self) -> None:
        if not isinstance(self.init_from, str):
            raise ConfigError(
                f"config.model.init_from must be a path (str), got {self.init_from!r}")
        if self.trainable not in TRAINABLE:
            raise ConfigError(
                f"config.model.trainable={self.trainable!r} is not one of {TRAINABLE}")
        if self.frozen_encoder_bn not in FROZEN_ENCODER_BN:
            raise ConfigError(f"config.model.frozen_encoder_bn must be one of "
                              f"{FROZEN_ENCODER_BN}, got {self.frozen_encoder_bn!r}")
        if self.frozen_encoder_bn != "running" and self.trainable != "head":
            raise ConfigError(
                f"config.model.frozen_encoder_bn={self.frozen_encoder_bn!r} is for a frozen "
                f"encoder (config.model.trainable='head'), got trainable={self.trainable!r}")
        layers = self.init_head_layers
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 0:
            raise ConfigError(
                f"config.model.init_head_layers must be an int >= 0, got {layers!r}")
        if not self.init_from and (self.trainable == "head" or layers):
            what = ("config.model.trainable='head' freezes the encoder" if layers == 0
                    else f"config.model.init_head_layers={layers} copies pretrained layers")
            raise ConfigError(
                f"{what}, but config.model.init_from is empty: set it to a pretraining work "
                "directory or checkpoint")

    @property
    def frozen_encoder(self) -> bool:
        return self.trainable == "head"


def parse_transfer(model: Any) -> TransferSpec:
    """The :class:`TransferSpec` of ``config.model`` (a config saved before these fields
    existed gets the defaults)."""
    defaults = TransferSpec()
    return TransferSpec(**{f.name: model.get(f.name, getattr(defaults, f.name))
                           for f in dataclasses.fields(TransferSpec)})


def is_frozen(path: tuple, frozen_encoder: bool) -> bool:
    """Whether the state leaf at ``path`` (keys of an ``nnx.State``) is frozen."""
    return frozen_encoder and tuple(_key(k) for k in path[:len(ENCODER_PATH)]) == ENCODER_PATH


def frozen_labels(tree: Any, frozen_encoder: bool) -> Any:
    """``"frozen"`` or ``"trainable"`` per leaf of a params tree (``optax.multi_transform``)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: "frozen" if is_frozen(path, frozen_encoder) else "trainable", tree)


def keep_frozen(old: Any, new: Any, frozen_encoder: bool) -> Any:
    """``new`` with the frozen leaves of ``old``: the encoder stays bit for bit as restored."""
    if not frozen_encoder:
        return new
    return jax.tree_util.tree_map_with_path(
        lambda path, a, b: a if is_frozen(path, frozen_encoder) else b, old, new)


def _key(key: Any) -> Any:
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return getattr(key, attribute)
    return key
