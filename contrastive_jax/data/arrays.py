"""In-memory array sources: numpy arrays in, the :class:`~.base.Source` the pipeline reads.

The built-in digits and phantoms are array sources; any other set of arrays (a
CIFAR subset already in memory, images rendered by an experiment) becomes one
with :func:`array_source`, and :func:`register_source` makes it a dataset name
that ``config.data.dataset`` selects, so ``contrastive_jax.train.loop.train``,
:func:`~contrastive_jax.data.host_pipeline.make_pretrain_iterator`, :func:`~contrastive_jax.data.eval_iterator.make_eval_iterator`
and ``contrastive_jax.eval.embed`` read it through the same pipeline (augmentation,
normalisation, sharding) as every other source::

    from contrastive_jax import data

    def make(config):                 # the data config; a factory may read its fields
        return data.array_source("blobs", {"train": (x_train, y_train), "test": (x_test, y_test)})

    data.register_source("blobs", make)
    config.data.dataset = "blobs"     # train(config, workdir) now reads the arrays

A registered name lives in this process only: a run restored elsewhere needs the
same registration before its source is loaded.

Float features [N, D] instead of images make a source of vectors
(:func:`contrastive_jax.data.vectors.vector_source`: no augmentation, no
normalisation, the ``mlp`` encoder), read by the same trainer and evaluation.

:func:`transform_metadata` applies the data config's ``metadata`` and
``metadata_scale`` fields (every source goes through it in
:func:`~.sources.load_source`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import ml_collections
import numpy as np

from contrastive_jax.data.base import (
    Source,
    Split,
    channel_stats,
    check_classes,
    check_metadata_names,
)
from contrastive_jax.data.config import as_data_spec
from contrastive_jax.data.vectors import VectorSplit, vector_source
from contrastive_jax.errors import ConfigError

#: Built-in dataset names, which :func:`register_source` refuses.
BUILTIN_NAMES = ("digits", "digits_cluttered", "phantoms", "image_folder")

SourceFactory = Callable[[ml_collections.ConfigDict], Source]
_REGISTRY: dict[str, SourceFactory] = {}


def as_images(images: np.ndarray) -> np.ndarray:
    """Images as the pipeline stores them: uint8 [N, H, W, 3].

    Args:
      images: uint8 [N, H, W, C] (0..255), or float [N, H, W, C] with values in [0, 1]
        (stored as ``round(255 x)``); C is 1 (grey, repeated on three channels) or 3.
        [N, H, W] is read as grey.

    Raises:
      ValueError: another rank, channel count or dtype, or floats outside [0, 1].
    """
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(f"`images` must have shape [N, H, W] or [N, H, W, 1 | 3], got {images.shape}")
    if np.issubdtype(images.dtype, np.floating):
        if images.size and (np.nanmin(images) < 0.0 or np.nanmax(images) > 1.0 or np.isnan(images).any()):
            raise ValueError("float `images` must have values in [0, 1]")
        images = np.round(images * 255.0).astype(np.uint8)
    elif images.dtype != np.uint8:
        raise ValueError(f"`images` must be uint8 or float in [0, 1], got dtype {images.dtype}")
    return np.repeat(images, 3, axis=-1) if images.shape[-1] == 1 else images


def array_source(
    name: str,
    splits: Mapping[str, Split | Sequence[np.ndarray]],
    *,
    class_names: Sequence[str] | None = None,
    num_classes: int | None = None,
    metadata_names: Sequence[str] = (),
    stats: tuple[Sequence[float], Sequence[float]] | None = None,
) -> Source:
    """A :class:`~.base.Source` held in memory.

    Args:
      name: the dataset name.
      splits: split name -> a :class:`~.base.Split` of images, or a tuple
        ``(images, labels)`` / ``(images, labels, metadata)`` with images as
        :func:`as_images` takes them, int labels [N] and float metadata [N, p];
        ``"train"`` is required (``"test"`` for evaluation). Float features
        [N, D] (rank 2) in place of the images, or
        :class:`~.vectors.VectorSplit` s, give a source of vectors
        (:func:`~.vectors.vector_source`; ``stats`` must then be None).
      class_names: K names; default ``"0" .. "K-1"``.
      num_classes: K; default ``len(class_names)``, else 1 + the largest label.
      metadata_names: names of the p metadata columns.
      stats: per-channel (mean, std) on the [0, 1] scale; default: those of the
        training images.

    Raises:
      ValueError: no ``"train"`` split, labels outside [0, K), splits of
        different image shapes, or a bad array (the message names it).
    """
    if any(isinstance(v, VectorSplit) or (not isinstance(v, Split) and len(v) and np.ndim(v[0]) == 2)
           for v in splits.values()):
        if stats is not None:
            raise ValueError(f"array source {name!r} holds vectors, which take no `stats`")
        return vector_source(name, splits, class_names=class_names, num_classes=num_classes,
                             metadata_names=metadata_names)
    built = {}
    for split, value in splits.items():
        if isinstance(value, Split):
            built[split] = value
            continue
        if len(value) not in (2, 3):
            raise ValueError(
                f"split {split!r}: give (images, labels) or (images, labels, metadata), "
                f"got {len(value)} arrays"
            )
        images, labels = as_images(value[0]), np.asarray(value[1])
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"split {split!r}: labels must be int [N], got {labels.dtype} {labels.shape}")
        metadata = None if len(value) == 2 or value[2] is None else np.asarray(value[2])
        built[split] = Split(labels=labels, images=images, metadata=metadata)
    if "train" not in built:
        raise ValueError(f"array source {name!r} needs a 'train' split, got {sorted(built)}")
    if any(s.images is None for s in built.values()):
        raise ValueError(f"array source {name!r}: every split must hold images in memory")
    shapes = {s.images.shape[1:] for s in built.values()}
    if len(shapes) != 1:
        raise ValueError(f"array source {name!r}: splits have different image shapes {sorted(shapes)}")
    num_classes, class_names = check_classes(f"array source {name!r}", built, class_names,
                                             num_classes)
    check_metadata_names(f"array source {name!r}", built, metadata_names)
    mean, std = stats if stats is not None else channel_stats(built["train"].images)
    return Source(
        name=name,
        splits=built,
        num_classes=num_classes,
        class_names=class_names,
        image_shape=tuple(built["train"].images.shape[1:]),
        mean=tuple(float(v) for v in mean),
        std=tuple(float(v) for v in std),
        metadata_names=tuple(metadata_names),
    )


def register_source(name: str, factory: SourceFactory) -> None:
    """Makes ``config.data.dataset = name`` load ``factory(config.data)`` in this process.

    Registering a name again replaces its factory. ``train_subset``,
    ``metadata`` and ``metadata_scale`` of the data config apply to the
    factory's source as to any other.

    Raises:
      ValueError: ``name`` is a built-in dataset or has the ``folder:`` prefix.
    """
    if name in BUILTIN_NAMES or name.startswith("folder:") or not name:
        raise ValueError(f"{name!r} is a built-in dataset name; register the arrays under another")
    _REGISTRY[name] = factory


def unregister_source(name: str) -> None:
    """Forgets a registered name (no error if it is not registered)."""
    _REGISTRY.pop(name, None)


def registered_source(name: str) -> SourceFactory | None:
    """The factory registered under ``name``, or None."""
    return _REGISTRY.get(name)


def transform_metadata(source: Source, config: ml_collections.ConfigDict) -> Source:
    """The source with the metadata the data config asks for.

    * ``config.metadata = "label_onehot"``: each split's metadata is the one-hot
      class label, float32 [N, K] (clean labels: ``label_noise`` acts later, in the
      pipeline). With an RBF kernel of small bandwidth on it (different classes at
      squared distance 2), the y-Aware kernel losses become class-delta kernels.
    * ``config.metadata_scale``: p factors multiplying the metadata columns, e.g.
      ``(1.0, 1000.0)`` on (age, sex) makes an RBF kernel of bandwidth 5 a product
      kernel ``w(age) * delta(sex)``.

    Raises:
      ConfigError: ``label_onehot`` for a streamed source, a scale for a source without
        metadata, or a scale of the wrong length.
    """
    config = as_data_spec(config)
    choice, scale = config.metadata, config.metadata_scale
    if choice == "source" and scale is None:
        return source
    splits = dict(source.splits)
    names = source.metadata_names
    if choice == "label_onehot":
        eye = np.eye(source.num_classes, dtype=np.float32)
        for key, split in splits.items():
            if split.labels is None:
                raise ConfigError(
                    f"config.data.metadata='label_onehot' needs labels in memory; {source.name!r} "
                    "is streamed from its records"
                )
            splits[key] = _with_metadata(split, eye[split.labels])
        names = tuple(f"label={c}" for c in source.class_names)
    if scale is not None:
        scale = np.asarray(tuple(scale), np.float32)
        if scale.shape != (len(names),) or not names:
            raise ConfigError(
                f"config.data.metadata_scale has {scale.size} factors; dataset {source.name!r} "
                f"has {len(names)} metadata columns {names}"
            )
        for key, split in splits.items():
            if split.metadata is not None:
                splits[key] = _with_metadata(split, split.metadata * scale)
    return dataclasses.replace(source, splits=splits, metadata_names=names)


def _with_metadata(split: Split, metadata: np.ndarray) -> Split:
    return dataclasses.replace(split, metadata=metadata)
