"""Reproduce SINCERE vs SupCon at CPU scale: Tables 1-2, Figs. 2-3, batch contrast.

Paper: P. Feeney and M. C. Hughes (2023), "SINCERE: Supervised Information Noise-Contrastive
Estimation REvisited", arXiv:2309.14277.

    python -m experiments.reproduce.sincere                    # built-in digits
    python -m experiments.reproduce.sincere --dataset cifar10  # CIFAR-10 16x16
    python -m experiments.reproduce.sincere --quick            # plain digits, 8 steps (< 2 min idle)
    python -m experiments.reproduce.sincere --steps 600 --batches 128  # longer runs, own directories

For each of two batch sizes (the second has about a quarter of the same-class partners per
anchor: the paper's CIFAR-10 vs CIFAR-100 contrast, with the data held fixed) and each of three
seeds, pretrain SINCERE and SupCon with the dataset's config in ``experiments/configs/sincere_*``
(same encoder, schedule and tau = 0.1; only the loss differs), then on the frozen network:

* Table 1: mean pretraining loss over the first and the last fifth of the steps, next to the
  reference values of docs/reproductions.md ("SINCERE protocol"): the value at constant embeddings (SupCon
  ``log(n - 1)``, SINCERE ``E log(1 + |N_t|)``) and SupCon's floor ``E log |P_t|``.
* Fig. 2: class-by-class mean cosine similarity of the test set (``M_ab``, self pairs
  excluded), of the L2-normalised projection-head output (our default; the paper does not say) and of the encoder
  features; within = mean diagonal, between = mean off-diagonal.
* Fig. 3: within-class vs class-vs-rest cosine histograms of class 9 (CIFAR-10's "truck").
* Table 2: linear probe (the paper's Sec. 4.3 protocol) top-1/top-5 test accuracy with 95 % percentile
  bootstrap intervals (1,000 resamples) and the paired bootstrap of SINCERE - SupCon.

Resumable: a finished run (its per-run JSON exists) is skipped, an unfinished one resumes from
its checkpoint. Work directories go to ``--runs_dir`` (checkpoints, logs, test embeddings);
per-run JSON, ``summary.json``, ``tables.md`` and the PNG figures go to ``--results_dir``
(default ``experiments/results/sincere/<dataset>``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import ml_collections
import numpy as np

from experiments.reproduce._common import (
    SINCERE_LOSSES,
    class_similarities,
    compare_sincere_supcon,
    loss_references,
    pack_bits,
    read_losses,
    sincere_tables,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "experiments" / "configs"
#: dataset -> (config file, batch sizes). The first batch size is the main setting; the second
#: has about a quarter of the same-class partners per anchor (the many-class contrast).
SETTINGS = {
    "digits": (CONFIGS / "sincere_digits.py", (128, 32)),
    "cifar10": (CONFIGS / "sincere_cifar10_proxy.py", (64, 16)),
}
FULL_SEEDS = (0, 1, 2)
#: Table 1's "initial" and "final" losses: means over the first and the last fifth of the steps.
LOSS_WINDOW = 0.2
#: CIFAR-10's "truck", the class of the paper's Fig. 3.
HIST_CLASS = 9
RESAMPLES = 1000
PROBE_EPOCHS = {"full": 100, "quick": 5}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One pretraining run: dataset, loss, seed and batch size (images per step)."""

    dataset: str
    loss: str
    seed: int
    batch: int

    @property
    def name(self) -> str:
        return f"{self.dataset}_b{self.batch}_{self.loss}_s{self.seed}"


