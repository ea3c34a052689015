"""Reproduce soft-target InfoNCE's Table 1 (Hugger & Uhlmann 2024) on CIFAR-10 at CPU scale.

Paper: J. Hugger and V. Uhlmann (2024), "Towards noise contrastive estimation with soft targets for
conditional models", arXiv:2404.14076.

    python -m experiments.reproduce.cifar_soft_target --data_dir PATH/TO/cifar10   # 4 methods x seeds 0 1 2
    python -m experiments.reproduce.cifar_soft_target --data_dir PATH/TO/cifar10 --seeds 0 --epochs 12
    python -m experiments.reproduce.cifar_soft_target --aggregate_only  # tables/plots of finished runs
    python -m experiments.reproduce.cifar_soft_target --data_dir PATH/TO/cifar10 --quick  # smoke run

A classifier is trained from scratch with four losses by the library's trainer
(``contrastive_jax.train.loop.train``, Orbax checkpoints in the run's work directory; configs
``experiments/configs/cifar_soft_target.py``) and compared on test top-1 / top-5 accuracy (the
paper's Tables 1 and 2) and calibration (its Sec. 4.2, Fig. 4):

* ``nll``: cross-entropy on the integer labels, no label smoothing, no MixUp/CutMix (Eq. 1);
* ``stce``: soft-target cross-entropy (tau 1) on the soft targets of the trainer's mixing stage
  (``config.loss.mixing``: label smoothing 0.1 + MixUp 0.8 / CutMix 1.0, batch mode,
  mixup_prob 1.0, switch_prob 0.5, partner = the mirrored row; Eqs. 2-3; docs/reproductions.md);
* ``infonce``: hard InfoNCE, soft-target InfoNCE fed the one-hot labels (the paper's code does
  the same), in-batch label negatives, nothing masked (Eq. 5);
* ``sti``: soft-target InfoNCE on the same smoothed + mixed targets as ``stce`` (Eq. 12).

tau = 1 and eta = the empirical class frequencies of the training subset (class-balanced, so
uniform; passed explicitly as ``class_prior``). Metrics on the test subset, no augmentation, from
the final checkpoint (:func:`contrastive_jax.eval.checkpoint.evaluate_classifier`): top-1 / top-5
(bootstrap intervals over the test set; per-example correctness stored, so the differences get a
paired bootstrap), ECE with 15 equal-width confidence bins of ``softmax(logits / tau)`` and the
test NLL. For the InfoNCE-type models ``softmax(logits / tau)`` is the paper's inference model:
training scores are ``L / tau - log eta`` and model ``log p(k|x) / eta_k`` up to a per-example
constant, so ``L / tau`` models ``log p(k|x)`` (the same as ``softmax(L / tau - log eta)`` for a
uniform eta). The differences STI - STCE, STI - NLL and InfoNCE - NLL are reported per seed
(paired bootstrap 95 % intervals for top-1 and for ECE) and as mean ± std over seeds.

Proxy settings (``experiments/configs/cifar_soft_target.py``): class-balanced subsets of a
CIFAR-10 image folder (``--data_dir``), 5,000 training and 2,000 test images at 32x32, the
``small_cnn`` encoder (three 3x3 stride-2 ReLU convolutions 32-64-128, global average pool), head
Linear(128, 128)-BN-ReLU-Linear(128, 10); one ``cifar_proxy``-augmented view per image; AdamW lr
1e-3 constant, weight decay 5e-5 on weights; batch 256 (last partial batch dropped); 36 epochs;
seeds 0 1 2 (a seed fixes the initialisation, the augmentation and the data order, shared by the
four methods, so differences are paired).

Expectation worth knowing (docs/reproductions.md, "Soft-target InfoNCE protocol"): with in-batch label negatives, hard InfoNCE is NLL on
logits shifted by ``log(n_k / eta_k)`` (``n_k`` the class counts of the batch) plus a constant;
with B = 256 >> K = 10, ``n_k ~ B eta_k``, so ``infonce`` is close to ``nll`` by construction.
The paired bootstrap of ECE differences resamples the test set; ECE is biased upwards on small
samples, so those intervals are approximate.

Deviations from the paper (Sec. 4.1, App. A.4), all for CPU scale:

* ViT-B/16 fine-tuned from MAE weights -> the 3-conv encoder above, trained from scratch;
* CIFAR-100 / Tiny ImageNet / ImageNet at 224x224 -> a 5,000 / 2,000-image CIFAR-10 subset at 32x32;
* RandAug + random erasing + drop-path -> ``augment_cifar`` (crop, flip, contrast, brightness,
  colour gains); label smoothing / MixUp / CutMix as in the paper;
* batch 1,024 (1,023 negatives) -> 256 (255 negatives; K = 10, so every class is in every batch);
* 100 epochs, 5 warm-up, cosine, layer-wise lr decay, per-method base lr -> 36 epochs of AdamW
  at a constant lr 1e-3 for every method;
* 3-layer MLP head (hidden 4,096, BN, non-affine BN on the class scores) -> a 2-layer MLP head
  with BN after the hidden layer;
* the repo keeps the best top-1 over epochs -> the last epoch is evaluated;
* single runs -> 3 seeds, with bootstrap intervals.

Resumable: each run writes ``<out>/runs/<task>/<method>/seed<k>.json`` (task
``cifar_soft_target_<E>ep``, ``quick_...`` for ``--quick``) and is skipped when that exists; an
unfinished run resumes from the newest checkpoint of ``<out>/work/<task>/<method>/seed<k>``; a
stored run of another budget (or of the former hand-made stack) is refused. Methods
run seed-major (all four methods of seed 0 before seed 1). ``<task>_summary.json``,
``<task>_table.md`` and ``<task>.png`` go to ``--out`` (default
``experiments/results/cifar_soft_target``; ``--quick`` defaults to ``runs/cifar_soft_target_quick``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ml_collections
import numpy as np

from contrastive_jax import eval as eval_lib
from experiments.configs import cifar_soft_target as configs
from experiments.reproduce import _common as common

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "cifar_soft_target"
QUICK_OUT = ROOT / "runs" / "cifar_soft_target_quick"
TAU = configs.TAU
NUM_BINS, RESAMPLES = 15, 1000
#: (a, b): report a - b.
COMPARISONS = (("sti", "stce"), ("sti", "nll"), ("infonce", "nll"))
LABELS = {"nll": "NLL", "stce": "STCE", "infonce": "InfoNCE", "sti": "STI"}
PAPER = {
    "cifar100_top1": {"nll": 90.84, "stce": 90.74, "infonce": 90.75, "sti": 90.80},
    "cifar100_top5": {"nll": 98.37, "stce": 98.40, "infonce": 98.40, "sti": 98.51},
    "ece_best_models": {"cifar100": {"sti": 2.9, "stce": 15.8},
                        "tiny_imagenet": {"sti": 7.7, "stce": 6.3}},
}
PAPER_TEXT = (
    "Paper (Hugger & Uhlmann 2024, arXiv:2404.14076; ViT-B/16 fine-tuned from MAE, 224x224, "
    "batch 1,024, single runs): CIFAR-100 top-1 (Table 1) NLL 90.84, STCE 90.74, InfoNCE 90.75, "
    "STI 90.80 (top-5, Table 2: 98.37, 98.40, 98.40, 98.51), i.e. STI - STCE +0.06, STI - NLL "
    "-0.04, InfoNCE - NLL -0.09; ECE of the best models (Sec. 4.2, Fig. 4; Fig. A.4) STI 2.9 % "
    "vs STCE 15.8 % on CIFAR-100, but STI 7.7 % vs STCE 6.3 % on Tiny ImageNet (ours: 15 "
    "bins). This proxy (CIFAR-10 subset, small CNN from scratch) checks the direction of these "
    "differences, not their size.\n"
)


# ----------------------------------------------------------------------------- summaries


def _num(x: float, digits: int = 2, sign: str = "") -> str:
    """``x`` with ``digits`` decimals, never "-0.00" (``sign="+"`` shows the sign)."""
    return f"{round(x, digits) + 0.0:{sign}.{digits}f}"


def _pm(stat: dict, digits: int = 2) -> str:
    return f"{_num(stat['mean'], digits)} ± {_num(stat['std'], digits)}"


def paired_ece_bootstrap(test_a: dict, test_b: dict, resamples: int = RESAMPLES,
                         seed: int = 0, confidence: float = 0.95) -> dict:
    """Paired percentile bootstrap of ``ECE(a) - ECE(b)`` (in [0, 1] units) on one test set.

    ``test_a``/``test_b`` are :func:`common.classifier_test` records of the same test images
    (per-example confidence and top-1 correctness); each resample draws the same indices for
    both. Returns ``diff`` (full test set), ``low``, ``high``, ``significant``.
    """
    conf = [np.asarray(t["confidence"]) for t in (test_a, test_b)]
    hit = [common.correct_bits(t) for t in (test_a, test_b)]
    n = len(conf[0])
    if len(conf[1]) != n:
        raise ValueError("the two records must be of the same test set")
    ece = eval_lib.calibration_error_from_confidence
    rng = np.random.default_rng(seed)
    diffs = np.empty(resamples)
    for r in range(resamples):
        rows = rng.integers(0, n, n)
        diffs[r] = (ece(conf[0][rows], hit[0][rows], NUM_BINS)
                    - ece(conf[1][rows], hit[1][rows], NUM_BINS))
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return {"diff": ece(conf[0], hit[0], NUM_BINS) - ece(conf[1], hit[1], NUM_BINS),
            "low": float(low), "high": float(high),
            "significant": bool(low > 0 or high < 0)}


def _differences(results: dict[str, list[dict]]) -> dict:
    """Per-seed paired differences (percentage points) for ``COMPARISONS`` present."""
    out = {}
    for a, b in COMPARISONS:
        runs_a = {r["seed"]: r["test"] for r in results.get(a, []) if r["test"]}
        runs_b = {r["seed"]: r["test"] for r in results.get(b, []) if r["test"]}
        seeds = sorted(set(runs_a) & set(runs_b))
        if not seeds:
            continue
        per_seed = []
        for s in seeds:
            top1 = eval_lib.paired_bootstrap_difference(
                common.correct_bits(runs_a[s]), common.correct_bits(runs_b[s]),
                resamples=RESAMPLES, seed=0)
            ece = paired_ece_bootstrap(runs_a[s], runs_b[s])
            per_seed.append({
                "seed": s,
                **{f"top1_{k}": 100 * top1[k] for k in ("diff", "low", "high")},
                "top1_significant": top1["significant"],
                **{f"ece_{k}": 100 * ece[k] for k in ("diff", "low", "high")},
                "ece_significant": ece["significant"],
            })
        out[f"{a}_minus_{b}"] = {
            "top1": common.stat([p["top1_diff"] for p in per_seed]),
            "ece": common.stat([p["ece_diff"] for p in per_seed]),
            "per_seed": per_seed,
        }
    return out


def summarise(results: dict[str, list[dict]]) -> tuple[str, dict]:
    """Markdown tables and the JSON summary of finished runs (:func:`run_one` records).

    Accuracies and ECE in %, NLL in nats; mean ± std (ddof 1) over seeds.
    """
    rows, methods = [], {}
    for m, runs in results.items():
        ok = [r for r in runs if r["test"] is not None]
        diverged = [r["seed"] for r in runs if r["test"] is None]
        if not ok:
            rows.append([LABELS.get(m, m), 0, "diverged", "", "", "", "", ""])
            continue
        t = [r["test"] for r in ok]
        entry = {
            "top1": common.stat([100 * x["top1"]["accuracy"] for x in t]),
            "top5": common.stat([100 * x["top5"]["accuracy"] for x in t]),
            "ece": common.stat([100 * x["ece"] for x in t]),
            "nll": common.stat([x["nll"] for x in t]),
            "final_train_loss": common.stat([r["epoch_losses"][-1] for r in ok]),
            "seeds": [r["seed"] for r in ok], "diverged_seeds": diverged,
            "per_seed": {str(r["seed"]): {
                "top1": 100 * r["test"]["top1"]["accuracy"],
                "top1_ci": [100 * r["test"]["top1"]["low"], 100 * r["test"]["top1"]["high"]],
                "top5": 100 * r["test"]["top5"]["accuracy"], "ece": 100 * r["test"]["ece"],
                "nll": r["test"]["nll"], "seconds": r["seconds"]} for r in ok},
        }
        methods[m] = entry
        ci = " ".join(f"[{v['top1_ci'][0]:.1f}, {v['top1_ci'][1]:.1f}]"
                      for v in entry["per_seed"].values())
        rows.append([LABELS.get(m, m), len(ok), _pm(entry["top1"]), ci, _pm(entry["top5"]),
                     _pm(entry["ece"]), _pm(entry["nll"], 3), _pm(entry["final_train_loss"], 3)])
    header = ["method", "seeds", "top-1 (%)", "top-1 95 % CI per seed", "top-5 (%)",
              "ECE-15 (%)", "test NLL", "final train loss"]
    text = common.markdown_table(header, rows)
    differences = _differences(results)
    if differences:
        drows = []
        for key, d in differences.items():
            a, b = key.split("_minus_")

            def per(d=d, which="top1"):
                return "; ".join(
                    f"s{p['seed']}: {_num(p[f'{which}_diff'], sign='+')} "
                    f"[{_num(p[f'{which}_low'], sign='+')}, "
                    f"{_num(p[f'{which}_high'], sign='+')}]"
                    f"{'*' if p[f'{which}_significant'] else ''}"
                    for p in d["per_seed"])

            drows.append([f"{LABELS[a]} − {LABELS[b]}", _pm(d["top1"]), per(which="top1"),
                          _pm(d["ece"]), per(which="ece")])
        text += ("\nDifferences in percentage points: mean ± std over seeds, and per seed the "
                 "value on the test set with its paired bootstrap 95 % interval (* = excludes "
                 "0).\n\n")
        text += common.markdown_table(["comparison", "top-1 diff", "top-1 per seed", "ECE diff",
                                       "ECE per seed"], drows)
    text += "\n" + PAPER_TEXT
    summary = {"methods": methods, "differences": differences, "paper": PAPER}
    return text, summary


def plot(results: dict[str, list[dict]], summary: dict, path: Path) -> None:
    """Top-1 and ECE bars (mean ± std over seeds, seeds as dots) and a reliability diagram of
    the lowest seed every method has."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(summary["methods"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, ylabel in ((axes[0], "top1", "test top-1 (%)"),
                            (axes[1], "ece", "test ECE-15 (%)")):
        stats = [summary["methods"][m][key] for m in methods]
        ax.bar(range(len(methods)), [s["mean"] for s in stats], yerr=[s["std"] for s in stats],
               capsize=3, color=[f"C{i}" for i in range(len(methods))], alpha=0.8)
        for i, m in enumerate(methods):
            values = [v[key] for v in summary["methods"][m]["per_seed"].values()]
            ax.plot([i] * len(values), values, "k.", ms=4)
        ax.set_xticks(range(len(methods)), [LABELS.get(m, m) for m in methods])
        ax.set(ylabel=ylabel)
    if methods:
        means = [summary["methods"][m]["top1"]["mean"] for m in methods]
        axes[0].set_ylim(max(0.0, min(means) - 10), min(100.0, max(means) + 5))
    axes[0].set_title("accuracy (Table 1)")
    axes[1].set_title("calibration (Sec. 4.2, Fig. 4)")
    seeds = [set(summary["methods"][m]["seeds"]) for m in methods]
    common_seeds = sorted(set.intersection(*seeds)) if seeds else []
    ax = axes[2]
    ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1)
    if common_seeds:
        s = common_seeds[0]
        for i, m in enumerate(methods):
            test = next(r["test"] for r in results[m] if r["seed"] == s)
            rel = test["reliability"]
            pts = [(c, a) for c, a in zip(rel["confidence"], rel["accuracy"], strict=True)
                   if c is not None]
            ax.plot(*zip(*pts, strict=True), marker="o", ms=3, color=f"C{i}",
                    label=f"{LABELS.get(m, m)} (ECE {100 * test['ece']:.1f} %)")
        ax.set_title(f"reliability diagram, seed {s}")
        ax.legend(fontsize=8)
    ax.set(xlabel="mean confidence in bin", ylabel="accuracy in bin", xlim=(0, 1), ylim=(0, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- driver


def task_name(epochs: int, quick: bool) -> str:
    return f"{'quick_' if quick else ''}cifar_soft_target_{epochs}ep"


def data_config(config: ml_collections.ConfigDict, args: argparse.Namespace):
    """``config`` reading ``--data_dir`` with the run's subset sizes."""
    config.data.data_dir = str(args.data_dir)
    config.data.train_subset = args.num_train
    config.data.source_kwargs.test_subset = args.num_test
    return config


def class_prior(labels: np.ndarray, num_classes: int) -> list[float]:
    """Empirical class frequencies of int labels [N] (the paper's eta), as a list of K floats."""
    counts = np.bincount(np.asarray(labels), minlength=num_classes)
    if counts.shape != (num_classes,):
        raise ValueError(f"labels must be in [0, {num_classes})")
    return (counts / counts.sum()).tolist()


def run_one(task: str, method: str, seed: int, args: argparse.Namespace, source,
            prior: list[float], progress: common.Progress) -> dict:
    """One (method, seed) run: loaded if its JSON exists (with this budget), else trained with
    the library (resuming from its work directory), scored on the test split and stored."""
    path = common.run_path(args.out, task, method, seed)
    label = f"{task}/{method}/seed{seed}"
    budget = {"epochs": args.epochs, "batch": configs.BATCH, "num_train": args.num_train,
              "num_test": args.num_test, "trainer": common.TRAINER}
    done = common.load_finished(path, budget, progress, label)
    if done is not None:
        return done
    config = data_config(configs.get_config(f"{method},{args.epochs}"), args)
    config.seed = seed
    term = config.loss.name
    if term == "label_soft_target_infonce":
        config.loss.kwargs[term].class_prior = tuple(prior)
    outcome = common.train_classifier(
        config, common.work_path(args.out, task, method, seed), epochs=args.epochs,
        source=source, progress=progress, label=label, temperature=TAU, num_bins=NUM_BINS)
    del outcome["final_step"]
    result = {"task": task, "method": method, "seed": seed, **budget, **outcome,
              "class_prior": prior, "temperature": TAU}
    common.save_json(path, result)
    progress.log(f"{label}: {common.classifier_summary(result['test'])} "
                 f"({result['seconds']:.0f}s)")
    return result


def run_all(args: argparse.Namespace) -> str:
    """Train (or load) every run, seed-major, then write the summary, table and plot."""
    task = task_name(args.epochs, args.quick)
    names = list(LABELS)
    results: dict[str, list[dict]] = {m: [] for m in names}
    if args.aggregate_only:
        for seed in args.seeds:
            for m in names:
                done = common.load_json(common.run_path(args.out, task, m, seed))
                if done is not None:
                    results[m].append(done)
    else:
        from contrastive_jax import data

        source = data.load_source(data_config(configs.get_config("nll,1"), args).data)
        prior = class_prior(source.split("train").labels, configs.NUM_CLASSES)
        progress = common.Progress(len(names) * len(args.seeds), task)
        for seed in args.seeds:  # seed-major: a first seed of every method before more seeds
            for m in names:
                results[m].append(run_one(task, m, seed, args, source, prior, progress))
    results = {m: r for m, r in results.items() if r}
    table, summary = summarise(results)
    any_run = next((r for runs in results.values() for r in runs), None)
    num_train, num_test = ((any_run["num_train"], any_run["num_test"]) if any_run
                           else (args.num_train, args.num_test))
    summary["config"] = {"task": task, "epochs": args.epochs, "batch": configs.BATCH,
                         "num_train": num_train, "num_test": num_test, "tau": TAU,
                         "seeds": args.seeds, "ece_bins": NUM_BINS, "trainer": common.TRAINER}
    common.save_json(args.out / f"{task}_summary.json", summary)
    plot(results, summary, args.out / f"{task}.png")
    text = (f"## {task} ({args.epochs} epochs, {num_train} training / {num_test} test "
            f"images, batch {configs.BATCH}, tau {TAU}, seeds {args.seeds})\n\n{table}")
    (args.out / f"{task}_table.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = common.parse_cifar_options(
        parser, argv, epochs=configs.EPOCHS, images=(configs.NUM_TRAIN, configs.NUM_TEST),
        default_out=DEFAULT_OUT, quick_out=QUICK_OUT)
    print(run_all(args), flush=True)


if __name__ == "__main__":
    main()
