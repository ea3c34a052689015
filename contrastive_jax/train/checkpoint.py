"""Orbax checkpoints of the training state in ``<workdir>/checkpoints``.

Each checkpoint holds two items: ``state`` (the pytree of arrays: parameters,
batch statistics, optimiser state, step, RNG) and ``meta`` (JSON: step, the
config that produced it, a signature of the state's structure, and a content
checksum of every array of ``state``, keyed by the array's path in the tree).
The input position is the step itself: batches are a pure function of (seed,
step).

Orbax detects a cut or missing file, but not changed bytes: a single flipped
bit in an OCDBT data file restores without error into a wrong array. So every
restore recomputes the checksum of the arrays it read and compares it with the
one stored at save time; a mismatch makes the checkpoint *damaged*.

Saves are asynchronous. A checkpoint counts once Orbax has finalised it (on a
local disk: renamed from its ``<step>.orbax-checkpoint-tmp-*`` directory, so a
save killed half-way leaves only a temporary directory, which is ignored and
never deleted). Retention is done here, not by Orbax's ``max_to_keep``:
every finished checkpoint is *verified* by reading it back, and an old
checkpoint is deleted only once ``max_to_keep`` newer checkpoints have been
verified, so a good checkpoint is never deleted while a newer one is
unverified. Each save starts the verification of the checkpoints finished
since the last one; with one process it runs in a background thread while
training goes on, and its verdicts are taken (damaged ones moved aside, old
ones pruned) at the next save, :meth:`Checkpointer.wait` or
:meth:`Checkpointer.flush`. With several processes it runs at the save itself,
on the main thread: Orbax's reads synchronise the processes with device
collectives, which must not interleave with the training step's. The threads
that finish a save after :meth:`Checkpointer.save` returns (Orbax's and
TensorStore's) and the background verification run at the lowest CPU priority
(nice 19, on Linux), so on a host whose cores also run the step (a CPU
"device", or a busy input pipeline) they use the cycles the step leaves idle. Verification reads the files on the host, never onto the devices:
the arrays are read as numpy arrays a few at a time (at most as many bytes at
once as the largest array holds, or 64 MiB if that is more) and their checksums
recomputed in numpy, so it costs no device memory and its host memory is bounded
by the largest array (or 64 MiB), not the state. With several processes, every
process reads the files (Orbax's reads are collective) and a damage verdict of
any process counts. A checkpoint that fails to read back is *damaged*: it is reported
and moved to ``<workdir>/damaged_checkpoints`` (never deleted), and
:meth:`Checkpointer.restore_latest` falls back to the previous one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from contrastive_jax.train import paths

CHECKPOINT_DIR = "checkpoints"
DAMAGED_DIR = "damaged_checkpoints"
#: Key of the state's content checksum in the JSON item (written and removed here).
CHECKSUM_KEY = "state_checksum"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, or none could be read where one exists."""


class ChecksumMismatch(CheckpointError):
    """The arrays restored from a checkpoint are not the arrays that were saved."""


def checkpoint_dir(workdir: str | os.PathLike) -> epath.Path:
    """``<workdir>/checkpoints`` (local or ``gs://``, :mod:`.paths`)."""
    return paths.as_path(workdir) / CHECKPOINT_DIR


