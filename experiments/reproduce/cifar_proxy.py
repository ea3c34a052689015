"""Reproduce SINCERE vs SupCon (Feeney & Hughes 2023) and MIO (Manna et al. 2021) on CIFAR-10.

Both at CPU scale; the papers' full references are in docs/reproductions.md.

    python -m experiments.reproduce.cifar_proxy --data_dir DIR        # both claims, seeds 0 1 2
    python -m experiments.reproduce.cifar_proxy --data_dir DIR --claims mio --seeds 0 \
        --mio_optimizer lars
    python -m experiments.reproduce.cifar_proxy --aggregate_only      # tables of finished runs
    python -m experiments.reproduce.cifar_proxy --data_dir DIR --quick  # smoke run, own out dir

DIR is a CIFAR-10 image folder ``DIR/{train,test}/<class>/<image>``.

The configs are ``experiments/configs/cifar_proxy.py`` (``get_config("CLAIM,METHOD,OPTIMIZER,
EPOCHS")``): class-balanced subsets of the CIFAR-10 image folder ``--data_dir`` (NUM_TRAIN
training and NUM_TEST test images at 32x32, the same images for every seed), the ``cifar_proxy``
augmentation (pad-4 shift crop, flip, brightness and contrast, per-channel gain), two views,
batch 128, the ``small_cnn`` encoder (3x3 stride-2 ReLU convolutions 32-64-128, global average
pool, h in R^128). Every run pretrains with the library's trainer
(``contrastive_jax.train.loop.train``, Orbax checkpoints in its work directory) and is probed on
the frozen network in inference mode (no augmentation). Every seed also probes its random-init
network (the trained runs' starting point, method ``random_init``), so a reader can see what
training added.

``--claims sincere`` (SINCERE's Tables 1-2 and Fig. 2): SupCon and SINCERE, tau 0.1, class
labels, AdamW lr 1e-3 constant, weight decay 5e-5 (not on biases and BN), projector
Linear(128, 128)-BN-ReLU-Linear(128, 64). Reported: initial and final pretraining loss (means of
the per-epoch losses over the first and the last fifth of the epochs) beside the
constant-embedding values and SupCon's floor E log|P_t|; the class-by-class mean cosine
similarity of the test set for the L2-normalised projector output and for h (within = mean
diagonal, between = mean off-diagonal; the paper has SupCon - SINCERE = 0.06 within and 0.11
between); the linear probe of SINCERE's Sec. 4.3 protocol
(:func:`contrastive_jax.eval.train_linear_classifier`, 100 epochs) with top-1 and top-5 test
accuracy, 95 % bootstrap intervals and the paired bootstrap of SINCERE - SupCon.

``--claims mio`` (MIO's Table 4): SimCLR (NT-Xent) and MIO (A)-(D) with
``experiments/configs/mio.py``'s projectors (BN after the output) and losses, tau 0.5; a
logistic-regression probe on standardised features with all labels and with 5 per class, 95 %
bootstrap intervals (:func:`experiments.reproduce._probes.logistic_probe`). Optimiser
(``--mio_optimizer``): ``adamw`` (default; the AdamW above, a fallback for the paper's LARS) or
``lars`` (``mio.py``'s LARS lr 1.5 and schedule).

Resumable like ``conditional_uniformity``: each run writes
``<out>/runs/<task>/<method>/seed<k>.json`` (task ``cifar_sincere_<E>ep`` or
``cifar_mio_<optimizer>_<E>ep``) and is skipped when that exists; an unfinished run resumes from
the newest checkpoint of ``<out>/work/<task>/<method>/seed<k>``; a stored run of another budget
(or of the former hand-made stack) is refused. ``<task>_summary.json``, ``<task>_table.md`` and
``<task>.png`` go to ``--out`` (default ``experiments/results/cifar_proxy``; ``--quick``:
``runs/cifar_proxy_quick``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ml_collections
import numpy as np

from experiments.configs import cifar_proxy as configs
from experiments.reproduce import _common as common

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "cifar_proxy"
QUICK_OUT = ROOT / "runs" / "cifar_proxy_quick"
#: Linear-probe epochs of the SINCERE claim (SINCERE Sec. 4.3 protocol), full and ``--quick``.
PROBE_EPOCHS, QUICK_PROBE_EPOCHS = 100, 5
#: Fraction of the epochs whose mean loss is the initial / final loss (Table 1).
LOSS_WINDOW = 0.2
#: Class of the within / class-vs-rest cosine statistics (CIFAR-10's "truck", SINCERE Fig. 3).
HIST_CLASS = 9
SHOTS, RESAMPLES = 5, 1000


# ----------------------------------------------------------------------------- probes


def sincere_probe(config: ml_collections.ConfigDict, workdir: Path | None, per_epoch: int,
                  source, probe_epochs: int):
    """``probe(epoch, {"train", "test"} encoder features or None) -> record`` of the SINCERE claim.

    The record holds ``linear`` (top1 / top5: bootstrap accuracy and the per-example correctness
    packed as hex ``bits``) and ``similarity`` (:func:`_common.class_similarities` of the test
    set for the projections and for h). The projections come from the checkpoint of the probed
    epoch in ``workdir``, or, with ``workdir`` None, from the network ``config`` initialises.
    """
    from contrastive_jax import eval as eval_lib

    def probe(epoch: int, emb: dict | None) -> dict:
        if emb is None:
            return {"epoch": epoch, "linear": None, "similarity": None, "summary": "diverged"}
        train, test = emb["train"], emb["test"]
        classifier = eval_lib.train_linear_classifier(
            train.features, train.labels, num_classes=source.num_classes, epochs=probe_epochs,
            warmup_epochs=min(10, probe_epochs - 1), seed=int(config.seed),
        )
        logits = eval_lib.predict_logits(classifier, test.features)
        linear = {}
        for k in (1, 5):
            correct = eval_lib.topk_correct(logits, test.labels, k)
            linear[f"top{k}"] = {**eval_lib.bootstrap_accuracy(correct, resamples=RESAMPLES),
                                 "bits": common.pack_bits(correct)}
        step = None if workdir is None else epoch * per_epoch
        z = common.projections(config, "test", workdir=workdir, step=step, source=source)
        k = source.num_classes
        similarity = {
            "projection": common.class_similarities(z.features, z.labels, k, HIST_CLASS),
            "encoder": common.class_similarities(test.features, test.labels, k, HIST_CLASS),
        }
        proj = similarity["projection"]
        summary = (f"top-1 {linear['top1']['accuracy']:.3f} top-5 {linear['top5']['accuracy']:.3f} "
                   f"cos within {proj['mean_within']:.3f} between {proj['mean_between']:.3f}")
        return {"epoch": epoch, "linear": linear, "similarity": similarity, "summary": summary}

    return probe


# ----------------------------------------------------------------------------- runs


def run_config(claim: str, method: str, args: argparse.Namespace,
               seed: int) -> ml_collections.ConfigDict:
    """The library config of one run: ``configs.get_config`` with the command line's data."""
    optimizer = args.mio_optimizer if claim == "mio" else "adamw"
    config = configs.get_config(f"{claim},{method},{optimizer},{args.epochs}")
    config.seed = seed
    config.data.data_dir = str(args.data_dir)
    config.data.train_subset = args.num_train
    config.data.source_kwargs.test_subset = args.num_test
    return config


