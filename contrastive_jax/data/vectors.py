"""Vector data: feature vectors [N, D] in memory, read by the trainer like images.

Synthetic experiments (ProjNCE's Gaussians, the soft-target toy's mixture) train on
vectors, not images. :func:`vector_source` (or :func:`~.arrays.array_source` given
float features [N, D]) holds them as a :class:`VectorSource`, which
:func:`~.arrays.register_source` makes a dataset name like any other; the pipeline's
:func:`~contrastive_jax.data.host_pipeline.make_pretrain_iterator` and
:func:`~contrastive_jax.data.eval_iterator.make_eval_iterator`
then serve it with the iterators below, in the batch formats of images with a
vector in place of each image::

    pretraining: {"views": float32 [B, V, D], "label": int32 [B], "index": int64 [B],
                  "metadata": float32 [B, p] (if any)}
    evaluation:  {"image": float32 [B, D] (zeros on padding), "label": int32 [B],
                  "index": int64 [B] (-1 on padding), "valid": bool [B], "metadata"}

so ``contrastive_jax.train.loop.train`` and ``contrastive_jax.eval.embed`` need nothing else
(the ``mlp`` encoder takes [B, D]). Vectors are fed as they are: no normalisation.

Views (``config.augmentation``, :data:`VIEW_CHOICES`): ``"none"`` (or ``"auto"``)
repeats the vector V times, the recipe of supervised objectives on fixed samples
(ProjNCE App. D.1, the soft-target toy; ``num_views = 1`` gives one row per
sample). The image augmentations do not apply to vectors and are refused.

Batches are a pure function of (seed, step), as for images: epoch
``e = step // steps_per_epoch`` visits the training split in the order
``numpy.random.default_rng([seed, e]).permutation(N)``, step ``k`` takes the
``k % steps_per_epoch``-th block of ``global_batch_size`` rows (the tail of an
epoch is dropped), process ``i`` of ``P`` the rows ``[i B, (i + 1) B)`` of that
block. A resumed run therefore sees the batches of an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence

import ml_collections
import numpy as np

from contrastive_jax.data.base import (
    Source,
    check_classes,
    check_metadata_names,
    symmetric_label_noise,
)
from contrastive_jax.data.batching import process_position, rows_per_part, steps_per_epoch
from contrastive_jax.data.config import as_data_spec
from contrastive_jax.errors import ConfigError

Batch = dict[str, np.ndarray]

#: Values of ``config.augmentation`` for a vector source ("auto" is "none").
VIEW_CHOICES = ("auto", "none")


@dataclasses.dataclass(frozen=True)
class VectorSplit:
    """One split of vectors, with the interface of :class:`~.base.Split` the sources use.

    Attributes:
      features: float32 [N, D].
      labels: int64 [N], class ids in [0, num_classes).
      metadata: float32 [N, p] continuous per-example attributes, or None.
      ids: int64 [N] example ids, unique within the split (default ``0 .. N-1``;
        kept when the split is subsampled).
    """

    features: np.ndarray
    labels: np.ndarray
    metadata: np.ndarray | None = None
    ids: np.ndarray | None = None

    #: A split of vectors is held in memory, never streamed from records.
    records = None

    def __post_init__(self) -> None:
        features = np.asarray(self.features)
        if features.ndim != 2 or not np.issubdtype(features.dtype, np.floating):
            raise ValueError(f"`features` must be float [N, D], got {features.dtype} {features.shape}")
        if not np.isfinite(features).all():
            raise ValueError("`features` must be finite")
        labels = np.asarray(self.labels)
        n = len(features)
        if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"`labels` must be int [{n}], got {labels.dtype} {labels.shape}")
        ids = np.arange(n, dtype=np.int64) if self.ids is None else np.asarray(self.ids, np.int64)
        if ids.shape != (n,):
            raise ValueError(f"`ids` must have shape [{n}], got {ids.shape}")
        object.__setattr__(self, "features", features.astype(np.float32))
        object.__setattr__(self, "labels", labels.astype(np.int64))
        object.__setattr__(self, "ids", ids)
        if self.metadata is not None:
            metadata = np.asarray(self.metadata, np.float32)
            if metadata.ndim != 2 or len(metadata) != n:
                raise ValueError(f"`metadata` must have shape [{n}, p], got {metadata.shape}")
            object.__setattr__(self, "metadata", metadata)

    @property
    def num_examples(self) -> int:
        return len(self.labels)

    @property
    def streamed(self) -> bool:
        return False

    def example_ids(self) -> np.ndarray:
        """int64 [N]: the example ids."""
        return self.ids

    def take(self, rows: np.ndarray) -> VectorSplit:
        """The examples at positions ``rows`` (int [M]), keeping their ids."""
        return VectorSplit(
            self.features[rows], self.labels[rows],
            None if self.metadata is None else self.metadata[rows], self.ids[rows],
        )

    def with_labels(self, labels: np.ndarray) -> VectorSplit:
        """The same examples with other labels (int [N])."""
        return dataclasses.replace(self, labels=labels)


@dataclasses.dataclass(frozen=True)
class VectorSource(Source):
    """A :class:`~.base.Source` of :class:`VectorSplit` s: ``image_shape`` is ``(D,)``,
    ``mean`` and ``std`` are empty (vectors are not normalised)."""

    @property
    def feature_dim(self) -> int:
        """D, the width of the vectors."""
        return int(self.image_shape[0])


def vector_source(
    name: str,
    splits: Mapping[str, VectorSplit | Sequence[np.ndarray]],
    *,
    class_names: Sequence[str] | None = None,
    num_classes: int | None = None,
    metadata_names: Sequence[str] = (),
) -> VectorSource:
    """A source of feature vectors held in memory.

    Args:
      name: the dataset name.
      splits: split name -> a :class:`VectorSplit`, or ``(features, labels)`` /
        ``(features, labels, metadata)`` with float features [N, D], int labels [N]
        and float metadata [N, p]; ``"train"`` is required (``"test"`` for evaluation).
      class_names: K names; default ``"0" .. "K-1"``.
      num_classes: K; default ``len(class_names)``, else 1 + the largest label.
      metadata_names: names of the p metadata columns.

    Raises:
      ValueError: no ``"train"`` split, labels outside [0, K), splits of different
        widths D, or a bad array (the message names it).
    """
    built = {}
    for split, value in splits.items():
        if isinstance(value, VectorSplit):
            built[split] = value
            continue
        if len(value) not in (2, 3):
            raise ValueError(
                f"split {split!r}: give (features, labels) or (features, labels, metadata), "
                f"got {len(value)} arrays"
            )
        try:
            built[split] = VectorSplit(*value)
        except ValueError as err:
            raise ValueError(f"vector source {name!r}, split {split!r}: {err}") from err
    if "train" not in built:
        raise ValueError(f"vector source {name!r} needs a 'train' split, got {sorted(built)}")
    widths = {s.features.shape[1] for s in built.values()}
    if len(widths) != 1:
        raise ValueError(f"vector source {name!r}: splits have different widths D {sorted(widths)}")
    num_classes, class_names = check_classes(f"vector source {name!r}", built, class_names,
                                             num_classes)
    check_metadata_names(f"vector source {name!r}", built, metadata_names)
    return VectorSource(
        name=name,
        splits=built,
        num_classes=num_classes,
        class_names=class_names,
        image_shape=(widths.pop(),),
        mean=(),
        std=(),
        metadata_names=tuple(metadata_names),
    )


def _check_views(config: ml_collections.ConfigDict, source: VectorSource) -> None:
    if config.augmentation not in VIEW_CHOICES:
        raise ConfigError(
            f"config.data.augmentation={config.augmentation!r}: dataset {source.name!r} holds "
            f"vectors, whose views are one of {VIEW_CHOICES}"
        )


def _fields(split: VectorSplit, rows: np.ndarray) -> Batch:
    out = {
        "label": split.labels[rows].astype(np.int32),
        "index": split.ids[rows],
    }
    if split.metadata is not None:
        out["metadata"] = split.metadata[rows]
    return out


class VectorPretrainIterator(Iterator[Batch]):
    """Infinite iterator of per-process pretraining batches of a vector source.

    Attributes (as :class:`~contrastive_jax.data.host_pipeline.HostPretrainIterator`):
      source: the vector source.
      num_views: V.
      global_batch_size, local_batch_size: examples per step over all processes /
        on this process.
      steps_per_epoch: ``n_train // global_batch_size``.
      step: the step of the next batch.
    """

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        *,
        seed: int,
        source: VectorSource,
        start_step: int = 0,
        process_index: int | None = None,
        process_count: int | None = None,
    ) -> None:
        config = as_data_spec(config)
        _check_views(config, source)
        self.source = source
        self._process_index, process_count = process_position(process_index, process_count)
        train = source.split("train")
        if config.label_noise > 0:
            noisy = symmetric_label_noise(
                train.labels, source.num_classes, config.label_noise, config.data_seed
            )
            train = train.with_labels(noisy)
        self._train = train
        self.num_views = config.num_views
        self.global_batch_size = int(config.global_batch_size)
        self.local_batch_size = rows_per_part(
            self.global_batch_size, process_count, "config.data.global_batch_size"
        )
        self.steps_per_epoch = steps_per_epoch(
            train.num_examples, self.global_batch_size, source.name
        )
        self._seed = int(seed)
        self.step = int(start_step)
        self._order: tuple[int, np.ndarray] | None = None  # (epoch, its permutation)

    def rows(self, step: int) -> np.ndarray:
        """Positions in the training split of this process's examples at ``step``: int64 [B]."""
        epoch, block = divmod(step, self.steps_per_epoch)
        if self._order is None or self._order[0] != epoch:
            order = np.random.default_rng([self._seed, epoch]).permutation(self._train.num_examples)
            self._order = (epoch, order)
        start = block * self.global_batch_size + self._process_index * self.local_batch_size
        return self._order[1][start : start + self.local_batch_size]

    def __next__(self) -> Batch:
        rows = self.rows(self.step)
        views = np.repeat(self._train.features[rows][:, None], self.num_views, axis=1)
        self.step += 1
        return {"views": views, **_fields(self._train, rows)}


