"""TFRecord files read by record (:mod:`contrastive_jax.data.tfrecord`): the offset index
against files written by an independent writer, the CRC checks, and the index cache.

The files are written by tensorboardX's ``RecordWriter`` (its own framing and its own
table-driven CRC-32C, no TensorFlow and no ``google-crc32c``), so the reader is checked
against another implementation of the format, not against itself.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from tensorboardX.record_writer import RecordWriter

from contrastive_jax.data import records, tfrecord

#: Payload sizes: empty, one byte, several to a 4 KiB read, and some longer than one.
SIZES = (0, 1, 17, 300, 4085, 4096, 9000, 3, 70_000, 12)


def _payloads(seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in SIZES]


def _write(path: str, payloads: list[bytes]) -> str:
    writer = RecordWriter(path)
    for payload in payloads:
        writer.write(payload)
    writer.close()
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> str:
    folder = str(tmp_path / "index_cache")
    monkeypatch.setenv(tfrecord.INDEX_DIR_VARIABLE, folder)
    return folder


def _record_set(path: str, count: int) -> records.RecordSet:
    return records.RecordSet("toy/train", records.TFRECORD,
                             [records.Span(path, 0, count, count)])


@pytest.mark.parametrize("chunk", [tfrecord.HEADER_BYTES, tfrecord.LOCAL_CHUNK,
                                   tfrecord.REMOTE_CHUNK])
def test_offsets_are_those_of_an_independent_writer(tmp_path, chunk):
    payloads = _payloads()
    path = _write(str(tmp_path / "a.tfrecord"), payloads)
    expected = np.cumsum([0] + [16 + len(p) for p in payloads])
    reads = []

    def read_at(offset, size):
        reads.append((offset, size))
        return tfrecord.local_reader(path)(offset, size)

    offsets = tfrecord.scan_offsets(read_at, os.path.getsize(path), chunk)
    np.testing.assert_array_equal(offsets, expected)
    assert offsets.dtype == np.int64 and offsets[-1] == os.path.getsize(path)
    if chunk == tfrecord.REMOTE_CHUNK:
        assert len(reads) == 1  # the whole (small) file in one request
    elif chunk == tfrecord.HEADER_BYTES:
        assert len(reads) == len(payloads)  # one header a read, every payload skipped
    shard = tfrecord.Shard(path, offsets, tfrecord.local_reader(path))
    assert [shard.record(i) for i in range(len(shard))] == payloads


def test_a_record_set_reads_rows_across_shards_in_any_order(tmp_path, cache):
    first, second = _payloads(0), _payloads(1)
    paths = [_write(str(tmp_path / f"s{i}.tfrecord"), p) for i, p in enumerate((first, second))]
    n = len(SIZES)
    rows = records.RecordSet("toy/train", records.TFRECORD,
                             [records.Span(p, 0, n, n) for p in paths])
    everything = first + second
    order = np.random.default_rng(3).permutation(2 * n)
    assert rows.read(order) == [everything[i] for i in order]
    assert rows.read([n + 2]) == [second[2]]
    assert rows.locate(n + 2) == (paths[1], 2)


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


def test_a_corrupt_payload_names_the_file_and_the_record(tmp_path, cache):
    payloads = _payloads()
    path = _write(str(tmp_path / "toy-train.tfrecord-00000-of-00001"), payloads)
    start = 16 * 4 + sum(SIZES[:4])  # record 4's frame
    _flip(path, start + 12 + 100)
    rows = _record_set(path, len(SIZES))
    assert rows.read([3, 5]) == [payloads[3], payloads[5]]  # the others still read
    pattern = (r"toy/train: record 4 of toy-train\.tfrecord-00000-of-00001 \(.*\) cannot be "
               r"read or decoded: the CRC-32C of the 4085 data bytes .* does not match")
    with pytest.raises(records.CorruptRecordError, match=pattern):
        rows.read([4])
    with pytest.raises(records.CorruptRecordError, match=pattern):
        rows.decode(4)
    with pytest.raises(records.CorruptRecordError, match=pattern):
        rows.read(range(len(SIZES)))  # in the threads too


def test_a_corrupt_length_or_a_cut_file_names_the_record(tmp_path, cache):
    payloads = _payloads()
    path = _write(str(tmp_path / "bad.tfrecord"), payloads)
    _flip(path, 16 * 6 + sum(SIZES[:6]) + 2)  # record 6's length
    with pytest.raises(records.CorruptRecordError,
                       match=r"record 6 of bad\.tfrecord .* CRC-32C of the length"):
        _record_set(path, len(SIZES)).read([0])
    cut = _write(str(tmp_path / "cut.tfrecord"), payloads)
    os.truncate(cut, os.path.getsize(cut) - 5)  # the last frame loses its end
    with pytest.raises(records.CorruptRecordError, match=r"record 9 of cut\.tfrecord .*truncated"):
        _record_set(cut, len(SIZES)).read([0])
    partial = _write(str(tmp_path / "partial.tfrecord"), payloads)
    with open(partial, "ab") as f:  # 5 bytes of an 11th header after 10 whole frames
        f.write(struct.pack("<Q", 5)[:5])
    with pytest.raises(records.CorruptRecordError,
                       match=r"record 10 of partial\.tfrecord .*ends 5 bytes into the header"):
        _record_set(partial, len(SIZES) + 1).read([0])


def test_a_count_unlike_dataset_info_is_refused(tmp_path, cache):
    path = _write(str(tmp_path / "short.tfrecord"), _payloads())
    with pytest.raises(records.CorruptRecordError,
                       match=r"record 10 of short\.tfrecord .*holds 10 records, its "
                             r"dataset_info\.json 11"):
        _record_set(path, len(SIZES) + 1).read([0])


def test_the_index_is_cached_reused_and_rebuilt_when_the_file_changes(tmp_path, cache,
                                                                      monkeypatch):
    payloads = _payloads()
    path = _write(str(tmp_path / "c.tfrecord"), payloads)
    scans = []
    scan = tfrecord.scan_offsets
    monkeypatch.setattr(tfrecord, "scan_offsets",
                        lambda *a, **k: scans.append(a[1]) or scan(*a, **k))
    assert tfrecord.open_shard(path).record(8) == payloads[8]
    assert len(scans) == 1 and len(os.listdir(cache)) == 1
    (cached,) = os.listdir(cache)
    assert cached.startswith("c.tfrecord.") and cached.endswith(".npy")
    assert not any(name.endswith(".tmp") for name in os.listdir(cache))
    assert tfrecord.open_shard(path).record(8) == payloads[8] and len(scans) == 1  # reused

    # Same size, new contents and modification time: a new index.
    swapped = payloads[:]
    swapped[1], swapped[2] = payloads[2][:1], payloads[1] + payloads[2][1:]
    _write(path, swapped)
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    shard = tfrecord.open_shard(path)
    assert len(scans) == 2 and shard.record(2) == swapped[2] and len(os.listdir(cache)) == 2
    # Another size: a new index too.
    _write(path, payloads + [b"one more"])
    assert len(tfrecord.open_shard(path)) == len(SIZES) + 1 and len(scans) == 3


def test_a_stale_index_is_caught_by_the_frame_checks(tmp_path, cache):
    payloads = _payloads()
    path = _write(str(tmp_path / "s.tfrecord"), payloads)
    shard = tfrecord.open_shard(path)
    stat = os.stat(path)
    swapped = payloads[:]
    swapped[3], swapped[4] = payloads[3] + payloads[4][:10], payloads[4][10:]
    _write(path, swapped)  # same size; the old offsets no longer fit
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(tfrecord.FrameError, match="holds 310 bytes, its index 300"):
        shard.record(3)


def test_an_unwritable_cache_keeps_the_index_in_memory(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(tfrecord.INDEX_DIR_VARIABLE, str(blocker / "index"))
    payloads = _payloads()
    path = _write(str(tmp_path / "u.tfrecord"), payloads)
    assert _record_set(path, len(SIZES)).read([9]) == [payloads[9]]
    assert "cannot be written" in caplog.text and "kept in memory only" in caplog.text


def test_the_default_cache_is_under_the_user_cache_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(tfrecord.INDEX_DIR_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tfrecord.index_dir() == str(tmp_path / "xdg" / "contrastive_jax" / "tfrecord_index")
    monkeypatch.setenv(tfrecord.INDEX_DIR_VARIABLE, "gs://bucket/index")
    assert tfrecord.index_dir() == "gs://bucket/index"
