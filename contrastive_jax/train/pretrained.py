"""Load a pretrained network from a work directory or one of its checkpoints, and start a
run from one.

:func:`load_pretrained` restores the network of a pretraining run (evaluation, embedding);
:func:`initialise` puts its encoder (and hidden layers of its head) into a new run's
initial state: the ``config.model.init_from`` of linear evaluation and fine-tuning
(:mod:`contrastive_jax.train.transfer`), called by :func:`contrastive_jax.train.loop.train`
before the work directory is created. A pretraining work directory holds the run's config
(:data:`CONFIG_FILE`, written by the loop) and its checkpoints
(:data:`~contrastive_jax.train.checkpoint.CHECKPOINT_DIR`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh

from contrastive_jax.errors import ConfigError
from contrastive_jax.models import weights
from contrastive_jax.parallel import DATA_AXIS
from contrastive_jax.train import optim, paths
from contrastive_jax.train.build import DataFacts, build
from contrastive_jax.train.checkpoint import (
    CHECKPOINT_DIR,
    Checkpointer,
    CheckpointError,
    abstract_like,
    quiet_libraries,
    short_error,
)
from contrastive_jax.train.config import rename_saved
from contrastive_jax.train.spec import RunSpec, parse
from contrastive_jax.train.step import TrainState
from contrastive_jax.train.transfer import ENCODER_PATH, TransferSpec

#: The run's config in its work directory (written by :func:`contrastive_jax.train.loop.train`).
CONFIG_FILE = "config.json"


class Pretrained(NamedTuple):
    """A restored network in evaluation mode (BN uses its running statistics).

    Attributes:
      network: ``ContrastiveModel``; ``network.encoder(x)`` gives features [B, F],
        ``network(x)`` gives (features, projections).
      config: the pretraining config.
      step: the checkpoint's step.
      workdir: the pretraining work directory.
    """

    network: nnx.Module
    config: ml_collections.ConfigDict
    step: int
    workdir: str


def locate_checkpoint(path: str) -> tuple[str, int | None]:
    """(workdir, step or None for the latest) of a work directory or checkpoint path.

    Local or ``gs://`` (:mod:`.paths`); a local path is made absolute.
    """
    location = paths.as_path(path)
    if (location / CONFIG_FILE).is_file():
        return str(location), None
    if re.fullmatch(r"\d+", location.name) and location.parent.name == CHECKPOINT_DIR:
        return str(location.parent.parent), int(location.name)
    raise FileNotFoundError(
        f"{location} is neither a pretraining work directory (with {CONFIG_FILE}) nor a "
        f"checkpoint directory <workdir>/{CHECKPOINT_DIR}/<step>"
    )


def load_config(workdir: str) -> ml_collections.ConfigDict:
    """The config a pretraining run saved in ``workdir`` (fields saved under a name that was
    since renamed, :data:`~contrastive_jax.train.config.RENAMED`, under their new name)."""
    saved = json.loads((paths.as_path(workdir) / CONFIG_FILE).read_text())
    return ml_collections.ConfigDict(rename_saved(saved))


def load_pretrained(path: str) -> Pretrained:
    """Restores the network of a pretraining run.

    Args:
      path: the work directory (its newest readable checkpoint is used) or a
        checkpoint directory ``<workdir>/checkpoints/<step>``.

    Raises:
      FileNotFoundError: no such run, no checkpoint in it, or none at the step named.
      CheckpointError: none of the checkpoints tried can be read (one warning line each).
    """
    workdir, step = locate_checkpoint(path)
    config = load_config(workdir)
    checkpointer = Checkpointer(workdir, asynchronous=False)
    try:
        present = checkpointer.steps()
        if step is not None and step not in present:
            raise FileNotFoundError(f"no checkpoint at step {step} in {checkpointer.directory} "
                                    f"(its checkpoints: steps {present})")
        candidates = [step] if step is not None else list(reversed(present))
        if not candidates:
            raise FileNotFoundError(f"no checkpoint in {checkpointer.directory}")
        failures = []
        with quiet_libraries():
            for position, candidate in enumerate(candidates):
                try:
                    meta = checkpointer.restore_meta(candidate)
                    graphdef, rest, state = _abstract_state(config, int(meta["num_classes"]))
                    state, meta = checkpointer.restore(candidate, abstract_like(state))
                    break
                except Exception as err:  # noqa: BLE001 - a damaged checkpoint: try an older one
                    failures.append(f"step {candidate}: {short_error(err)}")
                    older = candidates[position + 1:]
                    logging.warning("the checkpoint at step %d in %s does not restore (%s)%s",
                                    candidate, checkpointer.directory, short_error(err),
                                    f"; trying step {older[0]}" if older else "")
            else:
                raise CheckpointError(
                    f"no readable checkpoint in {checkpointer.directory}: " + "; ".join(failures))
    finally:
        checkpointer.close()
    model = nnx.merge(graphdef, state.params, state.batch_stats, rest)
    model.eval()
    return Pretrained(model.network, config, int(meta["step"]), workdir)


def _abstract_state(config: ml_collections.ConfigDict, num_classes: int):
    """(graphdef, rest, state) shaped like the run's training state, built by
    :func:`contrastive_jax.train.build.build` on one device.

    The state's structure depends on neither the data's size nor the schedule's length, so
    a nominal epoch of one step will do; the schedule's warning of a warm-up longer than
    that nominal run is not the user's concern here and is silenced.
    """
    spec = parse(config)
    mesh = Mesh(np.asarray(jax.devices()[:1]), (DATA_AXIS,), axis_types=(AxisType.Auto,))
    facts = DataFacts(spec.data.global_batch_size, num_classes, spec.data.known_image_size or 1)
    optim_logger = logging.getLogger(optim.__name__)
    level = optim_logger.level
    optim_logger.setLevel(logging.ERROR)
    try:
        run = build(spec, mesh, facts)
    finally:
        optim_logger.setLevel(level)
    return run.graphdef, run.rest, run.state


def initialise(state: TrainState, spec: RunSpec) -> TrainState:
    """``state`` (host arrays) with the encoder (and ``init_head_layers`` hidden layers of the head) of the pretraining
    checkpoint at ``spec.transfer.init_from``, or of the weights file there
    (:func:`contrastive_jax.models.weights.is_weights_file`); ``state`` itself without one.

    Raises:
      ConfigError: the run or its checkpoint is missing, its encoder config is not this
        run's, or its head has fewer hidden layers (or other widths) than asked for.
      CheckpointError: none of the checkpoints asked for can be read (damaged).
    """
    transfer = spec.transfer
    if not transfer.init_from:
        return state
    if weights.is_weights_file(transfer.init_from):
        return _initialise_from_file(state, spec)
    try:
        pretrained = load_pretrained(transfer.init_from)
    except (FileNotFoundError, OSError, ValueError) as err:  # a damaged one: CheckpointError
        raise ConfigError(
            f"config.model.init_from={transfer.init_from!r} cannot be restored: {err}") from err
    saved = dataclasses.asdict(parse(pretrained.config).model.encoder)
    current = dataclasses.asdict(spec.model.encoder)
    differences = sorted(k for k in saved if saved[k] != current[k])
    if differences:
        name = differences[0]
        raise ConfigError(
            f"config.model.encoder.{name}={current[name]!r}, but the pretraining run at "
            f"{transfer.init_from} has {saved[name]!r}: the encoder must be the one "
            "pretrained")
    network: Any = pretrained.network  # a ContrastiveModel
    params = _replace(state.params, ENCODER_PATH, nnx.state(network.encoder, nnx.Param))
    stats = _replace(state.batch_stats, ENCODER_PATH, nnx.state(network.encoder, nnx.BatchStat))
    for layer in range(transfer.init_head_layers):
        params, stats = _copy_head_layer(params, stats, network.head, layer, transfer)
    return state._replace(params=params, batch_stats=stats)


def _initialise_from_file(state: TrainState, spec: RunSpec) -> TrainState:
    """:func:`initialise` from a weights file (:mod:`contrastive_jax.models.weights`: a
    ``flax`` export, or a torchvision ResNet ``state_dict`` read into ``config.model.encoder``)."""
    transfer = spec.transfer
    try:
        encoder, head = weights.load_network(transfer.init_from, spec.model.encoder)
    except (FileNotFoundError, OSError, ValueError, ModuleNotFoundError) as err:  # torch for .pth
        raise ConfigError(
            f"config.model.init_from={transfer.init_from!r} cannot be read: {err}") from err
    params = _replace(state.params, ENCODER_PATH, nnx.state(encoder, nnx.Param))
    stats = _replace(state.batch_stats, ENCODER_PATH, nnx.state(encoder, nnx.BatchStat))
    if transfer.init_head_layers and head is None:
        raise ConfigError(
            f"config.model.init_head_layers={transfer.init_head_layers}, but "
            f"{transfer.init_from} holds no projection head (export it with --with_head "
            "--format flax)")
    for layer in range(transfer.init_head_layers):
        params, stats = _copy_head_layer(params, stats, head, layer, transfer)
    return state._replace(params=params, batch_stats=stats)


def _copy_head_layer(params, stats, head: Any, layer: int, transfer: TransferSpec):
    """params, stats with hidden layer ``layer`` (its Linear and batch norm) of ``head``."""
    hidden = getattr(head, "hidden_linears", ())
    if layer >= len(hidden):
        raise ConfigError(
            f"config.model.init_head_layers={transfer.init_head_layers}, but the pretrained "
            f"head of {transfer.init_from} has {len(hidden)} hidden layers")
    for name, module in (("hidden_linears", hidden[layer]),
                         ("hidden_bns", head.hidden_bns[layer])):
        path = ("network", "head", name, layer)
        params = _replace(params, path, nnx.state(module, nnx.Param))
        stats = _replace(stats, path, nnx.state(module, nnx.BatchStat))
    return params, stats


def _replace(tree: Any, path: tuple, subtree: Any) -> Any:
    """``tree`` (an ``nnx.State``) with ``subtree`` at ``path``, whose structure, shapes and
    dtypes must be those it replaces; an empty ``subtree`` (a layer without batch statistics)
    changes nothing."""
    if not jax.tree.leaves(subtree):
        return tree
    target = tree.to_pure_dict()
    parent = target
    try:
        for key in path[:-1]:
            parent = parent[key]
        old = parent[path[-1]]
    except (KeyError, IndexError, TypeError) as err:
        raise ConfigError(
            f"config.model: the model has no {'.'.join(map(str, path))} to initialise from "
            "config.model.init_from (is config.model.head the head asked for?)") from err
    # Host copies: the restored arrays sit on this process's device, the run's state is put
    # on the whole mesh (every process's devices) from host arrays.
    new = jax.tree.map(np.asarray, subtree.to_pure_dict())
    shapes = jax.tree.map(lambda a: (a.shape, a.dtype), old)
    if jax.tree.map(lambda a: (a.shape, a.dtype), new) != shapes:
        raise ConfigError(
            f"config.model: {'.'.join(map(str, path))} of the pretrained network "
            "(config.model.init_from) has other shapes than this run's: check "
            "config.model.head.hidden_features and the encoder")
    parent[path[-1]] = new
    result = jax.tree.map(lambda a: a, tree)
    nnx.replace_by_pure_dict(result, target)
    return result
