"""Reproduce SINCERE vs SupCon (Feeney & Hughes 2023) and MIO (Manna et al. 2021) on CIFAR-10.

Both at CPU scale; the papers' full references are in docs/reproductions.md.

    python -m experiments.reproduce.cifar_proxy                       # both claims, seeds 0 1 2
    python -m experiments.reproduce.cifar_proxy --claims mio --seeds 0 --mio_optimizer lars
    python -m experiments.reproduce.cifar_proxy --aggregate_only      # tables/plots of finished runs
    python -m experiments.reproduce.cifar_proxy --quick               # smoke run (< 2 min), own out dir

Proxy settings (both claims), chosen so that a run takes about 4 minutes on an idle 2-core machine.
Measured with ``nice -n 10`` beside a background job (so upper bounds; the process had about one
core): about 6.5 s per epoch, 8 s of compilation per method, 50-70 s per probe (5,000 x 128
logistic regression), so 4-5 min per 36-epoch run; the default grid (21 runs + 6 random-init
probes) 1.5-2 h there, less on an idle machine. A 16x16 down-sampled variant
(``_cifar_common.load_split(downsample=True)``, stride-1 first convolution) cost the same per step
and was not better (random init 0.391, SimCLR/LARS 0.368 after 12 epochs), so runs use 32x32:

* data: class-balanced subsets of the shared CIFAR-10 image folder (``_cifar_common.py``),
  NUM_TRAIN training and NUM_TEST test images at 32x32, float in [0, 1], fixed subset seed;
* encoder: three 3x3 stride-2 ReLU convolutions 32-64-128 on RGB, global average pool, h in R^128
  (``conditional_uniformity.Arch``); projector Linear(128, 128)-BN-ReLU-Linear(128, 64);
* augmentation: ``_cifar_common.augment_cifar`` (pad-4 random crop, flip, contrast, brightness and
  per-channel colour gains), two views, batch 128 (256 views), last partial batch dropped;
* probe: logistic regression on standardised frozen h of the NUM_TRAIN training images, scored on the
  NUM_TEST test images, 95 % percentile bootstrap intervals (1,000 resamples). Every seed also
  probes its random-init encoder (the trained runs' starting point), so a reader can see what
  training added.

``--claims sincere`` (SINCERE's Tables 1-2 and Fig. 2): SupCon and SINCERE, tau 0.1, class
labels, the digits proxies' optimiser (AdamW lr 1e-3 constant, weight decay 5e-5 on weights), same
encoder and projector (no BN after the output). Reported as in ``sincere.py``, whose aggregation
and tables are reused: initial and final pretraining loss (means of the per-epoch losses over the
first and the last fifth of the epochs) beside the constant-embedding values and SupCon's floor
E log|P_t|; the class-by-class mean cosine similarity of the test set for the L2-normalised
projector output (BN with the test set's statistics) and for h (within = mean diagonal, between =
mean off-diagonal; the paper has SupCon - SINCERE = 0.06 within and 0.11 between); linear top-1
and top-5 with bootstrap intervals and the paired bootstrap of SINCERE - SupCon.

``--claims mio`` (MIO's Table 4; ``mio.py``'s proxy with CIFAR in place of the digits): SimCLR
(NT-Xent) and MIO (A)-(D) with ``mio.py``'s projectors (BN after the output) and losses, tau 0.5;
full-label and 5-shot probe accuracy with bootstrap intervals. Optimiser (``--mio_optimizer``):
``adamw`` (default; the AdamW above, a fallback for the paper's LARS) or ``lars`` (``mio.py``'s
LARS lr 1.5 and schedule). In pilots of this proxy (seed 0, SimCLR, full-label probe) LARS did
not move the probe off the random-init encoder's 0.379 (0.373 at lr 1.5 after 10 epochs, 0.381
after 36, 0.373 at lr 0.3 after 12), while AdamW reached 0.408 after 12 epochs and 0.440 after 36.
SupCon (AdamW) reached top-1 0.431 after 4 epochs, SINCERE 0.417 (random init 0.378).

Resumable like ``conditional_uniformity.py``: each run writes
``<out>/runs/<task>/<method>/seed<k>.json`` (task ``cifar_sincere_<E>ep`` or
``cifar_mio_<optimizer>_<E>ep``; method ``random_init`` is the random-init probe) and is skipped
when that exists; an unfinished run resumes from its checkpoint; a stored run of another budget
is refused.
``<task>_summary.json``, ``<task>_table.md`` and ``<task>.png`` go to ``--out`` (default
``experiments/results/cifar_proxy``; ``--quick`` defaults to ``runs/cifar_proxy_quick``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _cifar_common as cifar  # noqa: E402
import _legacy_cu as cu  # noqa: E402
import _legacy_mio as mio  # noqa: E402
import _synthetic_common as common  # noqa: E402
import sincere  # noqa: E402

from contrastive_jax import eval as eval_lib  # noqa: E402
from contrastive_jax import losses  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "cifar_proxy"
QUICK_OUT = ROOT / "runs" / "cifar_proxy_quick"
NUM_TRAIN, NUM_TEST, EPOCHS = 5000, 2000, 36
QUICK_TRAIN, QUICK_TEST, QUICK_EPOCHS = 256, 200, 2
DOWNSAMPLE = False
RUN_OPTIONS = cifar.RunOptions(EPOCHS, DEFAULT_OUT, QUICK_OUT, QUICK_EPOCHS, NUM_TRAIN, NUM_TEST,
                               QUICK_TRAIN, QUICK_TEST)
BATCH = 128
ARCH = cu.Arch(convs=((32, 2), (64, 2), (128, 2)), in_channels=3)
SINCERE_METHODS: dict[str, cu.LossFn] = {
    "supcon": lambda z, ids, labels, meta: losses.supcon(z, labels, temperature=0.1),
    "sincere": lambda z, ids, labels, meta: losses.sincere(z, labels, temperature=0.1),
}
MIO_TAU, MIO_LR = 0.5, 1.5


# ----------------------------------------------------------------------------- probes


def sincere_probe(task: cu.Task, data: cu.Data, seed: int):
    """Probe of the SINCERE claim: ``probe(epoch, params) -> record``.

    The record holds ``linear`` (top1/top5: bootstrap accuracy and the per-example correctness
    packed as hex ``bits``, as ``sincere.py`` stores them) and ``similarity`` (``sincere.py``'s
    class-similarity statistics of the test set for the projector output and for h).
    """
    del seed  # the probe is deterministic; bootstrap indices use seed 0 like sincere.py

    def probe(epoch: int, params: dict | None) -> dict:
        if params is None:
            return {"epoch": epoch, "linear": None, "similarity": None, "summary": "diverged"}
        h_train = cu.features(task, params, data.x_train)
        h_test = cu.features(task, params, data.x_test)
        scores = cu.logistic_scores(h_train, data.y_train, h_test)
        linear = {}
        for k in (1, 5):
            correct = eval_lib.topk_correct(scores, data.y_test, k)
            linear[f"top{k}"] = {**eval_lib.bootstrap_accuracy(correct, resamples=cu.RESAMPLES),
                                 "bits": sincere._bits(correct)}
        z_test = np.asarray(cu.project(task.arch, params, jnp.asarray(h_test, jnp.float32)))
        similarity = {
            "projection": sincere._similarities(z_test, data.y_test, cifar.NUM_CLASSES),
            "encoder": sincere._similarities(h_test, data.y_test, cifar.NUM_CLASSES),
        }
        proj = similarity["projection"]
        summary = (f"top-1 {linear['top1']['accuracy']:.3f} top-5 {linear['top5']['accuracy']:.3f} "
                   f"cos within {proj['mean_within']:.3f} between {proj['mean_between']:.3f}")
        return {"epoch": epoch, "linear": linear, "similarity": similarity, "summary": summary}

    return probe


# ----------------------------------------------------------------------------- summaries


def sincere_records(results: dict[str, list[dict]], references: dict, num_test: int) -> dict:
    """``cu.run_one`` results -> the per-run records ``sincere.aggregate`` reads, keyed by
    ``sincere.RunSpec("cifar10", loss, seed, BATCH).name``; initial and final loss are the means
    of the per-epoch losses over the first and the last ``sincere.LOSS_WINDOW`` of the epochs."""
    records = {}
    for loss, runs in results.items():
        for r in runs:
            final = cu.final(r)
            if final["linear"] is None:
                continue  # a diverged run has no statistics to aggregate
            curve = np.asarray(r["epoch_losses"])
            window = max(1, round(sincere.LOSS_WINDOW * r["epochs"]))
            records[sincere.RunSpec("cifar10", loss, r["seed"], BATCH).name] = {
                "references": references, "num_test": num_test,
                "loss_initial": float(curve[:window].mean()),
                "loss_final": float(curve[-window:].mean()),
                "similarity": final["similarity"], "linear": final["linear"],
            }
    return records


def summarise_sincere(results: dict[str, list[dict]], init: list[dict], references: dict,
                      num_test: int, seeds: list[int]) -> tuple[str, dict]:
    """``sincere.py``'s tables and summary (key ``b<BATCH>``), plus the random-init probe."""
    runs = [sincere.RunSpec("cifar10", loss, s, BATCH) for s in seeds for loss in sincere.LOSSES]
    summary = sincere.aggregate(sincere_records(results, references, num_test), runs, tuple(seeds))
    text = sincere.tables(summary)
    text += ("\nPaper (Feeney & Hughes 2023, arXiv:2309.14277; CIFAR-10, ResNet-50, 1,000 "
             "epochs): SupCon - SINCERE cosine 0.06 within, "
             "0.11 between (Fig. 2); top-1 95.78 (SupCon) vs 95.93 (SINCERE), not significant "
             "(Table 2).\n")
    if init:
        linear = [cu.final(r)["linear"] for r in init]
        proj = [cu.final(r)["similarity"]["projection"] for r in init]
        ri = {**{f"linear_{t}": common.stat([100 * x[t]["accuracy"] for x in linear])
                 for t in ("top1", "top5")},
              **{f"projection_{k}": common.stat([x[k] for x in proj])
                 for k in ("mean_within", "mean_between")}}
        summary["random_init"] = ri
        text += (f"\nRandom-init encoder ({len(init)} seeds): linear top-1 "
                 f"{sincere._pm(ri['linear_top1'], 2)} %, top-5 {sincere._pm(ri['linear_top5'], 2)} %"
                 f"; projection cosine within {sincere._pm(ri['projection_mean_within'])}, between "
                 f"{sincere._pm(ri['projection_mean_between'])}.\n")
    return text, summary


