"""The trainer's input: a dataset of :mod:`contrastive_jax.data`, or random in-memory images.

:func:`load_input` reads the run's data section (``spec.data``, a
:class:`~contrastive_jax.data.DataSpec`). ``config.data.dataset = "synthetic"`` gives
:func:`synthetic_input`, random images that need no dataset on disk
(smoke tests, benchmarks); every other dataset goes through
:func:`contrastive_jax.data.make_pretrain_iterator` (grain on the host, the batches finished
on the devices). Either way the batches of a step are a pure function of (seed, step), so
a resumed run sees the batches it would have seen.

:class:`DevicePrefetch` puts the next global batches on the devices while a step runs.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import numpy as np

from contrastive_jax import data as data_lib
from contrastive_jax.data import batching, resolve_image_size
from contrastive_jax.data.config import DataSpec, check_source_kwargs
from contrastive_jax.parallel import batch_sharding
from contrastive_jax.train.build import DataFacts

#: ``config.data.dataset`` of random in-memory images.
SYNTHETIC = "synthetic"
#: ``config.data.source_kwargs`` of the synthetic dataset, and their defaults.
SYNTHETIC_DEFAULTS = {
    "num_examples": 1024,  # examples per epoch (steps per epoch = num_examples // batch)
    "num_classes": 10,  # labels are the example index modulo num_classes
}
#: Image side of the synthetic dataset when ``config.data.image_size`` is None.
SYNTHETIC_IMAGE_SIZE = 32
#: Fields of a pretraining batch that reach the device.
BATCH_FIELDS = ("views", "label", "index", "metadata")


class Input(NamedTuple):
    """What the loop needs of its data.

    Attributes:
      name: the dataset's name.
      num_examples: training examples per epoch.
      num_classes: classes of the labels (the online probe's outputs).
      batches: ``batches(start_step)`` yields this process's rows of every global batch
        from ``start_step`` on: ``views`` float [b, V, H, W, C], ``label`` int [b],
        ``index`` int [b] and optionally ``metadata`` float [b, p]; or, from an iterator
        with an ``on_device(arrays) -> arrays`` method, whatever that method turns into
        those fields on the devices (:class:`DevicePrefetch` calls it).
      source: the dataset's :class:`contrastive_jax.data.Source` (its splits, for the
        online kNN monitor); None for synthetic data.
      image_size: S, the side of the views [b, V, S, S, C]; None for feature vectors.
      metadata_width: p of ``metadata`` [b, p]; None: the batches have none.
      vector_width: F of feature-vector views [b, V, F]; None for images.
    """

    name: str
    num_examples: int
    num_classes: int
    batches: Callable[[int], Iterator[dict[str, np.ndarray]]]
    source: Any = None
    image_size: int | None = SYNTHETIC_IMAGE_SIZE
    metadata_width: int | None = None
    vector_width: int | None = None

    @property
    def facts(self) -> DataFacts:
        """What building a run needs of this input (:func:`contrastive_jax.train.build.build`)."""
        return DataFacts(self.num_examples, self.num_classes, self.image_size,
                         self.metadata_width, self.vector_width)


def load_input(data: DataSpec, *, seed: int) -> Input:
    """The :class:`Input` of a run's data section; ``seed`` (the run's) orders the
    augmentation."""
    if data.dataset == SYNTHETIC:
        return synthetic_input(data, seed=seed)
    source = data_lib.load_source(data)

    def batches(start_step: int) -> Iterator[dict[str, np.ndarray]]:
        return data_lib.make_pretrain_iterator(data, seed=seed, start_step=start_step,
                                               source=source)

    shape = tuple(source.image_shape)
    vectors = len(shape) == 1  # feature vectors [F] have no side
    width = shape[0] if vectors else None
    return Input(source.name, source.split("train").num_examples, source.num_classes, batches,
                 source, image_size=None if vectors else resolve_image_size(data, source),
                 metadata_width=len(source.metadata_names) or None,
                 vector_width=None if width is None else int(width))


def synthetic_input(data: DataSpec, *, seed: int) -> Input:
    """Random images: N(0, 1) pixels, label = example index mod ``num_classes``.

    Reads ``global_batch_size``, ``num_views``, ``image_size`` (None: 32) and
    ``source_kwargs`` (:data:`SYNTHETIC_DEFAULTS`) of ``data``. Each process draws
    its own rows of the step's global batch from a generator seeded by (seed, step,
    process), in numpy on the host.

    Examples:
      >>> from contrastive_jax.data import DataSpec
      >>> data = DataSpec(dataset="synthetic", global_batch_size=8, image_size=4)
      >>> batch = next(synthetic_input(data, seed=0).batches(0))
      >>> batch["views"].shape, batch["label"].tolist()
      ((8, 2, 4, 4, 3), [0, 1, 2, 3, 4, 5, 6, 7])
    """
    kwargs = dict(data.source_kwargs.items())
    check_source_kwargs(kwargs, "the synthetic source", tuple(SYNTHETIC_DEFAULTS),
                        tuple(SYNTHETIC_DEFAULTS))
    kwargs = {**SYNTHETIC_DEFAULTS, **kwargs}
    size = data.image_size or SYNTHETIC_IMAGE_SIZE
    views, global_batch = data.num_views, data.global_batch_size
    process = jax.process_index()
    local = batching.rows_per_part(global_batch, jax.process_count(),
                                   "config.data.global_batch_size")

    def batches(start_step: int) -> Iterator[dict[str, np.ndarray]]:
        for step in itertools.count(start_step):
            rng = np.random.default_rng((seed, step, process))
            first = (step * global_batch + process * local) % kwargs["num_examples"]
            index = (first + np.arange(local)) % kwargs["num_examples"]
            yield {
                "views": rng.standard_normal((local, views, size, size, 3), np.float32),
                "label": (index % kwargs["num_classes"]).astype(np.int32),
                "index": index.astype(np.int32),
            }

    return Input(SYNTHETIC, kwargs["num_examples"], kwargs["num_classes"], batches,
                 image_size=size)


class Batch(NamedTuple):
    arrays: dict[str, jax.Array]  # the global batch, on the devices
    stop: bool  # this process's SIGTERM flag when the batch was drawn


class DevicePrefetch:
    """Global batches put on the devices ahead of the step that consumes them.

    ``take()`` returns the next batch; ``fill()`` (called right after a step is
    dispatched) draws and transfers batches until ``depth`` are waiting, so the
    transfers overlap the running step. Drawing happens on the calling (main)
    thread: each batch carries ``stop_flag()`` (the SIGTERM flag) as it was when it was
    drawn, as its ``stop`` field too. ``depth`` 0 transfers each batch when it is taken.
    An iterator with an ``on_device`` method (the default input path) has it applied to
    each global batch after the transfer (dispatched, not waited for).
    """

    def __init__(self, local_batches: Iterator[dict], mesh, stop_flag: Callable[[], bool], *,
                 depth: int, remaining: int) -> None:
        self._local = local_batches
        self._on_device = getattr(local_batches, "on_device", None)
        self._fields = BATCH_FIELDS + (("step",) if self._on_device else ())
        self._sharding = batch_sharding(mesh)
        self._stop_flag = stop_flag
        self.depth = depth
        self._remaining = remaining  # batches still to draw
        self._queue: collections.deque[Batch] = collections.deque()
        self.seconds = 0.0  # host time spent drawing and transferring

    def _draw(self) -> None:
        started = time.perf_counter()
        local = {k: v for k, v in next(self._local).items() if k in self._fields}
        stop = self._stop_flag()
        local["stop"] = np.full(len(local["label"]), stop, np.int32)
        arrays = {k: jax.make_array_from_process_local_data(self._sharding, v)
                  for k, v in local.items()}
        if self._on_device is not None:
            arrays = self._on_device(arrays)
        self._queue.append(Batch(arrays, stop))
        self._remaining -= 1
        self.seconds += time.perf_counter() - started

    def fill(self) -> None:
        while len(self._queue) < self.depth and self._remaining > 0:
            self._draw()

    def take(self) -> Batch:
        if not self._queue:
            self._draw()
        return self._queue.popleft()