def base_config(dataset: str, quick: bool) -> ml_collections.ConfigDict:
    """The experiment config of ``dataset``; ``quick`` cuts it to 8 steps on plain digits."""
    spec = importlib.util.spec_from_file_location("sincere_config", SETTINGS[dataset][0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    if dataset == "cifar10" and not quick and config.data.data_dir is None:
        config.data.data_dir = str(ROOT.parent / "shared" / "data" / "cifar10")
    if quick:
        config.data.dataset = "digits"
        config.data.image_size = None
        config.data.augmentation = "auto"
        config.data.train_subset = None
        config.model.encoder.width = 0.125
        config.optimizer.warmup_steps = 2
        config.train.total_steps = 8
        config.train.log_every = 1
        config.train.checkpoint_every = 4
    return config


def run_config(base: ml_collections.ConfigDict, run: RunSpec) -> ml_collections.ConfigDict:
    """``base`` with the run's loss, seed and batch size."""
    config = ml_collections.ConfigDict(base.to_dict())
    config.loss.name = run.loss
    config.seed = run.seed
    config.data.global_batch_size = run.batch
    return config


def train_run(config: ml_collections.ConfigDict, workdir: Path) -> None:
    """Pretrains (or resumes) one run; a run already at its last step returns at once."""
    from contrastive_jax.train import loop

    loop.train(config, str(workdir))


def evaluate_run(run: RunSpec, workdir: Path, probe_epochs: int) -> dict:
    """Everything one run contributes: loss table entries, similarities, probe accuracies.

    Also saves the test projections to ``workdir/test_embeddings.npz`` for the figures.
    """
    from contrastive_jax import data as data_lib
    from contrastive_jax import eval as eval_lib
    from contrastive_jax.eval.embed import embed_split
    from contrastive_jax.train.pretrained import load_pretrained

    pretrained = load_pretrained(str(workdir))
    config = pretrained.config
    source = data_lib.load_source(config.data)
    train = embed_split(pretrained.network, config.data, "train", source=source)
    test = embed_split(pretrained.network, config.data, "test", source=source)
    test_proj = embed_split(
        pretrained.network, config.data, "test", output="projections", source=source
    )
    np.savez(workdir / "test_embeddings.npz", z=test_proj.features, labels=test_proj.labels)
    k = source.num_classes

    probe = eval_lib.train_linear_classifier(
        train.features,
        train.labels,
        num_classes=k,
        epochs=probe_epochs,
        warmup_epochs=min(10, probe_epochs - 1),
        seed=run.seed,
    )
    logits = eval_lib.predict_logits(probe, test.features)
    k5 = min(5, k)
    correct = {f"top{t}": eval_lib.topk_correct(logits, test.labels, t) for t in (1, k5)}

    steps, losses = read_losses(workdir)
    total = int(config.train.total_steps)
    window = max(1, round(LOSS_WINDOW * total))
    return {
        "run": dataclasses.asdict(run),
        "step": pretrained.step,
        "dataset": source.name,
        "num_train": int(len(train.labels)),
        "num_test": int(len(test.labels)),
        "steps_per_epoch": len(train.labels) // config.data.global_batch_size,
        "loss_window_steps": window,
        "loss_initial": float(losses[steps <= window].mean()),
        "loss_final": float(losses[steps > total - window].mean()),
        "loss_curve": {"steps": steps.tolist(), "loss": np.round(losses, 5).tolist()},
        "references": loss_references(
            train.labels, config.data.global_batch_size, config.data.num_views
        ),
        "similarity": {
            "projection": class_similarities(test_proj.features, test_proj.labels, k, HIST_CLASS),
            "encoder": class_similarities(test.features, test.labels, k, HIST_CLASS),
        },
        "linear": {
            name: {
                **eval_lib.bootstrap_accuracy(c, resamples=RESAMPLES, seed=0),
                "bits": pack_bits(c),
            }
            for name, c in correct.items()
        },
        "class_names": list(source.class_names),
    }


def aggregate(results: dict[str, dict], runs: list[RunSpec], seeds: tuple[int, ...]) -> dict:
    """Per batch size (``"b<batch>"``, largest first): :func:`compare_sincere_supcon` of the
    seeds whose SINCERE and SupCon runs both finished."""
    dataset = runs[0].dataset
    summary: dict = {}
    for batch in sorted({r.batch for r in runs}, reverse=True):
        names = [
            (RunSpec(dataset, "sincere", s, batch).name, RunSpec(dataset, "supcon", s, batch).name)
            for s in seeds
        ]
        pairs = [(results[a], results[b]) for a, b in names if a in results and b in results]
        if pairs:
            summary[f"b{batch}"] = compare_sincere_supcon(pairs, resamples=RESAMPLES)
    return summary


def plot_figures(
    results: dict[str, dict], runs_dir: Path, out: Path, dataset: str, batches, seed: int
) -> None:
    """Fig. 2 and Fig. 3 panels for ``seed`` of each batch size; loss curves of every run."""
    from matplotlib.figure import Figure

    from contrastive_jax import eval as eval_lib

    for batch in batches:
        names = {loss: RunSpec(dataset, loss, seed, batch).name for loss in SINCERE_LOSSES}
        if not all((runs_dir / n / "test_embeddings.npz").exists() for n in names.values()):
            continue
        loaded = {loss: np.load(runs_dir / n / "test_embeddings.npz") for loss, n in names.items()}
        z = {f"{loss} (batch {batch}, seed {seed})": d["z"] for loss, d in loaded.items()}
        labels = loaded["sincere"]["labels"]
        class_names = results[names["sincere"]]["class_names"]
        eval_lib.plot_class_similarity(
            z, labels, class_names, out / f"fig2_similarity_b{batch}.png"
        )
        eval_lib.plot_within_between_histograms(
            z,
            labels,
            HIST_CLASS % len(class_names),
            class_names,
            out / f"fig3_histograms_b{batch}.png",
        )
    fig = Figure(figsize=(6.0 * len(batches), 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(batches)))
    for ax, batch in zip(axes, batches, strict=True):
        for loss, colour in zip(SINCERE_LOSSES, ("tab:blue", "tab:orange"), strict=True):
            for r in results.values():
                if r["run"]["batch"] == batch and r["run"]["loss"] == loss:
                    c = r["loss_curve"]
                    ax.plot(
                        c["steps"],
                        c["loss"],
                        color=colour,
                        alpha=0.7,
                        label=loss if r["run"]["seed"] == seed else None,
                    )
                    ref = r["references"]
        if any(r["run"]["batch"] == batch for r in results.values()):
            ax.axhline(
                ref["supcon_floor"],
                color="tab:orange",
                ls="--",
                lw=1,
                label="SupCon floor E log|P_t|",
            )
        ax.set_title(f"pretraining loss, batch {batch}")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(fontsize=8)
    fig.savefig(out / "table1_loss_curves.png", dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="digits, 8 steps, one seed")
    parser.add_argument("--dataset", choices=sorted(SETTINGS), default="digits")
    parser.add_argument(
        "--aggregate_only",
        action="store_true",
        help="train nothing: tables and figures from the runs finished so far",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="pretraining steps (default: the config's); another count than the config's gets "
        "its own runs and results directories (suffix _<steps>steps)",
    )
    parser.add_argument(
        "--batches", type=int, nargs="+", default=None, help="a subset of the dataset's batch sizes"
    )
    parser.add_argument("--runs_dir", type=Path, default=None)
    parser.add_argument("--results_dir", type=Path, default=None)
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    base = base_config(args.dataset, args.quick)
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    suffix = ""
    if args.steps is not None and args.steps != base.train.total_steps:
        base.train.total_steps = args.steps
        suffix = f"_{args.steps}steps"
    all_batches = (64, 16) if args.quick else SETTINGS[args.dataset][1]
    batches = tuple(args.batches or all_batches)
    if not set(batches) <= set(all_batches):
        parser.error(
            f"--batches {list(batches)}: this setting runs batch sizes {list(all_batches)}"
        )
    runs_dir = args.runs_dir or ROOT / "runs" / (
        ("sincere_quick" if args.quick else "sincere") + suffix
    )
    out = args.results_dir or (
        runs_dir / "results"
        if args.quick
        else ROOT / "experiments" / "results" / "sincere" / (args.dataset + suffix)
    )
    (out / "runs").mkdir(parents=True, exist_ok=True)
    seeds = (0,) if args.quick else FULL_SEEDS
    dataset = "digits" if args.quick else args.dataset
    runs = [RunSpec(dataset, loss, s, b) for b in batches for s in seeds for loss in SINCERE_LOSSES]

    results: dict[str, dict] = {}
    for i, run in enumerate(runs, 1):
        path = out / "runs" / f"{run.name}.json"
        workdir = runs_dir / run.name
        if path.exists():
            results[run.name] = json.loads(path.read_text())
            if results[run.name]["step"] != base.train.total_steps:
                raise ValueError(
                    f"{path} holds a run of {results[run.name]['step']} steps, not the "
                    f"{base.train.total_steps} asked for; pass --steps "
                    f"{results[run.name]['step']} or another --results_dir"
                )
            print(f"[{i}/{len(runs)}] {run.name}: done, skipped", flush=True)
            continue
        if args.aggregate_only:
            print(f"[{i}/{len(runs)}] {run.name}: not finished, left out", flush=True)
            continue
        start = time.time()
        print(f"[{i}/{len(runs)}] {run.name}: pretraining in {workdir}", flush=True)
        train_run(run_config(base, run), workdir)
        print(f"[{i}/{len(runs)}] {run.name}: evaluating", flush=True)
        results[run.name] = evaluate_run(run, workdir, PROBE_EPOCHS[mode])
        results[run.name]["seconds"] = round(time.time() - start, 1)
        path.write_text(json.dumps(results[run.name], indent=1))
        r = results[run.name]
        print(
            f"[{i}/{len(runs)}] {run.name}: loss {r['loss_initial']:.3f} -> {r['loss_final']:.3f}, "
            f"top-1 {100 * r['linear']['top1']['accuracy']:.2f} %, "
            f"{r['seconds']:.0f} s",
            flush=True,
        )

    summary = aggregate(results, runs, seeds)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    text = sincere_tables(summary)
    (out / "tables.md").write_text(text)
    plot_figures(results, runs_dir, out, dataset, batches, seeds[0])
    print(text)
    print(f"results in {out}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
