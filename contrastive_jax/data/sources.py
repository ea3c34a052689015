"""Loading a :class:`~contrastive_jax.data.base.Source` from a data config.

``config.data.dataset`` selects the source:

* ``"digits"`` / ``"digits_cluttered"``: scikit-learn's bundled digits
  (:mod:`contrastive_jax.data.digits`); nothing to download.
* ``"phantoms"``: synthetic brain phantoms with (age, sex) metadata
  (:mod:`contrastive_jax.data.synthetic`).
* ``"image_folder"``: ``tfds.ImageFolder(config.data_dir)``, a tree
  ``<data_dir>/<split>/<class>/<image>.{jpg,jpeg,png}``; ``"folder:PATH"`` is
  the same with ``data_dir = PATH`` (e.g. ``folder:PATH/TO/cifar10``).
* any other name: a TFDS dataset (``cifar10``, ``cifar100``, ``stl10``,
  ``imagenet2012``, ...). If ``config.data_dir`` is a folder of images in the
  layout above, it is read with ``tfds.ImageFolder`` under that name;
  otherwise ``config.data_dir`` is a TFDS data directory and the dataset is
  loaded with TFDS (``download`` only when ``config.download`` is true, so an
  unprepared dataset fails fast with a message that names it and says what
  to pass). Without a ``data_dir``, TFDS's own default data directory is
  used (``~/tensorflow_datasets`` or ``$TFDS_DATA_DIR``).

Image folders are listed, not decoded: the pipeline reads and decodes files
on the fly. A file that cannot be decoded raises
:class:`~contrastive_jax.errors.CorruptImageError` naming it (no silent
skip: skipping would change every later batch). A TFDS dataset of
fixed-size images whose splits fit in :data:`MAX_IN_MEMORY_BYTES` decoded
(CIFAR, STL-10, MNIST, ...) is loaded into memory; every other one
(``imagenet2012``, any dataset of variable-size images) is streamed from its
prepared ArrayRecord or TFRecord files (:mod:`contrastive_jax.data.records`),
with host memory independent of its size. ``config.in_memory`` forces the
choice.

* a name registered with :func:`contrastive_jax.data.register_source`: the
  in-memory arrays its factory returns (:mod:`contrastive_jax.data.arrays`).

``config.source_kwargs`` passes keyword arguments to the generator of a
synthetic built-in source (phantoms: ``num_train``, ``num_test_controls``,
``num_test_patients``, ``delta_d``, ``seed``; see
:func:`contrastive_jax.data.synthetic.phantom_splits`). An image folder takes
``test_subset`` (see below).

``config.train_subset`` replaces the training split by a deterministic,
class-balanced subset (seed ``config.data_seed``); it applies to every
consumer of the source (pretraining and evaluation alike). For an image
folder, ``config.source_kwargs.test_subset`` does the same to the test split
(same seed), and ``config.in_memory = True`` decodes the (subset) images of
every split into memory once instead of reading the files at every epoch. The
CPU proxies of CIFAR-10 read the shared folder this way::

    config.data.dataset = "cifar10"
    config.data.data_dir = "PATH/TO/cifar10"    # <root>/{train,test}/<class>/<image>
    config.data.train_subset = 5000
    config.data.source_kwargs = {"test_subset": 2000}
    config.data.in_memory = True

``config.metadata`` and ``config.metadata_scale`` then choose the metadata
(:func:`contrastive_jax.data.arrays.transform_metadata`).
"""

from __future__ import annotations

import dataclasses
import logging
import os

import ml_collections
import numpy as np

from contrastive_jax.data import arrays, digits, label_subset, synthetic
from contrastive_jax.data._image_folder import (
    decode_image_file,
    image_folder_source,
    is_image_folder,
)
from contrastive_jax.data._tfds_source import (
    MAX_IN_MEMORY_BYTES,
    DatasetNotPreparedError,
    tfds_source,
)
from contrastive_jax.data.base import KNOWN_STATS, STATS_SAMPLE, Source, Split, channel_stats
from contrastive_jax.data.config import as_data_spec, check_source_kwargs
from contrastive_jax.errors import ConfigError

__all__ = [
    "FOLDER_KWARGS",
    "FOLDER_PREFIX",
    "KNOWN_STATS",
    "MAX_IN_MEMORY_BYTES",
    "STATS_SAMPLE",
    "DatasetNotPreparedError",
    "class_balanced_subset",
    "decode_image_file",
    "image_folder_source",
    "is_image_folder",
    "load_source",
    "tfds_source",
]

