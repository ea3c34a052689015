"""Reproduce ProjNCE's label-noise table (its Table 3) on a CIFAR-10 proxy at CPU scale.

Paper: M. Jeong and A. Hero (2025), "Generalizing Supervised Contrastive Learning: A Projection
Perspective", arXiv:2506.09810.

    python -m experiments.reproduce.cifar_label_noise --data_dir PATH/TO/cifar10   # grid, seeds 0 1 2
    python -m experiments.reproduce.cifar_label_noise --data_dir PATH/TO/cifar10 \
        --methods supcon projnce --seeds 0
    python -m experiments.reproduce.cifar_label_noise --aggregate_only  # tables/plot of finished runs
    python -m experiments.reproduce.cifar_label_noise --data_dir PATH/TO/cifar10 --quick  # smoke run

The paper's Table 3 trains on STL-10 with symmetric label noise p in {0, 0.1, ..., 0.7} and reports
linear top-1. This proxy uses p in {0, 0.2, 0.4} and the configs
``experiments/configs/cifar_label_noise.py``: class-balanced CIFAR-10 subsets of ``--data_dir``
(5,000 training / 2,000 test images at 32x32), the CIFAR proxy's augmentation, ``small_cnn``
encoder (three stride-2 convolutions 32-64-128) and projector Linear(128, 128)-BN-ReLU-Linear(128,
64), two views, batch 128, the paper's tau = 0.07 for every loss and AdamW (lr 1e-3 constant,
weight decay 5e-5 on weights; docs/reproductions.md) in place of the paper's AdamW lr 0.05 (likely
unstable at this scale). Budget: 24 epochs, not the paper's 500. Every run trains with the
library's trainer (``contrastive_jax.train.loop.train``, Orbax checkpoints in its work directory).

Methods (ProjNCE Sec. 2-3; docs/losses.md, "ProjNCE family"):

* ``supcon``, ``projnce`` (beta 1) and ``med_supcon`` (lower median): supervised contrastive
  pretraining on the noisy labels;
* ``simclr``: NT-Xent on instance ids. It never sees a label, so one pretraining run per seed
  serves every p (stored under the task ``cifar_labelnoise_simclr_<E>ep``);
* ``random_init``: the probes of the seed's random-init network (SimCLR's config and seed), so a
  reader can see what training added (stored beside SimCLR's runs);
* ``ce``: the encoder with the soft-target proxy's MLP classifier head trained end to end with
  softmax cross-entropy on the noisy labels (one augmented view per image, batch 256, the same
  AdamW and epochs) and scored with its own head (the paper's "CE" row;
  :func:`contrastive_jax.eval.checkpoint.evaluate_classifier`).

Noise: ``config.data.label_noise`` = p, i.e. :func:`contrastive_jax.data.base.symmetric_label_noise`
of the training subset's labels (docs/reproductions.md, "ProjNCE protocol": each training label is
replaced with probability p by a uniformly drawn class), drawn with the data seed 0: every
method and every training seed sees the same noisy labels at a given p (the seeds differ in
initialisation, augmentation and data order).

Probe: logistic regression on standardised frozen h (:func:`experiments.reproduce._probes.logistic_predict`),
scored on the test images, with 95 % percentile bootstrap intervals, fitted twice (an ambiguity of
the paper; docs/reproductions.md):

* ``clean``: on the clean training labels (our default reading of "fitting a linear classifier ...
  with clean labels");
* ``noisy``: on the same noisy labels the encoder was trained with. Under the clean reading the
  paper's SimCLR row could not fall from 64.49 at p = 0 to 58.94 at p = 0.4 (its pretraining
  is label-free), so the paper's probe may have seen the noisy labels; both are reported.

The CE runs also get both probes of their frozen h beside their own head's accuracy.

Resumable like ``conditional_uniformity``: each run writes
``<out>/runs/<task>/<method>/seed<k>.json`` (task ``cifar_labelnoise_p<p>_<E>ep``) and is skipped
when that exists; an unfinished run resumes from the newest checkpoint of
``<out>/work/<task>/<method>/seed<k>``; a stored run of another budget (or of the former
hand-made stack) is refused. ``cifar_labelnoise_<E>ep_summary.json``, ``_table.md`` and ``.png``
go to ``--out`` (default ``experiments/results/cifar_label_noise``; ``--quick`` defaults to
``runs/cifar_label_noise_quick``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from contrastive_jax import eval as eval_lib
from experiments.configs import cifar_label_noise as configs
from experiments.configs import cifar_soft_target as classifier_configs
from experiments.reproduce import _common as common

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "cifar_label_noise"
QUICK_OUT = ROOT / "runs" / "cifar_label_noise_quick"
NOISE, EPOCHS, TAU = configs.NOISE, configs.EPOCHS, configs.TAU
METHODS, LABEL_FREE = configs.METHODS, configs.LABEL_FREE
NUM_TRAIN, NUM_TEST = 5000, 2000
QUICK_NOISE = (0.0, 0.4)
NUM_CLASSES, RESAMPLES = 10, 1000
#: Jeong & Hero (2025), arXiv:2506.09810, Table 3 (STL-10, ResNet-18, 500 epochs) at our noise
#: levels, linear top-1 %.
PAPER = {"ce": (69.14, 56.19, 41.03), "simclr": (64.49, 59.78, 58.94),
         "supcon": (77.71, 67.43, 51.63), "projnce": (79.19, 70.96, 55.36),
         "med_supcon": (79.04, 72.70, 60.78)}


def noisy_labels(y: np.ndarray, p: float, data_seed: int = 0) -> np.ndarray:
    """The training labels of noise level ``p`` as the trainer draws them (int64 [N]):
    ``symmetric_label_noise`` of the subset's labels ``y`` with the config's ``data_seed``."""
    from contrastive_jax.data.base import symmetric_label_noise

    return symmetric_label_noise(y, NUM_CLASSES, p, data_seed)


def task_name(p: float | None, epochs: int, quick: bool) -> str:
    """``cifar_labelnoise_p<p>_<E>ep``; ``p=None`` is SimCLR's label-free task."""
    level = "simclr" if p is None else f"p{p:g}"
    return f"{'quick_' if quick else ''}cifar_labelnoise_{level}_{epochs}ep"


