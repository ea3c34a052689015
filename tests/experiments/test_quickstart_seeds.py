"""The quickstart seed sweep's reading of finished runs (experiments/quickstart_seeds.py)."""

from __future__ import annotations

import json

import pytest

from experiments import quickstart_seeds


def _accuracy(value: float) -> dict:
    return {"top1": {"accuracy": value, "low": value - 0.02, "high": value + 0.02}}


def _fake_run(run_dir, linear: float, knn: float, uniformity: dict[int, float]) -> None:
    run_dir.mkdir(parents=True)
    results = {"step": max(uniformity), "linear": _accuracy(linear), "knn": _accuracy(knn),
               "pixels": {"linear": _accuracy(0.158), "knn": _accuracy(0.564)}}
    (run_dir / "eval.json").write_text(json.dumps(results))
    lines = [json.dumps({"step": s, "uniformity": u, "loss": 1.0}) for s, u in uniformity.items()]
    lines.insert(1, json.dumps({"step": 60, "knn_top1": 0.5}))  # an evaluation record
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_seeds_are_ranges_or_lists():
    assert quickstart_seeds.parse_seeds("3-5,9") == [3, 4, 5, 9]
    for bad in ("a", "3-", "1,1"):
        with pytest.raises(ValueError, match="--seeds"):
            quickstart_seeds.parse_seeds(bad)


def test_table_gives_each_seed_then_mean_std_and_lowest(tmp_path):
    _fake_run(tmp_path / "s0", 0.90, 0.88, {50: -0.5, 100: -0.9, 200: -1.2, 660: -2.1})
    _fake_run(tmp_path / "s1", 0.80, 0.84, {50: -0.4, 100: -0.7, 660: -1.9})
    rows = {s: quickstart_seeds.seed_row(tmp_path / f"s{s}") for s in (0, 1)}
    text = quickstart_seeds.table(rows)
    assert "| 0 | 90.0 % [88.0, 92.0] | 88.0 % [86.0, 90.0] | −0.50 | −0.90 | −1.20 | −2.10 |" in text
    assert "| 1 | 80.0 % [78.0, 82.0] | 84.0 % [82.0, 86.0] | −0.40 | −0.70 | — | −1.90 |" in text
    assert "| mean ± std | 85.0 ± 7.1 % | 86.0 ± 2.8 % |" in text
    assert "| lowest | 80.0 % | 84.0 % |" in text
    assert "linear 15.8 %, kNN 56.4 %" in text


def test_a_sweep_with_a_missing_run_is_an_error(tmp_path, capsys):
    _fake_run(tmp_path / "s0", 0.9, 0.9, {50: -0.5})
    assert quickstart_seeds.main(["--seeds", "0-1", "--workdir", str(tmp_path), "--no_run"]) == 2
    assert "seeds [1]" in capsys.readouterr().err
