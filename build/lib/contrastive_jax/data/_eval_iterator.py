"""Evaluation batches of a whole split, in order (:class:`EvalIterator`).

Every example of a split once, split over processes like pretraining, the last batch
padded (the format is in :mod:`contrastive_jax.data.pipeline`, which re-exports
:func:`make_eval_iterator` and :class:`EvalIterator`); a TFRecord split is read in order
and only this process's records are decoded.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import ml_collections
import numpy as np

from contrastive_jax.data._resolve import (
    resolve_crop_fraction,
    resolve_image_size,
)
from contrastive_jax.data._stages import (
    DATA_ERRORS,
    Batch,
    decode_example,
    deterministic_options,
    explain_decode_error,
    lookup_rows,
    normaliser,
    split_columns,
)
from contrastive_jax.data._tf import tf
from contrastive_jax.data.augment import eval_transform
from contrastive_jax.data.base import Source
from contrastive_jax.data.batching import per_process as _per_process
from contrastive_jax.data.batching import process_position as _process
from contrastive_jax.data.records import RecordSet
from contrastive_jax.data.sources import load_source
from contrastive_jax.data.vectors import VectorEvalIterator, VectorSource


class EvalIterator:
    """Re-iterable batches over a whole split, in order, for feature extraction.

    Attributes:
      source, image_size: as for :class:`~.pipeline.PretrainIterator`.
      num_examples: examples in the split.
      num_batches: ``ceil(num_examples / batch_size)`` (``len(self)``).
      local_batch_size: rows per batch on this process.
    """

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        split: str,
        batch_size: int,
        *,
        process_index: int | None = None,
        process_count: int | None = None,
        source: Source | None = None,
    ) -> None:
        self.source = load_source(config) if source is None else source
        self._split = self.source.split(split)
        self._process_index, process_count = _process(process_index, process_count)
        self._global_batch = int(batch_size)
        self.local_batch_size = _per_process(self._global_batch, process_count, "batch_size")
        self.image_size = resolve_image_size(config, self.source)
        self.num_examples = self._split.num_examples
        self.num_batches = math.ceil(self.num_examples / self._global_batch)
        self._crop_fraction = resolve_crop_fraction(config, self.source)
        self._transform = config.eval_transform
        self._prefetch = config.prefetch

    def __len__(self) -> int:
        return self.num_batches

    def _dataset(self) -> tf.data.Dataset:
        n, size, crop_fraction = self.num_examples, self.image_size, self._crop_fraction
        mode = self._transform
        global_batch, local_batch = self._global_batch, self.local_batch_size
        offset = self._process_index * local_batch
        normalise = normaliser(self.source)

        def position_row(position: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            batch, slot = position // local_batch, position % local_batch
            row = batch * global_batch + offset + slot
            return row < n, tf.minimum(row, n - 1)  # (valid, a row to read)

        def example(valid: tf.Tensor, ex: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            image = eval_transform(decode_example(ex), size=size, crop_fraction=crop_fraction,
                                   mode=mode)
            image = normalise(image)
            out = {
                "image": tf.where(valid, image, tf.zeros_like(image)),
                "label": tf.where(valid, ex["label"], 0),
                "index": tf.where(valid, ex["index"], -1),
                "valid": valid,
            }
            if "metadata" in ex:
                out["metadata"] = tf.where(valid, ex["metadata"], tf.zeros_like(ex["metadata"]))
            return out

        records = self._split.records
        if records is not None and not records.random_access:
            ds = self._stream(records, example)
        else:
            ds = tf.data.Dataset.range(self.num_batches * local_batch).map(position_row)
            ds = lookup_rows(self._split, split_columns(self._split), ds).map(
                example, num_parallel_calls=tf.data.AUTOTUNE
            )
        ds = ds.batch(local_batch).prefetch(self._prefetch)
        return ds.with_options(deterministic_options())

    def _stream(self, records: RecordSet, example) -> tf.data.Dataset:
        """A TFRecord split in order: this process's rows, then padding to whole batches.

        Every record is read, only this process's are decoded.
        """
        global_batch, local_batch = self._global_batch, self.local_batch_size
        mine = self._process_index
        ds = records.stream().filter(lambda row, _: (row % global_batch) // local_batch == mine)
        ds = ds.map(lambda row, rec: (True, {"index": row, **records.parse(rec)}))
        ds = ds.map(example, num_parallel_calls=tf.data.AUTOTUNE)
        total = self.num_batches * local_batch
        real = sum(
            max(0, min(self.num_examples - (b * global_batch + mine * local_batch), local_batch))
            for b in range(self.num_batches)
        )
        size = self.image_size
        pad = tf.data.Dataset.range(total - real).map(
            lambda _: {
                "image": tf.zeros([size, size, 3], tf.float32),
                "label": tf.constant(0, tf.int32),
                "index": tf.constant(-1, tf.int64),
                "valid": tf.constant(False),
            }
        )
        return ds.concatenate(pad)

    def __iter__(self) -> Iterator[Batch]:
        iterator = self._dataset().as_numpy_iterator()
        for b in range(self.num_batches):
            try:
                batch = next(iterator)
            except DATA_ERRORS:
                start = b * self._global_batch
                records = self._split.records
                if records is not None and not records.random_access:
                    records.find_corrupt(start, min(start + self._global_batch, self.num_examples))
                    raise
                start += self._process_index * self.local_batch_size
                rows = np.arange(start, start + self.local_batch_size)
                explain_decode_error(
                    self._split, np.unique(np.minimum(rows, self.num_examples - 1))
                )
                raise
            yield batch


def make_eval_iterator(
    config: ml_collections.ConfigDict,
    split: str,
    batch_size: int,
    *,
    process_index: int | None = None,
    process_count: int | None = None,
    source: Source | None = None,
) -> EvalIterator | VectorEvalIterator:
    """Evaluation batches of a whole split (format in the module docstring; a source of
    vectors is served by a :class:`~.vectors.VectorEvalIterator`, ``"image"`` [B, D]).

    Args:
      config: data config.
      split: ``"train"`` or ``"test"`` (the training split honours
        ``train_subset``; labels are always clean).
      batch_size: global rows per batch (a multiple of the process count).
      process_index, process_count: as for :func:`~.pipeline.make_pretrain_iterator`.
      source: an already loaded source (else ``load_source(config)``).
    """
    source = load_source(config) if source is None else source
    if isinstance(source, VectorSource):
        return VectorEvalIterator(
            split, batch_size, source=source, process_index=process_index,
            process_count=process_count,
        )
    return EvalIterator(
        config,
        split,
        batch_size,
        process_index=process_index,
        process_count=process_count,
        source=source,
    )
