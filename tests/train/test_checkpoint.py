"""Checkpointer: verified retention, damaged and incomplete checkpoints, write failures."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from contrastive_jax.train import verify
from contrastive_jax.train.checkpoint import (
    CHECKPOINT_DIR,
    DAMAGED_DIR,
    Checkpointer,
    CheckpointError,
    ChecksumMismatch,
    abstract_like,
    state_checksum,
)
from contrastive_jax.train.verify import TENSORSTORE_THREAD, thread_names
from tests.train import runs


def _state(step: int) -> dict:
    return {"w": jnp.full((64, 32), float(step)), "step": jnp.asarray(step, jnp.int32)}


def _save(checkpointer: Checkpointer, step: int) -> None:
    checkpointer.save(step, _state(step), {"step": step})


def test_rejects_bad_max_to_keep(tmp_path):
    with pytest.raises(ValueError, match="max_to_keep"):
        Checkpointer(str(tmp_path), max_to_keep=0)


def test_deletes_old_checkpoints_only_after_newer_ones_verified(tmp_path):
    workdir = str(tmp_path)
    checkpointer = Checkpointer(workdir, max_to_keep=1)
    _save(checkpointer, 1)
    _save(checkpointer, 2)  # 1 verified, 2 being written: nothing may go
    checkpointer.wait()
    assert checkpointer.steps() == [1, 2]
    runs.truncate_checkpoint(workdir, 2)
    _save(checkpointer, 3)  # 2 fails verification: moved aside, 1 is still the only good one
    checkpointer.wait()
    assert checkpointer.steps() == [1, 3]
    assert os.listdir(os.path.join(workdir, DAMAGED_DIR))[0].startswith("2-")
    checkpointer.flush()  # 3 verified: now 1 can go
    assert checkpointer.steps() == [3]
    checkpointer.close()


def test_restore_latest_skips_truncated_checkpoint(tmp_path, caplog):
    workdir = str(tmp_path)
    checkpointer = Checkpointer(workdir, max_to_keep=3)
    for step in (1, 2):
        _save(checkpointer, step)
    checkpointer.close()
    runs.truncate_checkpoint(workdir, 2)

    checkpointer = Checkpointer(workdir)
    with caplog.at_level(logging.WARNING):
        state, meta = checkpointer.restore_latest(abstract_like(_state(0)))
    checkpointer.close()
    assert meta == {"step": 1} and int(state["step"]) == 1
    np.testing.assert_array_equal(state["w"], np.ones((64, 32)))
    assert "checkpoint at step 2" in caplog.text and "damaged" in caplog.text
    assert runs.checkpoint_steps(workdir) == [1]


def test_incomplete_checkpoint_is_ignored_and_kept(tmp_path):
    workdir = str(tmp_path)
    checkpointer = Checkpointer(workdir)
    _save(checkpointer, 1)
    checkpointer.close()
    # What a save killed before finalisation leaves behind.
    partial = os.path.join(workdir, CHECKPOINT_DIR, "2.orbax-checkpoint-tmp-1795400000")
    os.makedirs(os.path.join(partial, "state"))

    checkpointer = Checkpointer(workdir)
    state, meta = checkpointer.restore_latest(abstract_like(_state(0)))
    _save(checkpointer, 2)
    checkpointer.close()
    assert meta["step"] == 1 and os.path.isdir(partial)
    assert runs.checkpoint_steps(workdir) == [1, 2]


def test_mismatch_found_by_check_meta_leaves_checkpoints_alone(tmp_path):
    workdir = str(tmp_path)
    checkpointer = Checkpointer(workdir)
    _save(checkpointer, 1)
    checkpointer.close()

    def refuse(meta, step):
        raise ValueError(f"incompatible step {step}")

    checkpointer = Checkpointer(workdir)
    with pytest.raises(ValueError, match="incompatible step 1"):
        checkpointer.restore_latest(abstract_like(_state(0)), check_meta=refuse)
    checkpointer.close()
    assert runs.checkpoint_steps(workdir) == [1]
    assert not os.path.exists(os.path.join(workdir, DAMAGED_DIR))


def test_full_disk_is_a_clear_error(tmp_path, monkeypatch):
    # A real ENOSPC needs a small filesystem (mount, root); the CLI test in
    # test_failures_cli.py limits the file size with RLIMIT_FSIZE instead.
    workdir = str(tmp_path)
    checkpointer = Checkpointer(workdir)
    _save(checkpointer, 1)
    checkpointer.flush()

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ocp.CheckpointManager, "save", no_space)
    with pytest.raises(CheckpointError, match=r"at step 2 .*No space left.*last verified checkpoint is step 1"):
        _save(checkpointer, 2)
    monkeypatch.undo()
    checkpointer.close()
    assert runs.checkpoint_steps(workdir) == [1]


def test_a_background_write_error_names_the_checkpoint_verified_meanwhile(tmp_path, monkeypatch):
    checkpointer = Checkpointer(str(tmp_path))
    _save(checkpointer, 1)
    _save(checkpointer, 2)  # waits for step 1, starts verifying it in the background

    def no_space(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ocp.CheckpointManager, "wait_until_finished", no_space)
    with pytest.raises(CheckpointError,
                       match=r"in the background .*No space left.*last verified checkpoint is step 1"):
        checkpointer.wait()
    monkeypatch.undo()
    checkpointer.close()


def test_flipped_bytes_in_array_data_are_detected_and_skipped(tmp_path, caplog):
    """Orbax restores a file with changed bytes without error; the content checksum catches it."""
    workdir = str(tmp_path)
    checkpointer = Checkpointer(workdir)
    for step in (1, 2):
        checkpointer.save(step, _random_state(step), {"step": step})
    checkpointer.close()
    runs.flip_checkpoint_bytes(workdir, 2, value_files_only=True)

    checkpointer = Checkpointer(workdir)
    with pytest.raises(ChecksumMismatch, match=r"step 2 differ from the ones saved.*\['w'\]"):
        checkpointer.restore(2, abstract_like(_random_state(0)))
    with caplog.at_level(logging.WARNING):
        state, meta = checkpointer.restore_latest(abstract_like(_random_state(0)))
    checkpointer.close()
    assert meta == {"step": 1}
    np.testing.assert_array_equal(state["w"], _random_state(1)["w"])
    assert "checkpoint at step 2" in caplog.text and "checksum mismatch" in caplog.text
    assert runs.checkpoint_steps(workdir) == [1]


def _random_state(seed: int) -> dict:
    # Random bits: a flipped byte anywhere in the data changes an array.
    w = np.random.default_rng(seed).normal(size=(256, 128)).astype(np.float32)
    return {"w": jnp.asarray(w), "step": jnp.asarray(seed, jnp.int32)}


@pytest.mark.slow
def test_state_checksum_sees_any_single_change_and_not_layout():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(64, 48)), jnp.float32)
    base = state_checksum({"x": x})
    assert state_checksum({"x": x + 0.0}) == base
    for index in [(0, 0), (63, 47), (17, 5)]:
        assert state_checksum({"x": x.at[index].set(jnp.nextafter(x[index], 1e9))}) != base
    # Two swapped elements and a transposed layout of the same values are changes too.
    swapped = x.at[0, 0].set(x[0, 1]).at[0, 1].set(x[0, 0])
    assert state_checksum({"x": swapped}) != base
    # The same values sharded over 8 devices give the same checksum.
    mesh = jax.make_mesh((8,), ("d",))
    sharded = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d")))
    assert state_checksum({"x": sharded}) == base


@pytest.mark.parametrize(
    "leaf",
    [
        jnp.arange(5, dtype=jnp.bfloat16),
        jnp.arange(5, dtype=jnp.int32),
        jnp.asarray([True, False, True]),
        jnp.arange(5, dtype=jnp.uint8),
        jax.random.key(3),
        jax.random.PRNGKey(3),
        jnp.asarray(2.5, jnp.float32),
    ],
    ids=["bfloat16", "int32", "bool", "uint8", "typed-key", "raw-key", "scalar"],
)
def test_state_checksum_covers_every_leaf_dtype(leaf):
    (value,) = state_checksum([leaf])
    assert 0 <= value < 2**32
    data = jax.random.key_data(leaf) if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf
    changed = data.at[0].set(data[0] + 1 if data.dtype != jnp.bool_ else ~data[0]) if data.ndim \
        else data + 1
    if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        changed = jax.random.wrap_key_data(changed)
    assert state_checksum([changed]) != [value]


@pytest.mark.parametrize(
    "leaf",
    [
        jnp.arange(5, dtype=jnp.bfloat16),
        jnp.arange(7, dtype=jnp.int32),
        jnp.asarray([True, False, True]),
        jnp.arange(5, dtype=jnp.uint8),
        jax.random.PRNGKey(3),
        jnp.asarray(2.5, jnp.float32),
        jnp.asarray(np.random.default_rng(1).normal(size=(37, 5, 3)), jnp.float32),
    ],
    ids=["bfloat16", "int32", "bool", "uint8", "raw-key", "scalar", "3-d"],
)
def test_host_checksum_equals_device_checksum(leaf, monkeypatch):
    monkeypatch.setattr(verify, "_HOST_CHUNK", 7)  # several slices along the first axis
    assert verify.host_checksum(np.asarray(leaf)) == state_checksum([leaf])[0]


def test_verification_reads_files_on_the_host_only(tmp_path, monkeypatch):
    """verify() puts no array on a device and never restores through the manager."""
    workdir = str(tmp_path)
    checkpointer = Checkpointer(workdir, asynchronous=False)
    state = {**_random_state(1), "b": jnp.arange(10.0), "c": [jnp.ones(3), jnp.zeros((2, 2))]}
    checkpointer.save(1, state, {"step": 1})
    checkpointer.wait()

    created = []

    def spy(name, original):
        def wrapped(*args, **kwargs):
            created.append(name)
            return original(*args, **kwargs)
        return wrapped

    for name in ("device_put", "make_array_from_callback", "make_array_from_single_device_arrays",
                 "make_array_from_process_local_data"):
        monkeypatch.setattr(jax, name, spy(name, getattr(jax, name)))
    restore = ocp.CheckpointManager.restore

    def manager_restore(self, step, args=None, **kwargs):
        if args is not None and "state" in args.keys():
            created.append("CheckpointManager.restore(state)")
        return restore(self, step, args=args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", manager_restore)
    live = len(jax.live_arrays())
    assert checkpointer.verify(1)
    assert created == [] and len(jax.live_arrays()) == live

    runs.flip_checkpoint_bytes(workdir, 1, value_files_only=True)
    checkpointer._verified.clear()
    assert not checkpointer.verify(1)  # the checksums recomputed on the host see the change
    assert created == []
    assert os.listdir(os.path.join(workdir, DAMAGED_DIR))[0].startswith("1-")
    monkeypatch.undo()
    checkpointer.close()


def test_verification_groups_arrays_by_the_largest_array_or_the_floor():
    class Meta:
        def __init__(self, shape):
            self.shape, self.dtype = shape, np.float32

    stored = {("a",): Meta((100,)), ("b",): Meta((30,)), ("c",): Meta((50,)), ("d",): Meta((40,)),
              ("e",): Meta(())}
    assert verify.byte_groups(stored, floor=0) == [[("a",)], [("b",), ("c",)], [("d",), ("e",)]]
    assert verify.byte_groups(stored, floor=500) == [[("a",)], [("b",), ("c",), ("d",), ("e",)]]
    assert verify.byte_groups(stored) == [[("a",), ("b",), ("c",), ("d",), ("e",)]]  # 64 MiB floor


def test_one_process_reads_checkpoints_back_in_a_background_thread(tmp_path, monkeypatch):
    """The save returns while the previous checkpoint is read back; flush reads on the caller."""
    read_by = []
    original = Checkpointer.verify_files

    def spy(self, step):
        read_by.append((step, threading.current_thread().name))
        return original(self, step)

    monkeypatch.setattr(Checkpointer, "verify_files", spy)
    checkpointer = Checkpointer(str(tmp_path), max_to_keep=1)
    _save(checkpointer, 1)
    _save(checkpointer, 2)  # starts reading 1 back beside the write of 2
    checkpointer.wait()
    assert read_by == [(1, "verify-checkpoints")]
    assert checkpointer.steps() == [1, 2]  # 2 unverified: 1 stays
    checkpointer.flush()
    assert read_by == [(1, "verify-checkpoints"), (2, threading.main_thread().name)]
    assert checkpointer.steps() == [2]
    checkpointer.close()


@pytest.mark.slow
def test_tree_metadata_is_read_once_and_later_damage_still_found(tmp_path, monkeypatch):
    """Verification reuses the first checkpoint's tree metadata for the same state structure."""
    reads = []
    original = ocp.PyTreeCheckpointHandler.metadata

    def spy(self, path, *args, **kwargs):
        reads.append(path)
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(ocp.PyTreeCheckpointHandler, "metadata", spy)
    workdir = str(tmp_path)
    checkpointer = Checkpointer(workdir, max_to_keep=3)
    for step in (1, 2, 3):
        checkpointer.save(step, _random_state(step), {"step": step})
    checkpointer.wait()  # 1 and 2 read back
    runs.flip_checkpoint_bytes(workdir, 3, value_files_only=True)
    checkpointer.flush()  # 3 read back with the cached tree: the flipped bytes are found
    checkpointer.close()
    assert len(reads) == 1
    assert runs.checkpoint_steps(workdir) == [1, 2]
    assert os.listdir(os.path.join(workdir, DAMAGED_DIR))[0].startswith("3-")


