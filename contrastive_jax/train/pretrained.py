"""Load a pretrained network from a work directory or one of its checkpoints."""

from __future__ import annotations

import json
import logging
import re
from typing import NamedTuple

import ml_collections
from flax import nnx

from contrastive_jax.train import loop, paths
from contrastive_jax.train.checkpoint import CHECKPOINT_DIR, Checkpointer, abstract_like


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
    """The config a pretraining run saved in ``workdir``."""
    return ml_collections.ConfigDict(
        json.loads((paths.as_path(workdir) / loop.CONFIG_FILE).read_text())
    )


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
    """(graphdef, rest, state) shaped like the run's training state.

    The optimiser state's structure does not depend on the schedule, so any
    valid schedule length will do.
    """
    warmup = int(config.optimizer.warmup_steps or 0)
    graphdef, rest, _, _, state = loop.init_state(
        config,
        num_classes,
        steps_per_epoch=1,
        global_batch_size=int(config.data.global_batch_size),
        total_steps=max(10**9, warmup + 1),
    )
    return graphdef, rest, state
