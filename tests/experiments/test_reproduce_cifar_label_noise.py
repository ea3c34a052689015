"""The CIFAR-10 label-noise proxy of ProjNCE (``experiments/reproduce/cifar_label_noise.py``,
configs ``experiments/configs/cifar_label_noise.py``).

The unmarked tests check the configs, the noisy labels (the trainer's), the probe records and the
tables on synthetic records in seconds; the ``slow`` one runs ``--quick`` end to end with the
library's trainer, twice, to check the outputs and that finished runs are skipped (skipped when
the shared CIFAR-10 folder is absent).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.train import objective
from experiments.configs import cifar_label_noise as configs
from experiments.reproduce import _common as common
from experiments.reproduce import cifar_label_noise as ln_module

ROOT = Path(__file__).resolve().parents[2]
SHARED_CIFAR10 = ROOT.parent / "shared" / "data" / "cifar10"


@pytest.fixture(scope="module")
def ln():
    return ln_module


def test_configs_of_the_methods():
    for method in configs.METHODS:
        p = 0.0 if method in configs.LABEL_FREE else 0.4
        config = configs.get_config(f"{method},{p},3")
        (term,) = objective.parse_terms(config.loss)
        assert config.data.label_noise == p and config.train.epochs == 3
        assert config.model.encoder.channels == (32, 64, 128)
        if method == "ce":
            assert term.name == "label_cross_entropy" and term.mixing is None
            assert config.data.num_views == 1 and config.model.head.out_features == 10
        else:
            assert term.name == configs.CONTRASTIVE.get(method, "nt_xent")
            assert term.kwargs == {} and term.temperature == 0.07
            assert config.data.num_views == 2 and config.data.global_batch_size == 128
            assert config.model.head.out_features == 64
    assert configs.get_config("projnce").data.label_noise == 0.0
    for bad in ("simclr,0.2", "projnce,1.5", "xent,0", "supcon,0.2,0", "supcon,a"):
        with pytest.raises(ValueError, match="METHOD"):
            configs.get_config(bad)


def test_noisy_labels_are_the_trainers_and_at_the_requested_rate(ln):
    y = np.repeat(np.arange(10), 500)
    np.testing.assert_array_equal(ln.noisy_labels(y, 0.0), y)
    a = ln.noisy_labels(y, 0.4)
    np.testing.assert_array_equal(a, data.symmetric_label_noise(y, 10, 0.4, 0))
    assert (a != ln.noisy_labels(y, 0.4, data_seed=1)).any()  # the data seed draws the noise
    # a replaced label keeps its class with probability 1/K: 0.4 * 0.9 = 0.36 change
    assert abs((a != y).mean() - 0.36) < 0.03
    assert a.min() >= 0 and a.max() <= 9


def test_task_names_separate_noise_levels_and_the_label_free_runs(ln):
    assert ln.task_name(0.2, 24, False) == "cifar_labelnoise_p0.2_24ep"
    assert ln.task_name(0.0, 24, False) == "cifar_labelnoise_p0_24ep"
    assert ln.task_name(None, 2, True) == "quick_cifar_labelnoise_simclr_2ep"


def test_features_probe_fits_clean_and_noisy_labels(ln):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(10, 8)) * 4
    y_train, y_test = np.repeat(np.arange(10), 40), np.repeat(np.arange(10), 10)
    h_train = centres[y_train] + rng.normal(size=(400, 8))
    h_test = centres[y_test] + rng.normal(size=(100, 8))
    record = ln.features_probe(y_train, y_test, (0.0, 0.4), seed=0)(h_train, h_test)
    assert record["clean"]["accuracy"] > 0.9  # separable clusters
    assert set(record["noisy"]) == {"0", "0.4"}
    assert record["noisy"]["0"]["bits"] == record["clean"]["bits"]  # p = 0: the clean labels
    for rec in (record["clean"], *record["noisy"].values()):
        assert rec["n"] == 100 and 0.0 <= rec["low"] <= rec["accuracy"] <= rec["high"] <= 1.0


def _run(ln, method: str, seed: int, correct: np.ndarray, levels) -> dict:
    rec = {"accuracy": float(correct.mean()), "n": len(correct),
           "bits": common.pack_bits(correct)}
    probe = {"clean": rec, "noisy": {f"{p:g}": rec for p in levels}}
    if method == "ce":  # a classifier record: its own head's test metrics and the probe
        return {"method": method, "seed": seed, "epochs": 2, "probe": probe,
                "test": {"top1": {**rec, "accuracy": float(correct.mean()) / 2}}}
    return {"method": method, "seed": seed, "epochs": 2, "probes": [{"epoch": 2, **probe}]}


def test_summarise_tables_paper_column_and_paired_differences(ln):
    noise = (0.0, 0.4)
    runs = {}
    for seed in (0, 1):
        for m, acc in (("ce", 0.5), ("supcon", 0.6), ("projnce", 0.7)):
            for p in noise:
                correct = np.arange(100) < int(100 * (acc - p / 4))
                runs.setdefault((m, p), []).append(_run(ln, m, seed, correct, (p,)))
    text, summary = ln.summarise(runs, noise, ("ce", "supcon", "projnce"))
    assert "### Top-1 %, clean-label linear probe" in text and "CE's own head" in text
    assert "| projnce | 70.00 ± 0.00 (n=2) | 60.00 ± 0.00 (n=2) | 79.19 / 55.36 |" in text
    assert "| ce | 25.00 ± 0.00 (n=2) | 20.00 ± 0.00 (n=2) | 69.14 / 41.03 |" in text
    assert summary["clean/projnce/p0.4"]["top1"] == (60.0, 0.0)
    assert summary["clean/ce/p0"]["top1"] == (50.0, 0.0)  # the probe of CE's frozen h
    assert summary["diff/clean/projnce-supcon/p0.4"] == (10.0, 0.0)
    assert "| projnce − supcon | 0.4 | noisy | 10.00 ± 0.00 |" in text


def test_cli_needs_the_data_folder(ln, tmp_path):
    with pytest.raises(SystemExit):
        ln.main(["--quick", "--out", str(tmp_path)])


@pytest.mark.slow
def test_cifar_label_noise_quick_end_to_end_and_resume(tmp_path):
    if not SHARED_CIFAR10.is_dir():
        pytest.skip("shared CIFAR-10 folder not present")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "experiments.reproduce.cifar_label_noise", "--quick", "--out",
               str(tmp_path), "--data_dir", str(SHARED_CIFAR10)]

    def run() -> str:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600,
                              cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    first = run()
    runs = sorted((tmp_path / "runs").rglob("seed0.json"))
    # per noise level (2): ce, supcon, projnce, med_supcon; once: random_init, simclr
    assert len(runs) == 2 * 4 + 2
    name = "quick_cifar_labelnoise_2ep"
    assert (tmp_path / f"{name}.png").stat().st_size > 0
    assert (tmp_path / f"{name}_table.md").read_text().startswith(f"## {name}")
    summary = json.loads((tmp_path / f"{name}_summary.json").read_text())
    for key in ("clean/simclr/p0.4", "noisy/med_supcon/p0", "head/ce/p0.4",
                "diff/noisy/projnce-supcon/p0.4"):
        assert key in summary
    record = json.loads((tmp_path / "runs/quick_cifar_labelnoise_p0.4_2ep/ce/seed0.json")
                        .read_text())
    assert record["epochs"] == 2 and record["noise"] == 0.4
    assert record["trainer"] == common.TRAINER
    assert set(record["probe"]["noisy"]) == {"0.4"} and 0 <= record["test"]["ece"] <= 1
    supcon = json.loads((tmp_path / "runs/quick_cifar_labelnoise_p0.4_2ep/supcon/seed0.json")
                        .read_text())
    assert supcon["trainer"] == common.TRAINER and len(supcon["epoch_losses"]) == 2
    # The library's work directories: Orbax checkpoints, and the noisy labels in the config.
    work = common.work_path(tmp_path, "quick_cifar_labelnoise_p0.4_2ep", "supcon", 0)
    assert common.checkpoint_steps(work)
    assert json.loads((work / "config.json").read_text())["data"]["label_noise"] == 0.4
    assert "| med_supcon |" in first and "CE's own head" in first
    assert run().count("done, skipped") == 10