log = logging.getLogger(__name__)

#: ``config.data.dataset = "folder:PATH"`` reads the image folder at PATH.
FOLDER_PREFIX = "folder:"


# --------------------------------------------------------------------------- subsets, noise


def class_balanced_subset(
    labels: np.ndarray, size: int, seed: int, *, option: str = "train_subset"
) -> np.ndarray:
    """Sorted positions of a deterministic class-balanced subset of ``size`` examples.

    Each of the K classes present gets ``size // K`` examples, and
    ``size % K`` randomly chosen classes one more; members are drawn without
    replacement with ``numpy.random.default_rng(seed)``.

    Args:
      labels: int [N].
      size: subset size, 1 <= size <= N.
      seed: subset seed.
      option: the config option that asked for the subset (named by errors).

    Returns:
      int64 [size], increasing.
    """
    classes = np.unique(labels)
    if not 1 <= size <= len(labels):
        raise ConfigError(f"{option} must be in [1, {len(labels)}], got {size}")
    rng = np.random.default_rng([seed, 1])
    per_class = np.full(len(classes), size // len(classes))
    per_class[rng.permutation(len(classes))[: size % len(classes)]] += 1
    rows = []
    for k, count in zip(classes, per_class, strict=True):
        members = np.flatnonzero(labels == k)
        if count > len(members):
            raise ConfigError(
                f"{option}={size} needs {count} examples of class {k}, which has {len(members)}"
            )
        rows.append(rng.choice(members, size=count, replace=False))
    return np.sort(np.concatenate(rows)).astype(np.int64)


# --------------------------------------------------------------------------- entry point


def _array_source(
    name: str,
    splits: dict[str, Split],
    class_names: tuple[str, ...],
    metadata_names: tuple[str, ...],
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None,
) -> Source:
    mean, std = stats if stats is not None else channel_stats(splits["train"].images)
    return Source(
        name=name,
        splits=splits,
        num_classes=len(class_names),
        class_names=class_names,
        image_shape=splits["train"].images.shape[1:],
        mean=tuple(mean),
        std=tuple(std),
        metadata_names=metadata_names,
    )


def load_source(config: ml_collections.ConfigDict) -> Source:
    """The source described by a data config (see :func:`~contrastive_jax.data.default_data_config`).

    Uses ``dataset``, ``data_dir``, ``download``, ``mean``/``std`` (both or
    neither), ``train_subset`` and ``data_seed``.
    """
    config = as_data_spec(config)
    name = config.dataset
    stats = None if config.mean is None else (tuple(config.mean), tuple(config.std))
    data_dir = config.data_dir
    source_kwargs = dict(config.source_kwargs)
    factory = arrays.registered_source(name)
    folder = None if factory is not None else _image_folder_root(name, data_dir)
    if folder is not None:
        check_source_kwargs(source_kwargs, "an image folder", FOLDER_KWARGS, FOLDER_KWARGS)
    elif source_kwargs and name != "phantoms":
        raise ConfigError(
            f"config.data.source_kwargs {sorted(source_kwargs)}: dataset {name!r} takes none "
            "(only the synthetic 'phantoms' and image folders take source_kwargs)"
        )
    if factory is not None:
        source = factory(config)
    elif name in ("digits", "digits_cluttered"):
        source = _array_source(
            name,
            digits.digits_splits(cluttered=name == "digits_cluttered"),
            tuple(str(k) for k in range(10)),
            digits.METADATA_NAMES,
            stats,
        )
    elif name == "phantoms":
        source = _array_source(
            name,
            _phantom_splits(source_kwargs),
            ("control", "patient"),
            synthetic.METADATA_NAMES,
            stats,
        )
    elif name.startswith(FOLDER_PREFIX):
        known = os.path.basename(os.path.normpath(folder))  # folder:.../cifar10 -> CIFAR stats
        source = image_folder_source(
            folder, name=known if known in KNOWN_STATS else "image_folder", stats=stats
        )
    elif folder is not None:
        source = image_folder_source(folder, name=name, stats=stats)
    else:
        source = tfds_source(
            name,
            data_dir=data_dir,
            download=config.download,
            stats=stats,
            in_memory=config.in_memory,
        )
    if config.train_subset is not None:
        train = source.split("train")
        if train.streamed:
            train.take(np.arange(0))  # raises: a subset needs the labels in memory
        rows = class_balanced_subset(train.labels, config.train_subset, config.data_seed)
        log.info("dataset %s: class-balanced training subset of %d", name, len(rows))
        source = _replace_split(source, "train", train.take(rows))
    source = _labelled_subset(source, config)
    if folder is not None:
        source = _folder_subset_and_decode(
            source, source_kwargs.get("test_subset"), config.data_seed, config.in_memory
        )
    return arrays.transform_metadata(source, config)


def _labelled_subset(source: Source, config: ml_collections.ConfigDict) -> Source:
    """The training split reduced to ``label_fraction`` or ``label_ids``
    (:mod:`.label_subset`); the source itself when neither is set."""
    fraction, ids_file = config.label_fraction, config.label_ids
    if fraction is None and not ids_file:
        return source
    train = source.split("train")
    if train.streamed:
        train.take(np.arange(0))  # raises: a subset needs the labels in memory
    if fraction is not None:
        rows = label_subset.fraction_rows(train.labels, fraction, config.data_seed)
    else:
        rows = label_subset.id_rows(label_subset.read_ids(ids_file), train.ids, train.paths)
    log.info("dataset %s: %d labelled training examples", source.name, len(rows))
    return _replace_split(source, "train", train.take(rows))


#: ``config.source_kwargs`` of an image folder.
FOLDER_KWARGS = ("test_subset",)


def _image_folder_root(name: str, data_dir: str | None) -> str | None:
    """The folder an image-folder dataset reads, or None for every other kind of dataset."""
    if name in arrays.BUILTIN_NAMES and name != "image_folder":
        return None
    if name.startswith(FOLDER_PREFIX):
        folder = name[len(FOLDER_PREFIX):]
        if not folder:
            raise ConfigError(f"dataset {name!r} names no folder; write {FOLDER_PREFIX}PATH")
        return folder
    if name == "image_folder":
        if data_dir is None:
            raise ConfigError(
                "dataset 'image_folder' needs config.data_dir (<root>/<split>/<class>/)"
            )
        return data_dir
    return data_dir if data_dir is not None and is_image_folder(data_dir) else None


def _folder_subset_and_decode(
    source: Source, test_subset: int | None, seed: int, in_memory: bool | None
) -> Source:
    """An image folder's class-balanced test subset (``test_subset`` images, subset seed
    ``seed``) and, with ``in_memory``, every split decoded into uint8 [N, H, W, 3] (ids kept).

    Raises:
      ConfigError: ``test_subset`` without a test split or larger than it; ``in_memory`` for
        a split of images of different sizes.
    """
    if test_subset is not None:
        if "test" not in source.splits:
            raise ConfigError(
                f"config.data.source_kwargs.test_subset: image folder {source.name!r} has no "
                f"'test' split; it has {sorted(source.splits)}"
            )
        test = source.split("test")
        rows = class_balanced_subset(
            test.labels, test_subset, seed, option="config.data.source_kwargs.test_subset"
        )
        log.info("dataset %s: class-balanced test subset of %d", source.name, len(rows))
        source = _replace_split(source, "test", test.take(rows))
    if not in_memory:
        return source
    splits = {}
    for key, split in source.splits.items():
        decoded = [decode_image_file(p) for p in split.paths]
        shapes = sorted({image.shape for image in decoded})
        if not decoded:
            splits[key] = split  # nothing to decode
            continue
        if len(shapes) != 1:
            raise ConfigError(
                f"config.data.in_memory=True: split {key!r} of image folder {source.name!r} holds "
                f"images of shapes {shapes[:4]}; read images of different sizes from their files "
                "(in_memory None or False)"
            )
        splits[key] = Split(
            labels=split.labels, images=np.stack(decoded), metadata=split.metadata, ids=split.ids
        )
    log.info("dataset %s: decoded %s into memory", source.name,
             ", ".join(f"{k} {len(v.labels)}" for k, v in splits.items()))
    return dataclasses.replace(source, splits=splits)


def _phantom_splits(kwargs: dict) -> dict[str, Split]:
    """:func:`synthetic.phantom_splits` with ``config.source_kwargs``; names a bad argument."""
    counts = ("num_train", "num_test_controls", "num_test_patients")
    check_source_kwargs(kwargs, "the phantoms source", (*counts, "delta_d", "seed"), counts)
    return synthetic.phantom_splits(**kwargs)


def _replace_split(source: Source, name: str, split: Split) -> Source:
    return dataclasses.replace(source, splits={**source.splits, name: split})
