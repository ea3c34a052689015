"""The data-source interface: a :class:`Source` of named :class:`Split` s.

Every dataset the pipeline reads (scikit-learn digits, synthetic phantoms, a
TFDS dataset, a folder of images) is served as a ``Source``: uint8 RGB images
``[H, W, 3]`` (grey data is repeated on three channels), integer labels in
``[0, num_classes)``, splits ``"train"`` and ``"test"``, per-channel mean/std
for normalisation and, where the dataset has it, continuous metadata
``[p]`` per example (for y-Aware losses).

A split holds its images in exactly one way: in memory (``images``), as
image files (``paths``, decoded by the pipeline) or as the records of a
prepared TFDS dataset (``records``, a :class:`~contrastive_jax.data.records.RecordSet`
streamed by the pipeline; its labels are read with the images, so the split
holds none).

The per-channel statistics of a source come from :func:`channel_stats` or, for the
datasets named in :data:`KNOWN_STATS`, from their published values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from contrastive_jax.errors import ConfigError

if TYPE_CHECKING:
    from contrastive_jax.data.records import RecordSet


@dataclasses.dataclass(frozen=True)
class Split:
    """One split of a source.

    Attributes:
      labels: int64 [N], class ids in [0, num_classes); None for ``records``.
      images: uint8 [N, H, W, 3] held in memory, or None.
      paths: str [N] image files decoded by the pipeline, or None.
      records: the records of a prepared TFDS split, or None.
      metadata: float32 [N, p] continuous per-example attributes, or None.
      ids: int64 [N] example ids, unique within the split: the row of each
        example in the full split (kept when the split is subsampled). The
        pipeline yields them as ``"index"`` (the SimCLR instance id).
    """

    labels: np.ndarray | None
    images: np.ndarray | None = None
    paths: np.ndarray | None = None
    metadata: np.ndarray | None = None
    ids: np.ndarray | None = None
    records: RecordSet | None = None

    def __post_init__(self) -> None:
        held = [x is not None for x in (self.images, self.paths, self.records)]
        if sum(held) != 1:
            raise ValueError("a Split holds exactly one of `images`, `paths` or `records`")
        if self.records is not None:
            if self.labels is not None or self.metadata is not None or self.ids is not None:
                raise ValueError("a Split of `records` holds no `labels`, `metadata` or `ids`")
            return
        if self.labels is None:
            raise ValueError("a Split of `images` or `paths` needs `labels`")
        n = len(self.labels)
        if self.images is not None:
            if self.images.dtype != np.uint8 or self.images.ndim != 4 or self.images.shape[-1] != 3:
                raise ValueError(
                    f"`images` must be uint8 [N, H, W, 3], got {self.images.dtype} {self.images.shape}"
                )
        data = self.images if self.images is not None else self.paths
        if len(data) != n:
            raise ValueError(f"{len(data)} images for {n} labels")
        if self.metadata is not None and (self.metadata.ndim != 2 or len(self.metadata) != n):
            raise ValueError(f"`metadata` must have shape [{n}, p], got {self.metadata.shape}")
        object.__setattr__(self, "labels", np.asarray(self.labels, np.int64))
        ids = np.arange(n, dtype=np.int64) if self.ids is None else np.asarray(self.ids, np.int64)
        if ids.shape != (n,):
            raise ValueError(f"`ids` must have shape [{n}], got {ids.shape}")
        object.__setattr__(self, "ids", ids)
        if self.metadata is not None:
            object.__setattr__(self, "metadata", np.asarray(self.metadata, np.float32))

    @property
    def num_examples(self) -> int:
        return self.records.num_examples if self.records is not None else len(self.labels)

    @property
    def streamed(self) -> bool:
        """Whether the split is read from the records of a prepared TFDS dataset."""
        return self.records is not None

    def example_ids(self) -> np.ndarray:
        """int64 [N]: ``ids``, or the rows ``0 .. N-1`` of a split of records."""
        return np.arange(self.num_examples, dtype=np.int64) if self.ids is None else self.ids

    def take(self, rows: np.ndarray) -> Split:
        """The examples at positions ``rows`` (int [M]), keeping their ids."""
        if self.records is not None:
            raise ConfigError(
                f"{self.records.dataset} is streamed from its records; a subset of it "
                "(train_subset) needs its labels in memory: prepare the subset as its own dataset"
            )
        return Split(
            labels=self.labels[rows],
            images=None if self.images is None else self.images[rows],
            paths=None if self.paths is None else self.paths[rows],
            metadata=None if self.metadata is None else self.metadata[rows],
            ids=self.ids[rows],
        )

    def with_labels(self, labels: np.ndarray) -> Split:
        """The same examples with other labels (int [N])."""
        if self.records is not None:
            raise ConfigError(
                f"{self.records.dataset} is streamed from its records; its labels cannot be "
                "replaced (label_noise needs a dataset held in memory or an image folder)"
            )
        return dataclasses.replace(self, labels=labels)


@dataclasses.dataclass(frozen=True)
class Source:
    """A dataset behind the common interface.

    Attributes:
      name: dataset name (``config.data.dataset``).
      splits: split name -> :class:`Split`; ``"train"`` and, where the data
        has one, ``"test"``.
      num_classes: K.
      class_names: K names.
      image_shape: (H, W, 3); H and W are None when image sizes vary.
      mean: per-channel mean of the training images, on the [0, 1] scale.
      std: per-channel standard deviation, on the [0, 1] scale.
      metadata_names: names of the p metadata columns; empty without metadata.
    """

    name: str
    splits: Mapping[str, Split]
    num_classes: int
    class_names: tuple[str, ...]
    image_shape: tuple[int | None, int | None, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    metadata_names: tuple[str, ...] = ()

    def split(self, name: str) -> Split:
        """The split called ``name``; ``ValueError`` naming the available ones otherwise."""
        if name not in self.splits:
            raise ConfigError(
                f"dataset {self.name!r} has no split {name!r}; available: {sorted(self.splits)}"
            )
        return self.splits[name]


def channel_stats(images: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std on the [0, 1] scale of uint8 pixels [N, ..., C]."""
    total = np.zeros(images.shape[-1])
    total_sq = np.zeros(images.shape[-1])
    count = 0
    for start in range(0, len(images), 4096):  # chunks keep float64 copies small
        x = images[start : start + 4096].reshape(-1, images.shape[-1]).astype(np.float64) / 255.0
        total += x.sum(0)
        total_sq += (x * x).sum(0)
        count += len(x)
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


