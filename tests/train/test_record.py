"""The work directory's record of a run, in-process: a resume runs the config the run was
started with (another is refused before anything is written, naming each field with both
values), an allowed change is recorded as an amendment from the step it took effect,
``metrics.jsonl`` holds each step once, a damaged checkpoint is one warning line, and
SIGINT saves as SIGTERM does.

The runs use the tiny encoder of :mod:`tests.train.runs` and a shared compilation cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal

import pytest

from contrastive_jax._cli import run_tool
from contrastive_jax.errors import ExitCode
from contrastive_jax.pretrain import json_safe
from contrastive_jax.train import loop, paths, record
from contrastive_jax.train.config import default_config
from tests.train import cli_config, runs
from tests.train.runs import fast_runs  # noqa: F401  (autouse: this module's runs)

TOTAL = 4


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> str:
    """A run of 4 steps: checkpoints at steps 2 and 4."""
    workdir = str(tmp_path_factory.mktemp("finished") / "run")
    loop.train(cli_config.tiny_config(TOTAL), workdir)
    assert runs.checkpoint_steps(workdir) == [2, 4]
    return workdir


def _copy(workdir: str, tmp_path) -> str:
    target = str(tmp_path / "run")
    shutil.copytree(workdir, target)
    return target


def _contents(workdir: str) -> dict[str, str]:
    """Every file under ``workdir`` and a hash of its bytes: what a refused run must not touch."""
    found = {}
    for folder, _, names in os.walk(workdir):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, workdir)] = hashlib.sha256(f.read()).hexdigest()
    return found


def _set(config, path: str, value) -> None:
    *parents, name = path.split(".")
    node = config
    for part in parents:
        node = node[part]
    node[name] = value


#: Fields whose change changes what the run computes, and another value for each.
COMPUTING = [
    ("seed", 7),
    ("loss.temperature", 0.5),
    ("data.global_batch_size", 64),
    ("loss.name", "supcon"),
    ("data.dataset", "digits_cluttered"),
    ("data.augmentation", "simclr_cifar"),
    ("optimizer.base_learning_rate", 2e-3),
    ("optimizer.warmup_epochs", 1.0),
]


@pytest.mark.parametrize(("field", "value"), COMPUTING, ids=[f for f, _ in COMPUTING])
def test_a_resume_with_another_config_is_refused_naming_the_field_and_writes_nothing(
        finished, tmp_path, capsys, field, value):
    workdir = _copy(finished, tmp_path)
    before = _contents(workdir)
    config = cli_config.tiny_config(TOTAL + 2)
    _set(config, field, value)
    code = run_tool(lambda: loop.train(config, workdir))
    message = capsys.readouterr().err
    assert code == ExitCode.USAGE, message
    old = json.loads(cli_config.tiny_config(TOTAL).to_json_best_effort())
    for part in field.split("."):
        old = old[part]
    assert f"config.{field}: {old!r} in the run, {value!r} now" in message, message
    assert "train.total_steps" not in message.split("; a resume may")[0], message
    assert _contents(workdir) == before  # nothing written, no checkpoint moved


def test_every_refused_field_is_named(finished, tmp_path):
    workdir = _copy(finished, tmp_path)
    config = cli_config.tiny_config(TOTAL)
    config.seed, config.loss.temperature = 3, 0.3
    with pytest.raises(ValueError, match=r"config\.loss\.temperature: None in the run, 0\.3 "
                                         r"now; config\.seed: 0 in the run, 3 now"):
        loop.train(config, workdir)


def test_an_extension_is_recorded_as_an_amendment_and_each_step_logged_once(finished, tmp_path):
    workdir = _copy(finished, tmp_path)
    config = cli_config.tiny_config(TOTAL + 2)
    config.train.log_every = 2
    summary = loop.train(config, workdir)
    assert (summary["start_step"], summary["final_step"]) == (TOTAL, TOTAL + 2)
    saved = json.loads(open(os.path.join(workdir, record.CONFIG_FILE)).read())
    assert saved["train"]["total_steps"] == TOTAL and saved["train"]["log_every"] == 1
    [amendment] = record.amendments(paths.as_path(workdir))
    assert amendment["step"] == TOTAL and amendment["changes"] == {
        "train.log_every": [1, 2], "train.total_steps": [TOTAL, TOTAL + 2]}
    assert "schedule follows the run's length: from step 4 on" in amendment["schedule"]
    steps = [r["step"] for r in runs.metrics(workdir)]
    assert steps == [1, 2, 3, 4, 6]  # steps 1-4 logged every step, then every other step
    # The same command again: the run is complete, nothing amended, a summary in valid JSON.
    summary = loop.train(config, workdir)
    assert summary["start_step"] == summary["final_step"] == TOTAL + 2
    assert summary["final_loss"] is None
    json.dumps(json_safe(summary), allow_nan=False)
    assert len(record.amendments(paths.as_path(workdir))) == 1
    # and the original config is refused now, the record naming the amended value
    with pytest.raises(ValueError, match=r"below the newest checkpoint .*\(step 6\)"):
        loop.train(cli_config.tiny_config(TOTAL), workdir)


def test_a_run_length_below_the_newest_checkpoint_is_refused_before_anything_is_written(
        finished, tmp_path, capsys):
    workdir = _copy(finished, tmp_path)
    before = _contents(workdir)
    code = run_tool(lambda: loop.train(cli_config.tiny_config(TOTAL - 1), workdir))
    message = capsys.readouterr().err
    assert code == ExitCode.USAGE, message
    assert "the run is 3 steps long" in message and "(step 4)" in message, message
    assert _contents(workdir) == before


def test_a_resume_from_a_damaged_checkpoint_says_so_in_one_line_and_logs_each_step_once(
        finished, tmp_path, caplog):
    workdir = _copy(finished, tmp_path)
    runs.truncate_checkpoint(workdir, TOTAL)
    caplog.set_level("WARNING")
    summary = loop.train(cli_config.tiny_config(TOTAL), workdir)
    assert summary["start_step"] == 2
    warnings = [r for r in caplog.records if r.levelno >= 30]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    text = warnings[0].getMessage()
    assert f"checkpoint at step {TOTAL}" in text and "damaged" in text and len(text) < 600
    assert [r["step"] for r in runs.metrics(workdir)] == [1, 2, 3, 4]


def test_a_new_run_in_a_work_directory_without_checkpoints_takes_its_config(tmp_path):
    """A run that stopped before its first checkpoint left a config but no step to resume."""
    workdir = str(tmp_path / "run")
    os.makedirs(workdir)
    first = cli_config.tiny_config(TOTAL)
    with open(os.path.join(workdir, record.CONFIG_FILE), "w") as f:
        f.write(first.to_json_best_effort())
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    config = cli_config.tiny_config(2)
    config.seed = 5
    loop.train(config, workdir)
    saved = json.loads(open(os.path.join(workdir, record.CONFIG_FILE)).read())
    assert saved["seed"] == 5 and saved["train"]["total_steps"] == 2
    assert [r["step"] for r in runs.metrics(workdir)] == [1, 2]
    assert [r["loss"] for r in runs.metrics(workdir)][0] != 1.0


def test_sigint_saves_the_step_and_exits_75_as_sigterm_does(tmp_path, monkeypatch, capsys):
    workdir = str(tmp_path / "run")

    def interrupt(position, batch):
        if position == 0:
            os.kill(os.getpid(), signal.SIGINT)
        return batch

    runs.patch_batches(monkeypatch, interrupt)
    before = signal.getsignal(signal.SIGINT)  # a test worker's may be SIG_IGN, not Python's
    code = run_tool(lambda: loop.train(cli_config.tiny_config(TOTAL), workdir))
    assert code == ExitCode.PREEMPTED == 75
    assert "interrupted by SIGINT; checkpoint saved at step 1" in capsys.readouterr().err
    assert runs.checkpoint_steps(workdir) == [1]
    assert signal.getsignal(signal.SIGINT) == before  # given back


def test_the_resumable_fields_are_fields():
    flat = record.flatten(json.loads(default_config().to_json_best_effort()))
    assert set(record.RESUMABLE) <= set(flat)


def test_the_resumable_fields_are_documented():
    text = open(os.path.join(runs.ROOT, "docs", "cli.md"), encoding="utf-8").read()
    section = text[text.index("## Resume"):]
    for name in record.RESUMABLE:
        assert f"`{name}`" in section, name


def test_without_a_recorded_config_the_checkpoint_still_refuses_another_model(finished,
                                                                              tmp_path):
    """A work directory of a version that wrote no config: the checkpoint's model config and
    state structure are still compared before any array is read."""
    workdir = _copy(finished, tmp_path)
    os.remove(os.path.join(workdir, record.CONFIG_FILE))
    config = cli_config.tiny_config(TOTAL)
    config.model.encoder.width = 0.25
    with pytest.raises(ValueError, match="encoder.width: checkpoint 0.125 vs config 0.25"):
        loop.train(config, workdir)
