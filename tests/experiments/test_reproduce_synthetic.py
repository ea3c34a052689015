"""The synthetic reproduction drivers: ProjNCE App. D.1 and the soft-target InfoNCE toy (Sec. 3.1).

The unmarked tests check the drivers' ground truths, data, configs and measurements in
seconds; the ``slow`` ones run each driver's ``--quick`` mode end to end
(``python -m experiments.reproduce.<name>``, the library's trainer), twice, to check that
finished runs are skipped and an unfinished one is redone.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import data, losses
from contrastive_jax.data.vectors import VectorSource
from contrastive_jax.train import objective
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import build_model
from experiments.configs import projnce_synthetic as pn_configs
from experiments.configs import soft_target_toy as toy_configs
from experiments.reproduce import projnce_synthetic
from experiments.reproduce import soft_target_toy as toy

ROOT = Path(__file__).resolve().parents[2]


def test_binary_true_mi_is_0_6587_nats():
    # docs/reproductions.md, "ProjNCE protocol": I(X; C) = 0.6587 nats for d_x = 5, sigma = 1.
    assert projnce_synthetic.true_mi_binary() == pytest.approx(0.6587, abs=5e-5)


def test_binary_true_mi_matches_monte_carlo():
    x, c = pn_configs.sample_binary(200_000, np.random.default_rng(0))
    logit = 2.0 * x.sum(1)  # log p(c=1|x) - log p(c=0|x)
    log_post = -np.logaddexp(0.0, np.where(c == 1, -logit, logit))
    mc = math.log(2.0) + log_post.mean()
    assert mc == pytest.approx(projnce_synthetic.true_mi_binary(), abs=5e-3)


def test_gmm_true_mi_is_below_entropy_and_posterior_normalised():
    gmm = pn_configs.make_gmm()
    mi, se = projnce_synthetic.true_mi_gmm(gmm, n=20_000)
    assert 0.0 < mi < math.log(32) and se < 0.02
    x, c = pn_configs.sample_gmm(gmm, 500, np.random.default_rng(0))
    assert x.shape == (500, 8) and c.shape == (500,) and c.max() < 32
    z = np.linalg.lstsq(gmm.proj, x.T.astype(np.float64), rcond=None)[0].T
    post = np.exp(projnce_synthetic.gmm_log_posterior(gmm, z))
    np.testing.assert_allclose(post.sum(1), 1.0, rtol=1e-10)
    assert (post.argmax(1) == c).mean() > 0.5


@pytest.mark.parametrize("setting", list(pn_configs.SETTINGS))
def test_projnce_datasets_are_vectors_fixed_by_the_data_seed(setting):
    config = pn_configs.get_config(f"{setting},projnce")
    config.data.dataset = pn_configs.register(setting, 256)
    s = pn_configs.SETTINGS[setting]
    source = data.load_source(config.data)
    assert isinstance(source, VectorSource) and source.num_classes == s.classes
    train, test = source.split("train"), source.split("test")
    assert train.features.shape == test.features.shape == (256, s.d_in)
    # The run seed's draw, as the former script drew it: train, then test, one generator.
    rng = np.random.default_rng([0, s.d_in])
    x, c = pn_configs.sample(setting, 256, rng)
    np.testing.assert_array_equal(train.features, x)
    np.testing.assert_array_equal(train.labels, c)
    config.data.data_seed = 1
    assert not np.array_equal(data.load_source(config.data).split("train").features, x)


@pytest.mark.parametrize("method", list(pn_configs.METHODS))
@pytest.mark.slow
def test_every_projnce_config_builds_the_papers_mlp(method):
    config = pn_configs.get_config(f"gmm,{method}")
    (term,) = objective.parse_terms(config.loss)
    network = build_model(parse(config).model, seed=config.seed).network
    features, projections = network(jnp.ones((3, 8)))
    assert features.shape == (3, 4)  # MLP 8 -> 32 -> 32 -> 4
    assert projections.shape == ((3, 32) if method == "ce" else (3, 4))
    if method != "ce":
        assert term.temperature == pn_configs.TAU
        np.testing.assert_array_equal(features, projections)  # the loss sees the MLP output
    assert config.optimizer.decay_norm_and_bias and config.optimizer.final_lr_factor == 1.0
    with pytest.raises(ValueError, match="SETTING"):
        pn_configs.get_config(f"ring,{method}")


@pytest.mark.slow
def test_bound_of_nce_type_adds_r_equal_one_and_supcon_uses_projnce():
    z = jax.random.normal(jax.random.key(0), (16, 2))
    c = jnp.arange(16) % 2
    soft = losses.soft_nce(z, c, temperature=pn_configs.TAU, bandwidth=0.6, distance="l1")
    bound = projnce_synthetic.bound_loss("soft_nce")(z, c)
    assert float(bound) == pytest.approx(float(soft) + 1.0)
    proj = losses.projnce(z, c, temperature=pn_configs.TAU, beta=1.0)
    assert float(projnce_synthetic.bound_loss("supcon")(z, c)) == pytest.approx(float(proj))
    assert projnce_synthetic.bound_loss("ce") is None


@pytest.mark.slow
def test_mi_probe_measures_normalised_embeddings_of_the_test_split():
    from contrastive_jax.eval.embed import Embedded
    from contrastive_jax.metrics import mixed_ksg

    rng = np.random.default_rng(0)
    c = rng.integers(0, 2, 512)
    z = (rng.normal(size=(512, 2)) + 3.0 * c[:, None]).astype(np.float32)
    record = projnce_synthetic.mi_probe("projnce", 256)(7, {"test": Embedded(z, c, np.arange(512))})
    unit = z / np.linalg.norm(z, axis=1, keepdims=True)
    assert record["epoch"] == 7 and record["mi_ksg"] == pytest.approx(mixed_ksg(unit, c, k=5))
    loss = np.mean([float(losses.projnce(jnp.asarray(z[i:i + 256]), jnp.asarray(c[i:i + 256]),
                                         temperature=pn_configs.TAU)) for i in (0, 256)])
    assert record["bound"] == pytest.approx(1.0 + math.log(256) - loss, rel=1e-5)
    assert projnce_synthetic.mi_probe("ce", 256)(7, None)["mi_ksg"] is None


@pytest.mark.parametrize("construction", ["alt", "spherical"])
def test_toy_modes_unit_norm_and_angle(construction):
    # docs/reproductions.md (toy modes): 0 % orthonormal; angle(theta_1, theta_j) = phi; 80 % -> 18 deg.
    np.testing.assert_allclose(toy_configs.modes(0, construction), np.eye(20), atol=1e-12)
    theta = toy_configs.modes(80, construction)
    np.testing.assert_allclose(np.linalg.norm(theta, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.degrees(np.arccos(theta[1:] @ theta[0])), 18.0, rtol=1e-9)
    with pytest.raises(ValueError, match="construction"):
        toy_configs.modes(10, "polar")


def test_toy_data_splits_and_the_infonce_prior():
    sizes = toy_configs.QUICK
    config = toy_configs.with_data_seed(toy_configs.get_config("alt,80,infonce", sizes), 1)
    source = data.load_source(config.data)
    train, val, test = (source.split(s) for s in ("train", "val", "test"))
    n = toy_configs.num_train(sizes)
    assert (train.num_examples, val.num_examples) == (n, sizes.samples - n)
    assert test.features.shape == (sizes.unique, 20)
    # Every sample is one of the unique points (subsampled with duplicates).
    assert set(map(tuple, train.features[:50].round(5))) <= set(map(tuple, test.features.round(5)))
    labels = np.concatenate([train.labels, val.labels])
    prior = config.loss.kwargs.label_soft_target_infonce.class_prior
    np.testing.assert_allclose(prior, np.bincount(labels, minlength=20) / sizes.samples)
    other = toy_configs.with_data_seed(toy_configs.get_config("alt,80,infonce", sizes), 2)
    assert other.loss.kwargs.label_soft_target_infonce.class_prior != prior
    assert "class_prior" not in toy_configs.get_config("alt,80,nll", sizes).loss.kwargs.to_dict()
    with pytest.raises(ValueError, match="LEVEL"):
        toy_configs.get_config("alt,45,nll")


def test_toy_model_is_a_bias_free_linear_softmax_and_kl_is_exact():
    config = toy_configs.get_config("alt,0,nll", toy_configs.QUICK)
    network = build_model(parse(config).model, seed=config.seed).network
    (layer,) = network.encoder.layers
    assert layer.bias is None and float(jnp.std(layer.kernel.value)) == pytest.approx(0.01, rel=0.2)
    x = np.random.default_rng(0).normal(size=(5, 20))
    features, projections = network(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(features, x @ np.asarray(layer.kernel.value), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(features, projections)
    theta = toy_configs.modes(40, "alt")
    assert toy.kl_to_truth(theta, x, x @ theta.T) == pytest.approx(0.0, abs=1e-12)
    assert toy.kl_to_truth(theta, x, np.zeros((5, 20))) > 0.0


def test_toy_validation_loss_is_the_trained_objective_over_full_batches():
    from contrastive_jax.losses import label_soft_target_infonce

    config = toy_configs.get_config("alt,80,infonce", toy_configs.QUICK)  # batch 256
    prior = jnp.asarray(config.loss.kwargs.label_soft_target_infonce.class_prior)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(600, 20)).astype(np.float32)
    labels = rng.integers(0, 20, 600)
    want = np.mean([float(label_soft_target_infonce(jnp.asarray(logits[i:i + 256]),
                                                    jnp.asarray(labels[i:i + 256]),
                                                    class_prior=prior)) for i in (0, 256)])
    assert toy.validation_loss(config)(logits, labels) == pytest.approx(want, rel=1e-5)


@pytest.mark.slow
def test_toy_hard_infonce_with_prior_is_the_papers_count_form():
    """Eq. 5 with in-batch label negatives: ``logsumexp_k (S[a, k] + log n_k) - S[a, k_a]``,
    S = L - log eta, n_k the batch count of class k (the former script's O(B K) form)."""
    from contrastive_jax.losses import label_soft_target_infonce

    k1, k2 = jax.random.split(jax.random.key(0))
    logits = 3.0 * jax.random.normal(k1, (64, 20))
    labels = jax.random.randint(k2, (64,), 0, 7)  # classes 7..19 absent from the batch
    prior = jnp.arange(1.0, 21.0) / 210.0
    scores = logits - jnp.log(prior)
    counts = jnp.bincount(labels, length=20)
    log_counts = jnp.where(counts > 0, jnp.log(jnp.maximum(counts, 1)), -jnp.inf)
    lse = jax.nn.logsumexp(scores + log_counts, axis=1)
    want = jnp.mean(lse - jnp.take_along_axis(scores, labels[:, None], axis=1)[:, 0])
    got = label_soft_target_infonce(logits, labels, class_prior=tuple(map(float, prior)))
    assert float(got) == pytest.approx(float(want), rel=1e-5)


def _run_quick(module: str, out: Path, *extra: str) -> str:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-m", f"experiments.reproduce.{module}", "--quick", "--out", str(out),
         *extra],
        capture_output=True, text=True, env=env, cwd=ROOT,
        timeout=3600,  # a few minutes of CPU; far longer on a shared, loaded machine
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_projnce_synthetic_quick_end_to_end_and_resumes(tmp_path):
    out = tmp_path / "projnce"
    _run_quick("projnce_synthetic", out)
    runs = sorted((out / "runs").glob("*/*/seed0.json"))
    assert len(runs) == 14
    for path in runs:
        result = json.loads(path.read_text())
        assert result["trainer"] == "contrastive_jax.train.loop"
        assert [p["epoch"] for p in result["curve"]] == [0, 2]
        assert math.isfinite(result["mi_ksg"]) and len(result["train_loss"]) == 2
        assert (result["bound"] is None) == (result["method"] == "ce")
        work = out / "work" / result["setting"] / result["method"] / "seed0"
        assert (work / "checkpoints").is_dir()  # the library's Orbax checkpoints
    assert (out / "mi_binary.png").exists() and (out / "mi_gmm.png").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["binary"]["true_mi"] == pytest.approx(0.6587, abs=5e-5)
    (out / "runs" / "gmm" / "projnce" / "seed0.json").unlink()
    second = _run_quick("projnce_synthetic", out)
    assert second.count("done, skipped") == 13 and "gmm/projnce/seed0: MI" in second


