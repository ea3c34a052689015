"""The pieces both iterators of :mod:`contrastive_jax.data.pipeline` build their tf.data
graphs from.

What a data config resolves to for a source (the image side, the evaluation crop, the
augmentation recipe: :mod:`._resolve`, re-exported); a split's rows as tensors (:func:`split_columns`) and the stage that
reads them, files and records in parallel (:func:`lookup_rows`); decoding, views and
normalisation of one example; the deterministic ``tf.data`` options; and, when a batch
fails to decode, the search that names the bad file or record
(:func:`explain_decode_error`).
"""

from __future__ import annotations

import numpy as np

from contrastive_jax.data._image_folder import decode_image_file
from contrastive_jax.data._tf import tf
from contrastive_jax.data.augment import AugmentConfig, decode_image, make_views
from contrastive_jax.data.base import Source, Split

#: A batch of an iterator: name -> numpy array [B, ...].
Batch = dict[str, np.ndarray]


def split_columns(split: Split) -> dict[str, tf.Tensor]:
    """The split as tensors, indexed by row inside the pipeline (no Python at run time).

    A split of records has no columns: its rows are its ids, read by :func:`lookup_rows`.
    """
    if split.records is not None:
        return {}
    columns = {
        "index": tf.constant(split.ids, tf.int64),
        "label": tf.constant(split.labels, tf.int32),
    }
    if split.images is not None:
        columns["image"] = tf.constant(split.images, tf.uint8)
    else:
        columns["path"] = tf.constant(split.paths.astype(str), tf.string)
    if split.metadata is not None:
        columns["metadata"] = tf.constant(split.metadata, tf.float32)
    return columns


#: Files read concurrently from an image folder. Reading is latency-bound (a
#: cold disk or a network file system), so it runs in its own stage with more
#: parallelism than there are cores; decoding and augmentation use AUTOTUNE.
READ_PARALLELISM = 32


#: Rows read from ArrayRecord files per Python call (one call per chunk reads
#: its records in parallel threads).
RECORD_CHUNK = 64


def lookup_rows(
    split: Split, columns: dict[str, tf.Tensor], ds: tf.data.Dataset
) -> tf.data.Dataset:
    """Maps a dataset of ``(key, row)`` to ``(key, example dict)``; file bytes read in parallel.

    Examples of encoded images (files, records) hold ``"data"`` (the encoded
    bytes), in-memory ones ``"image"``.
    """
    if split.records is not None:
        records = split.records
        ds = ds.batch(RECORD_CHUNK).map(
            lambda key, row: (key, row, records.read_tensor(row)),
            num_parallel_calls=READ_PARALLELISM // 8,
        )
        return ds.unbatch().map(
            lambda key, row, record: (key, {"index": row, **records.parse(record)})
        )
    ds = ds.map(lambda key, row: (key, {n: tf.gather(c, row) for n, c in columns.items()}))
    if "path" in columns:
        ds = ds.map(
            lambda key, ex: (key, {**ex, "data": tf.io.read_file(ex["path"])}),
            num_parallel_calls=READ_PARALLELISM,
        )
    return ds


def decode_example(example: dict[str, tf.Tensor]) -> tf.Tensor:
    """float32 [h, w, 3] in [0, 1] from an in-memory image or encoded bytes."""
    image = example["image"] if "image" in example else decode_image(example["data"])
    return tf.cast(image, tf.float32) / 255.0


def example_views(
    example: dict[str, tf.Tensor], seed: tf.Tensor, aug: AugmentConfig, views: int, size: int
) -> tf.Tensor:
    """[V, S, S, 3] views; encoded images are cropped before decoding where possible."""
    if "data" in example:
        return make_views(example["data"], seed, aug, num_views=views, size=size, encoded=True)
    return make_views(decode_example(example), seed, aug, num_views=views, size=size)


def normaliser(source: Source):
    mean = tf.constant(source.mean, tf.float32)
    std = tf.constant(source.std, tf.float32)
    return lambda x: (x - mean) / std


def deterministic_options() -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = True
    return options


def explain_decode_error(split: Split, rows: np.ndarray) -> None:
    """Raises CorruptImageError naming the first undecodable file or record among ``rows``."""
    if split.paths is not None:
        for path in split.paths[rows]:
            decode_image_file(path)  # raises CorruptImageError for a bad file
    if split.records is not None and split.records.random_access:
        split.records.check(rows)  # raises CorruptRecordError naming file and index


#: Errors of a tf.data pipeline that a bad file or record can cause.
DATA_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.DataLossError)
