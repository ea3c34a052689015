"""Reproduce MIO at CPU scale: SimCLR vs MIO (A)-(D), plus lr and tau ablations.

Paper: S. Manna, S. Bhattacharya and U. Pal (2021), "MIO: Mutual Information Optimization using
Self-Supervised Binary Contrastive Learning", arXiv:2111.12664.

    python -m experiments.reproduce.mio             # main grid + lr/tau ablations, 3 seeds each
    python -m experiments.reproduce.mio --quick     # tiny smoke version
    python -m experiments.reproduce.mio --epochs 10 --seeds 0 1 2 --ablation_seeds 0

Proxy for MIO's CIFAR-10 Table 4 (CIFAR-scale ResNet-50 runs do not fit a 2-core CPU): the
configs are ``experiments/configs/mio.py`` (cluttered 16x16 digits, the small encoder, batch
128, LARS lr 1.5 with MIO's warm-up and slow cosine decay, MIO's projection heads (A)-(D)).
Every run pretrains with the library's trainer; the probe is a logistic regression on
standardised frozen encoder features, all labels and 5 per class, with 95 % bootstrap
intervals. Ablations (model A): lr in {0.3, 0.5, 1.0, 1.5, 2.0} at tau 0.5 and tau in
{0.3, 0.5, 0.7} at lr 1.5 (MIO Sec. 4.1 ran its tau sweep at lr 0.3).

Resumable like ``conditional_uniformity``: per-run JSON under ``<out>/runs`` (skipped when
present), the library's checkpoints under ``<out>/work`` (an unfinished run resumes).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from experiments.configs import mio as configs
from experiments.reproduce import _common as common

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "mio"
LRS = (0.3, 0.5, 1.0, 1.5, 2.0)
TAUS = (0.3, 0.5, 0.7)
SHOTS = 5
RESAMPLES = 1000


def grid(main_seeds: list[int], ablation_seeds: list[int]) -> list[tuple[str, str, float, float, int]]:
    """(setting, method, lr, tau, seed) of every run; the ablations reuse main runs' settings.

    Each main seed starts with ``random_init``, the probe of the encoder every run of that seed
    starts from (the floor a pretrained encoder has to beat). The lr ablation runs SimCLR beside
    MIO (A): the paper sweeps lr for MIO only, but a comparison of the two at the one rate 1.5
    says little without the matched-rate control."""
    runs = [("main", m, configs.LR, configs.TAU, s) for s in main_seeds
            for m in ("random_init", *configs.VARIANTS)]
    runs += [(f"lr{lr}", m, lr, configs.TAU, s) for lr in LRS if lr != configs.LR
             for s in ablation_seeds for m in ("mio_A", "simclr")]
    runs += [(f"tau{t}", "mio_A", configs.LR, t, s) for t in TAUS if t != configs.TAU
             for s in ablation_seeds]
    return runs


def run_one(name: str, setting: str, method: str, lr: float, tau: float, seed: int, epochs: int,
            out: Path, progress: common.Progress) -> dict:
    """One run of the grid (skipped when its JSON exists); ``random_init`` probes the encoder
    the seed's runs start from, without training."""
    task = f"{name}/{setting}"
    path = common.run_path(out, task, method, seed)
    label = f"{task}/{method}/seed{seed}"
    budget = {"epochs": 0 if method == "random_init" else epochs, "trainer": common.TRAINER}
    done = common.load_finished(path, budget, progress, label)
    if done is not None:
        return done
    config = configs.get_config(
        f"{'simclr' if method == 'random_init' else method},{lr},{tau},{epochs}"
    )
    config.seed = seed
    probe = common.labelled_probe(seed, SHOTS, RESAMPLES)
    if method == "random_init":
        start = time.time()
        record = probe(0, common.initial_embeddings(config, ("train", "test")))
        outcome = {"probes": [record], "seconds": time.time() - start}
    else:
        outcome = common.pretrain_and_probe(
            config, common.work_path(out, task, method, seed), epochs=epochs, probes=(epochs,),
            splits=("train", "test"), probe=probe, progress=progress, label=label,
        )
    result = {"task": task, "method": method, "seed": seed, "lr": lr, "tau": tau,
              "batch": int(config.data.global_batch_size), **budget, **outcome}
    common.save_json(path, result)
    progress.log(f"{label}: {common.final(result)['summary']} ({result['seconds']:.0f}s)")
    return result


def plot(summary: dict, path: Path) -> None:
    """Bar chart of the main grid and line plots of the lr and tau ablations (full-label)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.2), layout="constrained")
    axes = fig.subplots(1, 3)
    main = [(k.split("/")[1], v) for k, v in summary.items()
            if k.startswith("main/") and k != "main/random_init"]
    axes[0].bar([m for m, _ in main], [v["full"][0] for _, v in main],
                yerr=[v["full"][1] for _, v in main], capsize=3)
    axes[0].set(ylabel="linear probe accuracy", title="SimCLR vs MIO (lr 1.5, tau 0.5)")
    lowest = [v["full"][0] for k, v in summary.items() if k.startswith("main/")]
    axes[0].set_ylim(bottom=min(lowest, default=0.5) - 0.1)
    axes_specs = ((axes[1], "lr", LRS, configs.LR, "LARS lr", ("mio_A", "simclr")),
                  (axes[2], "tau", TAUS, configs.TAU, "tau", ("mio_A",)))
    for ax, key, values, main_value, label, methods in axes_specs:
        for method in methods:
            pts = [(x, summary.get(f"main/{method}") if x == main_value
                    else summary.get(f"{key}{x}/{method}")) for x in values]
            pts = [(x, v) for x, v in pts if v is not None]
            ax.errorbar([x for x, _ in pts], [v["full"][0] for _, v in pts],
                        yerr=[v["full"][1] for _, v in pts], marker="o", capsize=3, label=method)
        ax.set(xlabel=label, title=f"{key} ablation")
    if "main/random_init" in summary:
        for ax in axes:
            ax.axhline(summary["main/random_init"]["full"][0], color="grey", ls="--",
                       label="random-init encoder")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (2 epochs, 1 seed)")
    parser.add_argument("--epochs", type=int, default=configs.EPOCHS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ablation_seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--aggregate_only", action="store_true",
                        help="train nothing; summarise the finished runs of the grid")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be >= 1")
    if args.quick:
        args.epochs, args.seeds, args.ablation_seeds = 2, [0], []
    name = f"{'quick_' if args.quick else ''}digits_{args.epochs}ep"
    runs = grid(args.seeds, args.ablation_seeds)
    progress = common.Progress(len(runs), name)
    results: dict[tuple[str, str], list[dict]] = {}
    for setting, method, lr, tau, seed in runs:
        if args.aggregate_only:
            result = common.load_json(common.run_path(args.out, f"{name}/{setting}", method, seed))
            if result is None:
                continue
        else:
            result = run_one(name, setting, method, lr, tau, seed, args.epochs, args.out, progress)
        results.setdefault((setting, method), []).append(result)
    table, summary = common.summarise_probes(results)
    args.out.mkdir(parents=True, exist_ok=True)
    common.save_json(args.out / f"{name}_summary.json", summary)
    plot(summary, args.out / f"{name}_mio.png")
    text = f"## {name} ({args.epochs} epochs)\n\n{table}"
    (args.out / f"{name}_table.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