def run_one(task: str, claim: str, method: str, seed: int, args: argparse.Namespace, source,
            progress: common.Progress) -> dict:
    """One run (skipped when its JSON exists); ``random_init`` probes the network the seed's
    runs of the claim's first method start from, without training."""
    path = common.run_path(args.out, task, method, seed)
    label = f"{task}/{method}/seed{seed}"
    budget = {"epochs": 0 if method == "random_init" else args.epochs, "trainer": common.TRAINER,
              "num_train": args.num_train, "num_test": args.num_test}
    done = common.load_finished(path, budget, progress, label)
    if done is not None:
        return done
    config = run_config(claim, configs.METHODS[claim][0] if method == "random_init" else method,
                        args, seed)
    workdir = None if method == "random_init" else common.work_path(args.out, task, method, seed)
    per_epoch = source.split("train").num_examples // int(config.data.global_batch_size)
    if claim == "sincere":
        probe = sincere_probe(config, workdir, per_epoch, source, args.probe_epochs)
    else:
        probe = common.labelled_probe(seed, SHOTS, RESAMPLES)
    if workdir is None:
        start = time.time()
        record = probe(0, common.initial_embeddings(config, ("train", "test"), source))
        outcome = {"probes": [record], "seconds": time.time() - start}
    else:
        outcome = common.pretrain_and_probe(
            config, workdir, epochs=args.epochs, probes=(args.epochs,), splits=("train", "test"),
            probe=probe, progress=progress, label=label, source=source,
        )
    result = {"task": task, "claim": claim, "method": method, "seed": seed,
              "optimizer": config.optimizer.name, "batch": int(config.data.global_batch_size),
              **budget, **outcome}
    if claim == "sincere":
        result["references"] = common.loss_references(
            source.split("train").labels, result["batch"], int(config.data.num_views))
    common.save_json(path, result)
    progress.log(f"{label}: {common.final(result)['summary']} ({result['seconds']:.0f}s)")
    return result


