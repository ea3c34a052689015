"""``--print_config``: the resolved, checked config of a run and the sizes the trainer derives
from it, without data, compilation or files.

``contrastive-jax-pretrain --config NAME --print_config`` (and ``contrastive-jax-quickstart
--print_config``, ``contrastive-jax-linear-eval --pretrained RUN --config NAME_linear
--print_config``) prints the config (every field, after the ``--config.*`` overrides, checked
as a run checks it) and then one JSON line (:func:`derived`): the devices, the global and
per-device batch, the steps per epoch and in all, the warm-up steps and the peak learning
rate, the same numbers :func:`contrastive_jax.train.build.plan` gives the trainer. The
training set's size comes from ``config.data.train_subset`` or :data:`TRAIN_EXAMPLES`; for
other data it is known only once the data is read, and the sizes that depend on it are null.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import jax
import ml_collections

from contrastive_jax.data import batching
from contrastive_jax.errors import ConfigError, ExitCode
from contrastive_jax.train import grad_cache, optim
from contrastive_jax.train.build import DataFacts, plan
from contrastive_jax.train.spec import RunSpec, parse

#: Examples of the training split of the datasets whose size is fixed (the TFDS ``train``
#: splits; the built-in digits' 80 % stratified split).
TRAIN_EXAMPLES = {
    "cifar10": 50_000,
    "cifar100": 50_000,
    "imagenet2012": 1_281_167,
    "stl10": 5_000,
    "digits": 1_437,
    "digits_cluttered": 1_437,
}


def train_examples(spec: RunSpec) -> int | None:
    """The training examples of an epoch of ``spec`` where the config alone tells them:
    ``train_subset``, or the dataset's size (:data:`TRAIN_EXAMPLES`) when no label subset
    (``label_fraction``, ``label_ids``) reduces it; else None."""
    if spec.data.train_subset is not None:
        return spec.data.train_subset
    if spec.data.label_fraction is not None or spec.data.label_ids:
        return None
    return TRAIN_EXAMPLES.get(spec.data.dataset)


def derived(config: ml_collections.ConfigDict, devices: int) -> dict[str, Any]:
    """What a run of ``config`` on ``devices`` devices derives, JSON-ready.

    Returns:
      ``devices``, ``global_batch``, ``per_device_batch``, ``train_examples``,
      ``steps_per_epoch``, ``total_steps``, ``warmup_steps`` (the longer of the learning-rate
      and the temperature warm-ups), ``micro_batches`` (per device; 0: no gradient caching)
      and ``peak_learning_rate``. Where the training set's size is unknown
      (:func:`train_examples`), ``train_examples`` and ``steps_per_epoch`` are None, and so
      are ``total_steps`` and ``warmup_steps`` unless ``config.train.total_steps`` and
      ``config.optimizer.warmup_steps`` set them.

    Raises:
      ConfigError: a field ``config`` does not declare or a bad value (naming it), a global
        batch the devices do not divide, or one larger than the training set.
    """
    spec = parse(config)
    batch = spec.data.global_batch_size
    if devices < 1:
        raise ConfigError(f"--devices must be at least 1, got {devices}")
    examples = train_examples(spec)
    if examples is None:
        per_device = batching.rows_per_part(batch, devices, "config.data.global_batch_size",
                                            "devices")
        warmup = spec.optimizer.warmup_steps
        sizes: dict[str, Any] = {
            "steps_per_epoch": None,
            "total_steps": spec.train.total_steps or None,
            "warmup_steps": None if warmup is None else max(
                int(warmup), spec.loss.temperature_warmup_steps),
            "micro_batches": grad_cache.num_micro_batches(per_device,
                                                          spec.train.micro_batch_size),
        }
    else:
        run = plan(spec, DataFacts(examples, num_classes=1, image_size=None), devices)
        sizes = {"steps_per_epoch": run.steps_per_epoch, "total_steps": run.total_steps,
                 "warmup_steps": run.warmup_steps, "micro_batches": run.micro_batches}
    return {
        "devices": devices,
        "global_batch": batch,
        "per_device_batch": batch // devices,
        "train_examples": examples,
        **sizes,
        "peak_learning_rate": optim.peak_learning_rate(spec.optimizer, batch),
    }


def report(config: ml_collections.ConfigDict, devices: int) -> str:
    """The text ``--print_config`` prints: the config, then :func:`derived` as one JSON line
    (a ConfigError for a config a run would refuse)."""
    sizes = derived(config, devices)
    return f"{config}\n{json.dumps(sizes)}"


def run_cli(config: ml_collections.ConfigDict, devices: int | None) -> int:
    """The tools' ``--print_config``: prints :func:`report` of ``config`` on ``devices``
    devices (None: every device here) and returns exit code 0, or prints one ``error:`` line
    and returns 2 for a config a run would refuse."""
    try:
        print(report(config, jax.device_count() if devices is None else devices))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return ExitCode.USAGE
    return ExitCode.OK
