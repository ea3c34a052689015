"""The conditional alignment/uniformity (Dufumier et al. 2021) and MIO reproduction drivers.

The unmarked tests check facts the drivers and their configs rely on in seconds; the ``slow``
ones run each driver's ``--quick`` mode end to end (``python -m experiments.reproduce.<name>``),
twice, to check that finished runs are skipped.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import data, losses
from contrastive_jax.errors import NonFiniteLoss
from contrastive_jax.train import objective
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import build_model
from experiments.configs import conditional_uniformity as cu_configs
from experiments.configs import mio as mio_configs
from experiments.reproduce import _common as common
from experiments.reproduce import conditional_uniformity as cu
from experiments.reproduce import mio

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_delta_sigma_makes_y_aware_equal_supcon_minus_log_n():
    """The digits grid's SupCon run stands for y-Aware with a delta kernel (the paper's Eq. 1)."""
    rng = np.random.default_rng(0)
    labels = np.tile(rng.integers(0, 4, 6), 2)
    z = jnp.asarray(rng.normal(size=(12, 5)), jnp.float32)
    onehot = jnp.asarray(np.eye(4, dtype=np.float32)[labels])
    y_aware = losses.y_aware_infonce(z, onehot, temperature=0.1, sigma=cu_configs.DELTA_SIGMA)
    supcon = losses.supcon(z, jnp.asarray(labels), temperature=0.1)
    np.testing.assert_allclose(y_aware, supcon - math.log(11), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_sex_scale_gives_product_kernel():
    """Metadata (age, SEX_SCALE * sex): a subject of the other sex weighs as one 1000 years away."""
    z = jnp.asarray(np.random.default_rng(1).normal(size=(6, 4)), jnp.float32)
    ages = jnp.asarray([30.0, 32.0, 36.0] * 2)
    sex = jnp.asarray([0.0, 1.0, 0.0] * 2)
    scaled = jnp.stack([ages, cu_configs.SEX_SCALE * sex], 1)
    far = jnp.stack([ages + 1000.0 * sex, jnp.zeros(6)], 1)
    near = jnp.stack([ages, sex], 1)  # sex on the age scale: 1 "year" apart, strongly attracting
    kw = {"temperature": 0.1, "sigma": cu_configs.AGE_SIGMA}
    value = losses.conditional_alignment(z, scaled, **kw)
    np.testing.assert_allclose(value, losses.conditional_alignment(z, far, **kw), rtol=1e-6)
    assert abs(float(value - losses.conditional_alignment(z, near, **kw))) > 1e-3


@pytest.mark.parametrize(
    "spec", [f"{t},{m}" for t, ms in cu_configs.METHODS.items() for m in ms]
)
@pytest.mark.matrix
def test_every_conditional_uniformity_config_builds(spec):
    config = cu_configs.get_config(spec)
    terms = objective.parse_terms(config.loss)
    model = build_model(parse(config).model, seed=config.seed)
    assert model.network.encoder.num_features == (64 if spec.startswith("digits") else 128)
    assert config.optimizer.final_lr_factor == 1.0  # constant AdamW learning rate
    if spec == "digits,conditional":
        assert config.data.metadata == "label_onehot"
        assert all(t.kwargs["sigma"] == cu_configs.DELTA_SIGMA for t in terms)
    with pytest.raises(ValueError, match="choose one of"):
        cu_configs.get_config("digits,y_aware")


def test_digits_configs_use_the_proxy_augmentation():
    """Shift by a quarter side (4 of 16 px), gain U(0.6, 1.4), N(0, 0.1) noise, no flip."""
    aug = data.augmentation_preset(cu_configs.get_config("digits,simclr").data.augmentation, 16)
    assert (aug.crop_scale, aug.pad_fraction * 16, aug.flip_prob) == (None, 4, 0.0)
    assert aug.gain == (0.6, 1.4) and aug.noise_std == (0.1, 0.1)
    assert mio_configs.get_config("mio_C").data.augmentation == "digits"


def test_phantom_config_scales_sex_and_sets_the_subject_count():
    config = cu_configs.get_config("phantoms,y_aware")
    config.data.source_kwargs.num_train = 40
    source = data.load_source(config.data)
    train = source.split("train")
    assert train.num_examples == 40
    assert set(np.unique(train.metadata[:, 1])) <= {0.0, cu_configs.SEX_SCALE}


@pytest.mark.parametrize("method", sorted(mio_configs.VARIANTS))
def test_mio_configs(method):
    config = mio_configs.get_config(f"{method},0.3,0.7,20")
    (term,) = objective.parse_terms(config.loss)
    hidden, l2 = mio_configs.VARIANTS[method]
    assert term.temperature == 0.7
    assert (term.name, term.target) == (("nt_xent", "instance") if method == "simclr"
                                        else ("mio", "instance"))
    if method != "simclr":
        assert term.kwargs["l2_weight"] == l2
    head = build_model(parse(config).model, seed=config.seed).network.head
    assert len(head.hidden_linears) == hidden and head.out_bn is not None
    assert (config.optimizer.warmup_epochs, config.optimizer.schedule_epochs) == (2.0, 80.0)
    assert config.optimizer.final_lr_factor * 0.3 == pytest.approx(1e-4)


def test_probe_epochs_end_at_the_budget():
    assert cu.probe_epochs(10) == (2, 5, 8, 10)
    assert cu.probe_epochs(1) == (1,)


def test_checkpoints_are_kept_at_every_probe_step():
    config = cu_configs.get_config("digits,simclr")
    scheduled = common.schedule_checkpoints(config, 1100, [275, 550, 825, 1100])
    assert scheduled.train.checkpoint_every == 275 and scheduled.train.keep_checkpoints == 5
    assert config.train.total_steps == 0  # the input config is left alone
    with pytest.raises(ValueError, match="must lie in"):
        common.schedule_checkpoints(config, 100, [0, 100])


def _run(module: str, out: Path) -> str:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-m", f"experiments.reproduce.{module}", "--quick", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=3600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_non_finite_loss_is_logged_as_a_diverged_run(monkeypatch, capsys, tmp_path):
    def diverge(config, workdir):
        raise NonFiniteLoss("loss nan at step 3")

    monkeypatch.setattr(common, "pretrain", diverge)
    progress = common.Progress(1, "test")
    assert common.train_or_diverge(None, tmp_path, progress, "run", "training")
    out = capsys.readouterr().out
    assert f"run: training in {tmp_path}" in out and "run: loss nan at step 3" in out
    monkeypatch.setattr(common, "pretrain", lambda config, workdir: {})
    assert not common.train_or_diverge(None, tmp_path, progress, "run")


@pytest.mark.slow
def test_conditional_uniformity_quick_end_to_end_and_resume(tmp_path):
    first = _run("conditional_uniformity", tmp_path)
    assert "quick_digits" in first and "quick_phantoms" in first
    runs = sorted((tmp_path / "runs").rglob("seed0.json"))
    assert len(runs) == 4 + 3  # digits methods + phantom methods
    record = json.loads((tmp_path / "runs/quick_digits_2ep/conditional/seed0.json").read_text())
    assert [p["epoch"] for p in record["probes"]] == [1, 2]
    assert 0.0 <= record["probes"][-1]["full"]["low"] <= record["probes"][-1]["full"]["high"] <= 1
    assert len(record["epoch_losses"]) == 2 and not record["diverged"]
    # The library's Orbax checkpoints, one per probe epoch (11 steps each).
    work = tmp_path / "work/quick_digits_2ep/conditional/seed0"
    assert common.checkpoint_steps(work) == [11, 22]
    phantom = json.loads(
        (tmp_path / "runs/quick_phantoms_1ep_n300/y_aware/seed0.json").read_text()
    )
    assert set(phantom["probes"][-1]["n_train"]) == {"100", "200", "400", "530"}
    assert (tmp_path / "quick_digits_2ep_accuracy_vs_epoch.png").stat().st_size > 0
    assert (tmp_path / "quick_phantoms_1ep_n300_auc_vs_ntrain.png").stat().st_size > 0
    second = _run("conditional_uniformity", tmp_path)
    assert second.count("done, skipped") == 7


@pytest.mark.slow
def test_mio_quick_end_to_end_and_resume(tmp_path):
    first = _run("mio", tmp_path)
    runs = sorted((tmp_path / "runs").rglob("seed0.json"))
    assert len(runs) == 6  # the random-init encoder, SimCLR and MIO (A)-(D)
    init = json.loads((tmp_path / "runs/quick_digits_2ep/main/random_init/seed0.json").read_text())
    assert init["epochs"] == 0 and 0.0 < init["probes"][0]["full"]["accuracy"] <= 1.0
    assert (tmp_path / "quick_digits_2ep_mio.png").stat().st_size > 0
    assert "main | mio_D" in first and "main | random_init" in first
    second = _run("mio", tmp_path)
    assert second.count("done, skipped") == 6


def test_mio_grid_probes_the_random_init_encoder_once_per_main_seed():
    runs = mio.grid([0, 1], [0])
    assert [r for r in runs if r[1] == "random_init"] == [
        ("main", "random_init", 1.5, 0.5, 0), ("main", "random_init", 1.5, 0.5, 1)]
    assert not any(r[1] == "random_init" for r in runs if r[0] != "main")


def test_a_stored_run_of_another_epoch_budget_is_refused(tmp_path):
    path = common.run_path(tmp_path, "digits_5ep", "simclr", 0)
    common.save_json(path, {"epochs": 3, "trainer": common.TRAINER, "probes": []})
    with pytest.raises(ValueError, match=re.escape("with {'epochs': 3, 'trainer'")):
        cu.run_one("digits", "digits_5ep", "simclr", 0, 5, (5,), tmp_path,
                   common.Progress(1, "test"))
    # A record of the former hand-made stack (no trainer field) is refused, not skipped.
    common.save_json(path, {"epochs": 5, "probes": []})
    with pytest.raises(ValueError, match="'trainer': None"):
        cu.run_one("digits", "digits_5ep", "simclr", 0, 5, (5,), tmp_path,
                   common.Progress(1, "test"))


def test_another_digits_probe_count_gets_its_own_run_names(tmp_path, capsys):
    cu.main(["--tasks", "digits", "--digits_probes", "20", "--aggregate_only",
             "--out", str(tmp_path)])
    assert "## digits_100ep_20probes (100 epochs" in capsys.readouterr().out
    assert (tmp_path / "digits_100ep_20probes_table.md").exists()
    assert cu.probe_epochs(100, 20)[:3] == (5, 10, 15)
