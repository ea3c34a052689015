"""End to end: a tiny pretraining run on 8 simulated devices, then the frozen-encoder evaluation."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from contrastive_jax import data
from contrastive_jax.eval.checkpoint import PLOT_FILES, evaluate_checkpoint
from contrastive_jax.eval.embed import embed_split
from contrastive_jax.train import loop
from contrastive_jax.train.pretrained import CONFIG_FILE, load_pretrained
from tests.train import runs
from tests.train.tiny import tiny_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """3 steps, then the same command with 6 steps: the restart continues from step 3."""
    workdir = str(tmp_path_factory.mktemp("pretrain"))
    config = tiny_config()
    config.train.total_steps = 3
    first = loop.train(config, workdir)
    assert first["final_step"] == 3
    summary = loop.train(tiny_config(), workdir)
    return workdir, summary


@pytest.mark.slow
def test_training_restarts_from_its_checkpoint_and_writes_logs_config_checkpoints(run):
    workdir, summary = run
    assert jax.device_count() == 8
    assert summary["start_step"] == 3 and summary["final_step"] == 6
    records = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    assert [r["step"] for r in records] == [2, 3, 4, 6]
    assert records[-1]["loss"] < records[0]["loss"]
    for record in records:
        for key in ("loss", "loss/sincere", "learning_rate", "alignment", "uniformity",
                    "images_per_s", "probe_accuracy", "grad_norm"):
            assert np.isfinite(record[key]), key
        assert record["finite"] == 1.0
    assert summary["final_loss"] == records[-1]["loss"]
    assert os.listdir(os.path.join(workdir, "tensorboard"))
    saved = json.load(open(os.path.join(workdir, CONFIG_FILE)))
    assert saved["model"]["encoder"]["width"] == 0.125
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["3", "6"]


@pytest.mark.slow
def test_rerun_of_a_finished_run_resumes_and_takes_no_step(run):
    workdir, _ = run
    summary = loop.train(tiny_config(), workdir)
    assert summary["start_step"] == 6 and summary["final_step"] == 6


@pytest.mark.slow  # a second ResNet-18 run; weighted sums: tests/train/test_objective.py
def test_weighted_sum_of_losses_trains(tmp_path):
    config = tiny_config(name="nt_xent+supcon", weights=(1.0, 0.5))
    config.train.total_steps = 2
    config.train.online_probe = False
    summary = loop.train(config, str(tmp_path))
    metrics = summary["metrics"]
    np.testing.assert_allclose(
        metrics["loss"], metrics["loss/nt_xent"] + 0.5 * metrics["loss/supcon"], rtol=1e-5
    )


def _tree_bytes(tree) -> list[bytes]:
    return [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(tree)]


def _checkpoint_digest(workdir: str) -> str:
    digest = hashlib.sha256()
    for folder, _, files in sorted(os.walk(os.path.join(workdir, "checkpoints"))):
        for name in sorted(files):
            with open(os.path.join(folder, name), "rb") as f:
                digest.update(name.encode() + f.read())
    return digest.hexdigest()


@pytest.mark.slow
def test_embedding_leaves_the_encoder_bit_identical_and_uses_running_bn_stats(run):
    workdir, _ = run
    pretrained = load_pretrained(workdir)
    before = _tree_bytes(nnx.state(pretrained.network))
    source = data.load_source(pretrained.config.data)
    small = embed_split(pretrained.network, pretrained.config.data, "test", batch_size=16,
                        source=source)
    large = embed_split(pretrained.network, pretrained.config.data, "test", batch_size=72,
                        source=source)
    assert _tree_bytes(nnx.state(pretrained.network)) == before
    assert small.features.shape == (source.split("test").num_examples, 64)
    np.testing.assert_array_equal(small.index, np.arange(small.features.shape[0]))
    # Inference-mode BN: an example's features do not depend on its batch.
    np.testing.assert_allclose(small.features, large.features, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_linear_evaluation_reports_bootstrap_intervals_and_changes_no_checkpoint(run, tmp_path):
    workdir, _ = run
    digest = _checkpoint_digest(workdir)
    results = evaluate_checkpoint(
        workdir, epochs=5, resamples=50, output_dir=str(tmp_path), pixel_baseline=True
    )
    assert _checkpoint_digest(workdir) == digest
    assert sorted(os.listdir(tmp_path)) == sorted(PLOT_FILES)
    # Plain digits: raw pixels are a strong baseline (about 0.9 after 5 probe epochs).
    assert results["pixels"]["linear"]["top1"]["accuracy"] > 0.8
    assert results["step"] == 6 and results["num_test"] == 360
    assert results["top1"] == results["linear"]["top1"]["accuracy"]
    assert results["top1_ci"][0] <= results["top1"] <= results["top1_ci"][1]
    assert results["top1"] <= results["top5"]
    for probe in ("linear", "knn", "ridge"):
        for k in ("top1", "top5"):
            acc = results[probe][k]
            assert 0.0 <= acc["low"] <= acc["accuracy"] <= acc["high"] <= 1.0
        assert results[probe]["top1"]["accuracy"] <= results[probe]["top5"]["accuracy"]
    # Better than chance (10 classes) even after 6 steps: the encoder is not random noise.
    assert results["linear"]["top1"]["accuracy"] > 0.3


@pytest.mark.slow
def test_linear_eval_cli(run, tmp_path):
    workdir, _ = run
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu")
    command = [sys.executable, "-m", "contrastive_jax.linear_eval", "--epochs", "2",
               "--resamples", "20"]
    out = tmp_path / "probe"
    done = subprocess.run(
        command + ["--pretrained", os.path.join(workdir, "checkpoints", "3"),
                   "--workdir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "linear" in done.stdout and json.load(open(out / "eval.json"))["step"] == 3
    assert set(PLOT_FILES) <= set(os.listdir(out))
    missing = subprocess.run(
        command + ["--pretrained", str(tmp_path / "nothing")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert missing.returncode == 2
    assert "nothing" in missing.stderr


@pytest.mark.slow
def test_load_pretrained_falls_back_past_a_damaged_checkpoint_and_says_so(run, tmp_path, caplog):
    workdir, _ = run
    copy = str(tmp_path / "copy")
    shutil.copytree(workdir, copy)
    runs.flip_checkpoint_bytes(copy, 6)
    with caplog.at_level(logging.WARNING):
        pretrained = load_pretrained(copy)
    assert pretrained.step == 3
    assert "checkpoint at step 6" in caplog.text and "does not restore" in caplog.text