def run_config(method: str, p: float, args: argparse.Namespace, seed: int):
    """The config of one run, reading ``--data_dir`` with the run's subset sizes."""
    config = configs.get_config(f"{method},{0.0 if method in LABEL_FREE else p},{args.epochs}")
    config.data.data_dir = str(args.data_dir)
    config.data.train_subset = args.num_train
    config.data.source_kwargs.test_subset = args.num_test
    config.seed = seed
    return config


# ----------------------------------------------------------------------------- probe


def _linear(h_train: np.ndarray, y_train: np.ndarray, h_test: np.ndarray, y_test: np.ndarray,
            seed: int) -> dict:
    """Top-1 of a logistic probe with its bootstrap interval and packed per-example bits."""
    from experiments.reproduce import _probes

    correct = _probes.logistic_predict(h_train, y_train, h_test) == y_test
    return {**eval_lib.bootstrap_accuracy(correct, resamples=RESAMPLES, seed=seed),
            "n": len(correct), "bits": common.pack_bits(correct)}


def features_probe(y_train: np.ndarray, y_test: np.ndarray, levels: tuple[float, ...],
                   seed: int):
    """``probe(h_train, h_test) -> {"clean": ..., "noisy": {str(p): ...}}`` for features of the
    training and test images (clean labels ``y_train``, ``y_test``, in that row order);
    ``noisy[p]`` is fitted on the trainer's labels of noise level p."""

    def probe(h_train: np.ndarray, h_test: np.ndarray) -> dict:
        clean_rec = _linear(h_train, y_train, h_test, y_test, seed)
        noisy = {f"{p:g}": _linear(h_train, noisy_labels(y_train, p), h_test, y_test, seed)
                 for p in levels}
        return {"clean": clean_rec, "noisy": noisy}

    return probe


def embedding_probe(levels: tuple[float, ...], seed: int):
    """``common.pretrain_and_probe``'s ``probe(epoch, {"train", "test"} embeddings or None)``:
    both probes of frozen h (``levels``: the noise levels of the noisy-label probe)."""

    def probe(epoch: int, emb: dict | None) -> dict:
        if emb is None:
            return {"epoch": epoch, "clean": None, "noisy": None, "summary": "diverged"}
        train, test = emb["train"], emb["test"]
        fit = features_probe(train.labels, test.labels, levels, seed)
        record = {"epoch": epoch, **fit(train.features, test.features)}
        noisy = " ".join(f"p{p} {r['accuracy']:.3f}" for p, r in record["noisy"].items())
        record["summary"] = f"clean-label probe {record['clean']['accuracy']:.3f}, noisy {noisy}"
        return record

    return probe


# ----------------------------------------------------------------------------- runs


