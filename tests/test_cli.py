"""The command-line tools: exit codes of bad configs vs bugs, and a quiet start-up."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contrastive_jax import configs
from contrastive_jax._cli import report_error, run_tool
from contrastive_jax.errors import (
    CheckpointError,
    ConfigError,
    ConfigMismatch,
    ExitCode,
    InputError,
    NonFiniteLoss,
    Preempted,
)

ROOT = Path(__file__).resolve().parents[1]
#: Start-up lines of TensorFlow, XLA and JAX a user should not see.
NOISE = ("cpu_feature_guard", "oneDNN", "Unable to initialize backend", "absl::InitializeLog")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "XLA_FLAGS")}
    env["JAX_PLATFORMS"] = "cpu"
    return env


@pytest.mark.slow
def test_bad_config_exits_with_2_naming_the_field_and_nothing_else(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "contrastive_jax.pretrain", "--workdir", str(tmp_path / "run"),
         "--config", configs.path("quickstart"), "--config.loss.name=simclr"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "error: config.loss.name: 'simclr' is not a loss the objective can train on" in done.stderr
    assert not any(noise in done.stderr for noise in NOISE), done.stderr


@pytest.mark.slow
def test_a_value_error_that_is_a_bug_shows_its_traceback_and_exits_with_1(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        from absl import app
        from contrastive_jax import pretrain
        from contrastive_jax.train import loop

        def broken(config, workdir):
            raise ValueError("not a config problem")

        loop.train = broken
        sys.argv = ["pretrain", "--workdir", {str(tmp_path / "run")!r},
                    "--config", {configs.path("quickstart")!r}]
        app.run(pretrain.main)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "Traceback" in done.stderr and "ValueError: not a config problem" in done.stderr


class _SharedStream:
    """stderr shared with another thread that writes an unfinished line before each of our
    writes (a traceback's exception type, its ": message" and newline still to come)."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += "RuntimeError" + text
        return len(text)

    def flush(self) -> None:
        pass


def test_an_error_line_starts_a_line_whatever_another_thread_writes_between(monkeypatch):
    stream = _SharedStream()
    monkeypatch.setattr(sys, "stderr", stream)
    report_error("writing a checkpoint failed (No space left on device)")
    lines = stream.text.splitlines()
    assert "error: writing a checkpoint failed (No space left on device)" in lines, stream.text


def _raise(err: BaseException):
    def body() -> int:
        raise err
    return body


@pytest.mark.parametrize(
    "err, code",
    [
        (ConfigError("config.train.log_every must be an int >= 1, got 0"), ExitCode.USAGE),
        (InputError("a corrupt image"), ExitCode.USAGE),
        (ConfigMismatch("another model"), ExitCode.USAGE),
        (FileNotFoundError("no checkpoint in runs/x"), ExitCode.USAGE),
        (PermissionError(errno.EACCES, "read-only"), ExitCode.USAGE),
        (OSError(errno.ENOSPC, "No space left on device"), ExitCode.CHECKPOINT),
        (CheckpointError("the write failed"), ExitCode.CHECKPOINT),
        (NonFiniteLoss("non-finite loss at step 3"), ExitCode.NONFINITE),
        (Preempted(7), ExitCode.PREEMPTED),
    ],
    ids=lambda x: type(x).__name__ if isinstance(x, BaseException) else None,
)
def test_every_tool_maps_an_error_to_the_code_of_the_one_table(err, code, capsys):
    assert run_tool(_raise(err), workdir="runs/x") == code
    message = capsys.readouterr().err.strip()
    assert str(err).split(";")[0] in message or "is the disk full?" in message, message


def test_a_bug_propagates_with_its_traceback():
    with pytest.raises(ValueError, match="not a config problem"):
        run_tool(_raise(ValueError("not a config problem")))


def test_the_exit_code_table_is_documented():
    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} | `{code.name}` |" in text, code