class Checkpointer:
    """Saves, verifies, prunes and restores (state, meta) pairs with Orbax.

    Args:
      workdir: the run's work directory, local or ``gs://`` (:mod:`.paths`); checkpoints go
        to ``<workdir>/checkpoints``.
      max_to_keep: verified checkpoints kept (the newest ones), >= 1.
      asynchronous: write in a background thread (the caller continues training).
    """

    def __init__(self, workdir: str, *, max_to_keep: int = 3, asynchronous: bool = True) -> None:
        if max_to_keep < 1:
            raise ValueError(f"checkpoint max_to_keep must be >= 1, got {max_to_keep}")
        self.directory = checkpoint_dir(workdir)
        self.damaged_directory = paths.as_path(workdir) / DAMAGED_DIR
        self.max_to_keep = max_to_keep
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None,  # retention below, after verification
            enable_async_checkpointing=asynchronous,
            create=True,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)
        self._verified: set[int] = set()
        # The verification under way: its thread (None when it ran on the caller's)
        # and its results, step -> the read error or None.
        self._verifying: tuple[threading.Thread | None, dict[int, Exception | None]] | None = None
        # Orbax's tree metadata per state structure (the sorted checksum keys): the same for
        # every checkpoint of a run, and reading it costs half of a verification.
        self._trees: dict[tuple[str, ...], Any] = {}

    def steps(self) -> list[int]:
        """Steps of the finalised checkpoints, oldest first."""
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Starts an (asynchronous) save of ``state`` and ``meta`` at ``step``.

        First waits for the previous save and takes the verdicts of the
        verification started by the previous save, prunes old checkpoints,
        and starts verifying the checkpoints finished since (see the module
        docstring). Raises :class:`CheckpointError` (naming the step and the
        last good checkpoint) when the previous or this save fails to write.
        """
        self.wait()
        self._prune()
        running = {thread.ident for thread in threading.enumerate()}
        self._start_verification(background=jax.process_count() == 1)
        meta = {**meta, CHECKSUM_KEY: dict(zip(checksum_keys(state), state_checksum(state),
                                               strict=True))}
        try:
            self._manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
                ),
                force=True,
            )
        except Exception as err:
            raise self._write_error(step, err) from err
        # Reading /proc costs tens of ms in some sandboxes: not on the step's thread.
        threading.Thread(target=_lower_writer_priority, args=(running,),
                         name="lower-checkpoint-priority", daemon=True).start()

    def compile_checksum(self, state: Any) -> None:
        """Compiles the content checksum of ``state``'s structure now.

        The loop calls this with its first step, so the first save does not
        hold the devices idle while it compiles (1.5 s for the quickstart's
        244 arrays on the CPU).
        """
        state_checksum(state)

    def wait(self) -> None:
        """Blocks until pending asynchronous saves are written and a verification under way has
        ended, and takes its verdicts; raises CheckpointError if a save failed."""
        try:
            self._manager.wait_until_finished()
        except Exception as err:
            raise self._write_error(None, err) from err
        finally:
            self._collect()

    def _write_error(self, step: int | None, err: Exception) -> CheckpointError:
        good = sorted(self._verified)
        where = f"at step {step}" if step is not None else "in the background"
        return CheckpointError(
            f"writing a checkpoint {where} to {self.directory} failed ({type(err).__name__}: "
            f"{err}); is the disk full or the directory unwritable? The last verified "
            f"checkpoint is {('step ' + str(good[-1])) if good else 'none'}"
        )

    def verify(self, step: int) -> bool:
        """Reads the checkpoint at ``step`` back on the host; moves it aside and returns False if damaged.

        Every process reads the files (:meth:`verify_files`; Orbax's reads are
        collective, so a read by one process alone would wait for the others
        forever), and the checkpoint counts as damaged if any process found it
        so. No array is put on a device.
        """
        return self._settle(step, _read_error(self.verify_files, step))

    def _settle(self, step: int, error: Exception | None) -> bool:
        """Marks ``step`` verified, or moves it aside if this or another process found it damaged."""
        if jax.process_count() > 1:
            damaged = multihost_utils.process_allgather(np.int32(error is not None))
            if int(np.max(damaged)) and error is None:
                error = CheckpointError("another process found it damaged")
        if error is not None:
            self._quarantine(step, error)
            return False
        self._verified.add(step)
        return True

    def verify_files(self, step: int) -> None:
        """Reads every array of the checkpoint at ``step`` into host memory and checks its checksum.

        The arrays are read as numpy arrays, a group at a time of at most
        ``max(largest array, VERIFY_GROUP_BYTES)`` bytes, and dropped once
        checked: peak extra host memory is about that much (plus the checksum's
        temporaries, a few MiB), and no device memory is used.

        Raises:
          ChecksumMismatch: an array read differs from the one saved.
          Exception: whatever Orbax or TensorStore raise on a missing, cut or
            unreadable file.
        """
        # Not through the manager: this may run in a thread beside a save.
        with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as json_reader:
            expected = json_reader.restore(self.directory / str(step) / "meta")
        expected = expected.get(CHECKSUM_KEY)
        path = self.directory / str(step) / "state"
        structure = tuple(sorted(expected)) if isinstance(expected, dict) else None
        with ocp.PyTreeCheckpointer() as reader:
            tree = self._trees.get(structure)
            if tree is None:
                # The handler's, not the checkpointer's: that one also looks for a step's
                # metadata file in the item's directory and warns that there is none.
                handler = ocp.PyTreeCheckpointHandler()
                try:
                    tree = handler.metadata(path).tree
                finally:
                    handler.close()
                if structure is not None:
                    self._trees[structure] = tree
            stored = ocp.tree.to_flat_dict(tree)
            as_numpy = ocp.tree.from_flat_dict(
                dict.fromkeys(stored, ocp.RestoreArgs(restore_type=np.ndarray)), target=tree
            )
            found: dict[str, int] = {}
            for group in _byte_groups(stored):
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
            _compare_checksums(step, expected, found)
        # Older checkpoints store a list in the leaf order of the state's pytree,
        # which the files do not record; reading every array back still proves
        # they are complete, and their restore checks the list.

    def _start_verification(self, *, background: bool) -> None:
        """Starts reading back every finished checkpoint not verified yet (:meth:`verify_files`),
        in a thread if ``background``; :meth:`_collect` takes the verdicts."""
        self._collect()
        self._manager.reload()
        pending = [s for s in self.steps() if s not in self._verified]
        results: dict[int, Exception | None] = {}

        def read_back(in_thread: bool) -> None:
            if in_thread:
                _lower_thread_priority(threading.get_native_id())
            for step in pending:
                results[step] = _read_error(self.verify_files, step)

        thread = None
        if background and pending:
            thread = threading.Thread(
                target=read_back, args=(True,), name="verify-checkpoints", daemon=True
            )
            thread.start()
        else:
            read_back(False)
        self._verifying = (thread, results)

    def _collect(self) -> None:
        """Waits for the verification under way; marks what it read verified, moves the damaged aside."""
        if self._verifying is None:
            return
        thread, results = self._verifying
        self._verifying = None
        if thread is not None:
            thread.join()
        for step in sorted(results):
            self._settle(step, results[step])

    def _prune(self) -> None:
        """Deletes the verified checkpoints older than the newest ``max_to_keep`` verified ones."""
        verified = sorted(s for s in self.steps() if s in self._verified)
        # Unverified checkpoints are never counted, so the newest max_to_keep
        # verified ones protect the older ones deleted here.
        for step in verified[: -self.max_to_keep]:
            self._manager.delete(step)
            self._verified.discard(step)

    def _quarantine(self, step: int, err: Exception) -> None:
        """Reports a damaged checkpoint and moves it to ``damaged_checkpoints/``."""
        target = self.damaged_directory / f"{step}-{int(time.time())}"
        logging.warning(
            "checkpoint at step %d in %s is damaged (%s: %s); moved to %s",
            step,
            self.directory,
            type(err).__name__,
            str(err).splitlines()[0] if str(err) else "",
            target,
        )
        if jax.process_index() == 0:
            self.damaged_directory.mkdir(parents=True, exist_ok=True)
            (self.directory / str(step)).rename(target)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"quarantine checkpoint {step}")
        self._manager.reload()

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
        """Restores the checkpoint at ``step`` into the structure of ``abstract_state``.

        Raises :class:`ChecksumMismatch` if the arrays read differ from the ones saved.
        """
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()
            ),
        )
        meta = dict(restored.meta)
        expected = meta.pop(CHECKSUM_KEY, None)
        if expected is not None:  # checkpoints written before the checksum existed have none
            keys = checksum_keys(restored.state)
            found = state_checksum(restored.state)
            if isinstance(expected, list):  # the older format: one value per leaf, in leaf order
                expected = dict(zip(keys, expected, strict=False)) if len(expected) == len(
                    found) else {}
            _compare_checksums(step, expected, dict(zip(keys, found, strict=True)))
        return restored.state, meta

    def restore_meta(self, step: int) -> dict:
        """Only the JSON item of the checkpoint at ``step`` (without the checksum)."""
        meta = self._read_meta(step)
        meta.pop(CHECKSUM_KEY, None)
        return meta

    def _read_meta(self, step: int) -> dict:
        restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(restored.meta)

    def restore_latest(self, abstract_state: Any, check_meta=None) -> tuple[Any, dict] | None:
        """The newest checkpoint that restores, or None if there is none.

        ``check_meta(meta, step)``, if given, runs on each candidate's JSON item
        before its arrays are read and may raise (e.g. an incompatible config);
        that error propagates and the checkpoint is left in place. A checkpoint
        that fails to read (truncated, incomplete, corrupt) is reported, moved
        to ``damaged_checkpoints/`` and skipped in favour of the previous one.
        """
        for step in reversed(self.steps()):
            try:
                meta = self.restore_meta(step)
            except Exception as err:  # noqa: BLE001 - unreadable JSON item: damaged
                self._quarantine(step, err)
                continue
            if check_meta is not None:
                check_meta(meta, step)
            try:
                state, meta = self.restore(step, abstract_state)
            except Exception as err:  # noqa: BLE001 - any read failure means "damaged"
                self._quarantine(step, err)
                continue
            self._verified.add(step)
            return state, meta
        return None

    def flush(self) -> None:
        """Waits for pending saves, then verifies every checkpoint and prunes (end of a run or
        preemption)."""
        self.wait()
        self._start_verification(background=False)
        self._collect()
        self._prune()

    def close(self) -> None:
        """Waits for pending saves (raising CheckpointError if one failed) and closes."""
        try:
            self.wait()
        finally:
            self._manager.close()


def _lower_thread_priority(native_id: int) -> None:
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


def _lower_writer_priority(running: set[int | None]) -> None:
    """Nice 19 for the threads finishing an asynchronous save: the Python threads whose
    ``ident`` is not in ``running`` (Orbax's save threads, started since) and TensorStore's
    workers; runs in a thread of its own, lowered first. The thread that saved, which runs
    the training step, keeps its priority."""
    _lower_thread_priority(threading.get_native_id())
    for thread in threading.enumerate():
        if thread.ident not in running and thread.native_id is not None:
            _lower_thread_priority(thread.native_id)
    for native_id, name in thread_names().items():
        if name == TENSORSTORE_THREAD:
            _lower_thread_priority(native_id)


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


def _read_error(read, step: int) -> Exception | None:
    """``read(step)``'s exception, or None if it returned: any read failure means "damaged"."""
    try:
        read(step)
    except Exception as err:  # noqa: BLE001
        return err
    return None


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of a pytree of arrays, for restoring into."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def structure_signature(tree: Any) -> list[str]:
    """``"<path> <dtype><shape>"`` per leaf: what a checkpoint must match to restore into ``tree``."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [
        f"{jax.tree_util.keystr(path)} {leaf.dtype}{list(leaf.shape)}" for path, leaf in leaves
    ]


def checksum_keys(tree: Any) -> list[str]:
    """``"params/network/..."`` per leaf of ``tree``, in leaf order: Orbax's path of each array.

    The same path names the array in the checkpoint's files, so a checksum
    keyed by it can be checked without the pytree that was saved.
    """
    return [_key_text(key) for key in ocp.tree.to_flat_dict(tree)]


def _key_text(key: tuple) -> str:
    return "/".join(str(part) for part in key)


def _compare_checksums(step: int, expected: dict[str, int], found: dict[str, int]) -> None:
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


def _byte_groups(stored: dict[tuple, Any], floor: int = VERIFY_GROUP_BYTES) -> list[list[tuple]]:
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