def contrastive_run(method: str, p: float, args: argparse.Namespace, source,
                    progress: common.Progress) -> dict:
    """One pretraining run with its probes; for the label-free methods the seed's one run."""
    seed = args.seed
    levels = args.noise if method in LABEL_FREE else (p,)
    task = task_name(None if method in LABEL_FREE else p, args.epochs, args.quick)
    path = common.run_path(args.out, task, method, seed)
    label = f"{task}/{method}/seed{seed}"
    budget = {"epochs": 0 if method == "random_init" else args.epochs,
              "num_train": args.num_train, "num_test": args.num_test, "trainer": common.TRAINER}
    done = common.load_finished(path, budget, progress, label)
    if done is not None:
        return done
    config = run_config(method, p, args, seed)
    probe = embedding_probe(tuple(levels), seed)
    if method == "random_init":
        start = time.time()
        emb = common.initial_embeddings(config, ("train", "test"), source)
        outcome = {"probes": [probe(0, emb)], "seconds": time.time() - start}
    else:
        outcome = common.pretrain_and_probe(
            config, common.work_path(args.out, task, method, seed), epochs=args.epochs,
            probes=(args.epochs,), splits=("train", "test"), probe=probe, progress=progress,
            label=label, source=source)
    result = {"task": task, "method": method, "seed": seed, "noise": None if method in LABEL_FREE
              else p, **budget, **outcome}
    common.save_json(path, result)
    progress.log(f"{label}: {common.final(result)['summary']} ({result['seconds']:.0f}s)")
    return result


def ce_run(p: float, args: argparse.Namespace, source, progress: common.Progress) -> dict:
    """Cross-entropy on the noisy labels, scored by its own head (``test``) and by both probes
    of its frozen h (``probe``)."""
    seed = args.seed
    task = task_name(p, args.epochs, args.quick)
    path = common.run_path(args.out, task, "ce", seed)
    label = f"{task}/ce/seed{seed}"
    budget = {"epochs": args.epochs, "batch": classifier_configs.BATCH,
              "num_train": args.num_train, "num_test": args.num_test, "trainer": common.TRAINER}
    done = common.load_finished(path, budget, progress, label)
    if done is not None:
        return done
    workdir = common.work_path(args.out, task, "ce", seed)
    outcome = common.train_classifier(run_config("ce", p, args, seed), workdir,
                                      epochs=args.epochs, source=source, progress=progress,
                                      label=label)
    final_step = outcome.pop("final_step")
    probe = None
    if not outcome["diverged"]:
        emb = common.embeddings_at(workdir, final_step, ("train", "test"), source)
        probe = features_probe(emb["train"].labels, emb["test"].labels, (p,), seed)(
            emb["train"].features, emb["test"].features)
    result = {"task": task, "method": "ce", "seed": seed, "noise": p, **budget, **outcome,
              "probe": probe}
    common.save_json(path, result)
    progress.log(f"{label}: {common.classifier_summary(result['test'])} "
                 f"({result['seconds']:.0f}s)")
    return result


# ----------------------------------------------------------------------------- summary


def _top1(run: dict, probe: str, p: float) -> dict | None:
    """A run's final top-1 record: ``probe`` in {"clean", "noisy", "head"}."""
    if run["method"] == "ce":  # a classifier record: its head's test metrics and the probes
        if probe == "head":
            return (run["test"] or {}).get("top1")
        rec = run["probe"] or {}
    else:
        rec = common.final(run)
    if probe == "noisy":
        return (rec.get("noisy") or {}).get(f"{p:g}")
    return rec.get("clean")


def summarise(runs: dict[tuple[str, float], list[dict]], noise: tuple[float, ...],
              methods: tuple[str, ...]) -> tuple[str, dict]:
    """Tables (top-1 % mean ± std per method and p, per probe; paired differences against
    SupCon) and a JSON summary keyed ``<probe>/<method>/p<p>``."""
    summary: dict = {}
    text = ""
    probes = [("clean", "clean-label linear probe (default)"),
              ("noisy", "noisy-label linear probe"), ("head", "CE's own head")]
    for probe, title in probes:
        rows = []
        for m in methods:
            if probe == "head" and m != "ce":
                continue
            cells = [m]
            for p in noise:
                found = [r for r in runs.get((m, p), []) if _top1(r, probe, p)]
                acc = [100 * _top1(r, probe, p)["accuracy"] for r in found]
                if acc:
                    summary[f"{probe}/{m}/p{p:g}"] = {"top1": common.mean_std(acc),
                                                      "seeds": [r["seed"] for r in found]}
                cells.append(f"{common.fmt_mean_std(acc, 2)} (n={len(acc)})" if acc else "–")
            paper = [f"{PAPER[m][NOISE.index(p)]:.2f}" for p in noise
                     if p in NOISE and m in PAPER and (probe == "head") == (m == "ce")]
            cells.append(" / ".join(paper) or "–")
            rows.append(cells)
        if not rows:
            continue
        levels = " / ".join(f"{p:g}" for p in noise if p in NOISE)
        header = ["method", *[f"p = {p:g}" for p in noise], f"paper, STL-10 (p = {levels})"]
        text += f"### Top-1 %, {title}\n\n{common.markdown_table(header, rows)}\n\n"
    text += differences(runs, noise, methods, summary)
    return text, summary