@pytest.mark.slow
def test_soft_target_toy_quick_end_to_end_and_resumes(tmp_path):
    out = tmp_path / "toy"
    _run_quick("soft_target_toy", out)
    runs = sorted((out / "runs").glob("*/*/seed*.json"))
    assert len(runs) == 2 * 2 * 2 * 2  # constructions x levels x losses x seeds
    for path in runs:
        result = json.loads(path.read_text())
        assert result["trainer"] == "contrastive_jax.train.loop"
        assert result["kl"] >= 0.0 and 1 <= result["epochs"] <= 8
        assert [e for e, _ in result["val_curve"]] == list(range(result["epochs"] + 1))
        best = min(result["val_curve"], key=lambda point: point[1])[0]
        assert result["best_epoch"] == best
        assert result["epochs"] == 8 or result["epochs"] - best == 3  # patience
    assert (out / "kl_vs_alignment.png").exists()
    second = _run_quick("soft_target_toy", out)
    assert second.count("done, skipped") == 16
    table = (out / "table.md").read_text()
    (out / "table.md").unlink()
    third = _run_quick("soft_target_toy", out, "--aggregate_only", "--constructions", "alt")
    assert "training" not in third and "skipped" not in third
    alt_only = (out / "table.md").read_text()
    assert "### alt" in alt_only and "### spherical" not in alt_only
    assert table.startswith(alt_only.rstrip("\n"))  # the same alt rows, from the stored runs


