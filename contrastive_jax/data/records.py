"""The records of a prepared TFDS dataset, read without loading the dataset into memory.

TFDS writes a prepared split as shards of serialized ``tf.train.Example``
records in one of two formats:

* **ArrayRecord** (``file_format="array_record"``): every record is
  addressable by its position, so the pipeline reads exactly the rows a step
  needs (:meth:`RecordSet.read`) and a batch is a pure function of
  (seed, step), as for in-memory data and image folders.
* **TFRecord** (``file_format="tfrecord"``, TFDS's default): records can only
  be read in order, which exact resume and per-process reads cannot use; such a
  dataset is converted once to ArrayRecord by :mod:`contrastive_jax.data.prepare`.

A :class:`RecordSet` names every record by its row: its position in the split
(the shards in TFDS's order, the records of a shard in file order). That row
is the example id the pipeline yields as ``"index"``. Records are parsed without
TensorFlow (:meth:`RecordSet.parse_bytes`) and decoded by Pillow; a record that cannot
be read, parsed or decoded raises :class:`CorruptRecordError` naming the shard file and
the record's index in it (:meth:`RecordSet.decode`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from contrastive_jax.data.host_views import decode
from contrastive_jax.errors import CorruptImageError, InputError

if TYPE_CHECKING:
    from PIL import Image

#: TFDS's names of its two file formats: the one this module reads, and the one
#: :mod:`contrastive_jax.data.prepare` converts from.
ARRAY_RECORD = "array_record"
TFRECORD = "tfrecord"


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
      file_format: :data:`ARRAY_RECORD` (another format raises :class:`InputError`; a
        TFRecord dataset's message names the converter).
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
        if file_format != ARRAY_RECORD:
            raise InputError(
                f"{dataset} is stored as {file_format!r} files, which cannot be read by row "
                "(exact resume and per-process reads need that): convert it once to ArrayRecord "
                "with `python -m contrastive_jax.data.prepare --dataset NAME --data_dir DIR "
                "--output_dir NEW_DIR` (needs the 'prepare' extra) and read it from NEW_DIR"
                if file_format == TFRECORD else
                f"{dataset}: cannot read files of format {file_format!r}, only {ARRAY_RECORD!r}")
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

    def locate(self, row: int) -> tuple[str, int]:
        """(shard file, index of the record in that file) of ``row``."""
        if not 0 <= row < self.num_examples:
            raise IndexError(f"{self.dataset}: row {row} not in [0, {self.num_examples})")
        i = bisect.bisect_right(self._ends, row)
        start = self._ends[i - 1] if i else 0
        return self.spans[i].filename, self.spans[i].skip + row - start

    # ------------------------------------------------------------------ reading

    def read(self, rows: Sequence[int] | np.ndarray) -> list[bytes]:
        """The serialized records at ``rows``, read in parallel."""
        if self._source is None:
            from array_record.python.array_record_data_source import ArrayRecordDataSource

            self._source = ArrayRecordDataSource(list(self.spans))
        return self._source.__getitems__([int(r) for r in rows])

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
