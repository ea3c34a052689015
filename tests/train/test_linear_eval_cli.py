"""``linear_eval`` keeps the exit code table of ``pretrain``: a bad flag 2 before any work,
a missing checkpoint 2 (saying which steps there are), checkpoints that none can be read 74,
and a failed evaluation leaves no ``--workdir`` behind."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from contrastive_jax.errors import ExitCode
from contrastive_jax.train import loop
from tests.train import cli_config, runs
from tests.train.tiny import SMALL_CNN


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> str:
    """A 2-step run of the small CNN, its checkpoint at step 2."""
    workdir = str(tmp_path_factory.mktemp("pretrained") / "run")
    config = cli_config.tiny_config(total_steps=2)
    config.model.encoder = dict(SMALL_CNN)
    config.train.compilation_cache_dir = ""
    loop.train(config, workdir)
    return workdir


def _linear_eval(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "contrastive_jax.linear_eval", *args],
                          cwd=tmp_path, env=runs.cli_env(num_devices=1), capture_output=True,
                          text=True, timeout=600)


def test_zero_epochs_is_a_usage_error_before_any_work(tmp_path):
    done = _linear_eval(tmp_path, "--pretrained", str(tmp_path / "absent"), "--epochs", "0",
                        "--workdir", str(tmp_path / "probe"))
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "error: --epochs must be an int >= 1, got 0"
    assert not (tmp_path / "probe").exists()


def test_a_named_missing_step_is_a_usage_error_that_names_the_steps_there(pretrained, tmp_path):
    done = _linear_eval(tmp_path, "--pretrained", f"{pretrained}/checkpoints/99",
                        "--workdir", str(tmp_path / "probe"))
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "no checkpoint at step 99" in done.stderr and "steps [2]" in done.stderr
    assert "trying" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "probe").exists()


def test_unreadable_checkpoints_exit_74_with_one_line_each_and_leave_nothing(pretrained,
                                                                            tmp_path):
    damaged = str(tmp_path / "damaged")
    shutil.copytree(pretrained, damaged)
    runs.truncate_checkpoint(damaged, 2)
    done = _linear_eval(tmp_path, "--pretrained", damaged, "--workdir", str(tmp_path / "probe"))
    assert done.returncode == ExitCode.CHECKPOINT, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: no readable checkpoint in "), lines
    tried = [line for line in lines if "does not restore" in line]
    assert len(tried) == 1 and "step 2" in tried[0] and "trying" not in tried[0], lines
    assert len([line for line in lines if line.strip()]) == 2, lines  # the warning, the error
    assert not (tmp_path / "probe").exists()