def plot_sincere(results: dict[str, list[dict]], summary: dict, references: dict,
                 path: Path) -> None:
    """Per-epoch loss curves (every seed), projection cosine similarities and top-1 probe
    accuracy (mean ± std over seeds; random init dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"sincere": "tab:blue", "supcon": "tab:orange"}
    entry = summary.get(f"b{BATCH}")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for loss, runs in results.items():
        for i, r in enumerate(runs):
            epochs = np.arange(1, len(r["epoch_losses"]) + 1)
            axes[0].plot(epochs, r["epoch_losses"], color=colours[loss], alpha=0.7,
                         label=loss if i == 0 else None)
    axes[0].axhline(references["supcon_floor"], color=colours["supcon"], ls="--", lw=1,
                    label="SupCon floor E log|P_t|")
    axes[0].set(xlabel="epoch", ylabel="mean training loss", title="pretraining loss (Table 1)")
    axes[0].legend(fontsize=8)
    init = summary.get("random_init")
    accuracies = [init["linear_top1"]["mean"]] if init else []
    if entry is not None:
        x = np.arange(2)
        for j, loss in enumerate(sincere.LOSSES):
            stats = [entry[loss][f"projection_mean_{k}"] for k in ("within", "between")]
            axes[1].bar(x + 0.35 * j, [s["mean"] for s in stats], 0.35, color=colours[loss],
                        yerr=[s["std"] for s in stats], capsize=3, label=loss)
            top1 = entry[loss]["linear_top1"]
            axes[2].bar(j, top1["mean"], yerr=top1["std"], capsize=3, color=colours[loss])
            accuracies.append(top1["mean"])
        axes[1].set_xticks(x + 0.175, ["within class", "between classes"])
        axes[1].legend(fontsize=8)
    if init:
        axes[2].axhline(init["linear_top1"]["mean"], color="grey", ls="--", label="random init")
        axes[2].legend(fontsize=8)
    axes[1].set(ylabel="mean cosine (test, projection)", title="class similarity (Fig. 2)")
    axes[2].set_xticks(range(len(sincere.LOSSES)), sincere.LOSSES)
    axes[2].set_ylim(min(accuracies, default=10.0) - 5, max(accuracies, default=90.0) + 5)
    axes[2].set(ylabel="linear probe top-1 (%)", title="linear probe (Table 2)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_mio(summary: dict, optimizer: str, path: Path) -> None:
    """Full-label probe accuracy of SimCLR and MIO (A)-(D), mean ± std, random init dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    trained = [(k.split("/")[1], v) for k, v in summary.items() if k != "main/random_init"]
    ax.bar([m for m, _ in trained], [v["full"][0] for _, v in trained],
           yerr=[v["full"][1] for _, v in trained], capsize=3)
    if "main/random_init" in summary:
        ax.axhline(summary["main/random_init"]["full"][0], color="grey", ls="--",
                   label="random init")
        ax.legend(fontsize=8)
    values = [v["full"][0] for v in summary.values()]
    ax.set_ylim(min(values, default=0.5) - 0.05, max(values, default=0.5) + 0.05)
    ax.set(ylabel="linear probe accuracy (test)",
           title=f"CIFAR-10: SimCLR vs MIO ({optimizer}, tau {MIO_TAU})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- driver


def run_claim(claim: str, args: argparse.Namespace, data: cu.Data) -> str:
    """Train (or load) every run of one claim, then write its summary, table and plot."""
    prefix = "quick_" if args.quick else ""
    name = f"{prefix}cifar_{claim}_{args.epochs}ep"
    if claim == "mio":
        name = f"{prefix}cifar_mio_{args.mio_optimizer}_{args.epochs}ep"
    methods = list(SINCERE_METHODS) if claim == "sincere" else list(mio.VARIANTS)
    probe_factory = sincere_probe if claim == "sincere" else cu.digits_probe
    progress = common.Progress((len(methods) + 1) * len(args.seeds), name)
    results: dict[str, list[dict]] = {m: [] for m in methods}
    init: list[dict] = []

    def task_for(method: str) -> cu.Task:
        arch = ARCH if claim == "sincere" else dataclasses.replace(
            ARCH, hidden_layers=mio.VARIANTS[method][0], last_bn=True)
        return cu.Task(name, arch, cifar.augment_cifar, args.epochs, BATCH, (args.epochs,))

    first = methods[0]  # SupCon / SimCLR: its arch's random init is every run's start
    for seed in args.seeds:  # seed-major: a first seed of every method before more seeds
        if args.aggregate_only:
            for m in ["random_init", *methods]:
                done = common.load_json(common.run_path(args.out, name, m, seed))
                if done is not None:
                    (init if m == "random_init" else results[m]).append(done)
            continue
        init.append(cu.random_init_run(task_for(first), data, probe_factory, seed, args.out, progress))
        for m in methods:
            if claim == "sincere":
                loss_fn, opt = SINCERE_METHODS[m], cu.adamw
            else:
                loss_fn = mio.loss_for(m, MIO_TAU)
                opt = mio.lars(MIO_LR) if args.mio_optimizer == "lars" else cu.adamw
            results[m].append(cu.run_one(task_for(m), m, loss_fn, opt, data, probe_factory, seed,
                                         args.out, progress))
    results = {m: r for m, r in results.items() if r}
    if claim == "sincere":
        references = sincere.loss_references(data.y_train, BATCH, 2)
        table, summary = summarise_sincere(results, init, references, len(data.y_test),
                                           args.seeds)
        plot_sincere(results, summary, references, args.out / f"{name}.png")
    else:
        keyed = {("main", m): r for m, r in results.items()}
        if init:
            keyed[("main", "random_init")] = init
        table, summary = mio.summarise(keyed)
        plot_mio(summary, args.mio_optimizer, args.out / f"{name}.png")
    common.save_json(args.out / f"{name}_summary.json", summary)
    text = (f"## {name} ({args.epochs} epochs, {len(data.y_train)} training / "
            f"{len(data.y_test)} test images, seeds {args.seeds})\n\n{table}")
    (args.out / f"{name}_table.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", nargs="+", default=["sincere", "mio"],
                        choices=["sincere", "mio"])
    parser.add_argument("--mio_optimizer", choices=["adamw", "lars"], default="adamw",
                        help=f"MIO claim: AdamW lr 1e-3 or mio.py's LARS lr {MIO_LR}")
    cifar.add_run_options(parser, RUN_OPTIONS)
    args = parser.parse_args(argv)
    num_train, num_test = cifar.resolve_run_options(args, RUN_OPTIONS)
    data = cifar.cifar_data(num_train, num_test, DOWNSAMPLE)
    for claim in args.claims:
        print(run_claim(claim, args, data), flush=True)


if __name__ == "__main__":
    main()
