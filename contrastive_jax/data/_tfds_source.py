"""A prepared (or downloadable) TFDS dataset as a source: in memory or streamed.

:func:`tfds_source` reads the TFRecord or ArrayRecord files of a TFDS dataset's ``train``
and ``test`` splits by row (:class:`~contrastive_jax.data.records.RecordSet`; a TFRecord
shard is indexed once, :mod:`contrastive_jax.data.tfrecord`), without TensorFlow: decoded
into memory by Pillow when the images have a fixed size and fit
:data:`MAX_IN_MEMORY_BYTES`, else streamed. :func:`tfds_builder` finds the
dataset's builder and fails fast, with :class:`DatasetNotPreparedError` listing what the
data directory holds, when it is not prepared and downloads are off.
:mod:`contrastive_jax.data.sources` reads a data config's TFDS dataset through these and
re-exports them.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from contrastive_jax.data import records as records_lib
from contrastive_jax.data.base import KNOWN_STATS, STATS_SAMPLE, Source, Split, channel_stats
from contrastive_jax.errors import ConfigError, InputError

log = logging.getLogger(__name__)

#: Largest TFDS dataset (both splits, decoded) loaded into memory by default; CIFAR
#: (180 MB) and STL-10 (140-220 MB) fit with room to spare.
MAX_IN_MEMORY_BYTES = 2**30
#: Records read and decoded per task when a dataset is loaded into memory.
_DECODE_CHUNK = 256


class DatasetNotPreparedError(FileNotFoundError):
    """A TFDS dataset that is not prepared locally and may not be downloaded."""


def tfds_builder(name: str, data_dir: str | None, download: bool):
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
            f"{name} --data_dir=DIR` and set "
            "config.data_dir=DIR, or read a folder of images: config.data_dir=<root>/<split>/"
            f"<class>/<image> (e.g. config.data.dataset={name!r}, config.data_dir=PATH/TO/FOLDER)."
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
    builder = tfds_builder(name, data_dir, download)
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
    file_format = str(getattr(builder.info.file_format, "value", builder.info.file_format))
    record_sets = {
        split: records_lib.RecordSet(
            f"{name}/{tfds_split}",
            file_format,
            [records_lib.Span(f.filename, f.skip, f.take, f.examples_in_shard)
             for f in available[tfds_split].file_instructions],
        )
        for split, tfds_split in chosen.items()
    }
    label_feature = features["label"]
    if in_memory:
        splits = {split: _decoded(records) for split, records in record_sets.items()}
        train_images = splits["train"].images
        image_shape = train_images.shape[1:]
        mean, std = stats if stats is not None else channel_stats(train_images)
    else:
        splits = {split: Split(labels=None, records=records)
                  for split, records in record_sets.items()}
        image_shape = (shape[0], shape[1], 3)
        mean, std = stats or KNOWN_STATS.get(name) or _record_stats(record_sets["train"])
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


def _decoded(records: records_lib.RecordSet) -> Split:
    """A split of fixed-size images decoded into memory (Pillow, in threads)."""
    from concurrent.futures import ThreadPoolExecutor

    def chunk(start: int) -> list[tuple[np.ndarray, int]]:
        rows = range(start, min(start + _DECODE_CHUNK, records.num_examples))
        return [(np.asarray(image), label) for image, label in (
            records.decode(row, record)
            for row, record in zip(rows, records.read(list(rows)), strict=True))]

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        decoded = [x for part in pool.map(chunk, range(0, records.num_examples, _DECODE_CHUNK))
                   for x in part]
    return Split(labels=np.array([label for _, label in decoded], np.int64),
                 images=np.stack([image for image, _ in decoded]))


def _record_stats(records: records_lib.RecordSet) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Channel statistics of :data:`STATS_SAMPLE` evenly spaced training images (Pillow)."""
    count = min(STATS_SAMPLE, records.num_examples)
    rows = np.linspace(0, records.num_examples - 1, count).astype(np.int64)
    pixels = [np.asarray(records.decode(int(row), record)[0]).reshape(-1, 3)
              for row, record in zip(rows, records.read(rows), strict=True)]
    return channel_stats(np.concatenate(pixels)[None])
