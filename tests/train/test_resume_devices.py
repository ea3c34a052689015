"""A checkpoint written on 8 devices resumes on 4: the replicated state restores onto any mesh
and the batches depend on the global batch only (the CLI end to end)."""

from __future__ import annotations

import pytest

from tests.train import runs

pytestmark = pytest.mark.slow


def test_resume_on_half_the_devices(tmp_path):
    workdir = str(tmp_path / "run")
    first = ("--config.train.total_steps=2", "--config.train.checkpoint_every=2")
    assert runs.run_pretrain(workdir, *first, env=runs.cli_env(num_devices=8)) == 0, (
        runs.log_text(workdir))
    assert runs.checkpoint_steps(workdir) == [2]
    second = ("--config.train.total_steps=4", "--config.train.checkpoint_every=2")
    assert runs.run_pretrain(workdir, *second, env=runs.cli_env(num_devices=4)) == 0, (
        runs.log_text(workdir))
    assert "resumed from the checkpoint at step 2" in runs.log_text(workdir)
    assert runs.checkpoint_steps(workdir)[-1] == 4
    assert sorted(runs.losses_by_step(workdir)) == [1, 2, 3, 4]
