"""TFRecord files read by record: an offset index of each file, then one ranged read a record.

A TFRecord file is a sequence of frames::

    uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes
    | data (length bytes)          | uint32 masked CRC-32C of the data

(masked: ``((crc >> 15 | crc << 17) + 0xA282EAD8) mod 2**32``, CRC-32C by ``google-crc32c``).
Nothing in the file says where record ``i`` starts, so :func:`scan_offsets` reads the
12-byte headers only, jumping over each payload, and returns the frame offsets: int64
``[N + 1]``, record ``i`` being the bytes ``[offsets[i], offsets[i + 1])``. From then on
:meth:`Shard.record` reads any record in one ranged read and checks both of its CRCs.

:func:`open_shard` keeps each file's offsets in a cache directory (:func:`index_dir`:
``$CONTRASTIVE_JAX_INDEX_DIR``, else ``$XDG_CACHE_HOME/contrastive_jax/tfrecord_index``,
by default under ``~/.cache``), one ``.npy`` file a shard, named by a hash of the shard's
path, size and modification time, and written atomically (a temporary file renamed): the
data directory may be read-only, a shard that changes gets a new index, and processes that
build the same index at once write the same bytes. Where the cache cannot be written the
index is kept in memory only (a warning says so).

Local files are read with ``os.pread`` (each header read is one 4 KiB read; see
:data:`LOCAL_CHUNK`); files in a bucket (``gs://``, ``s3://``, through ``etils.epath``) are
indexed by reading the whole file in :data:`REMOTE_CHUNK` pieces (one request a piece
instead of one a record) and their records read by one ranged request each.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import uuid
from collections.abc import Callable

import google_crc32c
import numpy as np
from etils import epath

log = logging.getLogger(__name__)

#: Bytes of a frame's header (length and its CRC) and of its trailing data CRC.
HEADER_BYTES = 12
FOOTER_BYTES = 4
#: Bytes read at a time while indexing a local file: the header and whatever small records
#: follow it in the same page; a larger payload is skipped by seeking past it.
LOCAL_CHUNK = 4096
#: Bytes read at a time while indexing a file in a bucket: every request costs tens of
#: milliseconds, so the file is read whole, 16 MiB a request, rather than a header a request.
REMOTE_CHUNK = 16 * 2**20
#: Prefixes of the paths that name an object store (read through ``etils.epath``).
CLOUD_PREFIXES = ("gs://", "s3://", "az://", "hf://")
#: The environment variable that overrides :func:`index_dir`.
INDEX_DIR_VARIABLE = "CONTRASTIVE_JAX_INDEX_DIR"
_MASK_DELTA = 0xA282EAD8


class FrameError(ValueError):
    """A frame of a TFRecord file that is not what its header or CRCs say.

    Attributes:
      index: the position in its file of the record whose frame is bad.
    """

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data`` (an unsigned 32-bit int)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def is_cloud(path: str) -> bool:
    """Whether ``path`` names an object in a bucket rather than a local file."""
    return path.startswith(CLOUD_PREFIXES)


#: ``read_at(offset, size)`` -> at most ``size`` bytes of a file from ``offset`` (fewer at its end).
ReadAt = Callable[[int, int], bytes]


def local_reader(path: str) -> ReadAt:
    """Ranged reads of a local file (``os.pread``, safe from any thread)."""

    def read_at(offset: int, size: int) -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.pread(fd, size, offset)
        finally:
            os.close(fd)

    return read_at


def remote_reader(path: str) -> ReadAt:
    """Ranged reads of a file in a bucket through ``etils.epath``: one request a read where
    epath reads the bucket through fsspec (``fs.cat_file``), else (``tf.io.gfile``) a seek
    and a read of a file opened for the call."""
    handle = epath.Path(path).open("rb")
    fs, name = getattr(handle, "fs", None), getattr(handle, "path", None)
    handle.close()
    if fs is not None and name is not None and hasattr(fs, "cat_file"):
        def read_at(offset: int, size: int) -> bytes:
            return fs.cat_file(name, start=offset, end=offset + size)
    else:
        def read_at(offset: int, size: int) -> bytes:
            with epath.Path(path).open("rb") as f:
                f.seek(offset)
                return f.read(size)
    return read_at


def scan_offsets(read_at: ReadAt, size: int, chunk: int = LOCAL_CHUNK) -> np.ndarray:
    """The frame offsets of a TFRecord file of ``size`` bytes: int64 ``[N + 1]``.

    Reads ``chunk`` bytes from each frame's start unless the frame's header is already in
    the last piece read (so a header is never read twice, and a payload longer than the
    piece is skipped). Checks each length's CRC and that each frame ends in the file.

    Raises:
      FrameError: a length whose CRC does not match, or a frame cut short by the end of
        the file (its ``index`` is the record's).
    """
    offsets = [0]
    position, buffer, buffer_start = 0, b"", 0
    while position < size:
        index = len(offsets) - 1
        if position + HEADER_BYTES > buffer_start + len(buffer):
            buffer_start, buffer = position, read_at(position, max(chunk, HEADER_BYTES))
        header = buffer[position - buffer_start: position - buffer_start + HEADER_BYTES]
        if len(header) < HEADER_BYTES:
            raise FrameError(index, f"the file ends {size - position} bytes into the header at "
                                    f"byte {position} (truncated)")
        length, stored = struct.unpack("<QI", header)
        if masked_crc(header[:8]) != stored:
            raise FrameError(index, f"the CRC-32C of the length at byte {position} does not "
                                    "match (a corrupt frame)")
        end = position + HEADER_BYTES + length + FOOTER_BYTES
        if end > size:
            raise FrameError(index, f"the frame at byte {position} needs {end - position} bytes, "
                                    f"the file has {size - position} left (truncated)")
        offsets.append(end)
        position = end
    return np.asarray(offsets, np.int64)


def check_frame(frame: bytes, index: int, offset: int) -> bytes:
    """The data of one whole frame (header, data, CRC) read from byte ``offset``, its length
    and both CRCs checked.

    Raises:
      FrameError: a short read, a length that differs from the index's, or a CRC mismatch.
    """
    expected = len(frame)
    if expected < HEADER_BYTES + FOOTER_BYTES:
        raise FrameError(index, f"only {expected} bytes could be read at byte {offset} "
                                "(the file is shorter than when it was indexed)")
    length, length_crc = struct.unpack("<QI", frame[:HEADER_BYTES])
    if masked_crc(frame[:8]) != length_crc:
        raise FrameError(index, f"the CRC-32C of the length at byte {offset} does not match "
                                "(a corrupt frame)")
    if HEADER_BYTES + length + FOOTER_BYTES != expected:
        raise FrameError(index, f"the frame at byte {offset} holds {length} bytes, its index "
                                f"{expected - HEADER_BYTES - FOOTER_BYTES} (the file changed)")
    data = frame[HEADER_BYTES:HEADER_BYTES + length]
    (data_crc,) = struct.unpack("<I", frame[HEADER_BYTES + length:])
    if masked_crc(data) != data_crc:
        raise FrameError(index, f"the CRC-32C of the {length} data bytes at byte {offset} does "
                                "not match (a corrupt record)")
    return data


class Shard:
    """One TFRecord file, indexed: ``record(i)`` is one ranged read.

    Attributes:
      path: the file (local or in a bucket).
      offsets: int64 ``[N + 1]``, the frame offsets (:func:`scan_offsets`).
    """

    def __init__(self, path: str, offsets: np.ndarray, read_at: ReadAt) -> None:
        self.path = path
        self.offsets = offsets
        self._read_at = read_at

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def record(self, index: int) -> bytes:
        """The data of record ``index`` (CRCs checked).

        Raises:
          FrameError: the frame cannot be read whole or fails a check.
          IndexError: ``index`` not in ``[0, N)``.
        """
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} not in [0, {len(self)}) of {self.path}")
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        try:
            frame = self._read_at(start, end - start)
        except OSError as e:
            raise FrameError(index, f"cannot be read: {e}") from e
        return check_frame(frame, index, start)


def index_dir() -> str:
    """Where the shards' offsets are cached: ``$CONTRASTIVE_JAX_INDEX_DIR`` (a local or
    ``gs://`` folder), else ``$XDG_CACHE_HOME/contrastive_jax/tfrecord_index`` (by default
    under ``~/.cache``)."""
    chosen = os.environ.get(INDEX_DIR_VARIABLE)
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "contrastive_jax", "tfrecord_index")


def _identity(path: str) -> tuple[int, int]:
    """(size in bytes, modification time in ns) of the file ``path``."""
    if is_cloud(path):
        stat = epath.Path(path).stat()
        return int(stat.length), int(stat.mtime) * 10**9
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


def cache_name(path: str, size: int, mtime_ns: int) -> str:
    """The cache file of a shard: its file name and a hash of its path, size and mtime."""
    key = hashlib.sha256(f"{path}\n{size}\n{mtime_ns}".encode()).hexdigest()[:24]
    return f"{os.path.basename(path)}.{key}.npy"


def _load(cached: epath.Path) -> np.ndarray | None:
    try:
        with cached.open("rb") as f:
            offsets = np.load(f, allow_pickle=False)
    except (OSError, ValueError):
        return None
    ok = offsets.dtype == np.int64 and offsets.ndim == 1 and len(offsets) >= 1
    return offsets if ok else None


def _store(cached: epath.Path, offsets: np.ndarray) -> None:
    """Writes ``offsets`` to ``cached`` atomically (a temporary file renamed), or warns."""
    temporary = cached.parent / f".{cached.name}.{uuid.uuid4().hex}.tmp"
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with temporary.open("wb") as f:
            np.save(f, offsets, allow_pickle=False)
        temporary.replace(cached)
    except OSError as e:
        log.warning("the TFRecord index %s cannot be written (%s): it is kept in memory only "
                    "(set %s to a writable folder)", cached, e, INDEX_DIR_VARIABLE)
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass


def open_shard(path: str, cache: str | None = None) -> Shard:
    """The shard ``path`` with its offsets, from the cache (``cache``, default
    :func:`index_dir`) or scanned and cached now.

    Raises:
      FrameError: a frame met while scanning is corrupt or cut short.
      OSError: the file cannot be read.
    """
    size, mtime_ns = _identity(path)
    remote = is_cloud(path)
    read_at = remote_reader(path) if remote else local_reader(path)
    cached = epath.Path(cache or index_dir()) / cache_name(path, size, mtime_ns)
    offsets = _load(cached)
    if offsets is None or int(offsets[-1]) != size:
        offsets = scan_offsets(read_at, size, REMOTE_CHUNK if remote else LOCAL_CHUNK)
        _store(cached, offsets)
    return Shard(path, offsets, read_at)
