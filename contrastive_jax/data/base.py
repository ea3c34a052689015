"""The data-source interface: a :class:`Source` of named :class:`Split` s.

Every dataset the pipeline reads (scikit-learn digits, synthetic phantoms, a
TFDS dataset, a folder of images) is served as a ``Source``: uint8 RGB images
``[H, W, 3]`` (grey data is repeated on three channels), integer labels in
``[0, num_classes)``, splits ``"train"`` and ``"test"``, per-channel mean/std
for normalisation and, where the dataset has it, continuous metadata
``[p]`` per example (for y-Aware losses).

A split holds its images either in memory (``images``) or as file paths
(``paths``, decoded by the pipeline), never both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np


class CorruptImageError(ValueError):
    """An image file that cannot be decoded; the message names the file."""


@dataclasses.dataclass(frozen=True)
class Split:
    """One split of a source.

    Attributes:
      labels: int64 [N], class ids in [0, num_classes).
      images: uint8 [N, H, W, 3] held in memory, or None.
      paths: str [N] image files decoded by the pipeline, or None.
      metadata: float32 [N, p] continuous per-example attributes, or None.
      ids: int64 [N] example ids, unique within the split: the row of each
        example in the full split (kept when the split is subsampled). The
        pipeline yields them as ``"index"`` (the SimCLR instance id).
    """

    labels: np.ndarray
    images: np.ndarray | None = None
    paths: np.ndarray | None = None
    metadata: np.ndarray | None = None
    ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.labels)
        if (self.images is None) == (self.paths is None):
            raise ValueError("a Split holds exactly one of `images` or `paths`")
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
        return len(self.labels)

    def take(self, rows: np.ndarray) -> Split:
        """The examples at positions ``rows`` (int [M]), keeping their ids."""
        return Split(
            labels=self.labels[rows],
            images=None if self.images is None else self.images[rows],
            paths=None if self.paths is None else self.paths[rows],
            metadata=None if self.metadata is None else self.metadata[rows],
            ids=self.ids[rows],
        )

    def with_labels(self, labels: np.ndarray) -> Split:
        """The same examples with other labels (int [N])."""
        return dataclasses.replace(self, labels=labels)


@dataclasses.dataclass(frozen=True)
class Source:
    """A dataset behind the common interface.

    Attributes:
      name: dataset name (``config.dataset``).
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
            raise ValueError(
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
