"""Exact resume of ``python -m contrastive_jax.pretrain`` after SIGKILL and SIGTERM
end to end with the quickstart's ResNet-18 (width 0.125).

Every interrupted run is restarted with the same command in the same work
directory and must end with a training state bit-identical to the
uninterrupted run's (parameters, BN statistics, optimiser state, step, RNG).
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from contrastive_jax.train.checkpoint import CHECKPOINT_DIR
from tests.train import runs

pytestmark = pytest.mark.slow

TOTAL = 12
FLAGS = (f"--config.train.total_steps={TOTAL}", "--config.train.checkpoint_every=3")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    return runs.cli_env(cache_dir=str(tmp_path_factory.mktemp("jax_cache")))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, env) -> str:
    workdir = str(tmp_path_factory.mktemp("cli") / "reference")
    assert runs.run_pretrain(workdir, *FLAGS, env=env) == 0, runs.log_text(workdir)
    assert runs.checkpoint_steps(workdir) == [6, 9, 12]
    return workdir


def _wait_for_checkpoint(proc, workdir: str) -> None:
    """Until a finalised checkpoint exists (so the restart really resumes)."""
    deadline = time.monotonic() + 600
    while not runs.checkpoint_steps(workdir):
        assert proc.poll() is None and time.monotonic() < deadline, runs.log_text(workdir)
        time.sleep(0.02)


def _finish_and_compare(workdir: str, reference: str, env) -> None:
    assert runs.run_pretrain(workdir, *FLAGS, env=env) == 0, runs.log_text(workdir)
    assert "resumed from the checkpoint at step" in runs.log_text(workdir)
    runs.assert_same_state(runs.read_state(workdir, TOTAL), runs.read_state(reference, TOTAL))
    assert runs.losses_by_step(workdir) == runs.losses_by_step(reference)


def test_sigkill_at_a_random_step_then_resume_is_exact(reference, tmp_path, env):
    kill_at = random.randint(4, TOTAL - 2)
    workdir = str(tmp_path / "killed")
    proc = runs.start_pretrain(workdir, *FLAGS, env=env)
    reached = runs.wait_for_step(proc, workdir, kill_at)
    _wait_for_checkpoint(proc, workdir)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert reached < TOTAL, f"the run finished before the kill at step {kill_at}"
    _finish_and_compare(workdir, reference, env)


def test_sigkill_during_an_asynchronous_checkpoint_write(reference, tmp_path, env):
    workdir = str(tmp_path / "killed_in_write")
    folder = os.path.join(workdir, CHECKPOINT_DIR)
    proc = runs.start_pretrain(workdir, *FLAGS, env=env)
    runs.wait_for_step(proc, workdir, 4)
    _wait_for_checkpoint(proc, workdir)  # step 3 finalised; the next write is at step 6
    partial = []
    deadline = time.monotonic() + 600
    while not partial and time.monotonic() < deadline and proc.poll() is None:
        partial = [n for n in os.listdir(folder) if "orbax-checkpoint-tmp" in n]
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert partial, "no checkpoint write in progress was seen"
    _finish_and_compare(workdir, reference, env)


def test_sigterm_saves_and_exits_with_75_then_resumes(reference, tmp_path, env):
    workdir = str(tmp_path / "preempted")
    proc = runs.start_pretrain(workdir, *FLAGS, env=env)
    runs.wait_for_step(proc, workdir, 4)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    waited = time.monotonic() - sent
    log = runs.log_text(workdir)
    assert code == 75, log
    assert waited < 60, f"took {waited:.1f} s to save and exit"
    step = max(runs.checkpoint_steps(workdir))
    assert f"preempted by SIGTERM; checkpoint saved at step {step}" in log
    assert 4 <= step < TOTAL
    _finish_and_compare(workdir, reference, env)
    assert f"resumed from the checkpoint at step {step}" in runs.log_text(workdir)
