"""Loading a :class:`~contrastive_jax.data.base.Source` from a data config.

``config.dataset`` selects the source:

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

from contrastive_jax.data import arrays, digits, synthetic
from contrastive_jax.data import records as records_lib
from contrastive_jax.data.base import Source, Split, channel_stats
from contrastive_jax.errors import ConfigError, CorruptImageError, InputError

log = logging.getLogger(__name__)

#: ``config.dataset = "folder:PATH"`` reads the image folder at PATH.
FOLDER_PREFIX = "folder:"

_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")  # those tfds.ImageFolder lists

#: Published per-channel training statistics ([0, 1] scale), used for image
#: folders of these datasets instead of decoding every file.
KNOWN_STATS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "stl10": ((0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713)),
    "imagenet2012": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}

#: Images decoded to estimate the statistics of an unknown image folder.
STATS_SAMPLE = 512
#: Largest TFDS split loaded into memory. The pipeline captures the split as a
#: tensor, which tf.data copies a few times (graph serialisation, 2 GB proto
#: limit); CIFAR (150 MB) and STL-10 (140-220 MB) fit with room to spare.
MAX_IN_MEMORY_BYTES = 2**30


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


# --------------------------------------------------------------------------- image files


def decode_image_file(path: str) -> np.ndarray:
    """Decodes one image file to uint8 [H, W, 3]; :class:`CorruptImageError` names a bad file."""
    from contrastive_jax.data._tf import tf

    try:
        data = tf.io.read_file(path)
        return tf.io.decode_image(data, channels=3, expand_animations=False).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
        raise CorruptImageError(f"cannot decode image file {path}: {e.message}") from e


def is_image_folder(path: str) -> bool:
    """Whether ``path`` has the ImageFolder layout: some ``<split>/<class>/`` holds image files.

    (A TFDS data directory, ``<name>/<version>/*.tfrecord...``, does not.)
    """
    from contrastive_jax.data._tf import tf

    def subdirs(folder: str) -> list[str]:
        if not tf.io.gfile.isdir(folder):
            return []
        children = (
            os.path.join(folder, c.rstrip("/")) for c in sorted(tf.io.gfile.listdir(folder))
        )
        return [c for c in children if tf.io.gfile.isdir(c)]

    for split_dir in subdirs(path):
        for class_dir in subdirs(split_dir)[:1]:
            if any(f.lower().endswith(_IMAGE_EXTENSIONS) for f in tf.io.gfile.listdir(class_dir)):
                return True
    return False


def image_folder_source(
    root: str,
    *,
    name: str = "image_folder",
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> Source:
    """A folder of images ``<root>/<split>/<class>/<file>`` via ``tfds.ImageFolder``.

    ``tfds.ImageFolder`` gives the splits, the sorted class names (label ids)
    and the example counts; the files are listed in sorted (class, file name)
    order, which fixes every example's id, and decoded later by the pipeline.

    Args:
      root: the folder.
      name: dataset name; selects :data:`KNOWN_STATS` when present.
      stats: (mean, std) to use; by default the known statistics of ``name``
        or estimates from :data:`STATS_SAMPLE` evenly spaced training images.

    Returns:
      A source with file-backed splits. ``image_shape`` is the common shape of
      the first 8 training images, or (None, None, 3) if they differ.
    """
    import tensorflow_datasets as tfds

    from contrastive_jax.data._tf import tf

    if not os.path.isdir(root):
        raise InputError(f"image folder {root!r} does not exist or is not a directory")
    builder = tfds.ImageFolder(root)
    label_feature = builder.info.features["label"]
    splits = {}
    for split, split_info in builder.info.splits.items():
        paths, labels = [], []
        split_dir = os.path.join(root, split)
        for class_name in sorted(d.rstrip("/") for d in tf.io.gfile.listdir(split_dir)):
            class_dir = os.path.join(split_dir, class_name)
            if not tf.io.gfile.isdir(class_dir):
                continue
            files = sorted(
                f for f in tf.io.gfile.listdir(class_dir) if f.lower().endswith(_IMAGE_EXTENSIONS)
            )
            paths += [os.path.join(class_dir, f) for f in files]
            labels += [label_feature.str2int(class_name)] * len(files)
        if len(paths) != split_info.num_examples:
            raise RuntimeError(
                f"listed {len(paths)} images in {split_dir}, tfds.ImageFolder counts "
                f"{split_info.num_examples}"
            )
        splits[split] = Split(labels=np.array(labels), paths=np.array(paths))
    if "train" not in splits:
        raise InputError(f"image folder {root} has no 'train' split; found {sorted(splits)}")
    train_paths = splits["train"].paths
    shapes = {decode_image_file(p).shape for p in train_paths[:8]}
    image_shape = shapes.pop() if len(shapes) == 1 else (None, None, 3)
    if stats is None:
        stats = KNOWN_STATS.get(name)
    if stats is None:
        rows = np.linspace(0, len(train_paths) - 1, min(STATS_SAMPLE, len(train_paths))).astype(int)
        sample = [decode_image_file(train_paths[i]).reshape(-1, 3) for i in rows]
        stats = channel_stats(np.concatenate(sample)[None])
    return Source(
        name=name,
        splits=splits,
        num_classes=label_feature.num_classes,
        class_names=tuple(label_feature.names),
        image_shape=image_shape,
        mean=tuple(stats[0]),
        std=tuple(stats[1]),
    )


# --------------------------------------------------------------------------- TFDS


class DatasetNotPreparedError(FileNotFoundError):
    """A TFDS dataset that is not prepared locally and may not be downloaded."""


def _tfds_builder(name: str, data_dir: str | None, download: bool):
    """The TFDS builder of ``name`` in ``data_dir``, prepared (downloading only if allowed)."""
    import tensorflow_datasets as tfds

    def not_prepared(where: str) -> DatasetNotPreparedError:
        found = records_lib.list_prepared(where)
        listing = (
            f"it holds: {', '.join(found)}" if found
            else "it holds no prepared TFDS dataset" if os.path.isdir(where)
            else "it does not exist"
        )
        return DatasetNotPreparedError(
            f"TFDS dataset {name!r} is not prepared in {where} ({listing}) and downloads are off "
            "(config.download=False). Prepare it with `tfds build "
            f"{name} --data_dir=DIR` (or `python -m contrastive_jax.data.prepare`) and set "
            "config.data_dir=DIR, or read a folder of images: config.data_dir=<root>/<split>/"
            f"<class>/<image> (e.g. config.dataset={name!r}, config.data_dir=PATH/TO/FOLDER)."
        )

    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as e:
        if data_dir is not None:
            raise not_prepared(data_dir) from e
        raise InputError(
            f"unknown dataset {name!r}: not a built-in name (digits, digits_cluttered, phantoms, "
            "image_folder) nor a TFDS dataset; a dataset prepared in a data directory needs "
            "config.data_dir"
        ) from e
    if not builder.is_prepared():
        if not download:
            raise not_prepared(data_dir or str(builder.data_dir_root))
        builder.download_and_prepare()
    return builder


def tfds_source(
    name: str,
    *,
    data_dir: str | None = None,
    download: bool = False,
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
    in_memory: bool | None = None,
) -> Source:
    """A prepared (or, with ``download``, downloadable) TFDS dataset.

    Splits ``train`` and ``test`` (``validation`` serves as ``test`` when the
    dataset has no ``test`` split). Grey images are repeated on three channels.
    The splits are either loaded into memory (fixed-size images, both splits
    at most :data:`MAX_IN_MEMORY_BYTES` decoded) or streamed from their
    records (:class:`~contrastive_jax.data.records.RecordSet`: ArrayRecord or
    TFRecord files, any size, images of any shape).

    Args:
      name: the TFDS name; a dataset prepared under ``data_dir`` may be one
        TFDS does not register (e.g. written by ``TfDataBuilder`` or by
        :mod:`contrastive_jax.data.prepare`).
      data_dir: TFDS data directory (None: TFDS's default).
      download: let TFDS download and prepare an unprepared dataset.
      stats: (mean, std) on the [0, 1] scale; default: :data:`KNOWN_STATS`,
        else computed from the training images (in memory) or estimated from
        :data:`STATS_SAMPLE` of them (streamed).
      in_memory: True / False forces the choice; None picks memory for small
        fixed-size datasets.

    Raises:
      DatasetNotPreparedError: the dataset is not prepared in ``data_dir`` and
        ``download`` is false; the message lists what ``data_dir`` holds.
      ValueError: unknown name, no image or label feature (the message lists
        the features), no train split, or ``in_memory=True`` for images of
        variable size.
    """
    import tensorflow_datasets as tfds

    builder = _tfds_builder(name, data_dir, download)
    features = builder.info.features
    missing = [k for k in ("image", "label") if k not in features]
    if missing:
        raise InputError(
            f"TFDS dataset {name!r} has no {' and no '.join(repr(k) for k in missing)} feature; "
            f"its features: {sorted(features.keys())}. Pretraining and evaluation need an "
            "'image' and an integer class 'label'."
        )
    shape = tuple(features["image"].shape)
    available = builder.info.splits
    chosen = {"train": "train", "test": "test" if "test" in available else "validation"}
    chosen = {k: v for k, v in chosen.items() if v in available}
    if "train" not in chosen:
        raise InputError(
            f"TFDS dataset {name!r} has no 'train' split; its splits: {sorted(available.keys())}"
        )
    fixed = None not in shape[:2]
    total = sum(available[v].num_examples for v in chosen.values()) * (
        int(np.prod(shape)) if fixed else 0
    )
    if in_memory is None:
        in_memory = fixed and total <= MAX_IN_MEMORY_BYTES
    elif in_memory and not fixed:
        raise ConfigError(f"TFDS dataset {name!r} has variable-size images {shape}; stream it")
    label_feature = features["label"]
    if in_memory:
        splits = {}
        for split, tfds_split in chosen.items():
            arrays = tfds.as_numpy(builder.as_dataset(split=tfds_split, batch_size=-1))
            images, labels = arrays["image"], arrays["label"]
            if images.shape[-1] == 1:
                images = np.repeat(images, 3, axis=-1)
            splits[split] = Split(labels=labels, images=images)
        train_images = splits["train"].images
        image_shape = train_images.shape[1:]
        mean, std = stats if stats is not None else channel_stats(train_images)
    else:
        file_format = str(getattr(builder.info.file_format, "value", builder.info.file_format))
        splits = {
            split: Split(
                labels=None,
                records=records_lib.RecordSet(
                    f"{name}/{tfds_split}",
                    file_format,
                    [
                        records_lib.Span(f.filename, f.skip, f.take, f.examples_in_shard)
                        for f in available[tfds_split].file_instructions
                    ],
                ),
            )
            for split, tfds_split in chosen.items()
        }
        image_shape = (shape[0], shape[1], 3)
        if stats is None:
            stats = KNOWN_STATS.get(name) or _record_stats(splits["train"].records)
        mean, std = stats
        log.info(
            "dataset %s: streaming %s records (%s)", name, file_format,
            ", ".join(f"{k} {v.num_examples}" for k, v in splits.items()),
        )
    return Source(
        name=name,
        splits=splits,
        num_classes=label_feature.num_classes,
        class_names=tuple(label_feature.names),
        image_shape=image_shape,
        mean=tuple(mean),
        std=tuple(std),
    )


def _record_stats(records: records_lib.RecordSet) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Channel statistics of :data:`STATS_SAMPLE` decoded training images (evenly spaced
    rows for ArrayRecord, the first ones for TFRecord)."""
    from contrastive_jax.data._tf import tf

    count = min(STATS_SAMPLE, records.num_examples)
    if records.random_access:
        rows = np.linspace(0, records.num_examples - 1, count).astype(np.int64)
        serialized = records.read(rows)
    else:
        rows = np.arange(count)
        serialized = [r for _, r in records.stream(0, count).as_numpy_iterator()]
    pixels = []
    for row, record in zip(rows, serialized, strict=True):
        try:
            data = records.parse(tf.constant(record))["data"]
            image = tf.io.decode_image(data, channels=3, expand_animations=False)
        except tf.errors.OpError:
            records.check([row], [record])  # raises CorruptRecordError naming the record
            raise
        pixels.append(image.numpy().reshape(-1, 3))
    return channel_stats(np.concatenate(pixels)[None])


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
    name = config.dataset
    if (config.mean is None) != (config.std is None):
        raise ConfigError("set both config.mean and config.std, or neither")
    stats = None if config.mean is None else (tuple(config.mean), tuple(config.std))
    data_dir = config.data_dir
    source_kwargs = dict(config.get("source_kwargs") or {})
    factory = arrays.registered_source(name)
    folder = None if factory is not None else _image_folder_root(name, data_dir)
    if folder is not None:
        _check_folder_kwargs(source_kwargs)
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
            in_memory=config.get("in_memory"),
        )
    if config.train_subset is not None:
        train = source.split("train")
        if train.streamed:
            train.take(np.arange(0))  # raises: a subset needs the labels in memory
        rows = class_balanced_subset(train.labels, config.train_subset, config.data_seed)
        log.info("dataset %s: class-balanced training subset of %d", name, len(rows))
        source = _replace_split(source, "train", train.take(rows))
    if folder is not None:
        source = _folder_subset_and_decode(
            source, source_kwargs.get("test_subset"), config.data_seed, config.get("in_memory")
        )
    return arrays.transform_metadata(source, config)


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


def _check_folder_kwargs(kwargs: dict) -> None:
    unknown = sorted(set(kwargs) - set(FOLDER_KWARGS))
    if unknown:
        raise ConfigError(
            f"config.data.source_kwargs {unknown}: an image folder takes {', '.join(FOLDER_KWARGS)}"
        )
    size = kwargs.get("test_subset")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
        raise ConfigError(f"config.data.source_kwargs.test_subset must be a positive int, got {size!r}")


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
    allowed = ("num_train", "num_test_controls", "num_test_patients", "delta_d", "seed")
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ConfigError(
            f"config.data.source_kwargs {unknown}: phantoms take {', '.join(allowed)}"
        )
    for key in ("num_train", "num_test_controls", "num_test_patients"):
        if key in kwargs and (not isinstance(kwargs[key], int) or kwargs[key] < 1):
            raise ConfigError(f"config.data.source_kwargs.{key} must be a positive int")
    return synthetic.phantom_splits(**kwargs)


def _replace_split(source: Source, name: str, split: Split) -> Source:
    return dataclasses.replace(source, splits={**source.splits, name: split})
