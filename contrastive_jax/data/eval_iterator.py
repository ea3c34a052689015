"""Evaluation batches of a whole split, in order (:func:`make_eval_iterator`).

Every example of a split once, in batches of ``batch_size`` global rows split over
processes as pretraining's are (process ``i`` of ``P`` holds rows ``[i B, (i + 1) B)`` of
each global batch, ``B = batch_size / P``); the last batch is padded::

    {"image": float32 [B, S, S, 3] (normalised; zeros on padding),
     "label": int32 [B], "index": int64 [B] (-1 on padding),
     "valid": bool [B], "metadata": float32 [B, p] if the source has metadata}

On the host, with no TensorFlow: the examples are read and decoded as pretraining's
(:class:`~.host_pipeline.ExampleReader`), transformed by
:func:`~.host_views.eval_view` (``config.eval_transform``: resize and centre-crop) and
normalised by the source's statistics, in a ``grain.MapDataset`` of
``config.loader_threads`` threads. A corrupt image raises
:class:`~contrastive_jax.errors.CorruptImageError` naming its file or record when the
batch holding it is requested. A source of vectors is served by a
:class:`~.vectors.VectorEvalIterator` (``"image"`` [B, D]).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import grain
import ml_collections
import numpy as np

from contrastive_jax.data._resolve import resolve_crop_fraction, resolve_image_size
from contrastive_jax.data.base import Source
from contrastive_jax.data.batching import process_position, rows_per_part
from contrastive_jax.data.config import as_data_spec
from contrastive_jax.data.host_pipeline import ExampleReader, default_threads
from contrastive_jax.data.host_views import eval_view
from contrastive_jax.data.sources import load_source
from contrastive_jax.data.vectors import VectorEvalIterator, VectorSource

__all__ = ["EvalIterator", "make_eval_iterator"]

#: A batch: name -> numpy array [B, ...].
Batch = dict[str, np.ndarray]


class EvalIterator:
    """Re-iterable batches over a whole split, in order, for feature extraction.

    Attributes:
      source: the dataset.
      image_size: S, the side of the images.
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
        config = as_data_spec(config)
        self.source = load_source(config) if source is None else source
        self._split = self.source.split(split)
        self._read = ExampleReader(self._split)
        self._process_index, process_count = process_position(process_index, process_count)
        self._global_batch = int(batch_size)
        self.local_batch_size = rows_per_part(self._global_batch, process_count, "batch_size")
        self.image_size = resolve_image_size(config, self.source)
        self.num_examples = self._split.num_examples
        self.num_batches = math.ceil(self.num_examples / self._global_batch)
        self._crop_fraction = resolve_crop_fraction(config, self.source)
        self._transform = config.eval_transform
        self._mean = np.asarray(self.source.mean, np.float32)
        self._std = np.asarray(self.source.std, np.float32)
        self._metadata_width = (None if self._split.metadata is None
                                else self._split.metadata.shape[1])
        self._threads = (default_threads() if config.loader_threads is None
                         else config.loader_threads)
        self._prefetch = config.prefetch

    def __len__(self) -> int:
        return self.num_batches

    def row(self, position: int) -> int:
        """The split's row at this process's ``position``-th slot (>= ``num_examples``:
        padding)."""
        batch, slot = divmod(position, self.local_batch_size)
        return batch * self._global_batch + self._process_index * self.local_batch_size + slot

    def _example(self, position: int) -> dict[str, np.ndarray]:
        row = self.row(position)
        valid = row < self.num_examples
        image, label, index, metadata = self._read(min(row, self.num_examples - 1))
        out = {
            "image": np.zeros((self.image_size, self.image_size, 3), np.float32),
            "label": np.int32(label if valid else 0),
            "index": np.int64(index if valid else -1),
            "valid": np.bool_(valid),
        }
        if valid:
            pixels = eval_view(image, size=self.image_size, crop_fraction=self._crop_fraction,
                               mode=self._transform)
            out["image"] = (pixels - self._mean) / self._std
        if self._metadata_width is not None:
            out["metadata"] = (np.asarray(metadata, np.float32) if valid
                               else np.zeros(self._metadata_width, np.float32))
        return out

    def __iter__(self) -> Iterator[Batch]:
        local = self.local_batch_size
        dataset = (grain.MapDataset.range(self.num_batches * local).map(self._example)
                   .batch(local))
        options = grain.ReadOptions(num_threads=self._threads,
                                    prefetch_buffer_size=max(2, self._prefetch) * local)
        return iter(dataset.to_iter_dataset(options))


def make_eval_iterator(
    config: ml_collections.ConfigDict,
    split: str,
    batch_size: int,
    *,
    process_index: int | None = None,
    process_count: int | None = None,
    source: Source | None = None,
) -> EvalIterator | VectorEvalIterator:
    """Evaluation batches of a whole split (format in the module docstring).

    Args:
      config: data config.
      split: ``"train"`` or ``"test"`` (the training split honours ``train_subset``; labels
        are always clean).
      batch_size: global rows per batch (a multiple of the process count).
      process_index, process_count: this process's place (None: JAX's).
      source: an already loaded source (else ``load_source(config)``).
    """
    config = as_data_spec(config)
    source = load_source(config) if source is None else source
    if isinstance(source, VectorSource):
        return VectorEvalIterator(split, batch_size, source=source, process_index=process_index,
                                  process_count=process_count)
    return EvalIterator(config, split, batch_size, process_index=process_index,
                        process_count=process_count, source=source)
