"""Helpers of the reliability tests: a tiny encoder, reading checkpoints back, damaging them,
and running the pretraining CLI in a subprocess (the tiny config they run is
:func:`tests.train.cli_config.tiny_config`)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from contrastive_jax import data as data_lib
from contrastive_jax import models
from contrastive_jax.train.checkpoint import CHECKPOINT_DIR
from contrastive_jax.train.metrics_log import METRICS_FILE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CLI_CONFIG = os.path.join(ROOT, "tests", "train", "cli_config.py")


class TinyEncoder(nnx.Module):
    """Conv(3x3, stride 2) -> BN -> ReLU -> mean pool -> Dropout(0.2): [B, H, W, C] -> [B, 8].

    A stand-in for the ResNet in the fast loop tests: seconds to compile, and
    it has batch statistics and dropout, so exact resume covers both.
    """

    num_features = 8

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.conv = nnx.Conv(3, 8, (3, 3), strides=(2, 2), rngs=rngs)
        self.norm = nnx.BatchNorm(8, rngs=rngs)
        self.dropout = nnx.Dropout(0.2, rngs=rngs)

    def __call__(self, x):
        y = nnx.relu(self.norm(self.conv(x)))
        return self.dropout(y.mean(axis=(1, 2)))


@contextlib.contextmanager
def tiny_encoder():
    """Makes ``train()`` build :class:`TinyEncoder` whatever ``config.model.encoder`` says."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(models, "create_encoder", lambda config, *, rngs: TinyEncoder(rngs=rngs))
        yield


class _Patched:
    """A pretraining iterator whose batches pass through ``change`` on the host and, once
    the original's ``on_device`` has finished them, through ``on_device`` on the devices."""

    def __init__(self, batches, step: int, change, on_device) -> None:
        self._batches, self._step = batches, step
        self._change, self._on_device = change, on_device

    def __iter__(self):
        return self

    def __next__(self):
        batch = self._change(self._step, next(self._batches))
        self._step += 1
        return batch

    def on_device(self, arrays):
        step = int(np.asarray(arrays["step"].addressable_data(0))[0])
        arrays = self._batches.on_device(arrays)
        return arrays if self._on_device is None else self._on_device(step, arrays)


def patch_batches(monkeypatch, change=lambda step, batch: batch, on_device=None) -> None:
    """Routes every pretraining batch through ``change(step, batch) -> batch`` on the host
    and, if given, ``on_device(step, arrays) -> arrays`` once the devices have finished its
    views (normalised float32 views: where a test injects a NaN).

    ``step`` is the 0-based step the batch is drawn for (the run's position in
    the input pipeline), so a test can inject a NaN or a signal at a given step.
    """
    original = data_lib.make_pretrain_iterator

    def iterator(*args, **kwargs):
        return _Patched(original(*args, **kwargs), kwargs["start_step"], change, on_device)

    monkeypatch.setattr(data_lib, "make_pretrain_iterator", iterator)


def nan_at(monkeypatch, step: int) -> None:
    """Puts a NaN in one pixel of the views of ``step`` (1-based)."""

    def poison(position, arrays):
        if position + 1 == step:
            arrays = dict(arrays, views=arrays["views"].at[0, 0, 0, 0, 0].set(np.nan))
        return arrays

    patch_batches(monkeypatch, on_device=poison)


def first_batch(data_config, fields=("views", "label", "index")) -> dict[str, np.ndarray]:
    """Step 0's batch of ``data_config`` (seed 0), its views finished as the trainer finishes
    them (normalised float32): what a train step reads, on the host."""
    iterator = data_lib.make_pretrain_iterator(data_config, seed=0, start_step=0)
    batch = next(iterator)
    views = iterator.on_device({k: batch[k] for k in ("views", "index", "step")})["views"]
    return {**{k: batch[k] for k in fields}, "views": np.asarray(views)}


def checkpoint_steps(workdir: str) -> list[int]:
    """Finalised checkpoint steps in ``workdir`` (directory names that are integers)."""
    folder = os.path.join(workdir, CHECKPOINT_DIR)
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit())


def read_state(workdir: str, step: int) -> list[np.ndarray]:
    """Every array of the checkpointed training state at ``step``, as host numpy arrays."""
    path = os.path.join(workdir, CHECKPOINT_DIR, str(step), "state")
    with ocp.PyTreeCheckpointer() as checkpointer:
        stored = checkpointer.metadata(path).item_metadata.tree
        as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), stored)
        tree = checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=as_numpy))
    return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]


