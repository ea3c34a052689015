"""Non-finite steps and bad environment or input, in-process.

The subprocess versions (exit codes, a NaN from a huge learning rate, a write
limit) are in ``test_failures_cli.py`` (slow).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from PIL import Image

from contrastive_jax import data as data_lib
from contrastive_jax.errors import ConfigMismatch, NonFiniteLoss
from contrastive_jax.train import loop
from contrastive_jax.train.checkpoint import DAMAGED_DIR
from tests.train import cli_config, runs
from tests.train.runs import fast_runs  # noqa: F401  (autouse: this module's runs)
from tests.train.tiny import SMALL_CNN

TOTAL = 4
NAN_STEP = 3  # 1-based step whose batch holds a NaN


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> tuple[str, str]:
    """A run stopped by a NaN at step 3: (work directory, error message)."""
    workdir = str(tmp_path_factory.mktemp("nan_stop"))
    with pytest.MonkeyPatch.context() as monkeypatch:
        runs.nan_at(monkeypatch, NAN_STEP)
        with pytest.raises(NonFiniteLoss) as info:
            loop.train(cli_config.tiny_config(TOTAL), workdir)
    return workdir, str(info.value)


@pytest.mark.slow
def test_nonfinite_loss_stops_naming_step_and_terms(stopped):
    workdir, message = stopped
    assert f"at step {NAN_STEP}" in message
    # The NaN pixel reaches the gradient (BN statistics) even if ReLU hides it from the loss.
    assert "loss=" in message and "loss/sincere=" in message and "grad_norm=nan" in message
    assert "last good checkpoint (step 2)" in message and "skip_nonfinite" in message
    assert runs.checkpoint_steps(workdir) == [2]
    assert all(np.isfinite(a).all() for a in runs.read_state(workdir, 2))


def test_skip_nonfinite_counts_skipped_steps(tmp_path, monkeypatch):
    workdir = str(tmp_path / "run")
    config = cli_config.tiny_config(TOTAL)
    config.model.encoder = dict(SMALL_CNN)
    config.train.skip_nonfinite = True
    runs.nan_at(monkeypatch, NAN_STEP)
    summary = loop.train(config, workdir)
    assert summary["skipped_steps"] == 1
    skipped = {r["step"]: r["skipped_steps"] for r in runs.metrics(workdir)}
    assert skipped == {1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0}
    final = runs.read_state(workdir, TOTAL)
    assert all(np.isfinite(a).all() for a in final)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("model.encoder.name", "resnet34", "config.model.encoder.name: 'resnet18' in the run, "
                                           "'resnet34' now"),
        ("model.encoder.width", 0.25, "config.model.encoder.width: 0.125 in the run, 0.25 now"),
        ("optimizer.name", "sgd", "config.optimizer.name: 'adamw' in the run, 'sgd' now"),
    ],
)
@pytest.mark.matrix
def test_incompatible_config_on_resume_is_refused(stopped, tmp_path, field, value, match):
    workdir = str(tmp_path / "run")
    shutil.copytree(stopped[0], workdir)
    config = cli_config.tiny_config(TOTAL)
    config.update_from_flattened_dict({field: value})
    with pytest.raises(ConfigMismatch, match=match):
        loop.train(config, workdir)
    assert runs.checkpoint_steps(workdir) == [2]  # untouched
    assert not os.path.exists(os.path.join(workdir, DAMAGED_DIR))


def test_unwritable_workdir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match=r"work directory .*a_file/run is not writable"):
        loop.train(cli_config.tiny_config(TOTAL), str(blocker / "run"))


def test_corrupt_image_in_image_folder_is_named(tmp_path):
    root = tmp_path / "folder"
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        for split, count in (("train", 8), ("test", 2)):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                image = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(image).save(folder / f"{i:02d}.png")
    for path in (root / "train" / "dog").iterdir():  # every step-1 batch holds a dog
        path.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    config = cli_config.tiny_config(TOTAL)
    config.data.dataset = "image_folder"
    config.data.data_dir = str(root)
    config.data.global_batch_size = 8
    config.data.mean = (0.5, 0.5, 0.5)
    config.data.std = (0.25, 0.25, 0.25)
    with pytest.raises(data_lib.CorruptImageError, match=r"train/dog/0\d\.png"):
        loop.train(config, str(tmp_path / "run"))


@pytest.mark.slow
def test_a_failing_close_does_not_hide_the_checkpoint_error(tmp_path, monkeypatch, caplog):
    """On a full disk the metric files fail too; the error raised must still be the checkpoint's."""
    import errno

    from contrastive_jax.train.checkpoint import Checkpointer, CheckpointError
    from contrastive_jax.train.metrics_log import MetricLogger

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def failed_save(self, step, state, meta):
        raise CheckpointError(f"writing a checkpoint at step {step} failed (No space left)")

    monkeypatch.setattr(Checkpointer, "save", failed_save)
    monkeypatch.setattr(MetricLogger, "close", no_space)
    with pytest.raises(CheckpointError, match="at step 2 failed"):
        loop.train(cli_config.tiny_config(2), str(tmp_path / "run"))
    assert "closing the metric logger failed too" in caplog.text
