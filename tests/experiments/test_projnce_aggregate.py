"""``projnce_synthetic --aggregate_only``: the committed tables from the committed records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.reproduce import projnce_synthetic

COMMITTED = Path(__file__).resolve().parents[2] / "experiments" / "results" / "projnce"


@pytest.mark.slow
def test_aggregate_only_rewrites_the_committed_table_and_summary(tmp_path):
    shutil.copytree(COMMITTED / "runs", tmp_path / "runs")
    projnce_synthetic.main(["--aggregate_only", "--out", str(tmp_path)])
    assert (tmp_path / "table.md").read_text() == (COMMITTED / "table.md").read_text()
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == json.loads((COMMITTED / "summary.json").read_text())
    assert (tmp_path / "mi_gmm.png").stat().st_size > 0


@pytest.mark.slow
def test_aggregate_only_leaves_a_missing_run_out_and_trains_nothing(tmp_path):
    shutil.copytree(COMMITTED / "runs" / "gmm" / "ce", tmp_path / "runs" / "gmm" / "ce")
    (tmp_path / "runs" / "gmm" / "ce" / "seed2.json").unlink()
    projnce_synthetic.main(["--aggregate_only", "--out", str(tmp_path)])
    table = (tmp_path / "table.md").read_text()
    assert "| CE | 2/2 |" in table and "binary" not in table
    assert not (tmp_path / "work").exists()


def test_aggregate_only_refuses_an_empty_directory_and_another_budget(tmp_path, capsys):
    with pytest.raises(SystemExit):
        projnce_synthetic.main(["--aggregate_only", "--out", str(tmp_path)])
    assert "no finished run" in capsys.readouterr().err
    record = json.loads((COMMITTED / "runs" / "gmm" / "ce" / "seed0.json").read_text())
    record["epochs"] = 3
    path = tmp_path / "runs" / "gmm" / "ce" / "seed0.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="budgets must not be mixed"):
        projnce_synthetic.main(["--aggregate_only", "--out", str(tmp_path)])
