"""The quickstart seed sweep's committed records and the README table they give."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contrastive_jax.configs import quickstart as quickstart_config
from experiments import quickstart_seeds

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "experiments" / "records" / "quickstart_seeds"
README_SEEDS = list(range(30, 40))
DIGITS_TRAIN_EXAMPLES = 1437  # the cluttered digits' training split


def _accuracy(value: float) -> dict:
    return {"top1": {"accuracy": value, "low": value - 0.02, "high": value + 0.02, "bits": "ff"}}


def _fake_run(run_dir: Path, seed: int, linear: float) -> None:
    run_dir.mkdir(parents=True)
    results = {"step": 660, "linear": _accuracy(linear), "knn": _accuracy(linear - 0.01),
               "pixels": {"linear": _accuracy(0.158), "knn": _accuracy(0.564)}}
    (run_dir / "eval.json").write_text(json.dumps(results))
    curve = {50: -2.5, 100: -2.6, 200: -2.4, 660: -2.2}
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "uniformity": u}) + "\n" for s, u in curve.items()))
    config = {"seed": seed, "data": {"dataset": "digits_cluttered", "global_batch_size": 128},
              "model": {"encoder": {"name": "resnet18", "width": 0.25}},
              "loss": {"name": "sincere+global_uniformity", "weights": [1.0, 0.5],
                       "temperature": 0.2, "warmup_temperature": 1.0,
                       "temperature_warmup_steps": 100},
              "train": {"epochs": 60}}
    (run_dir / "config.json").write_text(json.dumps(config))


def test_records_give_the_same_tables_as_the_work_directories(tmp_path, capsys):
    for seed, acc in ((3, 0.9), (4, 0.8), (5, 0.85)):
        _fake_run(tmp_path / "runs" / f"s{seed}", seed, acc)
    records = tmp_path / "records"
    args = ["--seeds", "3-5", "--no_run", "--workdir", str(tmp_path / "runs")]
    assert quickstart_seeds.main([*args, "--records", str(records)]) == 0
    from_runs = capsys.readouterr().out.split("\nwrote ")[0]
    saved = json.loads((records / "seed4.json").read_text())
    assert saved["recipe"]["width"] == 0.25 and saved["recipe"]["seed"] == 4
    assert "bits" not in json.dumps(saved)  # only the numbers the tables print
    assert quickstart_seeds.main(["--seeds", "3-5", "--from_records", str(records)]) == 0
    assert capsys.readouterr().out.strip() == from_runs.strip()
    assert quickstart_seeds.main(["--seeds", "3-5", "--from_records", str(records),
                                  "--readme"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        "| linear top-1, seeds 3–5 | mean ± std | lowest | raw pixels |",
        "|---|---|---|---|",
        "| 90.0 / 80.0 / 85.0 % | 85.0 ± 5.0 % | 80.0 % | 15.8 % |",
    ]
    assert quickstart_seeds.main(["--seeds", "3-6", "--from_records", str(records)]) == 2
    assert "no record" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        quickstart_seeds.main(["--seeds", "3-5", "--from_records", str(records),
                               "--workdir", str(tmp_path)])


def _readme_table() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^\| linear top-1, seeds .*?(?=\n\n)", text, flags=re.M | re.S)
    assert match, "README.md has no quickstart seed table"
    return match.group(0)


def _packaged_recipe() -> dict:
    """The recipe fields of the packaged quickstart config (what ``make quickstart`` runs)."""
    config = quickstart_config.get_config()
    return {
        "dataset": config.data.dataset, "batch_size": config.data.global_batch_size,
        "encoder": config.model.encoder.name, "width": config.model.encoder.width,
        "loss": config.loss.name, "weights": list(config.loss.weights),
        "temperature": config.loss.temperature,
        "warmup_temperature": config.loss.warmup_temperature,
        "temperature_warmup_steps": config.loss.temperature_warmup_steps,
        "epochs": config.train.epochs,
    }


def test_the_readme_seed_table_is_what_the_committed_records_give():
    """README.md's seed table is --from_records --readme of the committed records, no more,
    and every record is a run of the packaged quickstart config."""
    recorded = sorted(int(p.stem[4:]) for p in RECORDS.glob("seed*.json"))
    assert recorded, f"no records under {RECORDS}"
    assert set(recorded) <= set(README_SEEDS)
    rows = {s: quickstart_seeds.read_record(RECORDS, s) for s in recorded}
    packaged = _packaged_recipe()
    steps = packaged["epochs"] * (DIGITS_TRAIN_EXAMPLES // packaged["batch_size"])
    for seed, row in rows.items():
        recipe = json.loads((RECORDS / f"seed{seed}.json").read_text())["recipe"]
        assert recipe == {**packaged, "seed": seed}
        assert row["final_step"] == steps
    # The table holds the recorded seeds, all measured on the quickstart's current input path
    # (a sweep still under way lists the seeds it has finished).
    assert _readme_table() == quickstart_seeds.readme_table(rows)


QUARTER_RECORDS = ROOT / "experiments" / "records" / "quickstart_seeds_width025"


def test_the_quarter_width_records_are_the_table_of_the_quickstart_page():
    """The quarter-width seeds (the default until 2026-11-29): the same recipe at width 0.25,
    the ten seeds 30-39, and docs/quickstart.md's table is what their records give."""
    recorded = sorted(int(p.stem[4:]) for p in QUARTER_RECORDS.glob("seed*.json"))
    assert recorded == README_SEEDS
    rows = {s: quickstart_seeds.read_record(QUARTER_RECORDS, s) for s in recorded}
    quarter = {**_packaged_recipe(), "width": 0.25}
    for seed in recorded:
        recipe = json.loads((QUARTER_RECORDS / f"seed{seed}.json").read_text())["recipe"]
        assert recipe == {**quarter, "seed": seed}
    page = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    assert quickstart_seeds.readme_table(rows) in page
