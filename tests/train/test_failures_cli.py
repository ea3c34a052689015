"""Failures of ``python -m contrastive_jax.pretrain`` end to end:
a NaN from a huge learning rate, a file-size limit and a full filesystem that
make checkpoint writes fail, a config changed between a checkpoint and a resume,
a work directory that cannot be created."""

from __future__ import annotations

import errno
import json
import resource
import signal
import subprocess

import pytest

from tests.train import runs

pytestmark = pytest.mark.slow

TOTAL = 6
FLAGS = (f"--config.train.total_steps={TOTAL}", "--config.train.checkpoint_every=2")
HUGE_LR = "--config.optimizer.base_learning_rate=1e30"


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    return runs.cli_env(cache_dir=str(tmp_path_factory.mktemp("jax_cache")))


def test_huge_learning_rate_stops_with_65_naming_the_step(tmp_path, env):
    workdir = str(tmp_path / "nan")
    assert runs.run_pretrain(workdir, *FLAGS, HUGE_LR, env=env) == 65, runs.log_text(workdir)
    log = runs.log_text(workdir)
    assert "error: non-finite loss or gradient at step" in log
    assert "loss/sincere=" in log and "grad_norm=" in log


def test_skip_nonfinite_finishes_and_logs_the_count(tmp_path, env):
    workdir = str(tmp_path / "skip")
    code = runs.run_pretrain(
        workdir, *FLAGS, HUGE_LR, "--config.train.skip_nonfinite=True", env=env
    )
    log = runs.log_text(workdir)
    assert code == 0, log
    summary = json.loads(log[log.rindex("{\n"):])
    last = runs.metrics(workdir)[-1]
    assert summary["skipped_steps"] >= 1
    assert last["step"] == TOTAL and last["skipped_steps"] == summary["skipped_steps"]
    assert "skipped non-finite step" in log


def test_failing_checkpoint_write_exits_with_74(tmp_path):
    # A full disk needs a small filesystem (mount needs root); a file-size limit
    # makes the same write fail (EFBIG instead of ENOSPC). No compilation cache here
    # (the default one is turned off too): its entries would hit the limit.
    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (96 << 10, 96 << 10))  # Orbax files: ~100-250 KB

    workdir = str(tmp_path / "full")
    proc = runs.start_pretrain(workdir, *FLAGS, "--config.train.compilation_cache_dir=",
                               preexec_fn=limit_file_size)
    code = proc.wait(timeout=1200)
    log = runs.log_text(workdir)
    assert code == 74, log
    assert "error: writing a checkpoint" in log and "File too large" in log


def test_changed_encoder_on_resume_exits_with_2(tmp_path, env):
    workdir = str(tmp_path / "run")
    assert runs.run_pretrain(workdir, "--config.train.total_steps=2",
                             "--config.train.checkpoint_every=2", env=env) == 0
    code = runs.run_pretrain(workdir, "--config.train.total_steps=4",
                             "--config.model.encoder.name=resnet34", env=env)
    log = runs.log_text(workdir)
    assert code == 2, log
    assert "holds a run started with another config" in log
    assert "config.model.encoder.name: 'resnet18' in the run, 'resnet34' now" in log
    assert runs.checkpoint_steps(workdir) == [2]


def test_uncreatable_workdir_exits_with_2(tmp_path, env):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    workdir = str(blocker / "run")
    done = subprocess.run(runs.pretrain_command(workdir, *FLAGS), cwd=runs.ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr
    assert f"work directory {workdir} is not writable" in done.stderr


@pytest.fixture
def small_filesystem(tmp_path):
    """A 32 MiB tmpfs (a checkpoint of the tiny run is about 4 MiB)."""
    mountpoint = tmp_path / "small"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mountpoint)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    yield mountpoint
    subprocess.run(["umount", str(mountpoint)], check=False)


#: Space left free on the full filesystem: room for the metric and config files, not for a
#: checkpoint.
SLACK = 256 << 10


def _fill(directory, slack: int = SLACK) -> None:
    """Fills the filesystem of ``directory`` up to ``slack`` free bytes with one file."""
    with open(directory / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
        f.truncate(max(0, f.tell() - slack))


def test_full_filesystem_exits_with_74_keeping_the_good_checkpoint(small_filesystem):
    # The disk fills between two runs, not during one: how much space a checkpoint takes
    # while Orbax writes it (its OCDBT files, then their merge) depends on the timing of
    # its writes, so a filesystem sized for "one checkpoint, not two" holds none or two
    # under load. The second run resumes from step 2 and its first save fails.
    workdir = str(small_filesystem)  # the log goes beside it, to <workdir>.log, off the tmpfs
    first = runs.start_pretrain(workdir, "--config.train.total_steps=2",
                                "--config.train.checkpoint_every=2")
    assert first.wait(timeout=1200) == 0, runs.log_text(workdir)
    assert runs.checkpoint_steps(workdir) == [2]
    _fill(small_filesystem)
    proc = runs.start_pretrain(workdir, *FLAGS)
    code = proc.wait(timeout=1200)
    log = runs.log_text(workdir)
    assert code == 74, log
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0], log
    # The first write to fail names what it wrote: the step's checkpoint, or the work
    # directory's logs and record, which a resume writes before its first save.
    assert ("at step 4" in errors[0] or "in the background" in errors[0]
            or f"writing to {workdir} failed" in errors[0]), log
    assert log.rstrip().splitlines()[-1] == errors[0], log  # the cause is the last line
    assert runs.checkpoint_steps(workdir) == [2], log
    assert runs.read_state(workdir, 2)  # the checkpoint written before the disk filled reads back
