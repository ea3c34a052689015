"""Global batches over processes: this process's place and share, steps per epoch, and
the global arrays of the processes' rows (multi-host input)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from contrastive_jax.errors import ConfigError


def process_position(process_index: int | None, process_count: int | None) -> tuple[int, int]:
    """(index, count) of this process; None takes ``jax.process_index()`` / ``jax.process_count()``.

    Raises:
      ValueError: the index is not in [0, count).
    """
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 0 <= index < count:
        raise ValueError(f"process_index {index} not in [0, {count})")
    return index, count


def rows_per_part(batch_size: int, parts: int, what: str, among: str = "processes") -> int:
    """Rows of a global batch of ``batch_size`` that each of ``parts`` processes or devices
    (``among``) holds: the one check that a batch divides among them.

    Raises:
      ConfigError: ``batch_size`` (the config field ``what``) is not positive or not divisible by
        ``parts``.

    Examples:
      >>> rows_per_part(256, 8, "config.data.global_batch_size", "devices")
      32
    """
    if batch_size < 1 or batch_size % parts:
        raise ConfigError(
            f"{what}={batch_size} must be positive and divisible by the {parts} {among}"
        )
    return batch_size // parts


def steps_per_epoch(num_examples: int, global_batch_size: int, dataset: str) -> int:
    """Steps of one epoch, ``num_examples // global_batch_size`` (each epoch's tail is dropped).

    Raises:
      ConfigError: the batch (config.data.global_batch_size) is larger than the training
        split of ``dataset``.
    """
    steps = num_examples // global_batch_size
    if steps < 1:
        raise ConfigError(
            f"config.data.global_batch_size={global_batch_size} exceeds the {num_examples} "
            f"training examples of {dataset!r}"
        )
    return steps


def make_global_batch(
    batch: dict[str, np.ndarray], mesh: jax.sharding.Mesh, data_axis: str = "data"
) -> dict[str, jax.Array]:
    """Per-process numpy batch -> global ``jax.Array`` s sharded over ``mesh``'s ``data_axis``.

    Each array's leading (batch) axis is split over ``data_axis``; the other axes are
    replicated. Every process passes its own rows (as the iterators of this package yield
    them) and gets arrays whose global batch is the concatenation over processes, in
    process order.

    Args:
      batch: name -> numpy array [B_local, ...].
      mesh: a mesh with axis ``data_axis``.
      data_axis: mesh axis of the batch.

    Returns:
      name -> jax.Array [B_local * process_count, ...].
    """
    sharding = NamedSharding(mesh, P(data_axis))
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}