#: Each tool's module, console script and a flag its --help must list.
TOOLS = (
    ("contrastive_jax.pretrain", "contrastive-jax-pretrain", "--dry_run"),
    ("contrastive_jax.linear_eval", "contrastive-jax-linear-eval", "--epochs"),
    ("contrastive_jax.quickstart", "contrastive-jax-quickstart", "--workdir"),
    ("contrastive_jax.export", "contrastive-jax-export", "--format"),
)


def _commands(module: str, script: str) -> list[list[str]]:
    """The tool as ``python -m`` and, where the package is installed, as its console script."""
    commands = [[sys.executable, "-m", module]]
    installed = Path(sys.executable).parent / script
    if installed.exists():
        commands.append([str(installed)])
    return commands


@pytest.mark.parametrize(("module", "script", "flag"), TOOLS)
@pytest.mark.matrix
def test_help_lists_the_flags_with_their_help_and_exits_0(module, script, flag, tmp_path):
    for command in _commands(module, script):
        done = subprocess.run([*command, "--help"], cwd=tmp_path, env=_env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stderr)
        assert flag in done.stdout, (command, done.stdout)
        assert "--workdir" in done.stdout and "USAGE" not in done.stdout, command
        assert not any(word in done.stderr for word in NOISE), done.stderr


