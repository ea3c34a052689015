"""The quickstart over several seeds: per-seed accuracies, their spread, and the start of training.

Runs ``python -m contrastive_jax.quickstart --workdir WORKDIR/sS --config.seed=S [overrides]``
for each seed one after the other (a finished run only re-evaluates), then prints a
Markdown table: linear and kNN top-1 on the 360 test images with their 95 % bootstrap
intervals, the logged uniformity at steps 50, 100, 200 and at the end, then mean ± std
over the seeds (sample std, ddof=1) and the raw-pixel baselines. ``--plot`` draws each
seed's uniformity over the first ``--plot_steps`` steps, one panel per work directory of
``--compare`` and this one::

    python -m experiments.quickstart_seeds --seeds 3-12 --workdir runs/quickstart_seeds
    python -m experiments.quickstart_seeds --seeds 0-4 --workdir runs/qs_nowarmup \\
        --label "no warm-up" -- --config.loss.temperature_warmup_steps=0
    python -m experiments.quickstart_seeds --seeds 3-12 --workdir runs/quickstart_seeds \\
        --no_run --compare "no warm-up=runs/qs_nowarmup" --plot docs/img/uniformity.png

Arguments after ``--`` are passed to every quickstart run (config overrides).

``--records DIR`` also writes each seed's numbers as a small JSON record (``DIR/seed<S>.json``:
the accuracies with their intervals, the raw-pixel baselines, the uniformity marks and the
overrides); ``--from_records DIR`` prints the tables from such records instead of work
directories, and ``--readme`` prints the one-row summary table of README.md. The README's
table is (``--seeds`` naming the seeds recorded so far, 30-39 once the sweep is complete)::

    python -m experiments.quickstart_seeds --seeds 30-39 \\
        --from_records experiments/records/quickstart_seeds --readme
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

RESULTS_FILE = "eval.json"
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
MARKED_STEPS = (50, 100, 200)


def parse_seeds(text: str) -> list[int]:
    """``"3-12"`` or ``"0,1,5"`` (or a mix, ``"0,3-5"``) -> the listed seeds in order."""
    seeds: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"--seeds: {part!r} is not a seed or a range such as 3-12")
        seeds.extend(range(int(first), int(last or first) + 1))
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds lists a seed twice: {text!r}")
    return seeds


def run_seed(workdir: Path, seed: int, overrides: list[str]) -> None:
    """Trains and evaluates one seed (resumes or only re-evaluates a finished run)."""
    run_dir = workdir / f"s{seed}"
    cmd = [sys.executable, "-m", "contrastive_jax.quickstart", "--workdir", str(run_dir),
           f"--config.seed={seed}", *overrides]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def uniformity_curve(run_dir: Path) -> list[tuple[int, float]]:
    """(step, uniformity) of every logged training step of a run, in order."""
    curve = []
    with open(run_dir / METRICS_FILE, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if "uniformity" in record and "step" in record:
                curve.append((int(record["step"]), float(record["uniformity"])))
    return curve


def _interval(acc: dict) -> dict:
    return {k: acc[k] for k in ("accuracy", "low", "high")}


def seed_row(run_dir: Path) -> dict:
    """One seed's accuracies (linear, kNN: accuracy, low, high), raw-pixel baselines and
    uniformity marks, read from its work directory."""
    results = json.loads((run_dir / RESULTS_FILE).read_text(encoding="utf-8"))
    curve = dict(uniformity_curve(run_dir))
    return {
        "linear": _interval(results["linear"]["top1"]),
        "knn": _interval(results["knn"]["top1"]),
        "pixels": {p: {"top1": _interval(results["pixels"][p]["top1"])} for p in ("linear", "knn")},
        "uniformity": {s: curve.get(s) for s in MARKED_STEPS},
        "final_uniformity": curve[max(curve)] if curve else None,
        "final_step": results["step"],
    }


def recipe(run_dir: Path) -> dict:
    """The fields that make a quickstart recipe, read from the run's saved config."""
    config = json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    loss, encoder = config["loss"], config["model"]["encoder"]
    return {
        "seed": config["seed"],
        "dataset": config["data"]["dataset"],
        "batch_size": config["data"]["global_batch_size"],
        "encoder": encoder["name"], "width": encoder["width"],
        "loss": loss["name"], "weights": loss["weights"], "temperature": loss["temperature"],
        "warmup_temperature": loss["warmup_temperature"],
        "temperature_warmup_steps": loss["temperature_warmup_steps"],
        "epochs": config["train"]["epochs"],
    }


