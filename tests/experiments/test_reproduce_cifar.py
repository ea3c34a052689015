"""The CIFAR-10 proxies of SINCERE and MIO (``experiments/reproduce/cifar_proxy.py``).

The unmarked tests check the configs (``experiments/configs/cifar_proxy.py``) and the SINCERE
claim's reporting helpers in seconds; the ``slow`` one runs ``--quick`` end to end
(``python -m experiments.reproduce.cifar_proxy``), twice, to check the outputs and that finished
runs are skipped (skipped when the shared CIFAR-10 folder is absent). The CIFAR data pieces
(class-balanced subsets decoded into memory, the ``cifar_proxy`` augmentation) are tested in
``tests/data/test_cifar_subset*.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.train import objective
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import build_model
from experiments.configs import cifar_proxy as configs
from experiments.configs import mio as mio_configs
from experiments.reproduce import _common as common
from experiments.reproduce import cifar_proxy
from tests.data.helpers import SHARED_CIFAR10

ROOT = Path(__file__).resolve().parents[2]
SPECS = [f"{claim},{method},{opt}" for claim, methods in configs.METHODS.items()
         for method in methods for opt in configs.OPTIMIZERS[claim]]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.slow
def test_every_config_builds_the_proxy_network(spec):
    claim, method, optimizer = spec.split(",")
    config = configs.get_config(spec)
    (term,) = objective.parse_terms(config.loss)
    network = build_model(parse(config).model, seed=config.seed).network
    assert network.encoder.num_features == 128 and len(network.encoder.convs) == 3
    assert (config.model.encoder.channels, config.model.encoder.strides) == ((32, 64, 128),
                                                                             (2, 2, 2))
    assert config.data.augmentation == "cifar_proxy" and config.data.global_batch_size == 128
    assert (config.data.train_subset, config.data.source_kwargs.test_subset) == (5000, 2000)
    assert config.data.in_memory and config.data.data_dir is None  # the caller names the folder
    assert config.model.head.out_features == 64 and config.model.head.bn_axis_name == "data"
    if claim == "sincere":
        assert (term.name, term.temperature) == (method, 0.1)
        assert network.head.out_bn is None and len(network.head.hidden_linears) == 1
    else:
        hidden, l2 = mio_configs.VARIANTS[method]
        assert term.temperature == 0.5 and term.target == "instance"
        assert len(network.head.hidden_linears) == hidden and network.head.out_bn is not None
        if method != "simclr":
            assert term.kwargs["l2_weight"] == l2
    opt = config.optimizer
    if optimizer == "adamw":
        assert (opt.name, opt.base_learning_rate, opt.weight_decay) == ("adamw", 1e-3, 5e-5)
        assert (opt.lr_scaling, opt.warmup_steps, opt.final_lr_factor) == ("none", 0, 1.0)
    else:
        assert (opt.name, opt.base_learning_rate, opt.schedule_epochs) == ("lars", 1.5, 4.0 * 36)


def test_config_spec_errors_and_epochs():
    assert configs.get_config("mio,mio_B,lars,20").optimizer.schedule_epochs == 80.0
    assert configs.get_config("sincere,supcon,adamw,7").train.epochs == 7
    for bad in ("sincere,supcon,lars", "mio,mio_E", "mio", "sincere,sincere,adamw,0",
                "mio,simclr,adamw,3,4"):
        with pytest.raises(ValueError, match=re.escape(f"cifar_proxy config {bad!r}: give one")):
            configs.get_config(bad)


def test_augmentation_matches_the_former_recipe():
    """Pad 4 of 32 and crop, flip 1/2, brightness and contrast U(0.6, 1.4), channel gain
    U(0.8, 1.2), no grayscale."""
    aug = data.augmentation_preset("cifar_proxy", 32)
    assert (aug.crop_scale, round(aug.pad_fraction * 32), aug.flip_prob) == (None, 4, 0.5)
    assert aug.jitter[:2] == (0.4, 0.4) and aug.jitter_prob == 1.0
    assert aug.channel_gain == (0.8, 1.2) and aug.grayscale_prob == 0.0


def test_loss_references_of_a_known_batch():
    """Two classes, batch 4 of labels [0, 0, 1, 1] (two views): every class has 4 views, so
    |P_t| = 3, the floor is log 3, SupCon's constant log 7 and SINCERE's log(1 + 4)."""
    refs = common.loss_references(np.array([0, 0, 1, 1]), batch=4, views=2)
    assert refs["positives_per_anchor"] == pytest.approx(3.0)
    assert refs["supcon_floor"] == pytest.approx(np.log(3))
    assert refs["supcon_constant"] == pytest.approx(np.log(7))
    assert refs["sincere_constant"] == pytest.approx(np.log(5))


def test_bits_round_trip():
    correct = np.random.default_rng(0).random(37) < 0.5
    np.testing.assert_array_equal(common.unpack_bits(common.pack_bits(correct), 37), correct)


def _record(seed: int, loss: str, correct: np.ndarray, within: float) -> dict:
    sims = {"mean_within": within, "mean_between": within / 2}
    return {"references": {"supcon_floor": 1.0, "supcon_constant": 5.0, "sincere_constant": 4.0,
                           "positives_per_anchor": 24.0},
            "num_test": len(correct), "loss_initial": 5.0 + seed, "loss_final": 4.0 + seed,
            "similarity": {"projection": sims, "encoder": sims},
            "linear": {t: {"accuracy": correct.mean(), "low": 0.0, "high": 1.0,
                           "bits": common.pack_bits(correct)} for t in ("top1", "top5")}}


def test_compare_sincere_supcon_differences_and_tables():
    rng = np.random.default_rng(0)
    a, b = rng.random(200) < 0.7, rng.random(200) < 0.5
    pairs = [(_record(s, "sincere", a, 0.6), _record(s, "supcon", b, 0.8)) for s in (0, 1)]
    entry = common.compare_sincere_supcon(pairs, resamples=200)
    assert entry["seeds"] == 2
    assert entry["supcon_minus_sincere"]["projection_mean_within"]["mean"] == pytest.approx(0.2)
    assert entry["supcon_minus_sincere"]["projection_mean_between"]["mean"] == pytest.approx(0.1)
    assert entry["sincere"]["linear_top1"]["mean"] == pytest.approx(100 * a.mean())
    assert entry["sincere"]["loss_final"]["values"] == [4.0, 5.0]
    paired = entry["paired_sincere_minus_supcon"]["top1"][0]
    assert paired["diff"] == pytest.approx(100 * (a.mean() - b.mean())) and paired["significant"]
    text = common.sincere_tables({"b128": entry})
    assert "SupCon − SINCERE | projection | 0.200 ± 0.000" in text and "significant" in text


def test_aggregate_only_reads_no_data_and_writes_empty_tables(tmp_path, capsys):
    cifar_proxy.main(["--quick", "--aggregate_only", "--out", str(tmp_path),
                      "--data_dir", str(tmp_path / "nowhere")])
    out = capsys.readouterr().out
    for name in ("quick_cifar_sincere_2ep", "quick_cifar_mio_adamw_2ep"):
        assert f"## {name} (2 epochs, 256 training / 200 test images" in out
        assert (tmp_path / f"{name}_table.md").exists() and (tmp_path / f"{name}.png").exists()


def test_a_missing_data_dir_is_named(tmp_path, capsys):
    for given in (["--data_dir", str(tmp_path / "nowhere")], []):
        with pytest.raises(SystemExit):
            cifar_proxy.main(["--quick", *given])
        named = given[1] if given else "None"
        assert f"--data_dir {named}: give a CIFAR-10 image folder" in capsys.readouterr().err


def test_a_stored_record_of_the_former_stack_is_refused(tmp_path):
    """A per-run JSON without the trainer field (the hand-made stack's) is not skipped as done."""
    path = common.run_path(tmp_path, "cifar_sincere_36ep", "supcon", 0)
    common.save_json(path, {"epochs": 36, "probes": []})
    budget = {"epochs": 36, "trainer": common.TRAINER, "num_train": 5000, "num_test": 2000}
    with pytest.raises(ValueError, match="'trainer': None"):
        common.load_finished(path, budget, common.Progress(1, "test"), "supcon")


@pytest.mark.slow
def test_cifar_proxy_quick_end_to_end_and_resume(tmp_path):
    if not os.path.isdir(SHARED_CIFAR10):
        pytest.skip(f"shared CIFAR-10 folder {SHARED_CIFAR10} not present")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "experiments.reproduce.cifar_proxy", "--quick",
               "--out", str(tmp_path), "--data_dir", SHARED_CIFAR10]

    def run() -> str:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600,
                              cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    first = run()
    runs = sorted((tmp_path / "runs").rglob("seed0.json"))
    assert len(runs) == (2 + 1) + (5 + 1)  # methods + random init, per claim
    for name in ("quick_cifar_sincere_2ep", "quick_cifar_mio_adamw_2ep"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0
        assert (tmp_path / f"{name}_table.md").read_text().startswith(f"## {name}")
        assert json.loads((tmp_path / f"{name}_summary.json").read_text())
    record = json.loads((tmp_path / "runs/quick_cifar_sincere_2ep/sincere/seed0.json").read_text())
    assert record["epochs"] == 2 and len(record["epoch_losses"]) == 2
    assert record["trainer"] == common.TRAINER and record["num_train"] == 256
    linear = record["probes"][-1]["linear"]
    assert 0.0 <= linear["top1"]["low"] <= linear["top1"]["high"] <= 1.0
    assert linear["top1"]["accuracy"] <= linear["top5"]["accuracy"]
    # The library's Orbax checkpoint of the last epoch (256 // 128 = 2 steps per epoch).
    work = tmp_path / "work/quick_cifar_sincere_2ep/sincere/seed0"
    assert common.checkpoint_steps(work) == [4]
    summary = json.loads((tmp_path / "quick_cifar_sincere_2ep_summary.json").read_text())
    assert {"sincere", "supcon", "supcon_minus_sincere", "paired_sincere_minus_supcon"} <= set(
        summary["b128"])
    assert "random_init" in summary
    mio = json.loads((tmp_path / "quick_cifar_mio_adamw_2ep_summary.json").read_text())
    assert set(mio) == {f"main/{m}" for m in
                        ("simclr", "mio_A", "mio_B", "mio_C", "mio_D", "random_init")}
    assert "main | mio_D" in first and "SupCon − SINCERE" in first
    second = run()
    assert second.count("done, skipped") == 9
