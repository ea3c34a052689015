"""Checkpoint verification: content checksums, reading a checkpoint back on the host, and
the low CPU priority of the threads that do it.

Orbax detects a cut or missing file, but not changed bytes: a single flipped bit in an
OCDBT data file restores without error into a wrong array. So every save stores a
content checksum of each array (:func:`state_checksum`, keyed by the array's path in the
tree, :func:`checksum_keys`), and every restore and verification recomputes and compares
it (:func:`compare_checksums`).

Verification (:func:`read_back`) reads the files on the host, never onto the devices:
the arrays are read as numpy arrays a few at a time (at most as many bytes at once as the
largest array holds, or :data:`VERIFY_GROUP_BYTES` if that is more) and their checksums
recomputed in numpy (:func:`host_checksum`), so it costs no device memory and its host
memory is bounded by the largest array, not the state. :class:`Verification` runs it in
a background thread or on the caller's.

The threads that finish a save after it returns (Orbax's and TensorStore's) and the
background verification run at the lowest CPU priority (nice 19, on Linux,
:func:`lower_writer_priority`), so on a host whose cores also run the step (a CPU
"device", or a busy input pipeline) they use the cycles the step leaves idle.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from contrastive_jax.errors import CheckpointError

#: Key of the state's content checksum in the JSON item of a checkpoint.
CHECKSUM_KEY = "state_checksum"


class ChecksumMismatch(CheckpointError):
    """The arrays restored from a checkpoint are not the arrays that were saved."""


def read_back(directory: epath.Path, step: int, trees: dict[tuple[str, ...], Any]) -> None:
    """Reads every array of the checkpoint ``directory/<step>`` into host memory and checks
    its checksum.

    The arrays are read as numpy arrays, a group at a time of at most
    ``max(largest array, VERIFY_GROUP_BYTES)`` bytes, and dropped once
    checked: peak extra host memory is about that much (plus the checksum's
    temporaries, a few MiB), and no device memory is used. ``trees`` caches Orbax's
    tree metadata per state structure (the same for every checkpoint of a run; reading
    it costs half of a verification).

    Raises:
      ChecksumMismatch: an array read differs from the one saved.
      Exception: whatever Orbax or TensorStore raise on a missing, cut or
        unreadable file.
    """
    # Not through the manager: this may run in a thread beside a save.
    with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as json_reader:
        expected = json_reader.restore(directory / str(step) / "meta")
    expected = expected.get(CHECKSUM_KEY)
    path = directory / str(step) / "state"
    structure = tuple(sorted(expected)) if isinstance(expected, dict) else None
    with ocp.PyTreeCheckpointer() as reader:
        tree = trees.get(structure) if structure is not None else None
        if tree is None:
            # The handler's, not the checkpointer's: that one also looks for a step's
            # metadata file in the item's directory and warns that there is none.
            handler = ocp.PyTreeCheckpointHandler()
            try:
                tree = handler.metadata(path).tree
            finally:
                handler.close()
            if structure is not None:
                trees[structure] = tree
        stored = ocp.tree.to_flat_dict(tree)
        as_numpy = ocp.tree.from_flat_dict(
            dict.fromkeys(stored, ocp.RestoreArgs(restore_type=np.ndarray)), target=tree
        )
        found: dict[str, int] = {}
        for group in byte_groups(stored):
            # Orbax reads the leaves of the group and skips the placeholders.
            wanted = set(group)
            item = ocp.tree.from_flat_dict(
                {k: 0 if k in wanted else ocp.PLACEHOLDER for k in stored}, target=tree
            )
            read = ocp.tree.to_flat_dict(reader.restore(
                path, args=ocp.args.PyTreeRestore(item=item, restore_args=as_numpy)))
            for key in group:
                found[_key_text(key)] = host_checksum(read.pop(key))
    if isinstance(expected, dict):
        compare_checksums(step, expected, found)
    # Older checkpoints store a list in the leaf order of the state's pytree,
    # which the files do not record; reading every array back still proves
    # they are complete, and their restore checks the list.


class Verification:
    """``read(step)`` for each of ``steps``, in a low-priority thread if ``background``.

    :meth:`results` waits for the reads and returns step -> the read's exception, or
    None where it succeeded (any read failure means "damaged").
    """

    def __init__(self, read: Callable[[int], None], steps: list[int], *,
                 background: bool) -> None:
        self._results: dict[int, Exception | None] = {}
        self._thread = None
        if background and steps:
            self._thread = threading.Thread(
                target=self._run, args=(read, steps, True), name="verify-checkpoints",
                daemon=True,
            )
            self._thread.start()
        else:
            self._run(read, steps, False)

    def _run(self, read: Callable[[int], None], steps: list[int], in_thread: bool) -> None:
        if in_thread:
            lower_thread_priority(threading.get_native_id())
        for step in steps:
            self._results[step] = read_error(read, step)

    def results(self) -> dict[int, Exception | None]:
        if self._thread is not None:
            self._thread.join()
        return self._results


def lower_thread_priority(native_id: int) -> None:
    """Gives a thread (its native id) the lowest CPU priority (nice 19), where the OS allows it.

    Linux schedules threads on their own nice values, and a thread started by a
    niced thread inherits its value: the background verification and writes
    then take the cores only when the training step leaves them idle, which
    matters when the "device" is the CPU. Elsewhere the thread keeps its priority.
    """
    try:
        os.setpriority(os.PRIO_PROCESS, native_id, 19)
    except (AttributeError, OSError):
        pass


#: Name (``/proc/self/task/<tid>/comm``) of TensorStore's worker threads, which do Orbax's
#: file reads and writes.
TENSORSTORE_THREAD = "ts_pool_worker"


def lower_writer_priority(running: set[int | None]) -> None:
    """Nice 19 for the threads finishing an asynchronous save: the Python threads whose
    ``ident`` is not in ``running`` (Orbax's save threads, started since) and TensorStore's
    workers; runs in a thread of its own, lowered first. The thread that saved, which runs
    the training step, keeps its priority."""
    lower_thread_priority(threading.get_native_id())
    for thread in threading.enumerate():
        if thread.ident not in running and thread.native_id is not None:
            lower_thread_priority(thread.native_id)
    for native_id, name in thread_names().items():
        if name == TENSORSTORE_THREAD:
            lower_thread_priority(native_id)


def thread_names() -> dict[int, str]:
    """This process's threads, native id to name (``/proc/self/task/<tid>/comm``); empty
    where there is no ``/proc`` (not Linux)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return {}
    names = {}
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names[int(task)] = comm.read().strip()
        except OSError:  # the thread ended
            continue
    return names


def read_error(read, step: int) -> Exception | None:
    """``read(step)``'s exception, or None if it returned: any read failure means "damaged"."""
    try:
        read(step)
    except Exception as err:  # noqa: BLE001
        return err
    return None


def checksum_keys(tree: Any) -> list[str]:
    """``"params/network/..."`` per leaf of ``tree``, in leaf order: Orbax's path of each array.

    The same path names the array in the checkpoint's files, so a checksum
    keyed by it can be checked without the pytree that was saved.
    """
    return [_key_text(key) for key in ocp.tree.to_flat_dict(tree)]


def _key_text(key: tuple) -> str:
    return "/".join(str(part) for part in key)


def compare_checksums(step: int, expected: dict[str, int], found: dict[str, int]) -> None:
    """Raises ChecksumMismatch naming the arrays whose checksums differ (or are missing)."""
    bad = sorted(k for k in set(expected) | set(found) if expected.get(k) != found.get(k))
    if bad:
        shown = ", ".join("".join(f"[{part!r}]" for part in k.split("/")) for k in bad[:3])
        raise ChecksumMismatch(
            f"the arrays read from the checkpoint at step {step} differ from the ones "
            f"saved: content checksum mismatch in {len(bad)} of {len(found)} arrays ({shown})"
        )


#: Bytes read at once when verifying a checkpoint, unless one array alone is larger: one Orbax
#: read costs about 0.1-0.3 s whatever its size, so a small state is read in one go.
VERIFY_GROUP_BYTES = 64 << 20


def byte_groups(stored: dict[tuple, Any], floor: int = VERIFY_GROUP_BYTES) -> list[list[tuple]]:
    """Keys of the stored arrays, in file order, in groups of at most
    ``max(largest array, floor)`` bytes each."""
    sizes = {
        key: int(np.prod(meta.shape, dtype=np.int64)) * np.dtype(meta.dtype).itemsize
        for key, meta in stored.items()
    }
    budget = max(max(sizes.values(), default=0), floor)
    groups: list[list[tuple]] = []
    total = budget + 1
    for key, size in sizes.items():
        if total + size > budget:
            groups.append([])
            total = 0
        groups[-1].append(key)
        total += size
    return groups


#: Elements per slice of :func:`host_checksum` (bounds its temporaries to a few MiB).
_HOST_CHUNK = 1 << 18


def host_checksum(x: np.ndarray) -> int:
    """:func:`state_checksum` of one host array, in numpy: the same uint32 for the same bits."""
    x = np.asarray(x)
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)
    width = x.dtype.itemsize
    words: np.ndarray
    if width == 8:  # two 32-bit words per element, low word first (as XLA's bitcast on CPU)
        words = x.reshape(x.shape + (1,)).view(np.uint32)
    else:
        unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32}[width]
        words = x.view(unsigned) if x.ndim else x.reshape(1).view(unsigned).reshape(())
    if words.ndim == 0:
        words = words.reshape(1)  # position 0 either way
    rows = max(1, _HOST_CHUNK // max(1, int(np.prod(words.shape[1:], dtype=np.int64))))
    total = np.zeros((), np.uint32)
    with np.errstate(over="ignore"):
        for start in range(0, words.shape[0], rows):
            block = words[start : start + rows].astype(np.uint32)
            position = np.zeros(block.shape, np.uint32)
            for dim in range(block.ndim):
                iota = np.arange(block.shape[dim], dtype=np.uint32) + np.uint32(
                    start if dim == 0 else 0
                )
                shape = [1] * block.ndim
                shape[dim] = block.shape[dim]
                position = position * np.uint32(1_000_003) + iota.reshape(shape)
            weight = position * np.uint32(2_654_435_761) + np.uint32(1)
            total = total + np.sum(block * weight, dtype=np.uint32)
    return int(total)


def _leaf_checksum(x: jax.Array) -> jax.Array:
    """uint32 sum of the leaf's bits, each 32-bit word weighted by a hash of its position.

    Wrapping integer arithmetic: exact and independent of the reduction order or
    the sharding, so every process and device layout computes the same value.
    """
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    x = jnp.asarray(x)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    width = x.dtype.itemsize
    if width == 8:
        words = jax.lax.bitcast_convert_type(x, jnp.uint32)  # [..., 2]
    else:
        unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[width]
        words = jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)
    position = jnp.zeros(words.shape, jnp.uint32)
    for dim in range(words.ndim):
        position = position * jnp.uint32(1_000_003) + jax.lax.broadcasted_iota(
            jnp.uint32, words.shape, dim
        )
    weight = position * jnp.uint32(2_654_435_761) + jnp.uint32(1)
    return jnp.sum(words * weight, dtype=jnp.uint32)


@jax.jit
def _checksums(tree: Any) -> list[jax.Array]:
    # Scalars, not one stacked vector: a 0-d result is replicated on every device,
    # so each process can read it whatever sharding XLA picks.
    return [_leaf_checksum(leaf) for leaf in jax.tree.leaves(tree)]


def state_checksum(tree: Any) -> list[int]:
    """One uint32 content checksum per array of ``tree``, in leaf order (JSON-ready).

    Detects any change of the arrays' bits with probability 1 - 2^-32 per array.
    Works on sharded and multi-process arrays (the result is replicated).
    """
    return [int(np.asarray(v.addressable_data(0))) for v in _checksums(tree)]
