"""The synthetic reproduction scripts: ProjNCE App. D.1 and the soft-target InfoNCE toy (Sec. 3.1).

The unmarked tests check the scripts' ground truths, data and bookkeeping in a
few seconds without compiling anything; the ``slow`` ones train (one chunk per
method, then each script's ``--quick`` mode end to end, twice, to check that
finished runs are skipped).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.experiments.scripts import REPRODUCE, load_script

# The reproduction scripts' own checks run with their --quick modes in `make test-all`.


@pytest.fixture(scope="module")
def projnce_synthetic():
    return load_script("projnce_synthetic")


@pytest.fixture(scope="module")
def toy():
    return load_script("soft_target_toy")


@pytest.fixture(scope="module")
def common():
    return load_script("_synthetic_common")


def test_binary_true_mi_is_0_6587_nats(projnce_synthetic):
    # docs/reproductions.md, "ProjNCE protocol": I(X; C) = 0.6587 nats for d_x = 5, sigma = 1.
    assert projnce_synthetic.true_mi_binary() == pytest.approx(0.6587, abs=5e-5)


def test_binary_true_mi_matches_monte_carlo(projnce_synthetic):
    x, c = projnce_synthetic.sample_binary(200_000, np.random.default_rng(0))
    logit = 2.0 * x.sum(1)  # log p(c=1|x) - log p(c=0|x)
    log_post = -np.logaddexp(0.0, np.where(c == 1, -logit, logit))
    mc = math.log(2.0) + log_post.mean()
    assert mc == pytest.approx(projnce_synthetic.true_mi_binary(), abs=5e-3)


def test_gmm_true_mi_is_below_entropy_and_posterior_normalised(projnce_synthetic):
    gmm = projnce_synthetic.make_gmm()
    mi, se = projnce_synthetic.true_mi_gmm(gmm, n=20_000)
    assert 0.0 < mi < math.log(32) and se < 0.02
    x, c = projnce_synthetic.sample_gmm(gmm, 500, np.random.default_rng(0))
    assert x.shape == (500, 8) and c.shape == (500,) and c.max() < 32
    z = np.linalg.lstsq(gmm.proj, x.T.astype(np.float64), rcond=None)[0].T
    post = np.exp(projnce_synthetic.gmm_log_posterior(gmm, z))
    np.testing.assert_allclose(post.sum(1), 1.0, rtol=1e-10)
    assert (post.argmax(1) == c).mean() > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("method", ["supcon", "projnce", "soft_nce", "med_nce", "ce"])
def test_one_training_chunk_lowers_the_loss(projnce_synthetic, method):
    ps = projnce_synthetic
    setting = ps.settings(quick=True)["binary"]
    x, c = (jnp.asarray(a) for a in ps.sample_binary(setting.n, np.random.default_rng(0)))
    optimizer = optax.adamw(setting.lr, weight_decay=1e-4)
    params = ps.init_params(setting, method, jax.random.key(0))
    before = float(ps.train_loss(method)(params, x[:256], c[:256]))
    params, _, epoch_losses = ps.make_chunk(setting, method, optimizer)(
        params, optimizer.init(params), x, c, jax.random.split(jax.random.key(1), 2)
    )
    after = float(ps.train_loss(method)(params, x[:256], c[:256]))
    assert np.all(np.isfinite(np.asarray(epoch_losses))) and after < before


@pytest.mark.slow
def test_bound_of_nce_type_adds_r_equal_one(projnce_synthetic):
    z = jax.random.normal(jax.random.key(0), (16, 2))
    c = jnp.arange(16) % 2
    soft = projnce_synthetic.contrastive_loss("soft_nce")(z, c)
    assert float(projnce_synthetic.bound_loss("soft_nce")(z, c)) == pytest.approx(float(soft) + 1.0)
    assert projnce_synthetic.bound_loss("ce") is None


@pytest.mark.parametrize("construction", ["alt", "spherical"])
def test_toy_modes_unit_norm_and_angle(toy, construction):
    # docs/reproductions.md (toy modes): 0 % orthonormal; angle(theta_1, theta_j) = phi; 80 % -> 18 deg.
    np.testing.assert_allclose(toy.modes(0, construction), np.eye(20), atol=1e-12)
    theta = toy.modes(80, construction)
    np.testing.assert_allclose(np.linalg.norm(theta, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.degrees(np.arccos(theta[1:] @ theta[0])), 18.0, rtol=1e-9)
    with pytest.raises(ValueError, match="construction"):
        toy.modes(10, "polar")


def test_checkpoint_round_trip_and_mean_std(common, tmp_path):
    tree = {"a": np.arange(3.0), "b": [np.ones((2, 2)), np.int32(4)]}
    path = tmp_path / "x.ckpt.npz"
    assert common.load_checkpoint(path, tree) is None
    common.save_checkpoint(path, tree, {"epoch": 7})
    restored, progress = common.load_checkpoint(path, tree)
    assert progress == {"epoch": 7}
    for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(tree), strict=True):
        np.testing.assert_array_equal(got, want)
    assert common.mean_std([1.0, 3.0]) == (2.0, pytest.approx(math.sqrt(2.0)))
    with pytest.raises(ValueError, match="values"):
        common.mean_std([])


def _run_quick(script: str, out: Path) -> str:
    env = dict(os.environ, XLA_FLAGS="", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(REPRODUCE / script), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,  # a few minutes of CPU; far longer on a shared, loaded machine
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_projnce_synthetic_quick_end_to_end_and_resumes(tmp_path):
    out = tmp_path / "projnce"
    _run_quick("projnce_synthetic.py", out)
    runs = sorted((out / "runs").glob("*/*/seed0.json"))
    assert len(runs) == 14
    for path in runs:
        result = json.loads(path.read_text())
        assert math.isfinite(result["mi_ksg"]) and result["curve"][-1]["epoch"] == 2
        assert (result["bound"] is None) == (result["method"] == "ce")
    assert (out / "mi_binary.png").exists() and (out / "mi_gmm.png").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["binary"]["true_mi"] == pytest.approx(0.6587, abs=5e-5)
    (out / "runs" / "gmm" / "projnce" / "seed0.json").unlink()
    second = _run_quick("projnce_synthetic.py", out)
    assert second.count("skip ") == 13 and "done gmm/projnce/seed0" in second


@pytest.mark.slow
def test_soft_target_toy_quick_end_to_end_and_resumes(tmp_path):
    out = tmp_path / "toy"
    _run_quick("soft_target_toy.py", out)
    runs = sorted((out / "runs").glob("*/*/seed*.json"))
    assert len(runs) == 2 * 2 * 2 * 2  # constructions x levels x losses x seeds
    for path in runs:
        result = json.loads(path.read_text())
        assert result["kl"] >= 0.0 and 1 <= result["epochs"] <= 15
    assert (out / "kl_vs_alignment.png").exists()
    second = _run_quick("soft_target_toy.py", out)
    assert second.count("skip ") == 8


def test_toy_hard_infonce_equals_library_soft_target_infonce(toy):
    from contrastive_jax import losses

    k1, k2 = jax.random.split(jax.random.key(0))
    logits = 3.0 * jax.random.normal(k1, (64, 20))
    labels = jax.random.randint(k2, (64,), 0, 7)  # classes 7..19 absent from the batch
    prior = jnp.arange(1.0, 21.0) / 210.0
    want = losses.soft_target_infonce(
        logits, jax.nn.one_hot(labels, 20), temperature=1.0, class_prior=prior
    )
    assert float(toy.hard_infonce(logits, labels, prior)) == pytest.approx(float(want), rel=1e-5)