@pytest.mark.parametrize(("module", "script", "flag"), TOOLS)
@pytest.mark.slow
def test_a_flag_error_is_a_usage_error_exit_2(module, script, flag, tmp_path):
    del flag
    for command in _commands(module, script):
        for bad in (["--no_such_flag=1"], ["--workdir"]):  # unknown; a value missing
            done = subprocess.run([*command, *bad], cwd=tmp_path, env=_env(),
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == ExitCode.USAGE, (command, bad, done.stderr)
            last = done.stderr.strip().splitlines()[-1]
            assert last.startswith("error: ") and "--help" in last, last
        assert not any(tmp_path.iterdir()), "a refused command wrote files"


@pytest.mark.parametrize(("args", "message"), [
    ([], "--pretrained is required"),
    (["--pretrained=run", "--config=supcon_cifar10_linear", "--epochs=3", "--workdir=out"],
     "--epochs set the fast probe"),
    (["--pretrained=run", "--config=supcon_cifar10_linear"], "--workdir is required"),
    (["--pretrained=run", "--workdir=out", "--config=supcon_cifar10_linear",
      "--config.model.init_from=other"], "name two runs"),
])
@pytest.mark.slow
def test_linear_eval_refuses_an_unclear_command_with_2(args, message, tmp_path):
    """Which run it reads (--pretrained), which it writes (--workdir), and the fast probe's
    flags against a protocol's recipe (--config)."""
    done = subprocess.run([sys.executable, "-m", "contrastive_jax.linear_eval", *args],
                          cwd=tmp_path, env={**_env(), "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert message in done.stderr, done.stderr
    assert not any(tmp_path.iterdir()), "a refused command wrote files"


@pytest.mark.slow
def test_config_takes_a_packaged_name_or_a_path_with_an_optional_arg(tmp_path):
    from contrastive_jax._cli import _with_config_paths

    recipe = configs.path("supcon_cifar10")
    assert _with_config_paths(["tool", "--config", "supcon_cifar10", "--config.seed=1"]) == [
        "tool", f"--config={recipe}", "--config.seed=1"]
    assert _with_config_paths(["tool", "--config=supcon_cifar10:small"]) == [
        "tool", f"--config={recipe}:small"]
    assert _with_config_paths(["tool", "-config", "my/file.py:arg"]) == [
        "tool", "-config=my/file.py:arg"]
    # parsed from its name, then checked: a bad override is refused naming the field
    done = subprocess.run(
        [sys.executable, "-m", "contrastive_jax.pretrain", "--workdir", str(tmp_path / "run"),
         "--config", "supcon_cifar10", "--config.loss.name=simclr"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "loss.name" in done.stderr and not (tmp_path / "run").exists()


def _print_config(tmp_path, command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command, "--print_config"], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_print_config_prints_the_checked_config_and_the_run_sizes_and_writes_nothing(tmp_path):
    import json

    done = _print_config(tmp_path, ["contrastive_jax.pretrain", "--config", "supcon_cifar10",
                                    "--devices", "8", "--workdir", str(tmp_path / "run")])
    assert done.returncode == 0, done.stderr
    *config, sizes = done.stdout.strip().splitlines()
    assert "  name: supcon" in config and "  global_batch_size: 1024" in config
    # CIFAR-10's 50,000 training images in batches of 1024: 48 steps an epoch, 1,000 epochs
    assert json.loads(sizes) == {
        "devices": 8, "global_batch": 1024, "per_device_batch": 128, "train_examples": 50_000,
        "steps_per_epoch": 48, "total_steps": 48_000, "warmup_steps": 480, "micro_batches": 0,
        "peak_learning_rate": 0.5}
    # the quickstart's, on the devices here (one CPU device), its default --workdir unwritten
    done = _print_config(tmp_path, ["contrastive_jax.quickstart", "--config.train.total_steps=6"])
    assert done.returncode == 0, done.stderr
    sizes = json.loads(done.stdout.strip().splitlines()[-1])
    assert sizes["devices"] == 1 and sizes["total_steps"] == 6 and sizes["train_examples"] == 1437
    # linear_eval's recipe on the encoder of --pretrained (read by nothing here), no --workdir
    done = _print_config(tmp_path, ["contrastive_jax.linear_eval", "--pretrained",
                                    str(tmp_path / "pretrained"), "--config",
                                    "supcon_cifar10_linear"])
    assert done.returncode == 0, done.stderr
    assert f"  init_from: {tmp_path / 'pretrained'}" in done.stdout.splitlines()
    sizes = json.loads(done.stdout.strip().splitlines()[-1])
    assert (sizes["total_steps"], sizes["peak_learning_rate"]) == (97 * 100, 5.0)
    # a batch the devices do not divide is refused as a run would refuse it
    done = _print_config(tmp_path, ["contrastive_jax.pretrain", "--config", "supcon_cifar10",
                                    "--devices", "3"])
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "global_batch_size=1024 must be positive and divisible by the 3 devices" in done.stderr
    assert not any(tmp_path.iterdir()), "--print_config wrote files"


def test_print_config_knows_the_built_in_digits_size():
    from contrastive_jax.data import digits
    from contrastive_jax.sizing.print_config import TRAIN_EXAMPLES

    splits = digits.digits_splits()
    assert TRAIN_EXAMPLES["digits"] == TRAIN_EXAMPLES["digits_cluttered"] == len(
        splits["train"].labels)


@pytest.mark.slow
def test_the_tools_import_side_by_side_without_tensorflow():
    """Every command-line module imports in one process (their flags are defined once), with
    TensorFlow absent as on the JAX CUDA images."""
    from tests.no_tensorflow import absent_env

    done = subprocess.run(
        [sys.executable, "-c", "import contrastive_jax.pretrain, contrastive_jax.linear_eval, "
         "contrastive_jax.quickstart, contrastive_jax.data.eval_iterator; print('imported')"],
        cwd=ROOT, env=absent_env(_env()), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "imported" in done.stdout


def test_the_error_line_is_the_last_thing_printed(capsys):
    """The threads a failed run started (a checkpoint's writers on a full disk) end, and the
    libraries stop logging, before the error line is printed."""
    import logging
    import threading
    import time

    from contrastive_jax.errors import LIBRARY_LOGGERS

    levels = {name: logging.getLogger(name).level for name in LIBRARY_LOGGERS}

    def writer() -> None:
        time.sleep(0.3)
        sys.stderr.write("a writer's last words\n")
        logging.getLogger("absl").error("a library's log after the error")

    def body() -> int:
        threading.Thread(target=writer).start()
        raise CheckpointError("writing a checkpoint at step 4 failed")

    try:
        assert run_tool(body) == ExitCode.CHECKPOINT
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == "error: writing a checkpoint at step 4 failed", lines
    assert "a writer's last words" in lines and not any("library's log" in x for x in lines)