def differences(runs: dict[tuple[str, float], list[dict]], noise: tuple[float, ...],
                methods: tuple[str, ...], summary: dict) -> str:
    """Per-seed paired bootstrap of method - SupCon (clean and noisy probe) at every p."""
    rows = []
    for m in methods:
        if m in ("supcon", "ce", "random_init"):
            continue
        for p in noise:
            for probe in ("clean", "noisy"):
                base = {r["seed"]: _top1(r, probe, p) for r in runs.get(("supcon", p), [])}
                diffs = []
                for r in runs.get((m, p), []):
                    a, b = _top1(r, probe, p), base.get(r["seed"])
                    if a and b:
                        diffs.append((r["seed"], eval_lib.paired_bootstrap_difference(
                            common.unpack_bits(a["bits"], a["n"]),
                            common.unpack_bits(b["bits"], b["n"]), resamples=RESAMPLES)))
                if not diffs:
                    continue
                values = [100 * d["diff"] for _, d in diffs]
                summary[f"diff/{probe}/{m}-supcon/p{p:g}"] = common.mean_std(values)
                cis = " ".join(f"s{s}: [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"
                               for s, d in diffs)
                rows.append([f"{m} − supcon", f"{p:g}", probe, common.fmt_mean_std(values, 2),
                             cis])
    if not rows:
        return ""
    header = ["difference", "p", "probe", "top-1 points (mean ± std)",
              "95 % paired bootstrap CI per seed"]
    return f"### Paired differences against SupCon\n\n{common.markdown_table(header, rows)}\n"


def plot(summary: dict, noise: tuple[float, ...], methods: tuple[str, ...], path: Path) -> None:
    """Top-1 against p per method, one panel per probe (mean ± std over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, probe in zip(axes, ("clean", "noisy"), strict=True):
        for i, m in enumerate(methods):  # one colour per method in both panels
            for key, style in ((probe, "-o"), ("head", "--s")):
                if key == "head" and (m != "ce" or probe != "noisy"):
                    continue
                pts = [(p, summary.get(f"{key}/{m}/p{p:g}")) for p in noise]
                pts = [(p, v) for p, v in pts if v]
                if pts:
                    label = "ce (own head)" if key == "head" else m
                    ax.errorbar([p for p, _ in pts], [v["top1"][0] for _, v in pts],
                                yerr=[v["top1"][1] for _, v in pts], fmt=style, capsize=3,
                                color=f"C{i}", label=label)
        ax.set(xlabel="label noise p", title=f"{probe}-label linear probe")
        ax.set_xticks(noise)
    axes[0].set_ylabel("test top-1 (%)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- driver


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--noise", type=float, nargs="+", default=list(NOISE))
    args = common.parse_cifar_options(
        parser, argv, epochs=EPOCHS, images=(NUM_TRAIN, NUM_TEST), default_out=DEFAULT_OUT,
        quick_out=QUICK_OUT, quick_note=f", p {QUICK_NOISE}")
    if any(not 0.0 <= p <= 1.0 for p in args.noise):
        parser.error(f"--noise levels must be in [0, 1], got {args.noise}")
    if args.quick:
        args.noise = list(QUICK_NOISE)
    args.noise = tuple(sorted(set(args.noise)))
    methods = tuple(m for m in METHODS if m in args.methods)
    grid = [(m, p) for p in args.noise for m in methods
            if not (m in LABEL_FREE and p != args.noise[0])]
    progress = common.Progress(len(grid) * len(args.seeds), "cifar_label_noise")
    source = None
    if not args.aggregate_only:
        from contrastive_jax import data

        source = data.load_source(run_config("supcon", 0.0, args, 0).data)
    runs: dict[tuple[str, float], list[dict]] = {}
    for seed in args.seeds:  # seed-major: every cell of seed 0 before seed 1
        args.seed = seed
        for m, p in grid:
            if args.aggregate_only:
                name = task_name(None if m in LABEL_FREE else p, args.epochs, args.quick)
                run = common.load_json(common.run_path(args.out, name, m, seed))
                if run is None:
                    continue
            elif m == "ce":
                run = ce_run(p, args, source, progress)
            else:
                run = contrastive_run(m, p, args, source, progress)
            for level in args.noise if m in LABEL_FREE else (p,):
                runs.setdefault((m, level), []).append(run)
    table, summary = summarise(runs, args.noise, methods)
    name = f"{'quick_' if args.quick else ''}cifar_labelnoise_{args.epochs}ep"
    common.save_json(args.out / f"{name}_summary.json", summary)
    plot(summary, args.noise, methods, args.out / f"{name}.png")
    text = (f"## {name} ({args.epochs} epochs, {args.num_train} training / {args.num_test} test "
            f"images, seeds {args.seeds}, tau {TAU})\n\n{table}")
    (args.out / f"{name}_table.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
