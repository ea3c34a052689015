"""Global batches over processes: this process's place and share, steps per epoch (multi-host input)."""

from __future__ import annotations

import jax

from contrastive_jax.errors import ConfigError


def process_position(process_index: int | None, process_count: int | None) -> tuple[int, int]:
    """(index, count) of this process; None takes ``jax.process_index()`` / ``jax.process_count()``.

    Raises:
      ConfigError: the index is not in [0, count).
    """
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 0 <= index < count:
        raise ConfigError(f"process_index {index} not in [0, {count})")
    return index, count


def per_process(batch_size: int, process_count: int, what: str) -> int:
    """Rows of a global batch of ``batch_size`` that each of ``process_count`` processes reads.

    Raises:
      ConfigError: ``batch_size`` (the config field ``what``) is not a positive multiple of the
        process count.
    """
    if batch_size < 1 or batch_size % process_count:
        raise ConfigError(
            f"{what}={batch_size} must be a positive multiple of the process count {process_count}"
        )
    return batch_size // process_count


def steps_per_epoch(num_examples: int, global_batch_size: int, dataset: str) -> int:
    """Steps of one epoch, ``num_examples // global_batch_size`` (each epoch's tail is dropped).

    Raises:
      ConfigError: the batch is larger than the training split of ``dataset``.
    """
    steps = num_examples // global_batch_size
    if steps < 1:
        raise ConfigError(
            f"global_batch_size={global_batch_size} exceeds the {num_examples} training examples "
            f"of {dataset!r}"
        )
    return steps
