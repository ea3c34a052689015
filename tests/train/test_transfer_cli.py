"""A linear evaluation and a fine-tuning through ``python -m contrastive_jax.pretrain``
(slow): two processes with 4 devices each take the step one process with 8 devices takes, and
a run killed with SIGKILL resumes bit for bit, its held-out evaluations (final and best)
included.

The run is :mod:`tests.train.transfer_config` (a classifier on the frozen encoder of a 2-step
pretraining of :mod:`tests.train.cli_config`), evaluated after every epoch of two steps; the
fine-tuning trains the whole network on a seeded half of each class of 128 examples
(``trainable="all"``, ``data.label_fraction=0.5``: fewer than 64 examples, one step of 32
an epoch).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

import numpy as np
import pytest

from tests.train import runs
from tests.train.test_multiprocess import ONE_STEP_RTOL, _log, _records, _start_pair

pytestmark = pytest.mark.slow

CONFIG = os.path.join(runs.ROOT, "tests", "train", "transfer_config.py")
TOTAL = 8
#: What trains: the classifier on the frozen encoder, or the whole network on a labelled half
#: of the data.
MODES = {
    "linear": (),
    "finetune": ("--config.model.trainable=all", "--config.data.train_subset=128",
                 "--config.data.label_fraction=0.5"),
}
#: The steps that end an epoch, where the held-out split is evaluated.
EVALUATED = {"linear": [2, 4, 6, 8], "finetune": list(range(1, TOTAL + 1))}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("jax_cache"))


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, cache_dir) -> str:
    workdir = str(tmp_path_factory.mktemp("transfer_cli") / "pretrain")
    flags = ("--config.train.total_steps=2", "--config.train.checkpoint_every=2")
    assert runs.run_pretrain(workdir, *flags, env=runs.cli_env(8, cache_dir)) == 0, \
        runs.log_text(workdir)
    return workdir


def _flags(pretrained: str, total: int, checkpoint_every: int, mode: str) -> tuple[str, ...]:
    return (f"--config.model.init_from={pretrained}", f"--config.train.total_steps={total}",
            f"--config.train.checkpoint_every={checkpoint_every}", *MODES[mode])


def _validation(workdir: str) -> dict:
    with open(os.path.join(workdir, "validation.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("mode", MODES)
def test_two_processes_match_one_process_with_eight_devices(tmp_path, pretrained, cache_dir,
                                                            mode):
    flags = (*_flags(pretrained, 2, 2, mode), "--heartbeat_timeout_seconds=120")  # 2 shared cores: a slow step is no death
    single = str(tmp_path / "single")
    assert runs.run_pretrain(single, *flags, env=runs.cli_env(8, cache_dir), config=CONFIG) == 0, \
        runs.log_text(single)
    pair = str(tmp_path / "pair")
    procs = _start_pair(pair, cache_dir, flags, CONFIG)
    assert [p.wait(timeout=1800) for p in procs] == [0, 0], _log(pair, 0) + _log(pair, 1)
    one, two = _records(single), _records(pair)
    assert sorted(one) == sorted(two) == [1, 2]
    for name in ("loss", "grad_norm"):  # the first step, from the same restored state
        np.testing.assert_allclose(two[1][name], one[1][name], rtol=ONE_STEP_RTOL)
    # The evaluation counts examples, over every device and process: the same on both
    # (the states after 2 steps differ by float32 roundings, far below a class margin).
    assert (two[2]["val_top1"], two[2]["val_top5"]) == (one[2]["val_top1"], one[2]["val_top5"])
    assert _validation(pair) == _validation(single)


@pytest.mark.parametrize("mode", MODES)
def test_sigkill_then_resume_is_exact(tmp_path, pretrained, cache_dir, mode):
    env = runs.cli_env(8, cache_dir)
    flags = _flags(pretrained, TOTAL, 2, mode)
    reference = str(tmp_path / "reference")
    assert runs.run_pretrain(reference, *flags, env=env, config=CONFIG) == 0, \
        runs.log_text(reference)
    killed = str(tmp_path / "killed")
    proc = runs.start_pretrain(killed, *flags, env=env, config=CONFIG)
    reached = runs.wait_for_step(proc, killed, random.randint(3, TOTAL - 2))
    deadline = time.monotonic() + 600
    while not runs.checkpoint_steps(killed):
        assert proc.poll() is None and time.monotonic() < deadline, runs.log_text(killed)
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert reached < TOTAL
    assert runs.run_pretrain(killed, *flags, env=env, config=CONFIG) == 0, runs.log_text(killed)
    assert "resumed from the checkpoint at step" in runs.log_text(killed)
    runs.assert_same_state(runs.read_state(killed, TOTAL), runs.read_state(reference, TOTAL))
    assert runs.losses_by_step(killed) == runs.losses_by_step(reference)
    assert _validation(killed) == _validation(reference)
    evaluated = [r["step"] for r in runs.metrics(reference) if "val_top1" in r]
    assert evaluated == EVALUATED[mode]
