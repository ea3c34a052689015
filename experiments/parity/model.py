"""The parity model and the converter from the reference ``SupConResNet`` state dict.

The reference model (Khosla et al., 2020, "Supervised Contrastive Learning", arXiv:2004.11362;
``SupConResNet('resnet18')`` of github.com/HobbitLong/SupContrast) is a CIFAR-stem ResNet-18
(3x3 stride-1 stem convolution, no max-pool, bias-free convolutions with symmetric padding
``k // 2``, BatchNorm with epsilon 1e-5 and PyTorch momentum 0.1) and a projection head
``Linear(512, 512) -> ReLU -> Linear(512, 128)`` with biases and no BatchNorm, whose output is
L2-normalised.

Our encoder expresses the reference encoder through its config
(:func:`parity_encoder_config`: ``resnet18``, ``stem="cifar"``, ``bn_momentum=0.9`` = PyTorch's
0.1). Our library's MLP head (:class:`contrastive_jax.models.MLPHead`) is SimCLR v2's
bias-free ``Linear -> BN -> ReLU -> Linear`` and cannot express the reference head, so the
parity model uses :class:`SupConMLPHead` below, which can.

The converter is pure numpy on the state-dict values (any mapping of names to arrays or CPU
tensors), so it needs PyTorch only to produce the state dict.

Layouts: PyTorch convolution weights are ``[O, I, kh, kw]``, ours (NHWC convolutions)
``[kh, kw, I, O]``; PyTorch ``Linear`` weights are ``[out, in]``, ours ``[in, out]``. BatchNorm
``weight``/``bias``/``running_mean``/``running_var`` are our ``scale``/``bias``/``mean``/``var``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from contrastive_jax import models
from contrastive_jax.models import BasicBlock, Bottleneck

#: Blocks per stage of the reference networks, keyed by (block class, number of blocks).
_STAGES = {
    (BasicBlock, 8): (2, 2, 2, 2),  # resnet18
    (BasicBlock, 16): (3, 4, 6, 3),  # resnet34
    (Bottleneck, 16): (3, 4, 6, 3),  # resnet50
}

#: Kinds of parameter: how a PyTorch array maps onto ours.
CONV, LINEAR, VECTOR = "conv", "linear", "vector"


def _torch_linear_bias_init(fan_in: int):
    """PyTorch ``nn.Linear``'s bias initialiser, ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``."""
    bound = 1.0 / np.sqrt(fan_in)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class SupConMLPHead(nnx.Module):
    """The reference SupCon projection head: ``Linear -> ReLU -> Linear``, both with bias.

    ``__call__``: h [B, in_features] -> z [B, out_features] float32 (not normalised; every
    contrastive_jax loss L2-normalises its input rows, as the reference's ``F.normalize`` does).

    Initialised as PyTorch's ``nn.Linear``: weights and biases ``U(-1/sqrt(fan_in),
    1/sqrt(fan_in))`` (Kaiming-uniform with ``a = sqrt(5)``).

    Args:
      in_features: the encoder's width (512 for ResNet-18).
      out_features: projection width (the reference's ``feat_dim``, 128).
      hidden_features: hidden width; ``None`` means ``in_features`` (the reference).
      rngs: initialisation RNGs.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int = 128,
        *,
        hidden_features: int | None = None,
        rngs: nnx.Rngs,
    ):
        hidden_features = in_features if hidden_features is None else hidden_features
        for name, value in (
            ("in_features", in_features),
            ("out_features", out_features),
            ("hidden_features", hidden_features),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        kernel_init = nnx.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
        self.fc1 = nnx.Linear(
            in_features,
            hidden_features,
            kernel_init=kernel_init,
            bias_init=_torch_linear_bias_init(in_features),
            rngs=rngs,
        )
        self.fc2 = nnx.Linear(
            hidden_features,
            out_features,
            kernel_init=kernel_init,
            bias_init=_torch_linear_bias_init(hidden_features),
            rngs=rngs,
        )

    def __call__(self, h: jax.Array) -> jax.Array:
        if h.ndim != 2:
            raise ValueError(f"h must be [B, in_features], got shape {h.shape}")
        return self.fc2(nnx.relu(self.fc1(h))).astype(jnp.float32)


#: Our encoder's fields that express the reference ``SupConResNet`` encoder (the rest default).
PARITY_ENCODER_FIELDS = {
    "stem": "cifar",
    "width": 1.0,
    "bn_momentum": 0.9,
    "zero_init_residual": False,
    "dtype": "float32",
}


def parity_encoder_config(name: str = "resnet18") -> Any:
    """Our encoder config that expresses the reference ``SupConResNet`` encoder, as an
    ``ml_collections.ConfigDict`` for a training config (needs ml_collections).

    CIFAR stem, width 1, BN running-average decay 0.9 (PyTorch ``momentum=0.1``), float32, no
    zero-initialised residual BN (the reference's ``zero_init_residual=False``), per-device BN.
    """
    config = models.default_encoder_config()
    config.update({"name": name, **PARITY_ENCODER_FIELDS})
    return config


def build_parity_model(
    name: str = "resnet18", feat_dim: int = 128, *, seed: int = 0
) -> models.ContrastiveModel:
    """Our encoder (:func:`parity_encoder_config`) + :class:`SupConMLPHead`, in training mode.

    ``model(x)``: x [B, H, W, 3] -> (features [B, 512], projections [B, feat_dim]).
    """
    rngs = nnx.Rngs(seed)
    # A plain dict: the step harness runs where ml_collections is not installed (a GPU image).
    encoder = models.create_encoder({"name": name, **PARITY_ENCODER_FIELDS}, rngs=rngs)
    head = SupConMLPHead(encoder.num_features, feat_dim, rngs=rngs)
    model = models.ContrastiveModel(encoder, head)
    model.train()
    return model


def _bn_entries(torch_prefix: str, path: tuple) -> list[tuple[str, tuple, str]]:
    return [
        (f"{torch_prefix}.weight", (*path, "scale"), VECTOR),
        (f"{torch_prefix}.bias", (*path, "bias"), VECTOR),
        (f"{torch_prefix}.running_mean", (*path, "mean"), VECTOR),
        (f"{torch_prefix}.running_var", (*path, "var"), VECTOR),
    ]


def parameter_map(model: models.ContrastiveModel) -> list[tuple[str, tuple, str]]:
    """Every (PyTorch state-dict key, our variable path, kind) pair of the parity model.

    Our paths are tuples of attribute names and list indices from the model root, e.g.
    ``("encoder", "blocks", 2, "shortcut", "conv", "kernel")`` for
    ``encoder.layer2.0.shortcut.0.weight``. ``kind`` is :data:`CONV`, :data:`LINEAR` or
    :data:`VECTOR`. BatchNorm ``num_batches_tracked`` counters have no counterpart.

    Raises:
      ValueError: the model is not a ResNet-18/34/50 + :class:`SupConMLPHead`.
    """
    encoder, head = model.encoder, model.head
    if not isinstance(encoder, models.ResNet) or encoder.stem != "cifar":
        raise ValueError("model.encoder must be a CIFAR-stem contrastive_jax ResNet")
    if not isinstance(head, SupConMLPHead):
        raise ValueError(f"model.head must be a SupConMLPHead, got {type(head).__name__}")
    blocks = list(encoder.blocks)
    key = (type(blocks[0]), len(blocks))
    if key not in _STAGES:
        raise ValueError(f"no reference ResNet has {len(blocks)} blocks of {key[0].__name__}")
    entries = [("encoder.conv1.weight", ("encoder", "conv1", "kernel"), CONV)]
    entries += _bn_entries("encoder.bn1", ("encoder", "bn1"))
    index = 0
    for layer, num_blocks in enumerate(_STAGES[key], start=1):
        for j in range(num_blocks):
            block = blocks[index]
            torch_block = f"encoder.layer{layer}.{j}"
            path = ("encoder", "blocks", index)
            for k in (1, 2, 3):
                if hasattr(block, f"conv{k}"):
                    entries.append(
                        (f"{torch_block}.conv{k}.weight", (*path, f"conv{k}", "kernel"), CONV)
                    )
                    entries += _bn_entries(f"{torch_block}.bn{k}", (*path, f"bn{k}"))
            if block.shortcut is not None:
                entries.append(
                    (f"{torch_block}.shortcut.0.weight", (*path, "shortcut", "conv", "kernel"), CONV)
                )
                entries += _bn_entries(f"{torch_block}.shortcut.1", (*path, "shortcut", "bn"))
            index += 1
    for torch_index, ours in ((0, "fc1"), (2, "fc2")):
        entries.append((f"head.{torch_index}.weight", ("head", ours, "kernel"), LINEAR))
        entries.append((f"head.{torch_index}.bias", ("head", ours, "bias"), VECTOR))
    return entries


def from_torch_layout(value: Any, kind: str) -> np.ndarray:
    """A PyTorch array (numpy or CPU tensor) in our layout, float32."""
    array = np.asarray(value, dtype=np.float32)
    if kind == CONV:
        return array.transpose(2, 3, 1, 0)  # [O, I, kh, kw] -> [kh, kw, I, O]
    if kind == LINEAR:
        return array.T  # [out, in] -> [in, out]
    return array


def to_torch_layout(value: Any, kind: str) -> np.ndarray:
    """One of our arrays in PyTorch's layout (the inverse of :func:`from_torch_layout`)."""
    array = np.asarray(value, dtype=np.float32)
    if kind == CONV:
        return array.transpose(3, 2, 0, 1)  # [kh, kw, I, O] -> [O, I, kh, kw]
    if kind == LINEAR:
        return array.T
    return array


def get_path(tree: Any, path: tuple) -> Any:
    """``tree.a[2].b`` for ``path = ("a", 2, "b")``; works on modules and nnx.State."""
    for part in path:
        tree = tree[part] if isinstance(part, int) or isinstance(tree, Mapping) else getattr(
            tree, part
        )
    return tree


def load_torch_state_dict(
    model: models.ContrastiveModel, state_dict: Mapping[str, Any]
) -> models.ContrastiveModel:
    """Copies a reference ``SupConResNet`` state dict into ``model`` in place and returns it.

    Parameters and running BN statistics (our ``nnx.BatchStat``) are both copied. Every key of
    ``state_dict`` but ``*.num_batches_tracked`` must map onto exactly one of our variables with
    the same shape after the layout change, and every variable must be written.

    Args:
      model: a parity model, see :func:`build_parity_model`.
      state_dict: ``SupConResNet.state_dict()`` (values: CPU tensors or numpy arrays). A
        ``DataParallel`` prefix (``encoder.module.``) is accepted.

    Raises:
      ValueError: a key is missing or left over, or a shape differs; the message names it.
    """
    values = {k.replace("encoder.module.", "encoder."): v for k, v in state_dict.items()}
    values = {k: v for k, v in values.items() if not k.endswith("num_batches_tracked")}
    entries = parameter_map(model)
    expected = {torch_key for torch_key, _, _ in entries}
    missing = sorted(expected - set(values))
    extra = sorted(set(values) - expected)
    if missing or extra:
        raise ValueError(
            f"state dict does not match the parity model: missing keys {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}, unexpected keys {extra[:5]}"
            f"{' ...' if len(extra) > 5 else ''}"
        )
    for torch_key, path, kind in entries:
        variable = get_path(model, path)
        array = from_torch_layout(_to_numpy(values[torch_key]), kind)
        if array.shape != variable[...].shape:
            raise ValueError(
                f"state dict key {torch_key!r}: shape {tuple(np.shape(values[torch_key]))} is "
                f"{array.shape} in our layout, but {'.'.join(map(str, path))} has shape "
                f"{variable[...].shape}"
            )
        variable[...] = jnp.asarray(array)
    return model


def _to_numpy(value: Any) -> np.ndarray:
    """A CPU tensor (detached) or array-like as numpy."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)
