"""A work directory's record of its run: the config it was started with and the amendments
of its resumes.

A work directory holds the config its run was started with (:data:`CONFIG_FILE`, written
once, by the run that starts at step 0) and, when a resume changed one of the fields of
:data:`RESUMABLE`, one line per such resume in :data:`AMENDMENTS_FILE`: the step it took
effect from and each changed field with its old and new value. The two together tell what
computed every step of the run.

:func:`compare` is called by :func:`contrastive_jax.train.loop.train` before anything is
written: a resume whose config differs from the recorded one in any other field (the seed,
the data, the batch, the loss, the augmentation, the schedule, the model, the optimiser)
is refused with a :class:`~contrastive_jax.errors.ConfigMismatch` that names every such field
with both values. The fields of :data:`RESUMABLE` change how the run is watched, logged and
checkpointed, or how long it runs, not what a step computes; ``docs/cli.md`` lists them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import ml_collections
from etils import epath

from contrastive_jax.errors import ConfigError, ConfigMismatch
from contrastive_jax.train.checkpoint import CHECKPOINT_DIR
from contrastive_jax.train.config import default_config, rename_saved
from contrastive_jax.train.pretrained import CONFIG_FILE  # the run's config as it was started

#: One JSON line per resume that changed a field of :data:`RESUMABLE`:
#: ``{"step": N, "changes": {"train.total_steps": [old, new], ...}}``, and ``"schedule"``
#: (a sentence) when the run's length changed a learning-rate schedule that follows it.
AMENDMENTS_FILE = "amendments.jsonl"

#: The fields a resume may change (each recorded in :data:`AMENDMENTS_FILE`); a change to
#: any other field is refused. The one list of them (``docs/cli.md`` shows it).
RESUMABLE = (
    # the run's length: extend (or shorten, down to the newest checkpoint) a run
    "train.epochs", "train.total_steps",
    # logging, checkpoints and their retention
    "train.log_every", "train.checkpoint_every", "train.keep_checkpoints",
    # what happens at a non-finite step: stop, or skip it
    "train.skip_nonfinite",
    # the monitors and evaluations, which read the state and change nothing of it
    "train.eval_every", "train.knn_k", "train.knn_temperature", "train.knn_bank_size",
    "train.knn_query_size", "train.validate_every_epochs", "train.collapse_threshold",
    "train.collapse_patience", "train.wandb_project",
    # how fast, not what: prefetching, loader threads, compilation cache, profiling
    "train.device_prefetch", "train.compilation_cache_dir", "train.profile_steps",
    "data.prefetch", "data.loader_threads", "data.in_memory", "data.download",
)

#: The fields of :data:`RESUMABLE` that set the run's length (and a schedule that follows it).
RUN_LENGTH = ("train.epochs", "train.total_steps")

def checkpoint_steps(workdir: epath.Path) -> list[int]:
    """The steps of the finalised checkpoints in ``workdir`` (their directory names), oldest
    first, read without Orbax: a save in progress (``<step>.orbax-checkpoint-tmp-*``) is none."""
    folder = workdir / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if re.fullmatch(r"\d+", p.name))


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    """``{"train.total_steps": 6, ...}``: every leaf of a nested config dict by its dotted
    path (lists are leaves)."""
    leaves: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            leaves.update(flatten(value, f"{path}."))
        else:
            leaves[path] = value
    return leaves


def with_defaults(config: dict) -> dict[str, Any]:
    """The flattened config dict over the flattened defaults: a field a config (or an
    older version's saved one) does not hold compares as its default."""
    return {**flatten(as_json(default_config())), **flatten(config)}


def as_json(config: ml_collections.ConfigDict) -> dict:
    """``config`` as :data:`CONFIG_FILE` stores it (tuples as lists, ...)."""
    return json.loads(config.to_json_best_effort())


def recorded(workdir: epath.Path) -> dict[str, Any] | None:
    """The flattened config the run in ``workdir`` runs under now: its :data:`CONFIG_FILE`
    with every amendment applied; None without a config file."""
    config_file = workdir / CONFIG_FILE
    if not config_file.is_file():
        return None
    try:
        saved = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{config_file} cannot be read ({err}): the work directory's "
                          "record is damaged; use a new --workdir") from err
    leaves = with_defaults(rename_saved(saved))
    for amendment in amendments(workdir):
        leaves.update({name: new for name, (_, new) in amendment["changes"].items()})
    return leaves


def amendments(workdir: epath.Path) -> list[dict]:
    """The amendments of :data:`AMENDMENTS_FILE`, oldest first (none without the file)."""
    path = workdir / AMENDMENTS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(
            a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b


def compare(workdir: epath.Path, config: ml_collections.ConfigDict) -> dict[str, list]:
    """The changes of :data:`RESUMABLE` fields a resume of ``workdir`` with ``config`` makes,
    ``{"train.total_steps": [old, new], ...}``; {} for a new run (no checkpoint yet) or
    the same config.

    Raises:
      ConfigMismatch: ``workdir`` holds a checkpoint and ``config`` differs from the config
        it was started with (amendments applied) in a field not in :data:`RESUMABLE`; the
        message names each such field with both values.
      ConfigError: the work directory's config file cannot be read.
    """
    if not checkpoint_steps(workdir):
        return {}
    before = recorded(workdir)
    if before is None:  # a work directory of a version that wrote no config: nothing to compare
        return {}
    now = with_defaults(as_json(config))
    changed = sorted(name for name in set(before) | set(now)
                     if not _same(before.get(name), now.get(name)))
    refused = [name for name in changed if name not in RESUMABLE]
    if refused:
        fields = "; ".join(f"config.{name}: {before.get(name)!r} in the run, {now.get(name)!r} "
                           "now" for name in refused)
        raise ConfigMismatch(
            f"{workdir} holds a run started with another config ({fields}); a resume may "
            "change only the fields that docs/cli.md lists under Resume (the run's length, "
            "logging, checkpoints, monitors). Run with the run's config "
            f"({workdir / CONFIG_FILE}, with {AMENDMENTS_FILE}) or use a new --workdir")
    return {name: [before.get(name), now.get(name)] for name in changed}


def write(workdir: epath.Path, config: ml_collections.ConfigDict, step: int,
          changes: dict[str, list]) -> None:
    """Records the run of ``config`` in ``workdir`` resumed at ``step`` (0: started): a new
    run's :data:`CONFIG_FILE` (and no amendments), a resume's amendment (if any ``changes``).
    Called by process 0 only."""
    amendments_file = workdir / AMENDMENTS_FILE
    if step == 0:
        (workdir / CONFIG_FILE).write_text(config.to_json_best_effort(indent=2))
        if amendments_file.exists():
            amendments_file.unlink()
        return
    if not (workdir / CONFIG_FILE).exists():  # a work directory of a version that wrote none
        (workdir / CONFIG_FILE).write_text(config.to_json_best_effort(indent=2))
    if changes:
        earlier = amendments_file.read_text() if amendments_file.exists() else ""
        amendment: dict[str, Any] = {"step": step, "changes": changes}
        if set(changes) & set(RUN_LENGTH) and (config.optimizer.schedule_steps is None
                                                and config.optimizer.schedule_epochs is None):
            amendment["schedule"] = (f"the learning-rate schedule follows the run's length: "
                                     f"from step {step} on it is that of the new length")
        amendments_file.write_text(earlier + json.dumps(amendment) + "\n")