def assert_same_state(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    """Bit-identical pytrees of arrays."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def metrics(workdir: str) -> list[dict]:
    """The records of ``metrics.jsonl``, in file order."""
    with open(os.path.join(workdir, METRICS_FILE), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def losses_by_step(workdir: str) -> dict[int, float]:
    """Last logged loss of each step (a resumed run logs its steps again)."""
    return {r["step"]: r["loss"] for r in metrics(workdir)}


def truncate_checkpoint(workdir: str, step: int) -> list[str]:
    """Cuts every file of the checkpoint at ``step`` to half its size (a write cut short).

    Every file, not one: which single file a restore reads in full depends on
    Orbax's layout (an OCDBT data file can hold bytes a restore never reads),
    and a test must not depend on which file happens to be largest.
    """
    files = [
        p for p in glob.glob(os.path.join(workdir, CHECKPOINT_DIR, str(step), "**"), recursive=True)
        if os.path.isfile(p)
    ]
    for target in files:
        with open(target, "r+b") as f:
            f.truncate(os.path.getsize(target) // 2)
    return files


def flip_checkpoint_bytes(workdir: str, step: int, *, value_files_only: bool = False) -> list[str]:
    """Inverts one byte in every 4 KiB of the array data files of the checkpoint at ``step``.

    Bit rot or a bad copy: every file keeps its size. An OCDBT checkpoint keeps
    its data in b-tree nodes (``state/d/*``, CRC-checked by TensorStore, small
    arrays inlined) and value files (``state/ocdbt.process_*/d/*``, no CRC: a
    changed byte restores without error into a wrong array, which only the
    content checksum notices). Which arrays go where depends on their sizes and
    the write timing, so by default both kinds are damaged; ``value_files_only``
    leaves the CRC-checked nodes intact.
    """
    state = os.path.join(workdir, CHECKPOINT_DIR, str(step), "state")
    patterns = [os.path.join(state, "ocdbt.process_*", "d", "*")]
    if not value_files_only:
        patterns.append(os.path.join(state, "d", "*"))
    files = [p for pattern in patterns for p in glob.glob(pattern) if os.path.isfile(p)]
    assert files, f"no OCDBT data files in the checkpoint at step {step} (layout changed?)"
    for target in files:
        size = os.path.getsize(target)
        with open(target, "r+b") as f:
            for offset in (*range(size // 2, size, 4096), *range(size // 2 - 4096, 0, -4096)):
                f.seek(offset)
                byte = f.read(1)
                f.seek(offset)
                f.write(bytes([byte[0] ^ 0xFF]))
    return files


def cli_env(num_devices: int = 8, cache_dir: str | None = None, **extra: str) -> dict[str, str]:
    """Environment of a pretraining subprocess on ``num_devices`` simulated CPU devices.

    ``cache_dir``: a persistent compilation cache shared by the subprocesses of a test.
    """
    env = dict(os.environ)
    env.update(
        XLA_FLAGS=f"--xla_force_host_platform_device_count={num_devices}",
        JAX_PLATFORMS="cpu",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    if cache_dir is not None:
        env.update(
            JAX_COMPILATION_CACHE_DIR=cache_dir,
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
        )
    return env


def wait_for_step(proc: subprocess.Popen, workdir: str, step: int, timeout: float = 900.0) -> int:
    """Polls ``metrics.jsonl`` until a step >= ``step`` is logged; returns the step seen."""
    deadline = time.monotonic() + timeout
    path = os.path.join(workdir, METRICS_FILE)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"run exited with {proc.returncode}:\n{log_text(workdir)}")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                steps = [json.loads(line)["step"] for line in f if line.endswith("\n")]
            if steps and max(steps) >= step:
                return max(steps)
        time.sleep(0.02)
    raise AssertionError(f"step {step} not reached in {timeout} s:\n{log_text(workdir)}")


def run_pretrain(workdir: str, *flags: str, env: dict[str, str] | None = None,
                 timeout: float = 1200.0, config: str = CLI_CONFIG) -> int:
    """Runs the CLI to completion; returns its exit code."""
    proc = start_pretrain(workdir, *flags, env=env, config=config)
    return proc.wait(timeout=timeout)


def pretrain_command(workdir: str, *flags: str, config: str = CLI_CONFIG) -> list[str]:
    """``python -m contrastive_jax.pretrain`` with ``config`` (default :data:`CLI_CONFIG`)
    and ``flags``."""
    return [
        sys.executable, "-m", "contrastive_jax.pretrain",
        "--config", config, "--workdir", workdir, *flags,
    ]


def start_pretrain(workdir: str, *flags: str, env: dict[str, str] | None = None,
                   config: str = CLI_CONFIG, log: str | None = None,
                   **popen) -> subprocess.Popen:
    """Starts the CLI in a new process group, stdout+stderr to ``log`` (default
    ``<workdir>.log``; a ``gs://`` work directory needs a local ``log``)."""
    log = log or f"{workdir}.log"
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    out = open(log, "w", encoding="utf-8")  # noqa: SIM115 - closed by the child's exit
    return subprocess.Popen(
        pretrain_command(workdir, *flags, config=config), cwd=ROOT, env=env or cli_env(),
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen,
    )


def log_text(workdir: str) -> str:
    with open(f"{workdir}.log", encoding="utf-8") as f:
        return f.read()


def enable_compilation_cache(directory: str) -> dict:
    """Turns on JAX's persistent compilation cache in ``directory``; returns the old settings.

    Each ``train()`` call builds (and would compile) its step function afresh;
    with the cache, runs of the same config compile once per test session.
    """
    from jax._src import compilation_cache

    names = (
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )
    previous = {name: jax.config.values[name] for name in names}
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    compilation_cache.reset_cache()
    return previous


def restore_compilation_cache(previous: dict) -> None:
    from jax._src import compilation_cache

    for name, value in previous.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


@pytest.fixture(scope="module", autouse=True)
def fast_runs(tmp_path_factory):
    """The tiny encoder and a compilation cache shared by the runs of a module; a test module
    that imports this name gets it (autouse)."""
    previous = enable_compilation_cache(str(tmp_path_factory.getbasetemp() / "jax_cache"))
    with tiny_encoder():
        yield
    restore_compilation_cache(previous)
