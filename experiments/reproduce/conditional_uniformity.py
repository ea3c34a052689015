"""Reproduce conditional alignment and uniformity (Dufumier et al. 2021) at CPU scale.

Paper: B. Dufumier, P. Gori, J. Victor, A. Grigis, E. Duchesnay (2021), "Conditional Alignment and
Uniformity for Contrastive Learning with Continuous Proxy Labels", arXiv:2111.05643.

    python -m experiments.reproduce.conditional_uniformity             # digits + phantoms grid
    python -m experiments.reproduce.conditional_uniformity --quick     # tiny smoke version
    python -m experiments.reproduce.conditional_uniformity --epochs 30 --seeds 0 1 2

Two proxies (real CIFAR and BIOBD do not fit the budget); the configs, with the encoder,
projector, augmentations, optimiser and losses of each method, are
``experiments/configs/conditional_uniformity.py`` (``get_config("TASK,METHOD")``). Every run
pretrains with the library's trainer (``contrastive_jax.train.loop.train``) and is probed
on the frozen encoder features (no augmentation):

* ``digits`` (cluttered 16x16 digits; SimCLR, Align-Uniform, SupCon and conditional alignment +
  conditional uniformity with a class-delta kernel): a logistic-regression probe on standardised
  features, with all labels and with 5 per class, 95 % bootstrap intervals (1,000 resamples),
  at evenly spaced epochs of each run: the paper's Fig. 2 accuracy-against-epochs curves.
* ``phantoms`` (32x32 synthetic brain phantoms with (age, sex); SimCLR, y-Aware InfoNCE and the
  conditional objective): diagnosis on the 662-subject downstream set, 5-fold stratified CV
  logistic regression with the training folds sub-sampled to N_train in {100, 200, 400, 530}
  (the paper's Fig. 3, right).

Resumable: each (task, method, seed) run writes ``<out>/runs/<task>/<method>/seed<k>.json`` when
done and is then skipped; an unfinished run resumes from the newest checkpoint of its work
directory ``<out>/work/<task>/<method>/seed<k>`` (the library's Orbax checkpoints, kept at every
probe epoch). ``<task>_summary.json``, ``<task>_table.md`` and PNG plots go to ``--out``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np

from experiments.configs import conditional_uniformity as configs
from experiments.reproduce import _common as common

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "conditional_uniformity"
N_TRAIN_SIZES = (100, 200, 400, 530)
SHOTS = 5
RESAMPLES = 1000
#: Evenly spaced probe epochs of a digits run (accuracy against epoch, Fig. 2).
DIGITS_PROBES = 4


def probe_epochs(epochs: int, count: int = 4) -> tuple[int, ...]:
    """``count`` evenly spaced probe epochs ending at ``epochs``."""
    return tuple(sorted({max(1, round(epochs * (i + 1) / count)) for i in range(count)}))


def phantom_probe(seed: int) -> Callable[[int, dict | None], dict]:
    """``probe(epoch, {"test"} embeddings or None)``: diagnosis AUC / balanced accuracy of a
    5-fold CV logistic regression at each N_train."""
    from experiments.reproduce import _probes

    def probe(epoch: int, emb: dict | None) -> dict:
        record: dict = {"epoch": epoch}
        if emb is None:
            record.update(n_train={}, summary="diverged")
            return record
        test = emb["test"]
        out = _probes.cross_validated_binary_probe(
            test.features.astype(np.float64), test.labels, train_sizes=N_TRAIN_SIZES, seed=seed
        )
        record["n_train"] = {str(k): v for k, v in out.items()}
        record["summary"] = " ".join(f"N{k}:auc {v['auc']:.3f}" for k, v in out.items())
        return record

    return probe


def run_one(task: str, name: str, method: str, seed: int, epochs: int, probes: tuple[int, ...],
            out: Path, progress: common.Progress, *, phantom_train: int | None = None) -> dict:
    """One (task, method, seed) run: skipped if its JSON exists, else pretrained (resumably)
    with the library and probed at the epochs ``probes``."""
    path = common.run_path(out, name, method, seed)
    label = f"{name}/{method}/seed{seed}"
    done = common.load_finished(path, {"epochs": epochs, "trainer": common.TRAINER}, progress,
                                label)
    if done is not None:
        return done
    config = configs.get_config(f"{task},{method}")
    config.seed = seed
    if phantom_train is not None:
        config.data.source_kwargs.num_train = phantom_train
    digits = task == "digits"
    result = {
        "task": name, "method": method, "seed": seed, "epochs": epochs,
        "trainer": common.TRAINER, "batch": int(config.data.global_batch_size),
        **common.pretrain_and_probe(
            config, common.work_path(out, name, method, seed), epochs=epochs, probes=probes,
            splits=("train", "test") if digits else ("test",),
            probe=common.labelled_probe(seed, SHOTS, RESAMPLES) if digits else phantom_probe(seed),
            progress=progress, label=label,
        ),
    }
    common.save_json(path, result)
    progress.log(f"{label}: finished in {result['seconds']:.0f}s")
    return result


def summarise_digits(results: dict[str, list[dict]]) -> tuple[str, dict]:
    """Markdown table (final probe, and accuracy against epoch) and a JSON summary."""
    rows, summary = [], {}
    for method, runs in results.items():
        full = [common.accuracy(r, "full") for r in runs]
        shot = [common.accuracy(r, "shot5") for r in runs]
        ci_full = [f"[{common.final(r)['full']['low']:.3f}, {common.final(r)['full']['high']:.3f}]" for r in runs
                   if common.final(r).get("full")]
        curve = {}
        for i, rec in enumerate(runs[0]["probes"]):
            curve[rec["epoch"]] = common.mean_std(
                [common.accuracy(r, "full", r["probes"][i]) if i < len(r["probes"]) else float("nan")
                 for r in runs])
        summary[method] = {"full": common.mean_std(full), "shot5": common.mean_std(shot),
                           "full_by_epoch": curve, "seeds": [r["seed"] for r in runs]}
        rows.append([method, len(runs), common.fmt_mean_std(full), common.fmt_mean_std(shot),
                     " ".join(ci_full),
                     " / ".join(f"{e}: {m:.3f}" for e, (m, _) in curve.items())])
    header = ["method", "seeds", "full-label acc", "5-shot acc", "95 % bootstrap CI (full, per seed)",
              "full-label acc by epoch (mean)"]
    return common.markdown_table(header, rows), summary


def summarise_phantoms(results: dict[str, list[dict]]) -> tuple[str, dict]:
    """Markdown table of AUC / balanced accuracy per N_train (mean ± std over seeds)."""
    rows, summary = [], {}
    for method, runs in results.items():
        ok = [r for r in runs if common.final(r)["n_train"]]
        summary[method] = {}
        row = [method, len(ok)]
        for n in N_TRAIN_SIZES:
            auc = [common.final(r)["n_train"][str(n)]["auc"] for r in ok]
            bacc = [common.final(r)["n_train"][str(n)]["bacc"] for r in ok]
            if not ok:
                row.append("diverged")
                continue
            summary[method][str(n)] = {"auc": common.mean_std(auc), "bacc": common.mean_std(bacc)}
            row.append(f"{common.fmt_mean_std(auc)} / {common.fmt_mean_std(bacc)}")
        rows.append(row)
    header = ["method", "seeds", *[f"N_train={n}: AUC / bal. acc" for n in N_TRAIN_SIZES]]
    return common.markdown_table(header, rows), summary


def plot_digits(summary: dict, path: Path) -> None:
    """Fig. 2 analogue: full-label probe accuracy against epoch, mean ± std over seeds."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 3.5), layout="constrained")
    ax = fig.subplots()
    for method, s in summary.items():
        epochs = sorted(s["full_by_epoch"], key=int)
        m = np.array([s["full_by_epoch"][e][0] for e in epochs])
        sd = np.array([s["full_by_epoch"][e][1] for e in epochs])
        x = [int(e) for e in epochs]
        ax.plot(x, m, marker="o", label=method)
        ax.fill_between(x, m - sd, m + sd, alpha=0.2)
    ax.set(xlabel="pretraining epoch", ylabel="linear probe accuracy (test)",
           title="Cluttered digits: accuracy vs epoch")
    if summary:  # no legend for a grid with no finished run
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)