# ----------------------------------------------------------------------------- summaries


def sincere_record(result: dict) -> dict:
    """A finished run's statistics as :func:`_common.compare_sincere_supcon` reads them; initial
    and final loss are the means of the per-epoch losses over the first and the last
    :data:`LOSS_WINDOW` of the epochs."""
    final = common.final(result)
    curve = np.asarray(result["epoch_losses"])
    window = max(1, round(LOSS_WINDOW * result["epochs"]))
    return {"references": result["references"], "num_test": result["num_test"],
            "loss_initial": float(curve[:window].mean()),
            "loss_final": float(curve[-window:].mean()),
            "similarity": final["similarity"], "linear": final["linear"]}


def summarise_sincere(results: dict[str, list[dict]], init: list[dict]) -> tuple[str, dict]:
    """The SINCERE claim's tables and summary (key ``b<batch>``), plus the random-init probe."""
    by_seed = {m: {r["seed"]: r for r in runs if common.final(r)["linear"] is not None}
               for m, runs in results.items()}
    seeds = sorted(set(by_seed.get("sincere", {})) & set(by_seed.get("supcon", {})))
    summary: dict = {}
    text = ""
    if seeds:
        pairs = [tuple(sincere_record(by_seed[loss][s]) for loss in common.SINCERE_LOSSES)
                 for s in seeds]
        summary[f"b{configs.BATCH}"] = common.compare_sincere_supcon(pairs, RESAMPLES)
        text = common.sincere_tables(summary)
    text += ("\nPaper (Feeney & Hughes 2023, arXiv:2309.14277; CIFAR-10, ResNet-50, 1,000 "
             "epochs): SupCon - SINCERE cosine 0.06 within, 0.11 between (Fig. 2); top-1 95.78 "
             "(SupCon) vs 95.93 (SINCERE), not significant (Table 2).\n")
    if init:
        linear = [common.final(r)["linear"] for r in init]
        proj = [common.final(r)["similarity"]["projection"] for r in init]
        ri = {**{f"linear_{t}": common.stat([100 * x[t]["accuracy"] for x in linear])
                 for t in ("top1", "top5")},
              **{f"projection_{k}": common.stat([x[k] for x in proj])
                 for k in ("mean_within", "mean_between")}}
        summary["random_init"] = ri
        text += (f"\nRandom-init network ({len(init)} seeds): linear top-1 "
                 f"{common.pm(ri['linear_top1'], 2)} %, top-5 {common.pm(ri['linear_top5'], 2)} %"
                 f"; projection cosine within {common.pm(ri['projection_mean_within'])}, between "
                 f"{common.pm(ri['projection_mean_between'])}.\n")
    return text, summary