def test_background_verification_runs_at_the_lowest_priority(tmp_path, monkeypatch):
    niceness = []
    original = Checkpointer.verify_files

    def spy(self, step):
        niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return original(self, step)

    monkeypatch.setattr(Checkpointer, "verify_files", spy)
    checkpointer = Checkpointer(str(tmp_path), max_to_keep=1)
    _save(checkpointer, 1)
    _save(checkpointer, 2)  # 1 read back in the background thread
    checkpointer.flush()  # 2 read back on the caller's thread, whose priority is untouched
    checkpointer.close()
    assert niceness == [19, os.getpriority(os.PRIO_PROCESS, 0)]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux thread priorities")
def test_asynchronous_writes_run_at_the_lowest_priority(tmp_path, monkeypatch):
    """Once a save returns, the threads still writing it (Orbax's, TensorStore's) are at nice
    19, so they take the cores only when the step leaves them idle; the caller is untouched."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = []
    setpriority = os.setpriority

    def spy(which, who, value):
        lowered.append(who)
        return setpriority(which, who, value)

    monkeypatch.setattr(os, "setpriority", spy)
    checkpointer = Checkpointer(str(tmp_path), max_to_keep=1)
    checkpointer.save(1, _random_state(1), {"step": 1})
    for thread in threading.enumerate():
        if thread.name == "lower-checkpoint-priority":
            thread.join()
    names = thread_names()
    workers = [tid for tid, name in names.items() if name == TENSORSTORE_THREAD]
    assert workers and all(tid in lowered for tid in workers)
    # Orbax's own threads (and the thread that lowers them)
    assert len([tid for tid in lowered if names.get(tid) != TENSORSTORE_THREAD]) >= 2
    for tid in workers:
        with contextlib.suppress(ProcessLookupError):
            assert os.getpriority(os.PRIO_PROCESS, tid) == 19
    assert threading.get_native_id() not in lowered
    assert os.getpriority(os.PRIO_PROCESS, 0) == own
    checkpointer.close()
    assert checkpointer.steps() == [1]