class VectorEvalIterator:
    """Re-iterable batches over a whole split of vectors, in order; the last one padded.

    Attributes (as :class:`~contrastive_jax.data.eval_iterator.EvalIterator`):
      source: the vector source.
      num_examples: examples in the split.
      num_batches: ``ceil(num_examples / batch_size)`` (``len(self)``).
      local_batch_size: rows per batch on this process.
    """

    def __init__(
        self,
        split: str,
        batch_size: int,
        *,
        source: VectorSource,
        process_index: int | None = None,
        process_count: int | None = None,
    ) -> None:
        self.source = source
        self._split = source.split(split)
        self._process_index, process_count = process_position(process_index, process_count)
        self._global_batch = int(batch_size)
        self.local_batch_size = rows_per_part(self._global_batch, process_count, "batch_size")
        self.num_examples = self._split.num_examples
        self.num_batches = math.ceil(self.num_examples / self._global_batch)

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[Batch]:
        split, n = self._split, self.num_examples
        for b in range(self.num_batches):
            start = b * self._global_batch + self._process_index * self.local_batch_size
            positions = np.arange(start, start + self.local_batch_size)
            valid = positions < n
            rows = np.minimum(positions, n - 1)
            out = _fields(split, rows)
            out["image"] = np.where(valid[:, None], split.features[rows], 0.0).astype(np.float32)
            out["label"] = np.where(valid, out["label"], 0).astype(np.int32)
            out["index"] = np.where(valid, out["index"], -1)
            out["valid"] = valid
            if "metadata" in out:
                out["metadata"] = np.where(valid[:, None], out["metadata"], 0.0).astype(np.float32)
            yield out
