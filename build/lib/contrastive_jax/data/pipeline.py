"""Deterministic, resumable, multi-host input pipelines (tf.data on the CPU).

Pretraining (:func:`make_pretrain_iterator`) - an infinite iterator of
per-process numpy batches::

    {"views":    float32 [B, V, S, S, 3]  normalised augmented views,
     "label":    int32   [B]              class (after label noise, if any),
     "index":    int64   [B]              example id, unique in the split
                                          (the SimCLR instance id),
     "metadata": float32 [B, p]           only for sources with metadata}

with B = global_batch_size / process_count. Which examples and which
augmentations a step gets is a pure function of (seed, step):

* examples: epoch ``e = step // steps_per_epoch`` is a permutation of the
  training split, a TF stateless shuffle seeded by ``(seed, e)``
  (:func:`epoch_permutation`); step ``k`` takes the ``k % steps_per_epoch``-th
  block of ``global_batch_size`` rows (the tail of each epoch is dropped).
  Process ``i`` of ``P`` reads rows ``[i B, (i + 1) B)`` of that block, the
  rows its devices hold in the global array (see :func:`make_global_batch`).
* augmentation: example ``x`` at step ``k`` is augmented with TF stateless ops
  seeded by ``fold_in(fold_in([seed, 0], k), id(x))``, and view ``v`` with
  ``fold_in(., v)``; nothing depends on the process count or on earlier steps.
  Images held in memory under a recipe of shifts, flips, gains, cutout and
  noise only (the digits presets) are augmented a whole batch at a time
  (:mod:`~contrastive_jax.data.batch_augment`, about six times less host CPU
  per step), with random numbers hashed from ``(seed, k, id(x), v)``: the same
  guarantees, other draws.

So a run started at ``start_step = k`` yields exactly the batches an
uninterrupted run yields from step ``k``, and the concatenation of the batches
of P processes is the single-process global batch. This holds for data in
memory, image folders and TFDS ArrayRecord files (random access: a process
reads only its own rows).

TFDS TFRecord files can only be read in order, so their examples come from
``L`` *lanes* (``config.stream_lanes``; default ``gcd(global_batch_size,
64)``): lane ``j`` reads rows ``[j n, (j + 1) n)`` of the split, ``n = N //
L``, epoch after epoch, each epoch through a shuffle buffer of
``config.shuffle_buffer // L`` records seeded by ``(seed, j, epoch)``; every
step takes the next ``global_batch_size / L`` examples of each lane, lanes in
order. Process ``i`` of ``P`` (``P`` must divide ``L``) reads only lanes
``[i L / P, (i + 1) L / P)``, so the global batch does not depend on ``P``.
Resuming at step ``k`` rebuilds each lane at its epoch and *skips* the
``k B / L`` mod ``n`` records before it (read, not decoded): the resumed run
sees exactly the batches of the uninterrupted one, at the cost of reading up
to one epoch of its lanes' records again. Augmentation is seeded as above. The whole pipeline is TF
graph code (the split's arrays or file names are captured as tensors): no
Python runs per element, so the prefetching threads never wait for the GIL of
the training loop, and many live pipelines cannot starve TF's small inter-op
thread pool (``Dataset.from_generator`` can deadlock there).

Evaluation (:func:`make_eval_iterator`) - every example of a split once, in
order, in batches of ``batch_size`` (split over processes like pretraining);
the last batch is padded::

    {"image": float32 [B, S, S, 3] (normalised; zeros on padding),
     "label": int32 [B], "index": int64 [B] (-1 on padding),
     "valid": bool [B], "metadata": float32 [B, p] if available}

A corrupt image file raises :class:`~contrastive_jax.errors.CorruptImageError`
naming the file, and a corrupt TFDS record
:class:`~contrastive_jax.data.records.CorruptRecordError` naming the shard
file and the record's index in it, when the batch that contains it is
requested.

This module holds the pretraining iterator, the TFRecord lanes and
:func:`make_global_batch`; the evaluation iterator (``_eval_iterator``) and the tf.data
stages both iterators share, with what a config resolves to for a source
(``_stages``: :func:`resolve_image_size`, ...), are private modules of this package
whose public names are re-exported here.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import jax
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from contrastive_jax.data._eval_iterator import EvalIterator, make_eval_iterator
from contrastive_jax.data._resolve import (
    DEFAULT_VARIABLE_SIZE,
    IMAGENET_CROP_FRACTION,
    resolve_augmentation,
    resolve_crop_fraction,
    resolve_image_size,
)
from contrastive_jax.data._stages import (
    DATA_ERRORS,
    Batch,
    deterministic_options,
    example_views,
    explain_decode_error,
    lookup_rows,
    normaliser,
    split_columns,
)
from contrastive_jax.data._tf import tf
from contrastive_jax.data.base import Source, symmetric_label_noise
from contrastive_jax.data.batch_augment import augment_batch, is_batchable, view_keys
from contrastive_jax.data.batching import per_process as _per_process
from contrastive_jax.data.batching import process_position as _process
from contrastive_jax.data.batching import steps_per_epoch
from contrastive_jax.data.records import RecordSet
from contrastive_jax.data.sources import load_source
from contrastive_jax.data.vectors import VectorPretrainIterator, VectorSource
from contrastive_jax.errors import ConfigError

__all__ = [
    "DEFAULT_VARIABLE_SIZE",
    "IMAGENET_CROP_FRACTION",
    "Batch",
    "EvalIterator",
    "PretrainIterator",
    "default_lanes",
    "epoch_permutation",
    "lane_stream",
    "make_eval_iterator",
    "make_global_batch",
    "make_pretrain_iterator",
    "resolve_augmentation",
    "resolve_crop_fraction",
    "resolve_image_size",
]


def epoch_permutation(
    num_examples: int, seed: int | tf.Tensor, epoch: int | tf.Tensor
) -> tf.Tensor:
    """The order of the training split in ``epoch``: int64 [num_examples].

    A TF stateless shuffle seeded by ``(seed, epoch)``, computed inside the
    pipeline once per epoch (and eagerly by :meth:`PretrainIterator.rows`).
    """
    seed = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.experimental.stateless_shuffle(tf.range(num_examples, dtype=tf.int64), seed)


def default_lanes(global_batch_size: int) -> int:
    """Default ``config.stream_lanes``: ``gcd(global_batch_size, 64)``."""
    return math.gcd(int(global_batch_size), 64)


def _shuffle_seed(seed: int, lane: int, epoch: tf.Tensor) -> tf.Tensor:
    """int64 scalar seed of ``tf.data.Dataset.shuffle`` for (run seed, lane, epoch)."""
    key = tf.stack([tf.constant(seed, tf.int64), tf.constant(lane, tf.int64) * 2**32 + epoch])
    draw = tf.random.stateless_uniform([], key, minval=None, maxval=None, dtype=tf.int64)
    return tf.math.floormod(draw, 2**62)


def lane_stream(
    records: RecordSet, lane: int, lanes: int, *, seed: int, start: int, shuffle_buffer: int
) -> tf.data.Dataset:
    """Lane ``lane`` of ``lanes`` of a TFRecord split from its ``start``-th record on.

    Infinite dataset of ``(row int64, serialized string)``: rows
    ``[lane n, (lane + 1) n)`` (``n = N // lanes``), epoch ``e`` through a
    shuffle buffer of ``shuffle_buffer`` seeded by ``(seed, lane, e)``; a
    pure function of its arguments, and ``start`` skips records unread by
    the decoder (see the module docstring).
    """
    n = records.num_examples // lanes
    if n < 1:
        raise ConfigError(f"{records.dataset}: {records.num_examples} examples for {lanes} lanes")
    epoch_records = records.stream(lane * n, (lane + 1) * n)

    def epoch(e: tf.Tensor) -> tf.data.Dataset:
        return epoch_records.shuffle(
            max(1, shuffle_buffer), seed=_shuffle_seed(seed, lane, e), reshuffle_each_iteration=False
        )

    first_epoch, skip = divmod(start, n)
    return tf.data.Dataset.range(first_epoch, 2**62).flat_map(epoch).skip(skip)


class PretrainIterator(Iterator[Batch]):
    """Infinite iterator of per-process pretraining batches (see the module docstring).

    Attributes:
      source: the data source.
      image_size: S.
      augmentation: the :class:`AugmentConfig` in use.
      global_batch_size, local_batch_size: examples per step over all
        processes / on this process.
      steps_per_epoch: ``n_train // global_batch_size``.
      step: the step of the next batch.
    """

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        *,
        seed: int,
        start_step: int = 0,
        process_index: int | None = None,
        process_count: int | None = None,
        source: Source | None = None,
    ) -> None:
        self.source = load_source(config) if source is None else source
        self._process_index, process_count = _process(process_index, process_count)
        train = self.source.split("train")
        if config.label_noise > 0:
            if train.streamed:
                train.with_labels(None)  # raises: a stream's labels cannot be replaced
            noisy = symmetric_label_noise(
                train.labels, self.source.num_classes, config.label_noise, config.data_seed
            )
            train = train.with_labels(noisy)
        self._train = train
        self.image_size = resolve_image_size(config, self.source)
        self.augmentation = resolve_augmentation(config, self.source, self.image_size)
        if self.augmentation.host_only:
            raise ConfigError(
                f"augmentation {config.augmentation!r} sets "
                f"{', '.join(self.augmentation.host_only)}, which only the default input "
                f"path implements, not the tf.data path (config.data.loader='tf', or a "
                f"TFRecord dataset): set config.data.loader='grain' (TFRecord datasets: "
                f"convert them with `python -m contrastive_jax.data.prepare`)")
        self.num_views = int(config.num_views)
        self.global_batch_size = int(config.global_batch_size)
        self.local_batch_size = _per_process(
            self.global_batch_size, process_count, "global_batch_size"
        )
        self.steps_per_epoch = steps_per_epoch(
            train.num_examples, self.global_batch_size, self.source.name
        )
        if start_step < 0:
            raise ConfigError(f"start_step must be >= 0, got {start_step}")
        self._seed = int(seed)
        self.step = int(start_step)
        self._process_count = process_count
        records = train.records
        self.streamed = records is not None and not records.random_access
        if self.streamed:
            self.lanes = int(config.get("stream_lanes") or default_lanes(self.global_batch_size))
            if self.global_batch_size % self.lanes or self.lanes % process_count:
                raise ConfigError(
                    f"config.data.stream_lanes={self.lanes} must divide global_batch_size="
                    f"{self.global_batch_size} and be a multiple of the process count "
                    f"{process_count} (TFRecord streams)"
                )
            self.steps_per_epoch = (train.num_examples // self.lanes) // (
                self.global_batch_size // self.lanes
            )
            if self.steps_per_epoch < 1:
                raise ConfigError(
                    f"global_batch_size={self.global_batch_size} exceeds the {train.num_examples} "
                    f"training examples of {self.source.name!r}"
                )
            self._shuffle_buffer = int(config.get("shuffle_buffer") or 10_000) // self.lanes
            dataset = self._stream_dataset(config)
        else:
            dataset = self._dataset(config)
        self._iterator = dataset.as_numpy_iterator()

    def rows(self, step: int) -> np.ndarray:
        """Positions in the training split of this process's examples at ``step``: int64 [B].

        (Random-access sources; a TFRecord stream has no fixed rows per step.)
        """
        if self.streamed:
            raise ValueError("a TFRecord stream has no fixed rows per step")
        epoch, block = divmod(step, self.steps_per_epoch)
        start = block * self.global_batch_size + self._process_index * self.local_batch_size
        order = epoch_permutation(self._train.num_examples, self._seed, epoch).numpy()
        return order[start : start + self.local_batch_size]

    def _dataset(self, config: ml_collections.ConfigDict) -> tf.data.Dataset:
        n, steps_per_epoch = self._train.num_examples, self.steps_per_epoch
        global_batch, local_batch = self.global_batch_size, self.local_batch_size
        offset = self._process_index * local_batch
        first_step, seed = self.step, self._seed
        columns = split_columns(self._train)

        def epoch_examples(epoch: tf.Tensor) -> tf.data.Dataset:
            """(step, row) of this process's examples of every step of ``epoch``, in order."""
            order = epoch_permutation(n, seed, epoch)[: steps_per_epoch * global_batch]
            rows = tf.reshape(order, [steps_per_epoch, global_batch])[
                :, offset : offset + local_batch
            ]
            steps = epoch * steps_per_epoch + tf.range(steps_per_epoch, dtype=tf.int64)
            steps = tf.repeat(steps, local_batch)
            skip = tf.maximum(first_step - epoch * steps_per_epoch, 0) * local_batch
            return tf.data.Dataset.from_tensor_slices((steps, tf.reshape(rows, [-1]))).skip(skip)

        ds = tf.data.Dataset.range(first_step // steps_per_epoch, 2**62).flat_map(epoch_examples)
        if "image" in columns and is_batchable(self.augmentation):
            ds = ds.batch(local_batch, drop_remainder=True).map(
                self._batch_fn(columns), num_parallel_calls=tf.data.AUTOTUNE
            )
        else:
            ds = lookup_rows(self._train, columns, ds).map(
                self._example_fn(), num_parallel_calls=tf.data.AUTOTUNE
            )
            ds = ds.batch(local_batch, drop_remainder=True)
        return ds.prefetch(config.prefetch).with_options(deterministic_options())

    def _batch_fn(self, columns: dict[str, tf.Tensor]):
        """``(steps [B], rows [B]) -> output dict``: a whole in-memory batch augmented at once.

        For recipes :func:`~contrastive_jax.data.batch_augment.is_batchable` accepts; views
        seeded by (seed, step, id, view) through :func:`~contrastive_jax.data.batch_augment.view_keys`.
        """
        size, views, aug, seed = self.image_size, self.num_views, self.augmentation, self._seed
        normalise = normaliser(self.source)

        def batch(steps: tf.Tensor, rows: tf.Tensor) -> dict[str, tf.Tensor]:
            ex = {name: tf.gather(column, rows) for name, column in columns.items()}
            keys = view_keys(seed, steps, ex["index"], views)
            out = {
                "views": normalise(augment_batch(ex["image"], keys, aug, size=size)),
                "label": ex["label"],
                "index": ex["index"],
            }
            if "metadata" in ex:
                out["metadata"] = ex["metadata"]
            return out

        return batch

    def _example_fn(self):
        """``(step, example) -> output dict``: views seeded by (seed, step, index), normalised."""
        size, views, aug = self.image_size, self.num_views, self.augmentation
        normalise = normaliser(self.source)
        base_seed = tf.constant([self._seed, 0], tf.int64)

        def example(step: tf.Tensor, ex: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            fold = tf.random.experimental.stateless_fold_in
            example_seed = fold(fold(base_seed, step), ex["index"])
            views_ = example_views(ex, example_seed, aug, views, size)
            out = {"views": normalise(views_), "label": ex["label"], "index": ex["index"]}
            if "metadata" in ex:
                out["metadata"] = ex["metadata"]
            return out

        return example

    def _lane_streams(self, start_step: int) -> list[tf.data.Dataset]:
        """This process's lanes from ``start_step`` on (TFRecord)."""
        per_step = self.global_batch_size // self.lanes
        mine = self.lanes // self._process_count
        return [
            lane_stream(
                self._train.records, j, self.lanes, seed=self._seed,
                start=start_step * per_step, shuffle_buffer=self._shuffle_buffer,
            )
            for j in range(self._process_index * mine, (self._process_index + 1) * mine)
        ]

    def _interleave(self, lanes: list[tf.data.Dataset]) -> tf.data.Dataset:
        """Per step, ``global_batch_size / L`` records of each lane, lanes in order."""
        per_step = self.global_batch_size // self.lanes
        selector = tf.data.Dataset.range(2**62).map(lambda t: (t // per_step) % len(lanes))
        return tf.data.Dataset.choose_from_datasets(lanes, selector)

    def _stream_dataset(self, config: ml_collections.ConfigDict) -> tf.data.Dataset:
        records, first_step, local_batch = self._train.records, self.step, self.local_batch_size
        ds = self._interleave(self._lane_streams(first_step)).enumerate()
        ds = ds.map(
            lambda t, rec: (
                first_step + t // local_batch,
                {"index": rec[0], **records.parse(rec[1])},
            )
        )
        ds = ds.map(self._example_fn(), num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(local_batch, drop_remainder=True).prefetch(config.prefetch)
        return ds.with_options(deterministic_options())

    def _explain_stream_error(self, step: int) -> None:
        """Names the bad record of a TFRecord stream at ``step`` (CorruptRecordError)."""
        records = self._train.records
        n = records.num_examples // self.lanes
        mine = self.lanes // self._process_count
        lanes = range(self._process_index * mine, (self._process_index + 1) * mine)
        for j in lanes:  # a damaged file: found by reading alone
            records.find_corrupt(j * n, (j + 1) * n, decode=False)
        ds = self._interleave(self._lane_streams(step)).take(self.local_batch_size)
        rows, serialized = zip(*ds.as_numpy_iterator(), strict=True)
        records.check(rows, serialized)  # an undecodable image among the step's records

    def __next__(self) -> Batch:
        try:
            batch = next(self._iterator)
        except DATA_ERRORS:
            if self.streamed:
                self._explain_stream_error(self.step)
            else:
                explain_decode_error(self._train, self.rows(self.step))
            raise
        self.step += 1
        return batch


def make_pretrain_iterator(
    config: ml_collections.ConfigDict,
    *,
    seed: int,
    start_step: int = 0,
    process_index: int | None = None,
    process_count: int | None = None,
    source: Source | None = None,
) -> PretrainIterator | VectorPretrainIterator:
    """Pretraining batches of this process from ``start_step`` on (infinite).

    A source of vectors (:mod:`.vectors`) is served by a
    :class:`~.vectors.VectorPretrainIterator`, in the same batch format.

    Args:
      config: data config (:func:`~contrastive_jax.data.default_data_config`).
      seed: run seed; with ``config`` it fixes every batch.
      start_step: first step to yield (resume).
      process_index, process_count: this process and the number of processes;
        default ``jax.process_index()`` / ``jax.process_count()``.
      source: an already loaded source (else ``load_source(config)``).

    Returns:
      A :class:`PretrainIterator` of numpy batches (format in the module docstring).
    """
    source = load_source(config) if source is None else source
    if isinstance(source, VectorSource):
        return VectorPretrainIterator(
            config, seed=seed, source=source, start_step=start_step,
            process_index=process_index, process_count=process_count,
        )
    return PretrainIterator(
        config,
        seed=seed,
        start_step=start_step,
        process_index=process_index,
        process_count=process_count,
        source=source,
    )


def make_global_batch(
    batch: Batch, mesh: jax.sharding.Mesh, data_axis: str = "data"
) -> dict[str, jax.Array]:
    """Per-process numpy batch -> global ``jax.Array`` s sharded over ``mesh``'s ``data_axis``.

    Each array's leading (batch) axis is split over ``data_axis``; the other
    axes are replicated. Every process passes its own rows (as yielded by the
    iterators above) and gets arrays whose global batch is the concatenation
    over processes, in process order.

    Args:
      batch: name -> numpy array [B_local, ...].
      mesh: a mesh with axis ``data_axis``.
      data_axis: mesh axis of the batch.

    Returns:
      name -> jax.Array [B_local * process_count, ...].
    """
    sharding = NamedSharding(mesh, P(data_axis))
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}
