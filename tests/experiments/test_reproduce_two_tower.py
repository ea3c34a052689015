"""The two-tower (CLIP / SigLIP) toy driver, its configs and its benchmark.

The unmarked tests check the pieces in seconds; the ``slow`` one runs the driver's ``--quick``
mode end to end, twice, to check that finished runs are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contrastive_jax.train import objective
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import build_model
from experiments.configs import two_tower as configs
from experiments.reproduce import _common as common
from experiments.reproduce import two_tower
from tests.experiments.scripts import EXPERIMENTS, load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("loss", sorted(configs.LOSSES))
@pytest.mark.parametrize("pairing", sorted(configs.PAIRINGS))
def test_every_config_builds_a_two_tower_term(loss, pairing):
    config = configs.get_config(f"{loss},{pairing},5")
    (term,) = objective.parse_terms(config.loss)
    assert term.name == loss and term.target == configs.PAIRINGS[pairing]
    assert {**term.kwargs, "temperature": term.temperature} == configs.LOSSES[loss]
    assert config.train.epochs == 5 and config.data.num_views == 2
    build_model(parse(config).model, seed=config.seed)


@pytest.mark.parametrize("spec", ["clap", "clip,crossed", "clip,paired,5,6"])
def test_bad_specs_are_refused(spec):
    with pytest.raises(ValueError, match="two_tower config"):
        configs.get_config(spec)


def test_retrieval_counts_own_partner_as_the_hit():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(6, 4))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    exact = two_tower.retrieval(z, z)
    assert exact["i2t"] == exact["t2i"] == 1.0 and exact["n"] == 6
    swapped = two_tower.retrieval(z, z[[1, 0, 2, 3, 4, 5]])
    assert swapped["i2t"] == pytest.approx(4 / 6)
    bits = common.unpack_bits(swapped["i2t_bits"], 6)
    assert bits.tolist() == [False, False, True, True, True, True]


def test_summary_reports_the_paired_difference_per_seed():
    def run(seed, pairing, hits):
        bits = np.zeros(10, bool)
        bits[:hits] = True
        return {"seed": seed, "pairing": pairing, "n": 10, "i2t": hits / 10, "t2i": hits / 10,
                "i2t_bits": common.pack_bits(bits), "t2i_bits": common.pack_bits(bits)}

    results = {("clip", "paired"): [run(s, "paired", 8 + s % 2) for s in range(3)],
               ("clip", "shuffled"): [run(s, "shuffled", 1) for s in range(3)]}
    table, summary = two_tower.summarise(results, [0, 1, 2])
    diff = summary["clip/paired_minus_shuffled"]
    assert [d["diff"] for d in diff["per_seed"]] == pytest.approx([0.7, 0.8, 0.7])
    assert all(d["low"] > 0 for d in diff["per_seed"])
    assert diff["t_interval"][0] > 0 and "paired - shuffled" in table


@pytest.mark.slow
def test_benchmark_cases_agree_at_a_small_size():
    """Every single-device case of the benchmark computes the same loss and gradients."""
    bench = load_script("two_tower", EXPERIMENTS / "bench")
    for loss in ("clip", "siglip"):
        outs = [bench.case_fn(f"{loss}:{v}", 64, 8) for v in ("dense", "block", "naive")]
        values = [fn(*args) for fn, args in outs]
        for value, grads in values[1:]:
            np.testing.assert_allclose(value, values[0][0], rtol=1e-5)
            for g, r in zip(grads[:3], values[0][1][:3], strict=True):
                np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_quick_mode_runs_and_skips_finished_runs(tmp_path):
    cmd = [sys.executable, "-m", "experiments.reproduce.two_tower", "--quick", "--losses", "siglip",
           "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, check=True, cwd=ROOT, env=env, capture_output=True, timeout=1800)
    run = json.loads((tmp_path / "runs/quick_digits_2ep/siglip_paired/seed0.json").read_text())
    assert run["n"] == 360 and 0.0 <= run["i2t"] <= 1.0 and run["epochs"] == 2
    again = subprocess.run(cmd, check=True, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)
    assert "done, skipped" in again.stdout
