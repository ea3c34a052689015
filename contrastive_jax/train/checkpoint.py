"""Orbax checkpoints of the training state in ``<workdir>/checkpoints``.

Each checkpoint holds two items: ``state`` (the pytree of arrays: parameters,
batch statistics, optimiser state, step, RNG) and ``meta`` (JSON: step, the
config that produced it, a signature of the state's structure, and a content
checksum of every array of ``state``, keyed by the array's path in the tree).
The input position is the step itself: batches are a pure function of (seed,
step).

Every restore recomputes a content checksum of the arrays it read and compares it with
the one stored at save time (:mod:`.verify`: Orbax detects a cut or missing file, not
changed bytes); a mismatch makes the checkpoint *damaged*.

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
that finish a save after :meth:`Checkpointer.save` returns and the
background verification run at the lowest CPU priority (:mod:`.verify` reads the files on
the host, never onto the devices, in bounded host memory). With several processes, every
process reads the files (Orbax's reads are collective) and a damage verdict of
any process counts. A checkpoint that fails to read back is *damaged*: it is reported
and moved to ``<workdir>/damaged_checkpoints`` (never deleted), and
:meth:`Checkpointer.restore_latest` falls back to the previous one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from contrastive_jax.errors import LIBRARY_LOGGERS
from contrastive_jax.train import paths, verify
from contrastive_jax.train.verify import (
    CHECKSUM_KEY,
    CheckpointError,
    ChecksumMismatch,
    checksum_keys,
    state_checksum,
)

__all__ = [
    "CHECKPOINT_DIR",
    "DAMAGED_DIR",
    "CheckpointError",
    "Checkpointer",
    "ChecksumMismatch",
    "abstract_like",
    "checkpoint_dir",
    "state_checksum",
    "structure_signature",
]

CHECKPOINT_DIR = "checkpoints"
DAMAGED_DIR = "damaged_checkpoints"


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

    def __init__(
        self, workdir: str | os.PathLike, *, max_to_keep: int = 3, asynchronous: bool = True
    ) -> None:
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
        with quiet_libraries():  # it reads every checkpoint's metadata, damaged ones too
            self._manager = ocp.CheckpointManager(self.directory, options=options)
        self._verified: set[int] = set()
        self._verifying: verify.Verification | None = None  # the verification under way
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
        threading.Thread(target=verify.lower_writer_priority, args=(running,),
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
            self._collect()  # first: the error names the last verified checkpoint
            raise self._write_error(None, err) from err
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
        return self._settle(step, verify.read_error(self.verify_files, step))

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
        """Reads every array of the checkpoint at ``step`` into host memory and checks its
        checksum (:func:`.verify.read_back`); raises if it is damaged."""
        # Not through the manager: this may run in a thread beside a save.
        verify.read_back(self.directory, step, self._trees)

    def _start_verification(self, *, background: bool) -> None:
        """Starts reading back every finished checkpoint not verified yet (:meth:`verify_files`),
        in a thread if ``background``; :meth:`_collect` takes the verdicts."""
        self._collect()
        with quiet_libraries():
            self._manager.reload()
        pending = [s for s in self.steps() if s not in self._verified]
        self._verifying = verify.Verification(self.verify_files, pending, background=background)

    def _collect(self) -> None:
        """Waits for the verification under way; marks what it read verified, moves the damaged aside."""
        if self._verifying is None:
            return
        results = self._verifying.results()
        self._verifying = None
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
        logging.warning("checkpoint at step %d in %s is damaged (%s); moved to %s", step,
                        self.directory, short_error(err), target)
        if jax.process_index() == 0:
            self.damaged_directory.mkdir(parents=True, exist_ok=True)
            (self.directory / str(step)).rename(target)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"quarantine checkpoint {step}")
        with quiet_libraries():
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
            verify.compare_checksums(step, expected, dict(zip(keys, found, strict=True)))
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
                with quiet_libraries():
                    meta = self.restore_meta(step)
            except Exception as err:  # noqa: BLE001 - unreadable JSON item: damaged
                self._quarantine(step, err)
                continue
            if check_meta is not None:
                check_meta(meta, step)
            try:
                with quiet_libraries():
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


#: The longest cause a warning line quotes of an error.
CAUSE_CHARS = 240


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Only the critical records of the libraries' loggers
    (:data:`contrastive_jax.errors.LIBRARY_LOGGERS`) show while the context is active: a restore
    that meets a damaged checkpoint makes Orbax (through absl) log each failed read,
    TensorStore's specs included, and asyncio the event loops it leaves behind ("Event loop
    is closed"); this module's one warning line per checkpoint says it."""
    loggers = [logging.getLogger(name) for name in LIBRARY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def short_error(err: BaseException) -> str:
    """``Type: first line`` of ``err``, cut to :data:`CAUSE_CHARS` characters: a warning
    line's cause (a TensorStore error's first line can hold a whole spec)."""
    lines = str(err).strip().splitlines()
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text if len(text) <= CAUSE_CHARS else text[:CAUSE_CHARS - 3] + "..."


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of a pytree of arrays, for restoring into."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def structure_signature(tree: Any) -> list[str]:
    """``"<path> <dtype><shape>"`` per leaf: what a checkpoint must match to restore into ``tree``."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [
        f"{jax.tree_util.keystr(path)} {leaf.dtype}{list(leaf.shape)}" for path, leaf in leaves
    ]


