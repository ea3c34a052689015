"""LEGACY: the hand-made training stack of the former ``mio.py``, kept only because
the CIFAR proxy scripts (``cifar_proxy``, ``cifar_label_noise``, ``_cifar_common``,
``_cifar_classifier``) still train with it; they and this file go once they run on the
library's trainer. ``python -m experiments.reproduce.mio`` is the reproduction.

Reproduce MIO at CPU scale: SimCLR vs MIO (A)-(D), plus lr and tau ablations.

Paper: S. Manna, S. Bhattacharya and U. Pal (2021), "MIO: Mutual Information Optimization using
Self-Supervised Binary Contrastive Learning", arXiv:2111.12664.

    python experiments/reproduce/mio.py             # main grid + lr/tau ablations, 3 seeds each
    python experiments/reproduce/mio.py --quick     # tiny smoke version
    python experiments/reproduce/mio.py --epochs 10 --seeds 0 1 2 --ablation_seeds 0

Proxy for MIO's CIFAR-10 Table 4 (docs/reproductions.md, "MIO protocol"; CIFAR-scale ResNet-50
runs do not fit a 2-core CPU): the cluttered 16x16 built-in digits with the small encoder and
augmentations of docs/reproductions.md
(shared with ``conditional_uniformity.py``), batch 128 (256 views), LARS lr 1.5, momentum 0.9,
weight decay 1e-6, BN and biases masked out of decay and trust ratio, linear warm-up over the
first tenth of the epochs from 1e-4, then cosine towards 1e-4 over 4x the trained epochs (MIO's
"slow decay": 250 of 1000 epochs). Projectors follow MIO's projection head (hidden 128, output
64, BN after the output): (A)/(C) one hidden layer, (B)/(D) two; (C)/(D) add the L2 term at the
official_mse scale with lambda 1. SimCLR (NT-Xent, tau 0.5) uses projector (A), so only the loss
differs. Probe: logistic regression on standardised frozen h, all labels and 5 per class, with
95 % bootstrap intervals. Ablations (model A): lr in {0.3, 0.5, 1.0, 1.5, 2.0} at tau 0.5 and
tau in {0.3, 0.5, 0.7} at lr 1.5 (MIO Sec. 4.1 ran the tau sweep at lr 0.3).

Resumable exactly like ``conditional_uniformity.py`` (per-run JSON + checkpoint).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import optax

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _legacy_cu as cu  # noqa: E402
import _synthetic_common as common  # noqa: E402

from contrastive_jax import losses  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "mio"
LRS = (0.3, 0.5, 1.0, 1.5, 2.0)
TAUS = (0.3, 0.5, 0.7)
#: method -> (hidden layers, L2 weight); SimCLR uses projector (A).
VARIANTS = {"simclr": (1, 0.0), "mio_A": (1, 0.0), "mio_B": (2, 0.0), "mio_C": (1, 1.0),
            "mio_D": (2, 1.0)}


def lars(lr: float):
    """LARS factory (steps_per_epoch, epochs) -> optax transform with MIO's schedule."""

    def make(steps_per_epoch: int, epochs: int) -> optax.GradientTransformation:
        warmup = max(1, epochs // 10) * steps_per_epoch
        total = 4 * epochs * steps_per_epoch
        schedule = optax.join_schedules(
            [optax.linear_schedule(1e-4, lr, warmup),
             optax.cosine_decay_schedule(lr, total - warmup, alpha=1e-4 / lr)],
            [warmup],
        )
        return optax.lars(schedule, weight_decay=1e-6, weight_decay_mask=cu.weight_mask,
                          trust_ratio_mask=cu.weight_mask, momentum=0.9)

    return make


def loss_for(method: str, tau: float) -> cu.LossFn:
    """NT-Xent for SimCLR, else MIO with the variant's L2 weight (instance ids as labels)."""
    if method == "simclr":
        return lambda z, ids, labels, meta: losses.nt_xent(z, ids, temperature=tau)
    l2 = VARIANTS[method][1]
    return lambda z, ids, labels, meta: losses.mio(z, ids, temperature=tau, l2_weight=l2)


def grid(main_seeds: list[int], ablation_seeds: list[int]) -> list[tuple[str, str, float, float, int]]:
    """(setting, method, lr, tau, seed) of every run; the ablations reuse main runs' settings.

    Each main seed starts with ``random_init``, the probe of the encoder every run of that seed
    starts from (the floor a pretrained encoder has to beat). The lr ablation runs SimCLR beside
    MIO (A): the paper sweeps lr for MIO only, but on this proxy SimCLR is unstable at lr 1.5, so the
    main-grid comparison needs the matched-lr control."""
    runs = [("main", m, 1.5, 0.5, s) for s in main_seeds for m in ("random_init", *VARIANTS)]
    runs += [(f"lr{lr}", m, lr, 0.5, s) for lr in LRS if lr != 1.5 for s in ablation_seeds
             for m in ("mio_A", "simclr")]
    runs += [(f"tau{t}", "mio_A", 1.5, t, s) for t in TAUS if t != 0.5 for s in ablation_seeds]
    return runs


def summarise(results: dict[tuple[str, str], list[dict]]) -> tuple[str, dict]:
    """Markdown tables (main grid; ablations) and a JSON summary of final probe accuracies."""
    summary, rows = {}, []
    for (setting, method), runs in results.items():
        full = [cu._acc(r, "full") for r in runs]
        shot = [cu._acc(r, "shot5") for r in runs]
        cis = " ".join(f"[{cu.final(r)['full']['low']:.3f}, {cu.final(r)['full']['high']:.3f}]"
                       for r in runs if cu.final(r).get("full"))
        summary[f"{setting}/{method}"] = {"full": common.mean_std(full),
                                          "shot5": common.mean_std(shot),
                                          "seeds": [r["seed"] for r in runs]}
        rows.append([setting, method, len(runs), common.fmt_mean_std(full),
                     common.fmt_mean_std(shot), cis])
    header = ["setting", "method", "seeds", "full-label acc", "5-shot acc",
              "95 % bootstrap CI (full, per seed)"]
    return common.markdown_table(header, rows), summary


def plot(summary: dict, path: Path) -> None:
    """Bar chart of the main grid and line plots of the lr and tau ablations (full-label)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    main = [(k.split("/")[1], v) for k, v in summary.items()
            if k.startswith("main/") and k != "main/random_init"]
    axes[0].bar([m for m, _ in main], [v["full"][0] for _, v in main],
                yerr=[v["full"][1] for _, v in main], capsize=3)
    axes[0].set(ylabel="linear probe accuracy", title="SimCLR vs MIO (lr 1.5, tau 0.5)")
    lowest = [v["full"][0] for k, v in summary.items() if k.startswith("main/")]
    axes[0].set_ylim(bottom=min(lowest, default=0.5) - 0.1)
    axes_specs = ((axes[1], "lr", LRS, 1.5, "LARS lr", ("mio_A", "simclr")),
                  (axes[2], "tau", TAUS, 0.5, "tau", ("mio_A",)))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (2 epochs, 1 seed)")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ablation_seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--aggregate_only", action="store_true",
                        help="train nothing; summarise the finished runs of the grid")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        raise ValueError("--epochs must be >= 1")
    if args.quick:
        args.epochs, args.seeds, args.ablation_seeds = 2, [0], []
    data = cu.digits_data()
    name = f"{'quick_' if args.quick else ''}digits_{args.epochs}ep"
    runs = grid(args.seeds, args.ablation_seeds)
    progress = common.Progress(len(runs), name)
    results: dict[tuple[str, str], list[dict]] = {}
    for setting, method, lr, tau, seed in runs:
        hidden_layers = VARIANTS["simclr" if method == "random_init" else method][0]
        arch = dataclasses.replace(cu.DIGITS_ARCH, hidden_layers=hidden_layers, last_bn=True)
        task = cu.Task(f"{name}/{setting}", arch, cu.augment_digits, args.epochs, 128,
                       cu.probe_epochs(args.epochs, 1))
        if args.aggregate_only:
            result = common.load_json(common.run_path(args.out, task.name, method, seed))
            if result is None:
                continue
        elif method == "random_init":
            result = cu.random_init_run(task, data, cu.digits_probe, seed, args.out, progress)
        else:
            result = cu.run_one(task, method, loss_for(method, tau), lars(lr), data,
                                cu.digits_probe, seed, args.out, progress)
        results.setdefault((setting, method), []).append(result)
    table, summary = summarise(results)
    common.save_json(args.out / f"{name}_summary.json", summary)
    plot(summary, args.out / f"{name}_mio.png")
    text = f"## {name} ({args.epochs} epochs)\n\n{table}"
    (args.out / f"{name}_table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