def plot_phantoms(summary: dict, path: Path) -> None:
    """Fig. 3 (right) analogue: diagnosis AUC against N_train, mean ± std over seeds."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 3.5), layout="constrained")
    ax = fig.subplots()
    for method, s in summary.items():
        if not s:
            continue
        m = np.array([s[str(n)]["auc"][0] for n in N_TRAIN_SIZES])
        sd = np.array([s[str(n)]["auc"][1] for n in N_TRAIN_SIZES])
        ax.errorbar(N_TRAIN_SIZES, m, yerr=sd, marker="o", capsize=3, label=method)
    ax.set(xlabel="N_train (downstream)", ylabel="diagnosis AUC (5-fold CV)",
           title="Phantoms: AUC vs training-set size")
    if summary:  # no legend for a grid with no finished run
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (2 epochs, 1 seed)")
    parser.add_argument("--epochs", type=int, default=100, help="digits pretraining epochs")
    parser.add_argument("--digits_probes", type=int, default=DIGITS_PROBES,
                        help="evenly spaced digits probe epochs; another count than "
                             f"{DIGITS_PROBES} gets its own run names (suffix _<count>probes)")
    parser.add_argument("--phantom_epochs", type=int, default=10)
    parser.add_argument("--phantom_train", type=int, default=5000, help="pretraining subjects")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=["digits", "phantoms"],
                        choices=["digits", "phantoms"])
    parser.add_argument("--methods", nargs="+", default=None, help="subset of the methods")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--aggregate_only", action="store_true",
                        help="train nothing; summarise the finished runs of the grid")
    args = parser.parse_args(argv)
    for name in ("epochs", "digits_probes", "phantom_epochs", "phantom_train"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.quick:
        args.epochs, args.phantom_epochs, args.phantom_train, args.seeds = 2, 1, 300, [0]
    out = args.out
    for task in args.tasks:
        if task == "digits":
            name = f"{'quick_' if args.quick else ''}digits_{args.epochs}ep"
            if args.digits_probes != DIGITS_PROBES:
                name += f"_{args.digits_probes}probes"
            epochs, probes = args.epochs, probe_epochs(args.epochs, args.digits_probes)
        else:
            name = (f"{'quick_' if args.quick else ''}phantoms_{args.phantom_epochs}ep"
                    f"_n{args.phantom_train}")
            epochs, probes = args.phantom_epochs, (args.phantom_epochs,)
        chosen = [m for m in configs.METHODS[task] if args.methods is None or m in args.methods]
        progress = common.Progress(len(chosen) * len(args.seeds), name)
        results: dict[str, list[dict]] = {m: [] for m in chosen}
        for seed in args.seeds:  # seed-major: a first seed of every method before more seeds
            for method in chosen:
                if args.aggregate_only:
                    done = common.load_json(common.run_path(out, name, method, seed))
                    results[method] += [done] if done is not None else []
                    continue
                results[method].append(run_one(
                    task, name, method, seed, epochs, probes, out, progress,
                    phantom_train=args.phantom_train if task == "phantoms" else None,
                ))
        results = {m: r for m, r in results.items() if r}
        out.mkdir(parents=True, exist_ok=True)
        if task == "digits":
            table, summary = summarise_digits(results)
            plot_digits(summary, out / f"{name}_accuracy_vs_epoch.png")
        else:
            table, summary = summarise_phantoms(results)
            plot_phantoms(summary, out / f"{name}_auc_vs_ntrain.png")
        common.save_json(out / f"{name}_summary.json", summary)
        text = f"## {name} ({epochs} epochs, seeds {args.seeds})\n\n{table}"
        (out / f"{name}_table.md").write_text(text)
        print(text, flush=True)


if __name__ == "__main__":
    main()
