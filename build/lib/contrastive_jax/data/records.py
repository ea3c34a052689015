"""The records of a prepared TFDS dataset, read without loading the dataset into memory.

TFDS writes a prepared split as shards of serialized ``tf.train.Example``
records in one of two formats:

* **ArrayRecord** (``file_format="array_record"``): every record is
  addressable by its position, so the pipeline reads exactly the rows a step
  needs (:meth:`RecordSet.read`) and a batch is a pure function of
  (seed, step), as for in-memory data and image folders.
* **TFRecord** (``file_format="tfrecord"``, TFDS's default): records can only
  be read in order (:meth:`RecordSet.stream`); the pipeline reads them as
  streams (see :mod:`contrastive_jax.data.pipeline` for what that means for
  resuming).

A :class:`RecordSet` names every record by its row: its position in the split
(the shards in TFDS's order, the records of a shard in file order). That row
is the example id the pipeline yields as ``"index"``. Records are parsed and
decoded by TensorFlow inside the tf.data pipeline (:meth:`RecordSet.parse`), or by
Pillow in the default one (:meth:`RecordSet.parse_bytes`, no TensorFlow: this module
imports it only where a method needs it); a record
that cannot be read, parsed or decoded raises :class:`CorruptRecordError`
naming the shard file and the record's index in it (:meth:`RecordSet.check`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from contrastive_jax.errors import CorruptImageError, InputError

if TYPE_CHECKING:
    import tensorflow as tf

#: TFDS's names of the two formats this module reads.
ARRAY_RECORD = "array_record"
TFRECORD = "tfrecord"
FORMATS = (ARRAY_RECORD, TFRECORD)


class CorruptRecordError(CorruptImageError):
    """A record of a prepared dataset that cannot be read or decoded; names file and index."""


@dataclasses.dataclass(frozen=True)
class Span:
    """Records ``[skip, skip + take)`` of one shard file (TFDS's file instruction).

    ``examples_in_shard`` is the shard's record count (what array_record's
    data source expects of a file instruction).
    """

    filename: str
    skip: int
    take: int
    examples_in_shard: int


class RecordSet:
    """The serialized examples of one split of a prepared TFDS dataset.

    Attributes:
      dataset: ``name/split`` (for messages).
      file_format: :data:`ARRAY_RECORD` or :data:`TFRECORD`.
      spans: the shard files in row order.
      num_examples: N, the split's size.
      image_key, label_key: the features holding the encoded image and the
        integer class label.
    """

    def __init__(
        self,
        dataset: str,
        file_format: str,
        spans: Sequence[Span],
        *,
        image_key: str = "image",
        label_key: str = "label",
    ) -> None:
        if file_format not in FORMATS:
            raise InputError(
                f"{dataset}: cannot read files of format {file_format!r}; formats: {FORMATS}"
            )
        if not spans:
            raise InputError(f"{dataset}: the split has no files")
        self.dataset = dataset
        self.file_format = file_format
        self.spans = tuple(spans)
        self.image_key = image_key
        self.label_key = label_key
        self._ends = list(itertools.accumulate(s.take for s in self.spans))
        self.num_examples = self._ends[-1]
        self._source = None  # array_record data source, opened on first read

    @property
    def random_access(self) -> bool:
        """Whether any row can be read on its own (ArrayRecord)."""
        return self.file_format == ARRAY_RECORD

    def locate(self, row: int) -> tuple[str, int]:
        """(shard file, index of the record in that file) of ``row``."""
        if not 0 <= row < self.num_examples:
            raise IndexError(f"{self.dataset}: row {row} not in [0, {self.num_examples})")
        i = bisect.bisect_right(self._ends, row)
        start = self._ends[i - 1] if i else 0
        return self.spans[i].filename, self.spans[i].skip + row - start

    # ------------------------------------------------------------------ reading

    def read(self, rows: Sequence[int] | np.ndarray) -> list[bytes]:
        """The serialized records at ``rows`` (ArrayRecord only), read in parallel."""
        if not self.random_access:
            raise ValueError(f"{self.dataset}: {self.file_format} files have no random access")
        if self._source is None:
            from array_record.python.array_record_data_source import ArrayRecordDataSource

            self._source = ArrayRecordDataSource(list(self.spans))
        return self._source.__getitems__([int(r) for r in rows])

    def read_tensor(self, rows: tf.Tensor) -> tf.Tensor:
        """Graph op: int64 [M] rows -> string [M] serialized records (ArrayRecord)."""
        from contrastive_jax.data._tf import tf

        def read(rows_):
            return np.array(self.read(rows_.numpy()), dtype=object)

        out = tf.py_function(read, [rows], tf.string)
        out.set_shape(rows.shape)
        return out

    def stream(self, start: int = 0, stop: int | None = None) -> tf.data.Dataset:
        """Rows ``[start, stop)`` in order, as ``(row int64, serialized string)`` (either format)."""
        from contrastive_jax.data._tf import tf

        stop = self.num_examples if stop is None else stop
        parts = []
        for span, end in zip(self.spans, self._ends, strict=True):
            first = end - span.take
            lo, hi = max(start, first), min(stop, end)
            if lo >= hi:
                continue
            skip = span.skip + lo - first
            if self.file_format == TFRECORD:
                records = tf.data.TFRecordDataset(span.filename).skip(skip).take(hi - lo)
            else:
                rows = tf.data.Dataset.range(lo, hi).batch(256)
                records = rows.map(self.read_tensor).unbatch()
            parts.append(tf.data.Dataset.zip(tf.data.Dataset.range(lo, hi), records))
        if not parts:
            raise ValueError(f"{self.dataset}: empty row range [{start}, {stop})")
        ds = parts[0]
        for part in parts[1:]:
            ds = ds.concatenate(part)
        return ds

    # ------------------------------------------------------------------ parsing

    def parse(self, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        """Graph op: one serialized example -> ``{"data": encoded image, "label": int32}``."""
        from contrastive_jax.data._tf import tf

        spec = {
            self.image_key: tf.io.FixedLenFeature([], tf.string),
            self.label_key: tf.io.FixedLenFeature([], tf.int64),
        }
        example = tf.io.parse_single_example(serialized, spec)
        return {"data": example[self.image_key], "label": tf.cast(example[self.label_key], tf.int32)}

    def corrupt(self, row: int, error: Exception) -> CorruptRecordError:
        """The error naming the shard file and index of ``row``, which failed with ``error``."""
        filename, index = self.locate(row)
        return CorruptRecordError(
            f"{self.dataset}: record {index} of {os.path.basename(filename)} ({filename}) "
            f"cannot be read or decoded: {error}"
        )

    def parse_bytes(self, serialized: bytes) -> tuple[bytes, int]:
        """One serialized example -> (encoded image, label), without TensorFlow."""
        from tensorflow_datasets.proto import tf_example_pb2

        features = tf_example_pb2.Example.FromString(serialized).features.feature
        return (features[self.image_key].bytes_list.value[0],
                int(features[self.label_key].int64_list.value[0]))

    def check(self, rows: Sequence[int] | np.ndarray, records: Sequence[bytes] | None = None) -> None:
        """Raises :class:`CorruptRecordError` for the first of ``rows`` that cannot be decoded.

        ``records``: the serialized records of ``rows`` when already read
        (needed for TFRecord); otherwise they are read here (ArrayRecord).
        """
        from contrastive_jax.data._tf import tf

        for i, row in enumerate(rows):
            filename, index = self.locate(int(row))
            try:
                record = self.read([row])[0] if records is None else records[i]
                example = self.parse(tf.constant(record))
                tf.io.decode_image(example["data"], channels=3, expand_animations=False)
            except (tf.errors.OpError, ValueError, RuntimeError) as e:
                message = getattr(e, "message", str(e))
                raise CorruptRecordError(
                    f"{self.dataset}: record {index} of {os.path.basename(filename)} "
                    f"({filename}) cannot be read or decoded: {message}"
                ) from e

    def find_corrupt(self, start: int, stop: int, *, decode: bool = True) -> None:
        """Reads rows ``[start, stop)`` in order; :class:`CorruptRecordError` at the first bad one.

        What the pipeline calls after a read or decode error in a TFRecord
        stream, whose error does not say which record failed. ``decode=False``
        only reads (finds damaged files quickly, not undecodable images).
        """
        from contrastive_jax.data._tf import tf

        row = start
        iterator = iter(self.stream(start, stop).as_numpy_iterator())
        while row < stop:
            try:
                _, record = next(iterator)
            except StopIteration:
                return
            except tf.errors.OpError as e:
                filename, index = self.locate(row)
                raise CorruptRecordError(
                    f"{self.dataset}: record {index} of {os.path.basename(filename)} "
                    f"({filename}) cannot be read: {e.message}"
                ) from e
            if decode:
                self.check([row], [record])
            row += 1


def list_prepared(data_dir: str, depth: int = 4) -> list[str]:
    """Prepared TFDS datasets under ``data_dir``: ``name[/config]/version`` of every
    folder holding a ``dataset_info.json``, sorted (for error messages)."""
    try:
        from contrastive_jax.data._tf import tf

        isdir, walk = tf.io.gfile.isdir, tf.io.gfile.walk
    except ImportError:  # no TensorFlow: local folders only
        isdir, walk = os.path.isdir, os.walk
    found = []
    if not isdir(data_dir):
        return found
    root = data_dir.rstrip("/")
    for folder, _, files in walk(root):
        rel = os.path.relpath(folder, root)
        if rel.count(os.sep) >= depth:
            continue
        if "dataset_info.json" in files:
            found.append(rel)
    return sorted(found)
