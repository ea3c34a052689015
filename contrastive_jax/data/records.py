"""The records of a prepared TFDS dataset, read by row without loading the dataset into memory.

TFDS writes a prepared split as shards of serialized ``tf.train.Example``
records in one of two formats, and both are read by row:

* **TFRecord** (``file_format="tfrecord"``, TFDS's default, what ``tfds build`` writes):
  each shard's record offsets are found once by reading its frame headers and cached
  outside the data directory (:mod:`contrastive_jax.data.tfrecord`); then every record is
  one ranged read, its CRC-32Cs checked.
* **ArrayRecord** (``file_format="array_record"``): every record is addressable by its
  position in the file; read through ``array_record``'s data source.

So the pipeline reads exactly the rows a step needs (:meth:`RecordSet.read`) and a batch is
a pure function of (seed, step), as for in-memory data and image folders; a TFRecord
dataset and its ArrayRecord copy (:mod:`contrastive_jax.data.prepare`) give the same batches.

A :class:`RecordSet` names every record by its row: its position in the split
(the shards in TFDS's order, the records of a shard in file order). That row
is the example id the pipeline yields as ``"index"``. Records are parsed without
TensorFlow (:meth:`RecordSet.parse_bytes`) and decoded by Pillow; a record that cannot
be read, parsed or decoded raises :class:`CorruptRecordError` naming the shard file and
the record's index in it (:meth:`RecordSet.read`, :meth:`RecordSet.decode`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from contrastive_jax.data import tfrecord
from contrastive_jax.data.host_views import decode
from contrastive_jax.errors import CorruptImageError, InputError

if TYPE_CHECKING:
    from PIL import Image

log = logging.getLogger(__name__)

#: TFDS's names of the two file formats this module reads.
ARRAY_RECORD = "array_record"
TFRECORD = "tfrecord"
#: Threads that index a split's TFRecord shards, or read the records of one call to
#: :meth:`RecordSet.read`, in parallel.
READ_THREADS = 16


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
      file_format: :data:`TFRECORD` or :data:`ARRAY_RECORD` (another format raises
        :class:`InputError`).
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
        if file_format not in (TFRECORD, ARRAY_RECORD):
            raise InputError(f"{dataset}: cannot read files of format {file_format!r}, only "
                             f"{TFRECORD!r} and {ARRAY_RECORD!r}")
        if not spans:
            raise InputError(f"{dataset}: the split has no files")
        self.dataset = dataset
        self.file_format = file_format
        self.spans = tuple(spans)
        self.image_key = image_key
        self.label_key = label_key
        self._ends = list(itertools.accumulate(s.take for s in self.spans))
        self.num_examples = self._ends[-1]
        self._source: Any = None  # array_record data source, opened on first read
        self._shards: dict[str, tfrecord.Shard] | None = None  # TFRecord, indexed on first read
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def _position(self, row: int) -> tuple[Span, int]:
        if not 0 <= row < self.num_examples:
            raise IndexError(f"{self.dataset}: row {row} not in [0, {self.num_examples})")
        i = bisect.bisect_right(self._ends, row)
        start = self._ends[i - 1] if i else 0
        return self.spans[i], self.spans[i].skip + row - start

    def locate(self, row: int) -> tuple[str, int]:
        """(shard file, index of the record in that file) of ``row``."""
        span, index = self._position(row)
        return span.filename, index

    # ------------------------------------------------------------------ reading

    def read(self, rows: Sequence[int] | np.ndarray) -> list[bytes]:
        """The serialized records at ``rows``, read in parallel.

        Raises:
          CorruptRecordError: a TFRecord frame that fails its CRC or length checks, or a
            shard cut short (names the shard file and the record's index in it).
        """
        rows = [int(r) for r in rows]
        if self.file_format == ARRAY_RECORD:
            if self._source is None:
                from array_record.python.array_record_data_source import ArrayRecordDataSource

                self._source = ArrayRecordDataSource(list(self.spans))
            return self._source.__getitems__(rows)
        shards = self._indexed()
        if len(rows) <= 1:
            return [self._record(shards, row) for row in rows]
        return list(self._threads().map(lambda row: self._record(shards, row), rows))

    def _record(self, shards: dict[str, tfrecord.Shard], row: int) -> bytes:
        span, index = self._position(row)
        try:
            return shards[span.filename].record(index)
        except tfrecord.FrameError as e:
            raise self._corrupt_at(span.filename, e.index, e) from e

    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="records")
            return self._pool

    def _indexed(self) -> dict[str, tfrecord.Shard]:
        """The TFRecord shards of the split, each with its offsets (cached, else scanned now:
        all shards in parallel, once)."""
        with self._lock:
            if self._shards is not None:
                return self._shards
            files = {span.filename: span.examples_in_shard for span in self.spans}
            started = time.perf_counter()

            def index(filename: str) -> tfrecord.Shard:
                try:
                    shard = tfrecord.open_shard(filename)
                except tfrecord.FrameError as e:
                    raise self._corrupt_at(filename, e.index, e) from e
                if len(shard) != files[filename]:
                    raise self._corrupt_at(
                        filename, min(len(shard), files[filename]),
                        f"the file holds {len(shard)} records, its dataset_info.json "
                        f"{files[filename]}")
                return shard

            with ThreadPoolExecutor(min(READ_THREADS, len(files))) as pool:
                shards = dict(zip(files, pool.map(index, files), strict=True))
            log.info("%s: %d TFRecord files indexed in %.2f s (index cache %s)", self.dataset,
                     len(shards), time.perf_counter() - started, tfrecord.index_dir())
            self._shards = shards
            return shards

    def _corrupt_at(self, filename: str, index: int, error: Exception | str) -> CorruptRecordError:
        return CorruptRecordError(
            f"{self.dataset}: record {index} of {os.path.basename(filename)} ({filename}) "
            f"cannot be read or decoded: {error}"
        )

    def corrupt(self, row: int, error: Exception) -> CorruptRecordError:
        """The error naming the shard file and index of ``row``, which failed with ``error``."""
        return self._corrupt_at(*self.locate(row), error)

    def parse_bytes(self, serialized: bytes) -> tuple[bytes, int]:
        """One serialized example -> (encoded image, label), without TensorFlow."""
        from tensorflow_datasets.proto import tf_example_pb2

        features = tf_example_pb2.Example.FromString(serialized).features.feature
        return (features[self.image_key].bytes_list.value[0],
                int(features[self.label_key].int64_list.value[0]))

    def decode(self, row: int, record: bytes | None = None) -> tuple[Image.Image, int]:
        """The RGB image (decoded by Pillow) and the label of ``row``; ``record``: its
        serialized record when already read.

        Raises:
          CorruptRecordError: the record cannot be read, parsed or decoded (names its file
            and index).
        """
        try:
            data, label = self.parse_bytes(self.read([row])[0] if record is None else record)
            return decode(data, f"row {row}"), label
        except CorruptRecordError:
            raise  # names its file and index already
        except (CorruptImageError, IndexError, ValueError, RuntimeError) as e:
            raise self.corrupt(int(row), e) from e


def list_prepared(data_dir: str, depth: int = 4) -> list[str]:
    """Prepared TFDS datasets under ``data_dir`` (a local or ``gs://`` folder):
    ``name[/config]/version`` of every folder holding a ``dataset_info.json``, sorted (for
    error messages)."""
    from etils import epath

    root = epath.Path(data_dir)
    if not root.is_dir():
        return []
    found, level = [], [root]
    for _ in range(depth + 1):  # folders of 0 .. depth path components
        found += [str(f.relative_to(root)) for f in level if (f / "dataset_info.json").exists()]
        level = [child for f in level for child in f.iterdir() if child.is_dir()]
    return sorted(found)
