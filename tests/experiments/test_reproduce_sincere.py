"""``python -m experiments.reproduce.sincere`` (SINCERE, Feeney & Hughes 2023, at CPU scale).

The unmarked tests check the script's building blocks in a second; the ``slow`` one runs
``--quick`` end to end twice (the second run must skip every finished run).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.reproduce import _common as common
from experiments.reproduce import sincere as sincere_module

# The reproduction scripts' own checks run with their --quick modes in `make test-all`.

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sincere():
    return sincere_module


def test_loss_references_closed_form():
    # The whole set in one batch: two classes of 4 images, 2 views -> 8 views per class, n = 16.
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    ref = common.loss_references(labels, batch=8, views=2)
    assert ref["supcon_floor"] == pytest.approx(math.log(7))
    assert ref["supcon_constant"] == pytest.approx(math.log(15))
    assert ref["sincere_constant"] == pytest.approx(math.log(9))
    assert ref["positives_per_anchor"] == pytest.approx(7.0)


def test_loss_references_fewer_positives_in_smaller_batches():
    labels = np.repeat(np.arange(10), 100)
    big = common.loss_references(labels, batch=128, views=2)
    small = common.loss_references(labels, batch=32, views=2)
    assert small["positives_per_anchor"] < big["positives_per_anchor"]
    assert small["supcon_floor"] < big["supcon_floor"]
    # Sampling without replacement from a balanced set: E|P_t| is about 2B/K - 1 (+ variance).
    assert big["positives_per_anchor"] == pytest.approx(2 * 128 / 10 - 1, rel=0.1)


def test_read_losses_keeps_last_entry_of_a_repeated_step(tmp_path):
    rows = [
        {"step": 1, "loss": 3.0},
        {"step": 2, "loss": 2.0},
        {"step": 2, "loss": 1.5},
        {"step": 3, "learning_rate": 0.1},
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    steps, losses = common.read_losses(tmp_path)
    np.testing.assert_array_equal(steps, [1, 2])
    np.testing.assert_allclose(losses, [3.0, 1.5])


def test_run_config_sets_loss_seed_and_batch_only(sincere):
    base = sincere.base_config("digits", quick=False)
    run = sincere.RunSpec("digits", "supcon", 2, 32)
    config = sincere.run_config(base, run)
    assert (config.loss.name, config.seed, config.data.global_batch_size) == ("supcon", 2, 32)
    assert config.loss.temperature == base.loss.temperature == 0.1
    assert config.optimizer.to_dict() == base.optimizer.to_dict()
    assert run.name == "digits_b32_supcon_s2"


@pytest.mark.slow
def test_quick_runs_end_to_end_and_resumes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    cmd = [
        sys.executable,
        "-m",
        "experiments.reproduce.sincere",
        "--quick",
        "--runs_dir",
        str(tmp_path / "runs"),
        "--results_dir",
        str(tmp_path / "results"),
    ]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert set(summary) == {"b64", "b16"}
    for entry in summary.values():
        for loss in ("sincere", "supcon"):
            for key in ("loss_initial", "loss_final", "linear_top1", "projection_mean_between"):
                assert np.isfinite(entry[loss][key]["mean"]), (loss, key)
        # SupCon's per-anchor loss is bounded below by log|P_t| (docs/reproductions.md).
        assert entry["supcon"]["loss_final"]["mean"] >= entry["references"]["supcon_floor"] - 1e-6
    for name in ("fig2_similarity_b64.png", "fig3_histograms_b64.png", "table1_loss_curves.png"):
        assert (tmp_path / "results" / name).stat().st_size > 0
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("done, skipped") == 4


def test_a_stored_run_of_another_step_count_is_refused(sincere, tmp_path):
    results = tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    (results / "runs" / "digits_b128_sincere_s0.json").write_text(json.dumps({"step": 150}))
    argv = ["--steps", "600", "--batches", "128", "--results_dir", str(results),
            "--runs_dir", str(tmp_path / "runs")]
    with pytest.raises(ValueError, match="holds a run of 150 steps, not the 600 asked for"):
        sincere.main(argv)


def test_batches_outside_the_setting_are_refused(sincere, capsys):
    with pytest.raises(SystemExit):
        sincere.main(["--batches", "64"])
    assert "--batches [64]: this setting runs batch sizes [128, 32]" in capsys.readouterr().err
