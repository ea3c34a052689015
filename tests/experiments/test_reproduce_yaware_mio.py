"""The conditional alignment/uniformity (Dufumier et al. 2021) and MIO reproduction scripts.

The unmarked tests check facts the scripts rely on in seconds; the ``slow`` ones run each
script's ``--quick`` mode end to end, twice, to check that finished runs are skipped.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import losses
from tests.experiments.scripts import REPRODUCE, load_script

# The reproduction scripts' own checks run with their --quick modes in `make test-all`.


@pytest.fixture(scope="module")
def cu():
    return load_script("conditional_uniformity")


def test_delta_sigma_makes_y_aware_equal_supcon_minus_log_n(cu):
    """The digits grid's SupCon run stands for y-Aware with a delta kernel (docs/reproductions.md)."""
    rng = np.random.default_rng(0)
    labels = np.tile(rng.integers(0, 4, 6), 2)
    z = jnp.asarray(rng.normal(size=(12, 5)), jnp.float32)
    onehot = jnp.asarray(np.eye(4, dtype=np.float32)[labels])
    y_aware = losses.y_aware_infonce(z, onehot, temperature=0.1, sigma=cu.DELTA_SIGMA)
    supcon = losses.supcon(z, jnp.asarray(labels), temperature=0.1)
    np.testing.assert_allclose(y_aware, supcon - math.log(11), rtol=1e-5, atol=1e-5)


def test_sex_scale_gives_product_kernel(cu):
    """Metadata (age, SEX_SCALE * sex): a subject of the other sex weighs as one 1000 years away."""
    z = jnp.asarray(np.random.default_rng(1).normal(size=(6, 4)), jnp.float32)
    ages = jnp.asarray([30.0, 32.0, 36.0] * 2)
    sex = jnp.asarray([0.0, 1.0, 0.0] * 2)
    scaled = jnp.stack([ages, cu.SEX_SCALE * sex], 1)
    far = jnp.stack([ages + 1000.0 * sex, jnp.zeros(6)], 1)
    near = jnp.stack([ages, sex], 1)  # sex on the age scale: 1 "year" apart, strongly attracting
    kw = {"temperature": 0.1, "sigma": cu.AGE_SIGMA}
    value = losses.conditional_alignment(z, scaled, **kw)
    np.testing.assert_allclose(value, losses.conditional_alignment(z, far, **kw), rtol=1e-6)
    assert abs(float(value - losses.conditional_alignment(z, near, **kw))) > 1e-3


def test_augment_digits_keeps_shape_and_moves_content(cu):
    x = jnp.zeros((4, 16, 16, 1)).at[:, 6:10, 6:10].set(1.0)
    out = cu.augment_digits(jax.random.PRNGKey(0), x)
    assert out.shape == x.shape
    assert not np.allclose(np.asarray(out), np.asarray(x), atol=0.3)


def test_probe_epochs_end_at_the_budget(cu):
    assert cu.probe_epochs(10) == (2, 5, 8, 10)
    assert cu.probe_epochs(1) == (1,)


def _run(script: str, out: Path) -> str:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(REPRODUCE / script), "--quick", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_conditional_uniformity_quick_end_to_end_and_resume(tmp_path):
    first = _run("conditional_uniformity.py", tmp_path)
    assert "quick_digits" in first and "quick_phantoms" in first
    runs = sorted((tmp_path / "runs").rglob("seed0.json"))
    assert len(runs) == 4 + 3  # digits methods + phantom methods
    record = json.loads((tmp_path / "runs/quick_digits_2ep/conditional/seed0.json").read_text())
    assert [p["epoch"] for p in record["probes"]] == [1, 2]
    assert 0.0 <= record["probes"][-1]["full"]["low"] <= record["probes"][-1]["full"]["high"] <= 1
    assert (tmp_path / "quick_digits_2ep_accuracy_vs_epoch.png").stat().st_size > 0
    assert (tmp_path / "quick_phantoms_1ep_n300_auc_vs_ntrain.png").stat().st_size > 0
    second = _run("conditional_uniformity.py", tmp_path)
    assert second.count("done, skipped") == 7


@pytest.mark.slow
def test_mio_quick_end_to_end_and_resume(tmp_path):
    first = _run("mio.py", tmp_path)
    runs = sorted((tmp_path / "runs").rglob("seed0.json"))
    assert len(runs) == 6  # the random-init encoder, SimCLR and MIO (A)-(D)
    init = json.loads((tmp_path / "runs/quick_digits_2ep/main/random_init/seed0.json").read_text())
    assert init["epochs"] == 0 and 0.0 < init["probes"][0]["full"]["accuracy"] <= 1.0
    assert (tmp_path / "quick_digits_2ep_mio.png").stat().st_size > 0
    assert "main | mio_D" in first and "main | random_init" in first
    second = _run("mio.py", tmp_path)
    assert second.count("done, skipped") == 6


def test_mio_grid_probes_the_random_init_encoder_once_per_main_seed():
    mio = load_script("mio")
    runs = mio.grid([0, 1], [0])
    assert [r for r in runs if r[1] == "random_init"] == [
        ("main", "random_init", 1.5, 0.5, 0), ("main", "random_init", 1.5, 0.5, 1)]
    assert not any(r[1] == "random_init" for r in runs if r[0] != "main")


def test_a_stored_run_of_another_epoch_budget_is_refused(cu, tmp_path):
    common = sys.modules["_synthetic_common"]
    task = cu.Task("digits_5ep", cu.DIGITS_ARCH, cu.augment_digits, 5, 128, (5,))
    common.save_json(common.run_path(tmp_path, task.name, "simclr", 0),
                     {"epochs": 3, "probes": []})
    with pytest.raises(ValueError, match=re.escape("with {'epochs': 3}, not {'epochs': 5}")):
        cu.run_one(task, "simclr", None, None, None, None, 0, tmp_path, None)


def test_another_digits_probe_count_gets_its_own_run_names(cu, tmp_path, capsys):
    cu.main(["--tasks", "digits", "--digits_probes", "20", "--aggregate_only",
             "--out", str(tmp_path)])
    assert "## digits_100ep_20probes (100 epochs" in capsys.readouterr().out
    assert (tmp_path / "digits_100ep_20probes_table.md").exists()
    assert cu.probe_epochs(100, 20)[:3] == (5, 10, 15)