def write_record(directory: Path, seed: int, row: dict, run_recipe: dict) -> Path:
    """``directory/seed<seed>.json``: :func:`seed_row`'s numbers and the run's recipe."""
    if run_recipe["seed"] != seed:
        raise ValueError(f"the run of seed {seed} was trained with seed {run_recipe['seed']}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"seed{seed}.json"
    record = {"seed": seed, "recipe": run_recipe, **row,
              "uniformity": {str(s): u for s, u in row["uniformity"].items()}}
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_record(directory: Path, seed: int) -> dict:
    """The :func:`seed_row` of a record written by :func:`write_record`."""
    path = directory / f"seed{seed}.json"
    if not path.is_file():
        raise FileNotFoundError(f"--from_records: no record {path}")
    record = json.loads(path.read_text(encoding="utf-8"))
    if record["seed"] != seed:
        raise ValueError(f"{path} holds seed {record['seed']}, not {seed}")
    row = {k: v for k, v in record.items() if k not in ("seed", "recipe")}
    row["uniformity"] = {int(s): u for s, u in row["uniformity"].items()}
    return row


def _pct(acc: dict) -> str:
    return f"{100 * acc['accuracy']:.1f} % [{100 * acc['low']:.1f}, {100 * acc['high']:.1f}]"


def _u(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}".replace("-", "−")


def table(rows: dict[int, dict]) -> str:
    """The Markdown table of :func:`seed_row` rows by seed, with mean ± std and the baselines."""
    marks = " | ".join(f"u@{s}" for s in MARKED_STEPS)
    lines = [f"| seed | linear top-1 | kNN top-1 | {marks} | u at end |",
             "|---|---|---|" + "---|" * len(MARKED_STEPS) + "---|"]
    for seed, row in rows.items():
        us = " | ".join(_u(row["uniformity"][s]) for s in MARKED_STEPS)
        lines.append(f"| {seed} | {_pct(row['linear'])} | {_pct(row['knn'])} | {us} | "
                     f"{_u(row['final_uniformity'])} |")
    summary = {}
    for probe in ("linear", "knn"):
        values = [100 * row[probe]["accuracy"] for row in rows.values()]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        summary[probe] = (statistics.mean(values), spread, min(values))
    lin, knn = summary["linear"], summary["knn"]
    blanks = " |" * (len(MARKED_STEPS) + 1)
    lines.append(f"| mean ± std | {lin[0]:.1f} ± {lin[1]:.1f} % | {knn[0]:.1f} ± {knn[1]:.1f} % |"
                 + blanks)
    lines.append(f"| lowest | {lin[2]:.1f} % | {knn[2]:.1f} % |" + blanks)
    pixels = next(iter(rows.values()))["pixels"]
    lines.append("")
    lines.append(f"Raw pixels (same probes): linear {100 * pixels['linear']['top1']['accuracy']:.1f} %, "
                 f"kNN {100 * pixels['knn']['top1']['accuracy']:.1f} %.")
    return "\n".join(lines)


def _seed_label(seeds: list[int]) -> str:
    """``30–39`` for a run of consecutive seeds, else ``0, 3, 5``."""
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def readme_table(rows: dict[int, dict]) -> str:
    """README.md's summary of a sweep: every seed's linear top-1, mean ± std, the lowest and
    the raw pixels' linear top-1."""
    values = [100 * row["linear"]["accuracy"] for row in rows.values()]
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    pixels = 100 * next(iter(rows.values()))["pixels"]["linear"]["top1"]["accuracy"]
    return "\n".join([
        f"| linear top-1, seeds {_seed_label(list(rows))} | mean ± std | lowest | raw pixels |",
        "|---|---|---|---|",
        f"| {' / '.join(f'{v:.1f}' for v in values)} % | {statistics.mean(values):.1f} ± "
        f"{spread:.1f} % | {min(values):.1f} % | {pixels:.1f} % |",
    ])


def plot(panels: list[tuple[str, Path]], steps: int, path: Path) -> None:
    """Each seed's uniformity over the first ``steps`` steps, one panel per (label, workdir)
    holding every seed run under that work directory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), sharey=True,
                             squeeze=False)
    for ax, (label, workdir) in zip(axes[0], panels, strict=True):
        runs = sorted(workdir.glob(f"s*/{METRICS_FILE}"), key=lambda p: int(p.parent.name[1:]))
        for metrics_file in runs:
            run_dir, seed = metrics_file.parent, metrics_file.parent.name[1:]
            curve = [(s, u) for s, u in uniformity_curve(run_dir) if s <= steps]
            ax.plot(*zip(*curve, strict=True), label=f"seed {seed}", linewidth=1.2)
        ax.axhline(-0.2, color="grey", linestyle=":", linewidth=1)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    axes[0][0].set_ylabel("uniformity (log mean Gaussian potential)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    print(f"wrote {path}")


def _panel(text: str) -> tuple[str, Path]:
    """``"LABEL=DIR"`` or ``"DIR"`` -> (label, directory)."""
    label, sep, directory = text.partition("=")
    return (label, Path(directory)) if sep else (Path(text).name, Path(text))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    overrides: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, overrides = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-9", help="e.g. 3-12 or 0,1,5")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="one sub-directory per seed (required unless --from_records)")
    parser.add_argument("--label", default=None, help="this run's panel title in --plot")
    parser.add_argument("--no_run", action="store_true", help="only read finished runs")
    parser.add_argument("--compare", action="append", default=[],
                        help="another sweep's [LABEL=]WORKDIR, plotted beside this one "
                             "(repeatable)")
    parser.add_argument("--plot", type=Path, default=None, help="PNG of the uniformity curves")
    parser.add_argument("--plot_steps", type=int, default=200)
    parser.add_argument("--records", type=Path, default=None,
                        help="also write each seed's numbers to RECORDS/seed<S>.json")
    parser.add_argument("--from_records", type=Path, default=None,
                        help="read the seeds' numbers from records written by --records")
    parser.add_argument("--readme", action="store_true",
                        help="print README.md's one-row summary instead of the per-seed table")
    args = parser.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as err:
        parser.error(str(err))
    if args.from_records is not None:
        if args.workdir is not None or args.records is not None or args.plot is not None:
            parser.error("--from_records reads records only: no --workdir, --records or --plot")
        try:
            rows = {s: read_record(args.from_records, s) for s in seeds}
        except (FileNotFoundError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(readme_table(rows) if args.readme else table(rows))
        return 0
    if args.workdir is None:
        parser.error("--workdir is required unless --from_records is given")
    if not args.no_run:
        for seed in seeds:
            run_seed(args.workdir, seed, overrides)
    missing = [s for s in seeds if not (args.workdir / f"s{s}" / RESULTS_FILE).exists()]
    if missing:
        print(f"error: no {RESULTS_FILE} for seeds {missing} under {args.workdir}", file=sys.stderr)
        return 2
    rows = {s: seed_row(args.workdir / f"s{s}") for s in seeds}
    print(readme_table(rows) if args.readme else table(rows))
    if args.records is not None:
        for seed, row in rows.items():
            run_recipe = recipe(args.workdir / f"s{seed}")
            print(f"wrote {write_record(args.records, seed, row, run_recipe)}")
    if args.plot is not None:
        panels = [_panel(text) for text in args.compare]
        panels.append((args.label or args.workdir.name, args.workdir))
        plot(panels, args.plot_steps, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
