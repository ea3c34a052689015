"""The pretraining input path: grain on the host, the appearance on the device.

No TensorFlow: examples are read from in-memory arrays, image files or the TFRecord or
ArrayRecord files of a prepared TFDS dataset (:class:`~.records.RecordSet`, by row,
parsed without TensorFlow), decoded once by Pillow, and
cropped, resized and flipped per view (:mod:`.host_views`) by a ``grain.MapDataset``
whose threads overlap the training step (Pillow releases the GIL while it decodes and
resamples). A batch is::

    {"views": uint8 [B, V, S, S, 3]  cropped, resized, flipped views (not normalised),
     "label": int32 [B], "index": int64 [B] (the example id),
     "step":  int64 [B] (the batch's step), "metadata": float32 [B, p] if any}

and :meth:`HostPretrainIterator.on_device` turns the views into the normalised float32
views the training step reads, with the appearance stages (:mod:`.device_augment`) in one
jitted function on the global arrays.

Which examples a step gets and every random draw are a pure function of (seed, step): epoch ``e`` is the permutation
``numpy.random.default_rng([seed, e]).permutation(N)`` of the training split, step ``k``
takes its ``k % steps_per_epoch``-th block of ``global_batch_size`` rows (the tail of each
epoch is dropped), and process ``i`` of ``P`` reads rows ``[i B, (i + 1) B)`` of the block.
The host draws a view's crop and flip from ``(seed, step, id, view)``, the device its
appearance from a key folded from the same four numbers. So a run resumed at step ``k``
sees exactly the batches of the uninterrupted run from step ``k`` (no iterator state to
checkpoint), whatever the process or device count.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

import grain
import jax
import ml_collections
import numpy as np

from contrastive_jax.data._image_folder import read_file
from contrastive_jax.data._resolve import resolve_augmentation, resolve_image_size
from contrastive_jax.data.base import Source, Split, symmetric_label_noise
from contrastive_jax.data.batching import process_position, rows_per_part, steps_per_epoch
from contrastive_jax.data.config import as_data_spec
from contrastive_jax.data.device_augment import make_device_augment
from contrastive_jax.data.host_views import decode, view_rngs, views_of
from contrastive_jax.data.sources import load_source
from contrastive_jax.data.vectors import VectorPretrainIterator, VectorSource

__all__ = ["ExampleReader", "HostPretrainIterator", "default_threads", "epoch_order",
           "make_pretrain_iterator"]

#: Host threads when ``config.loader_threads`` is None: the cores, at most this many.
MAX_DEFAULT_THREADS = 16


def default_threads() -> int:
    """Threads of the host pipeline by default: the usable cores, at most 16."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, MAX_DEFAULT_THREADS))


@functools.lru_cache(maxsize=4)
def epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    """The rows of the training split in ``epoch``'s order: int64 [num_examples]."""
    return np.random.default_rng([seed, epoch]).permutation(num_examples).astype(np.int64)


class ExampleReader:
    """Row -> (an RGB image or uint8 [H, W, 3], label, example id, metadata or None) of one
    split: what both iterators read (records and files decoded here by Pillow)."""

    def __init__(self, split: Split) -> None:
        self.split = split

    def __call__(self, row: int) -> tuple[Any, int, int, np.ndarray | None]:
        split = self.split
        if split.records is not None:
            image, label = split.records.decode(row)  # an error names the file and the index
            return image, label, row, None
        assert split.labels is not None and split.ids is not None  # a Split of images or paths
        metadata = None if split.metadata is None else split.metadata[row]
        if split.images is not None:
            image = split.images[row]
        else:
            path = str(split.paths[row])  # type: ignore[index]
            image = decode(read_file(path), f"file {path}")
        return image, int(split.labels[row]), int(split.ids[row]), metadata


