"""experiments/bench/losses.py: the quick mode prints a full table; the memory
subprocess reports a peak for a case that fits and refuses one that does not."""

from __future__ import annotations

import inspect
import re

import pytest

from tests.experiments.scripts import EXPERIMENTS, load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("losses", EXPERIMENTS / "bench")


@pytest.mark.slow
def test_quick_mode_prints_every_case_with_a_time_and_a_ratio(bench, capsys):
    bench.main(["--quick", "--no-memory"])
    out = capsys.readouterr().out
    times_table, _, naive_table = out.partition("time / naive")
    rows = [ln for ln in times_table.splitlines() if ln.startswith("| 256 |")]
    cases = [row.split("|")[2].strip() for row in rows]
    assert cases == ["matmul", *bench.cases_for(["supcon", "nt_xent"])]
    for row in rows:
        _, _, _, seconds, ratio, memory, _ = row.split("|")
        assert float(seconds) > 0 and float(ratio) > 0 and memory.strip() == "-"
    assert next(r for r in rows if "| matmul |" in r).split("|")[4].strip() == "1.00"
    paired = [ln for ln in naive_table.splitlines() if ln.startswith("| 256 |")]
    assert [row.split("|")[2].strip() for row in paired] == [
        f"{name}:{variant}" for name in ("supcon", "nt_xent") for variant in ("dense", "block", "auto")
    ]
    for row in paired:
        assert re.fullmatch(r"\d+\.\d\d \[\d+\.\d\d-\d+\.\d\d\]", row.split("|")[3].strip())


def test_paired_ratio_is_the_median_of_per_round_ratios(bench):
    assert bench.paired_ratio([2.0, 3.0, 8.0], [1.0, 3.0, 2.0]) == "2.00 [1.50-3.00]"


@pytest.mark.slow
def test_peak_memory_subprocess(bench, monkeypatch):
    assert re.fullmatch(r"\d+ MiB", bench.peak_memory("supcon:block", 64))
    monkeypatch.setattr(bench, "_available_bytes", lambda: 1024)
    fn, args = bench.case_fn("supcon:dense", 64)
    assert not bench.fits(fn, args)


def test_default_losses_cover_every_registered_loss(bench):
    from contrastive_jax import losses

    cases = bench.cases_for(list(bench.LOSSES))
    names = {case.split(":")[0].removesuffix("_cosine") for case in cases}
    # The two-tower losses have their own benchmark, experiments/bench/two_tower.py; the
    # losses without a streamed form (no block_size: the per-row label losses on class
    # scores) are not contrastive [N, N] costs to compare with a matrix product.
    one_tower = {
        n for n in losses.names()
        if losses.second_argument(n) != "paired_embeddings"
        and ("block_size" in inspect.signature(losses.get(n)).parameters
             or n in bench.NOT_STREAMED)
    }
    assert names == one_tower
    # Every loss with an [N, N] form has a dense and a streamed case.
    for name in one_tower - set(bench.NOT_STREAMED):
        assert f"{name}:dense" in cases and f"{name}:block" in cases
    assert "projnce:classes" in cases and "supcon:classes" not in cases


@pytest.mark.slow  # a memory subprocess per case; test_peak_memory_subprocess runs one
def test_memory_only_mode_reports_one_call_per_case(bench, capsys):
    bench.main(["--sizes", "64", "--losses", "projnce,global_uniformity", "--memory-only",
                "--variants", "block,classes"])
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| 64 |")]
    assert [row.split("|")[2].strip() for row in rows] == [
        "projnce:block", "projnce:classes", "global_uniformity:block"
    ]
    for row in rows:
        _, _, _, seconds, ratio, memory, _ = row.split("|")
        assert float(seconds) > 0 and float(ratio) > 0
        assert re.fullmatch(r"\d+ MiB", memory.strip())


def test_soft_loss_inputs_give_every_row_kernel_neighbours(bench):
    """SoftSupCon/SoftNCE rows are clustered: after normalisation every row with a
    classmate has one within the l1 bandwidth (0.6), and no row of another class is."""
    import numpy as np

    z, labels = bench._inputs("soft_supcon", 1024)
    z = np.asarray(z / np.linalg.norm(z, axis=1, keepdims=True))
    labels = np.asarray(labels)
    for i in range(0, 1024, 97):
        l1 = np.abs(z - z[i]).sum(axis=1)
        mates = (labels == labels[i]) & (np.arange(1024) != i)
        if mates.any():
            assert l1[mates].min() < 0.6
        assert l1[labels != labels[i]].min() > 0.6