#: Published per-channel training statistics ([0, 1] scale), used for image folders and
#: streamed TFDS datasets of these names instead of decoding their images.
KNOWN_STATS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "stl10": ((0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713)),
    "imagenet2012": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}

#: Images decoded to estimate the statistics of an image folder or a streamed TFDS
#: dataset whose name has no :data:`KNOWN_STATS`.
STATS_SAMPLE = 512


def check_classes(
    what: str,
    splits: Mapping[str, Split],
    class_names: Sequence[str] | None,
    num_classes: int | None,
) -> tuple[int, tuple[str, ...]]:
    """(K, K class names) of in-memory ``splits`` (anything with int ``labels`` [N]).

    K defaults to ``len(class_names)``, else 1 + the largest label; names to ``"0" .. "K-1"``.

    Raises:
      ValueError: names for another K, or labels outside [0, K) (``what`` names the source).
    """
    labelled = [s.labels for s in splits.values() if len(s.labels)]
    largest = max(int(y.max()) for y in labelled) if labelled else -1
    smallest = min(int(y.min()) for y in labelled) if labelled else 0
    if num_classes is None:
        num_classes = len(class_names) if class_names is not None else largest + 1
    if class_names is None:
        class_names = tuple(str(k) for k in range(num_classes))
    if len(class_names) != num_classes:
        raise ValueError(f"{len(class_names)} class_names for num_classes={num_classes}")
    if smallest < 0 or largest >= num_classes:
        raise ValueError(
            f"{what}: labels must lie in [0, {num_classes}), got [{smallest}, {largest}]"
        )
    return int(num_classes), tuple(str(c) for c in class_names)


def check_metadata_names(what: str, splits: Mapping[str, Split],
                         metadata_names: Sequence[str]) -> None:
    """Raises ValueError unless every split's metadata has one column per name."""
    widths = {s.metadata.shape[1] for s in splits.values() if s.metadata is not None}
    if widths and widths != {len(metadata_names)}:
        raise ValueError(
            f"{what}: metadata has {sorted(widths)} columns but {len(metadata_names)} "
            "metadata_names"
        )


def symmetric_label_noise(
    labels: np.ndarray, num_classes: int, prob: float, seed: int
) -> np.ndarray:
    """Symmetric label noise, the corruption of Jeong & Hero's label-noise experiments
    ("Generalizing Supervised Contrastive learning: A Projection Perspective", Table 3).

    Each label is independently replaced, with probability ``prob``, by a class
    drawn uniformly from all K classes (so it may keep its value: the expected
    fraction of changed labels is ``prob (K - 1) / K``).

    Args:
      labels: int [N].
      num_classes: K.
      prob: noise probability in [0, 1].
      seed: noise seed.

    Returns:
      int64 [N] noisy labels.
    """
    if not 0.0 <= prob <= 1.0:
        raise ConfigError(f"label_noise must be in [0, 1], got {prob}")
    rng = np.random.default_rng([seed, 2])
    replace = rng.random(len(labels)) < prob
    random_labels = rng.integers(0, num_classes, len(labels))
    return np.where(replace, random_labels, labels).astype(np.int64)