def _finished_quick_toy_run(tmp_path: Path) -> tuple[tuple, Path, dict]:
    """One finished ``--quick`` toy run (alt 0 %, NLL, seed 0) with its result JSON removed, as
    if it had been interrupted: (the ``run_one`` arguments but the progress, its work
    directory, its result)."""
    from experiments.reproduce import _common as common

    args = ("alt", 0, "nll", 0, toy_configs.QUICK, toy.QUICK_PATIENCE, toy.QUICK_EVAL_EVERY,
            tmp_path)
    result = toy.run_one(*args, common.Progress(1, "toy"))
    common.run_path(tmp_path, toy.setting_name("alt", 0), "nll", 0).unlink()
    return args, common.work_path(tmp_path, toy.setting_name("alt", 0), "nll", 0), result


@pytest.mark.slow
def test_toy_run_interrupted_past_the_patience_resumes_to_the_same_result(tmp_path, monkeypatch):
    """A run cut off at epoch k > patience rebuilds its early-stopping curve from the k
    checkpoints it left, never trains to an earlier target (which would prune them), and ends
    where the uninterrupted run ended."""
    from experiments.reproduce import _common as common

    args, work, whole = _finished_quick_toy_run(tmp_path)
    patience, eval_every = toy.QUICK_PATIENCE, toy.QUICK_EVAL_EVERY
    steps = common.checkpoint_steps(work)
    per_epoch = steps[0] // eval_every
    cut = whole["epochs"] - 1  # the interrupted run's last checkpoint
    assert cut > patience, f"the run stopped at epoch {whole['epochs']}, too early to test"
    for step in steps:
        if step > cut * per_epoch:
            shutil.rmtree(work / "checkpoints" / str(step))

    pretrain = common.pretrain

    def pretrain_never_backwards(config, workdir):
        latest = max(common.checkpoint_steps(workdir))
        assert config.train.total_steps >= latest, "trains to a step before its checkpoint"
        return pretrain(config, workdir)

    monkeypatch.setattr(common, "pretrain", pretrain_never_backwards)
    resumed = toy.run_one(*args, common.Progress(1, "toy"))
    assert resumed["epochs"] == whole["epochs"] and resumed["best_epoch"] == whole["best_epoch"]
    np.testing.assert_allclose(resumed["val_curve"], whole["val_curve"], rtol=1e-5)
    assert resumed["kl"] == pytest.approx(whole["kl"], rel=1e-5)


@pytest.mark.slow
def test_toy_run_with_a_gap_in_its_checkpoints_names_the_directory(tmp_path):
    from experiments.reproduce import _common as common

    args, work, _ = _finished_quick_toy_run(tmp_path)
    first, *_ = common.checkpoint_steps(work)
    shutil.rmtree(work / "checkpoints" / str(first))
    with pytest.raises(ValueError, match="delete the directory to rerun alt_00/nll/seed0"):
        toy.run_one(*args, common.Progress(1, "toy"))
