"""Exact resume, fast in-process versions.

One uninterrupted 6-step run is the reference; every interrupted or damaged
run in the same configuration must end with bit-identical parameters,
optimiser state and BN statistics. The runs use a tiny conv + BN + dropout
encoder (``runs.TinyEncoder``) so they compile in seconds; the dropout masks
are checked to be a function of (seed, step). The subprocess versions with
the ResNet-18 and a real SIGKILL are in ``test_resume_cli.py`` (slow).
"""

from __future__ import annotations

import os
import shutil
import signal
import time

import jax
import numpy as np
import pytest

from contrastive_jax import data as data_lib
from contrastive_jax.errors import Preempted
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import loop, objective
from contrastive_jax.train.checkpoint import CHECKPOINT_DIR, DAMAGED_DIR, CheckpointError
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import init_state, make_train_step
from tests.train import cli_config, runs
from tests.train.runs import fast_runs  # noqa: F401  (autouse: this module's runs)

TOTAL = 6


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> str:
    """Work directory of an uninterrupted run: checkpoints at steps 2, 4, 6."""
    workdir = str(tmp_path_factory.mktemp("reference"))
    summary = loop.train(cli_config.tiny_config(TOTAL), workdir)
    assert summary["start_step"] == 0 and summary["final_step"] == TOTAL
    return workdir


def _signal_at(monkeypatch, step: int, signum: int) -> list[float]:
    """Sends ``signum`` to this process when the batch of ``step`` (0-based) is drawn."""
    sent: list[float] = []

    def change(position, batch):
        if position == step and not sent:
            sent.append(time.monotonic())
            os.kill(os.getpid(), signum)
        return batch

    runs.patch_batches(monkeypatch, change)
    return sent


def test_retention_keeps_verified_checkpoints(reference):
    # keep_checkpoints=3 and saves at 2, 4, 6: nothing deleted, the final one verified on close.
    assert runs.checkpoint_steps(reference) == [2, 4, 6]
    assert runs.losses_by_step(reference).keys() == set(range(1, TOTAL + 1))


@pytest.mark.slow
def test_sigterm_saves_current_step_and_resume_is_exact(reference, tmp_path, monkeypatch):
    workdir = str(tmp_path / "run")
    sent = _signal_at(monkeypatch, 2, signal.SIGTERM)  # arrives during step 3
    with pytest.raises(Preempted, match="step 3") as info:
        loop.train(cli_config.tiny_config(TOTAL), workdir)
    stopped = time.monotonic()
    assert info.value.step == 3
    assert stopped - sent[0] < 60.0  # one step, one checkpoint write
    assert runs.checkpoint_steps(workdir) == [2, 3]
    monkeypatch.undo()

    summary = loop.train(cli_config.tiny_config(TOTAL), workdir)
    assert summary["start_step"] == 3
    runs.assert_same_state(runs.read_state(workdir, TOTAL), runs.read_state(reference, TOTAL))
    assert runs.losses_by_step(workdir) == runs.losses_by_step(reference)


@pytest.mark.parametrize("damage", [runs.truncate_checkpoint, runs.flip_checkpoint_bytes],
                         ids=["truncated", "flipped-bytes"])
def test_damaged_latest_checkpoint_is_skipped(reference, tmp_path, caplog, damage):
    workdir = str(tmp_path / "run")
    shutil.copytree(reference, workdir)
    damage(workdir, TOTAL)

    summary = loop.train(cli_config.tiny_config(TOTAL), workdir)
    assert summary["start_step"] == 4
    assert f"checkpoint at step {TOTAL}" in caplog.text and "damaged" in caplog.text
    # Moved aside, never deleted; the re-run wrote a good step 6 identical to the reference.
    assert len(os.listdir(os.path.join(workdir, DAMAGED_DIR))) == 1
    runs.assert_same_state(runs.read_state(workdir, TOTAL), runs.read_state(reference, TOTAL))


def test_every_checkpoint_damaged_is_an_error(reference, tmp_path):
    workdir = str(tmp_path / "run")
    shutil.copytree(reference, workdir)
    for step in (2, 4, TOTAL):
        runs.truncate_checkpoint(workdir, step)
    with pytest.raises(CheckpointError, match=r"every checkpoint .*\(steps \[2, 4, 6\]\) is damaged"):
        loop.train(cli_config.tiny_config(TOTAL), workdir)
    assert len(os.listdir(os.path.join(workdir, DAMAGED_DIR))) == 3


@pytest.mark.slow
def test_incomplete_checkpoint_of_a_killed_save_is_ignored(reference, tmp_path):
    # A save killed before Orbax finalised it leaves only its temporary directory.
    workdir = str(tmp_path / "run")
    shutil.copytree(reference, workdir)
    folder = os.path.join(workdir, CHECKPOINT_DIR)
    partial = os.path.join(folder, f"{TOTAL}.orbax-checkpoint-tmp-1234567890")
    os.rename(os.path.join(folder, str(TOTAL)), partial)

    summary = loop.train(cli_config.tiny_config(TOTAL), workdir)
    assert summary["start_step"] == 4
    assert os.path.isdir(partial)  # ignored, not deleted
    runs.assert_same_state(runs.read_state(workdir, TOTAL), runs.read_state(reference, TOTAL))


@pytest.mark.slow
def test_dropout_masks_follow_seed_and_step_not_call_history():
    mesh = make_mesh()
    config = cli_config.tiny_config()
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=10 if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=1437 // 32, global_batch_size=32, total_steps=TOTAL)
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule, mesh)
    rng = np.random.default_rng(0)
    batch = data_lib.make_global_batch(
        {
            "views": rng.normal(size=(32, 2, 16, 16, 3)).astype(np.float32),
            "label": rng.integers(0, 10, 32).astype(np.int32),
            "index": np.arange(32, dtype=np.int32),
            "stop": np.zeros(32, np.int32),  # as train() sends it: the same compiled step
        },
        mesh,
    )

    state = jax.device_get(state)  # host copies: the step donates its input

    def loss_at(step_number: int, seed_state=state) -> float:
        s = jax.device_put(seed_state._replace(step=np.int32(step_number)), replicated(mesh))
        return float(step(s, batch)[1]["loss"])

    first = loss_at(5)
    assert loss_at(5) == first  # same (seed, step): same masks, whatever ran before
    assert loss_at(6) != first  # next step: new masks
    other_seed = state._replace(rng=np.asarray(jax.random.key_data(jax.random.key(1))))
    assert loss_at(5, other_seed) != first