def plot_sincere(results: dict[str, list[dict]], summary: dict, path: Path) -> None:
    """Per-epoch loss curves (every seed) with SupCon's floor, projection cosine similarities and
    top-1 probe accuracy (mean ± std over seeds; random init dashed)."""
    from matplotlib.figure import Figure

    colours = {"sincere": "tab:blue", "supcon": "tab:orange"}
    entry = summary.get(f"b{configs.BATCH}")
    fig = Figure(figsize=(13, 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    for loss, runs in results.items():
        for i, r in enumerate(runs):
            epochs = np.arange(1, len(r["epoch_losses"]) + 1)
            axes[0].plot(epochs, r["epoch_losses"], color=colours[loss], alpha=0.7,
                         label=loss if i == 0 else None)
    floors = {r["references"]["supcon_floor"] for runs in results.values() for r in runs}
    for floor in sorted(floors):
        axes[0].axhline(floor, color=colours["supcon"], ls="--", lw=1,
                        label="SupCon floor E log|P_t|")
    axes[0].set(xlabel="epoch", ylabel="mean training loss", title="pretraining loss (Table 1)")
    if results:
        axes[0].legend(fontsize=8)
    init = summary.get("random_init")
    accuracies = [init["linear_top1"]["mean"]] if init else []
    if entry is not None:
        x = np.arange(2)
        for j, loss in enumerate(common.SINCERE_LOSSES):
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
    axes[2].set_xticks(range(len(common.SINCERE_LOSSES)), common.SINCERE_LOSSES)
    axes[2].set_ylim(min(accuracies, default=10.0) - 5, max(accuracies, default=90.0) + 5)
    axes[2].set(ylabel="linear probe top-1 (%)", title="linear probe (Table 2)")
    fig.savefig(path, dpi=120)


def plot_mio(summary: dict, optimizer: str, path: Path) -> None:
    """Full-label probe accuracy of SimCLR and MIO (A)-(D), mean ± std, random init dashed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 3.5), layout="constrained")
    ax = fig.subplots()
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
           title=f"CIFAR-10: SimCLR vs MIO ({optimizer}, tau {configs.MIO_TAU})")
    fig.savefig(path, dpi=120)


# ----------------------------------------------------------------------------- driver


def run_claim(claim: str, args: argparse.Namespace) -> str:
    """Train (or load) every run of one claim, then write its summary, table and plot."""
    from contrastive_jax import data

    prefix = "quick_" if args.quick else ""
    name = f"{prefix}cifar_{claim}_{args.epochs}ep"
    if claim == "mio":
        name = f"{prefix}cifar_mio_{args.mio_optimizer}_{args.epochs}ep"
    methods = configs.METHODS[claim]
    source = None if args.aggregate_only else data.load_source(
        run_config(claim, methods[0], args, 0).data)
    progress = common.Progress((len(methods) + 1) * len(args.seeds), name)
    results: dict[str, list[dict]] = {m: [] for m in methods}
    init: list[dict] = []
    for seed in args.seeds:  # seed-major: a first seed of every method before more seeds
        for method in ("random_init", *methods):
            if args.aggregate_only:
                result = common.load_json(common.run_path(args.out, name, method, seed))
                if result is None:
                    continue
            else:
                result = run_one(name, claim, method, seed, args, source, progress)
            (init if method == "random_init" else results[method]).append(result)
    results = {m: r for m, r in results.items() if r}
    if claim == "sincere":
        table, summary = summarise_sincere(results, init)
        plot_sincere(results, summary, args.out / f"{name}.png")
    else:
        keyed = {("main", m): r for m, r in results.items()}
        if init:
            keyed[("main", "random_init")] = init
        table, summary = common.summarise_probes(keyed)
        plot_mio(summary, args.mio_optimizer, args.out / f"{name}.png")
    common.save_json(args.out / f"{name}_summary.json", summary)
    text = (f"## {name} ({args.epochs} epochs, {args.num_train} training / {args.num_test} "
            f"test images, seeds {args.seeds})\n\n{table}")
    (args.out / f"{name}_table.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", nargs="+", default=["sincere", "mio"],
                        choices=["sincere", "mio"])
    parser.add_argument("--mio_optimizer", choices=configs.OPTIMIZERS["mio"], default="adamw",
                        help=f"MIO claim: AdamW lr 1e-3 or mio.py's LARS lr {configs.MIO_LARS_LR}")
    args = common.parse_cifar_options(
        parser, argv, epochs=configs.EPOCHS, images=(configs.NUM_TRAIN, configs.NUM_TEST),
        default_out=DEFAULT_OUT, quick_out=QUICK_OUT)
    args.probe_epochs = QUICK_PROBE_EPOCHS if args.quick else PROBE_EPOCHS
    for claim in args.claims:
        print(run_claim(claim, args), flush=True)


if __name__ == "__main__":
    main()