class HostPretrainIterator(Iterator[dict[str, np.ndarray]]):
    """Infinite iterator of this process's pretraining batches (module docstring).

    Attributes:
      source: the dataset.
      image_size: S, the side of the views.
      augmentation: the resolved :class:`~.augment_config.AugmentConfig`.
      num_views: V.
      global_batch_size, local_batch_size: rows of a step over all processes / on this one.
      steps_per_epoch: ``n_train // global_batch_size``.
      step: the step of the next batch.
      threads: host threads decoding and cropping.
    """

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        *,
        seed: int,
        source: Source,
        start_step: int = 0,
        process_index: int | None = None,
        process_count: int | None = None,
    ) -> None:
        config = as_data_spec(config)
        self.source = source
        self._process_index, process_count = process_position(process_index, process_count)
        train = source.split("train")
        if config.label_noise > 0:
            if train.streamed:
                train.with_labels(None)  # raises: a stream's labels cannot be replaced
            train = train.with_labels(symmetric_label_noise(
                train.labels, source.num_classes, config.label_noise, config.data_seed))
        self._examples = ExampleReader(train)
        self._num_train = train.num_examples
        self.image_size = resolve_image_size(config, source)
        self.augmentation = resolve_augmentation(config, source, self.image_size)
        self.num_views = int(config.num_views)
        self.global_batch_size = int(config.global_batch_size)
        self.local_batch_size = rows_per_part(
            self.global_batch_size, process_count, "config.data.global_batch_size")
        self.steps_per_epoch = steps_per_epoch(
            train.num_examples, self.global_batch_size, source.name)
        threads = config.loader_threads
        self.threads = default_threads() if threads is None else threads
        self._seed = int(seed)
        self.step = int(start_step)
        self._device_augment = make_device_augment(
            self.augmentation, seed=self._seed, mean=source.mean, std=source.std)
        local = self.local_batch_size
        dataset = (
            grain.MapDataset.range(self.step * local, 2**62)
            .map(self._example)
            .batch(local, drop_remainder=True)
        )
        options = grain.ReadOptions(num_threads=self.threads,
                                    prefetch_buffer_size=max(2 * local, int(config.prefetch) * local))
        self._iterator = iter(dataset.to_iter_dataset(options))

    def position(self, count: int) -> tuple[int, int]:
        """(step, row in the split) of this process's ``count``-th example from step 0."""
        step, slot = divmod(count, self.local_batch_size)
        epoch, block = divmod(step, self.steps_per_epoch)
        position = (block * self.global_batch_size + self._process_index * self.local_batch_size
                    + slot)
        return step, int(epoch_order(self._num_train, self._seed, epoch)[position])

    def rows(self, step: int) -> np.ndarray:
        """Rows in the training split of this process's examples at ``step``: int64 [B]."""
        first = step * self.local_batch_size
        return np.array([self.position(first + j)[1] for j in range(self.local_batch_size)])

    def _example(self, count: int) -> dict[str, np.ndarray]:
        step, row = self.position(count)
        image, label, index, metadata = self._examples(row)
        views = views_of(image, view_rngs(self._seed, step, index, self.num_views),
                         self.augmentation, self.image_size)
        out = {"views": views, "label": np.int32(label), "index": np.int64(index),
               "step": np.int64(step)}
        if metadata is not None:
            out["metadata"] = metadata
        return out

    def on_device(self, arrays: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """The appearance stages on the global batch: uint8 ``views`` -> normalised float32
        views; drops ``step``. Jitted; keeps the batch's sharding."""
        arrays = dict(arrays)
        step = arrays.pop("step")
        arrays["views"] = self._device_augment(arrays["views"], arrays["index"], step)
        return arrays

    def __next__(self) -> dict[str, np.ndarray]:
        batch = next(self._iterator)
        self.step += 1
        return batch


def make_pretrain_iterator(
    config: ml_collections.ConfigDict,
    *,
    seed: int,
    source: Source | None = None,
    start_step: int = 0,
    process_index: int | None = None,
    process_count: int | None = None,
) -> HostPretrainIterator | VectorPretrainIterator:
    """This process's pretraining batches from ``start_step`` on.

    Images: a :class:`HostPretrainIterator` (uint8 views; its ``on_device`` finishes them
    on the accelerator). Sources of vectors: a :class:`~.vectors.VectorPretrainIterator`.

    Args:
      config: data config (``config.data``).
      seed: the run's seed (with the step, it orders the examples and draws every view).
      source: an already loaded source (else ``load_source(config)``).
      start_step: the step of the first batch (>= 0).
      process_index, process_count: this process's place (None: JAX's).
    """
    if start_step < 0:
        raise ValueError(f"start_step must be >= 0, got {start_step}")
    config = as_data_spec(config)
    source = load_source(config) if source is None else source
    if isinstance(source, VectorSource):
        return VectorPretrainIterator(config, seed=seed, source=source, start_step=start_step,
                                      process_index=process_index, process_count=process_count)
    return HostPretrainIterator(config, seed=seed, source=source, start_step=start_step,
                                process_index=process_index, process_count=process_count)
