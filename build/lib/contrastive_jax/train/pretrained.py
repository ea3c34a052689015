"""Load a pretrained network from a work directory or one of its checkpoints."""

from __future__ import annotations

import json
import logging
import re
from typing import NamedTuple

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh

from contrastive_jax.parallel import DATA_AXIS
from contrastive_jax.train import loop, optim, paths
from contrastive_jax.train.build import DataFacts, build
from contrastive_jax.train.checkpoint import CHECKPOINT_DIR, Checkpointer, abstract_like
from contrastive_jax.train.config import rename_saved
from contrastive_jax.train.spec import parse


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
    if (location / loop.CONFIG_FILE).is_file():
        return str(location), None
    if re.fullmatch(r"\d+", location.name) and location.parent.name == CHECKPOINT_DIR:
        return str(location.parent.parent), int(location.name)
    raise FileNotFoundError(
        f"{location} is neither a pretraining work directory (with {loop.CONFIG_FILE}) nor a "
        f"checkpoint directory <workdir>/{CHECKPOINT_DIR}/<step>"
    )


def load_config(workdir: str) -> ml_collections.ConfigDict:
    """The config a pretraining run saved in ``workdir`` (fields saved under a name that was
    since renamed, :data:`~contrastive_jax.train.config.RENAMED`, under their new name)."""
    saved = json.loads((paths.as_path(workdir) / loop.CONFIG_FILE).read_text())
    return ml_collections.ConfigDict(rename_saved(saved))


def load_pretrained(path: str) -> Pretrained:
    """Restores the network of a pretraining run.

    Args:
      path: the work directory (its newest readable checkpoint is used) or a
        checkpoint directory ``<workdir>/checkpoints/<step>``.
    """
    workdir, step = locate_checkpoint(path)
    config = load_config(workdir)
    checkpointer = Checkpointer(workdir, asynchronous=False)
    try:
        candidates = [step] if step is not None else list(reversed(checkpointer.steps()))
        if not candidates:
            raise FileNotFoundError(f"no checkpoint in {checkpointer.directory}")
        failures = []
        for candidate in candidates:
            try:
                meta = checkpointer.restore_meta(candidate)
                graphdef, rest, state = _abstract_state(config, int(meta["num_classes"]))
                state, meta = checkpointer.restore(candidate, abstract_like(state))
                break
            except Exception as err:  # noqa: BLE001 - a damaged checkpoint: try an older one
                failures.append(f"step {candidate}: {type(err).__name__}: {err}")
                logging.warning("the checkpoint at step %d in %s does not restore (%s: %s); "
                                "trying an older one", candidate, checkpointer.directory,
                                type(err).__name__, str(err).splitlines()[0] if str(err) else "")
        else:
            raise FileNotFoundError(
                f"no readable checkpoint in {checkpointer.directory}: " + "; ".join(failures)
            )
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
