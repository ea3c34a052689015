"""Reproduce ProjNCE's label-noise table (its Table 3) on a CIFAR-10 proxy at CPU scale.

Paper: M. Jeong and A. Hero (2025), "Generalizing Supervised Contrastive Learning: A Projection
Perspective", arXiv:2506.09810.

    python -m experiments.reproduce.cifar_label_noise                  # full grid, seeds 0 1 2
    python -m experiments.reproduce.cifar_label_noise --methods supcon projnce --seeds 0
    python -m experiments.reproduce.cifar_label_noise --aggregate_only # tables/plot of finished runs
    python -m experiments.reproduce.cifar_label_noise --quick          # smoke run (< 2 min)

The paper's Table 3 trains on STL-10 with symmetric label noise p in {0, 0.1, ..., 0.7} and reports
linear top-1 (its Table 3). This proxy uses p in {0, 0.2, 0.4} and the CIFAR-10 subsets,
encoder, projector and augmentation of ``cifar_proxy.py`` (5,000 training / 2,000 test images at
32x32, three stride-2 convolutions 32-64-128, projector Linear(128, 128)-BN-ReLU-Linear(128, 64),
two views, batch 128), with the paper's tau = 0.07 for every loss and the conditional-uniformity
proxy's AdamW (lr 1e-3 constant, weight decay 5e-5 on weights; docs/reproductions.md) in place of
the paper's AdamW lr 0.05 (likely unstable at this scale). Budget: EPOCHS epochs, not
the paper's 500.

Methods (ProjNCE Sec. 2-3; docs/losses.md, "ProjNCE family"):

* ``supcon``, ``projnce`` (beta 1) and ``med_supcon`` (lower median): supervised contrastive
  pretraining on the noisy labels;
* ``simclr``: NT-Xent on instance ids. It never sees a label, so one pretraining run per seed
  serves every p (stored under the task ``cifar_labelnoise_simclr_<E>ep``);
* ``random_init``: the probes of the seed's random-init encoder (every contrastive run's
  starting point), so a reader can see what training added (stored beside SimCLR's runs);
* ``ce``: the encoder with ``_cifar_classifier``'s MLP head trained end to end with softmax
  cross-entropy on the noisy labels (one augmented view per image, batch 256, the same AdamW and
  epochs) and scored with its own head, the paper's "CE" row.

Noise: :func:`contrastive_jax.data.sources.symmetric_label_noise` (docs/reproductions.md, "ProjNCE protocol": each training
label is replaced with probability p by a uniformly drawn class), drawn with the training seed,
so each seed has its own noise and a method sees the same noisy labels as the others of its seed.

Probe: logistic regression on standardised frozen h (``cu.logistic_scores``), scored on the test
images, with 95 % percentile bootstrap intervals, fitted twice (an ambiguity of the paper;
docs/reproductions.md):

* ``clean``: on the clean training labels (our default reading of "fitting a linear classifier ...
  with clean labels");
* ``noisy``: on the same noisy labels the encoder was trained with. Under the clean reading the
  paper's SimCLR row could not fall from 64.49 at p = 0 to 58.94 at p = 0.4 (its pretraining
  is label-free), so the paper's probe may have seen the noisy labels; both are reported.

The CE runs also get both probes of their frozen h beside their own head's accuracy.

Resumable like ``conditional_uniformity.py``: each run writes
``<out>/runs/<task>/<method>/seed<k>.json`` (task ``cifar_labelnoise_p<p>_<E>ep``) and is skipped
when that exists; an unfinished run resumes from its checkpoint; a stored run of another budget is
refused. ``cifar_labelnoise_<E>ep_summary.json``, ``_table.md`` and ``.png`` go to ``--out``
(default ``experiments/results/cifar_label_noise``; ``--quick`` defaults to
``runs/cifar_label_noise_quick``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import optax

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _cifar_classifier as classifier  # noqa: E402
import _cifar_common as cifar  # noqa: E402
import _legacy_cu as cu  # noqa: E402
import _synthetic_common as common  # noqa: E402
import cifar_proxy  # noqa: E402
import sincere  # noqa: E402

from contrastive_jax import eval as eval_lib  # noqa: E402
from contrastive_jax import losses  # noqa: E402
from contrastive_jax.data.sources import symmetric_label_noise  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "cifar_label_noise"
QUICK_OUT = ROOT / "runs" / "cifar_label_noise_quick"
NOISE = (0.0, 0.2, 0.4)
EPOCHS = 24
QUICK_EPOCHS, QUICK_NOISE = 2, (0.0, 0.4)
TAU = 0.07
RUN_OPTIONS = cifar.RunOptions(EPOCHS, DEFAULT_OUT, QUICK_OUT, QUICK_EPOCHS, cifar_proxy.NUM_TRAIN,
                               cifar_proxy.NUM_TEST, cifar_proxy.QUICK_TRAIN, cifar_proxy.QUICK_TEST)
SUPERVISED: dict[str, cu.LossFn] = {
    "supcon": lambda z, ids, labels, meta: losses.supcon(z, labels, temperature=TAU),
    "projnce": lambda z, ids, labels, meta: losses.projnce(z, labels, temperature=TAU),
    "med_supcon": lambda z, ids, labels, meta: losses.med_supcon(z, labels, temperature=TAU),
}


def simclr_loss(z, ids, labels, meta):
    """NT-Xent over instance ids at tau 0.07 (``cu.LossFn``; labels and meta unused)."""
    del labels, meta
    return losses.nt_xent(z, ids, temperature=TAU)


METHODS = ("ce", "random_init", "simclr", *SUPERVISED)
#: Label-free methods: one run per seed serves every noise level.
LABEL_FREE = ("random_init", "simclr")
#: Jeong & Hero (2025), arXiv:2506.09810, Table 3 (STL-10, ResNet-18, 500 epochs) at our noise
#: levels, linear top-1 %.
PAPER = {"ce": (69.14, 56.19, 41.03), "simclr": (64.49, 59.78, 58.94),
         "supcon": (77.71, 67.43, 51.63), "projnce": (79.19, 70.96, 55.36),
         "med_supcon": (79.04, 72.70, 60.78)}


def noisy_labels(y: np.ndarray, p: float, seed: int) -> np.ndarray:
    """The training labels of noise level ``p`` for training seed ``seed`` (int64 [N])."""
    return symmetric_label_noise(y, cifar.NUM_CLASSES, p, seed)


def task_name(p: float | None, epochs: int, quick: bool) -> str:
    """``cifar_labelnoise_p<p>_<E>ep``; ``p=None`` is SimCLR's label-free task."""
    level = "simclr" if p is None else f"p{p:g}"
    return f"{'quick_' if quick else ''}cifar_labelnoise_{level}_{epochs}ep"


# ----------------------------------------------------------------------------- probe


def _linear(h_train: np.ndarray, y_train: np.ndarray, h_test: np.ndarray, y_test: np.ndarray,
            seed: int) -> dict:
    """Top-1 of a logistic probe with its bootstrap interval and packed per-example bits."""
    correct = eval_lib.topk_correct(cu.logistic_scores(h_train, y_train, h_test), y_test, 1)
    return {**eval_lib.bootstrap_accuracy(correct, resamples=cu.RESAMPLES, seed=seed),
            "n": len(correct), "bits": sincere._bits(correct)}


def features_probe(clean: cu.Data, levels: tuple[float, ...], seed: int):
    """``probe(h_train, h_test) -> {"clean": ..., "noisy": {str(p): ...}}`` for features of
    ``clean``'s images; ``noisy[p]`` is fitted on the seed's labels of noise level p."""

    def probe(h_train: np.ndarray, h_test: np.ndarray) -> dict:
        clean_rec = _linear(h_train, clean.y_train, h_test, clean.y_test, seed)
        noisy = {f"{p:g}": _linear(h_train, noisy_labels(clean.y_train, p, seed), h_test,
                                   clean.y_test, seed) for p in levels}
        return {"clean": clean_rec, "noisy": noisy}

    return probe


def contrastive_probe(clean: cu.Data, levels: tuple[float, ...]):
    """``cu.run_one``'s probe factory for a contrastive run: both probes of frozen h.

    ``levels``: the noise levels of the noisy-label probe (one for a supervised run, all of them
    for SimCLR, whose pretraining serves every level).
    """

    def factory(task: cu.Task, data: cu.Data, seed: int):
        del data  # the run trains on noisy labels; the probe needs the clean ones
        fit = features_probe(clean, levels, seed)

        def probe(epoch: int, params: dict | None) -> dict:
            if params is None:
                return {"epoch": epoch, "clean": None, "noisy": None, "summary": "diverged"}
            record = {"epoch": epoch, **fit(cu.features(task, params, clean.x_train),
                                            cu.features(task, params, clean.x_test))}
            noisy = " ".join(f"p{p} {r['accuracy']:.3f}" for p, r in record["noisy"].items())
            record["summary"] = f"clean-label probe {record['clean']['accuracy']:.3f}, noisy {noisy}"
            return record

        return probe

    return factory


# ----------------------------------------------------------------------------- runs


def contrastive_run(method: str, p: float, clean: cu.Data, args: argparse.Namespace,
                    progress: common.Progress) -> dict:
    """One pretraining run with its probes; for the label-free methods the seed's one run."""
    seed = args.seed
    levels = args.noise if method in LABEL_FREE else (p,)
    name = task_name(None if method in LABEL_FREE else p, args.epochs, args.quick)
    task = cu.Task(name, cifar_proxy.ARCH, cifar.augment_cifar, args.epochs, cifar_proxy.BATCH,
                   (args.epochs,))
    if method == "random_init":
        return cu.random_init_run(task, clean, contrastive_probe(clean, levels), seed,
                                  args.out, progress)
    if method == "simclr":
        loss_fn, data = simclr_loss, clean
    else:
        loss_fn = SUPERVISED[method]
        data = cu.Data(clean.x_train, noisy_labels(clean.y_train, p, seed), clean.meta_train,
                       clean.x_test, clean.y_test)
    return cu.run_one(task, method, loss_fn, cu.adamw, data, contrastive_probe(clean, levels),
                      seed, args.out, progress)


def cross_entropy(logits, labels, targets):
    """Softmax cross-entropy on integer labels (``_cifar_classifier.LossFn``; targets unused)."""
    del targets
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def ce_run(p: float, clean: cu.Data, args: argparse.Namespace, progress: common.Progress) -> dict:
    """Cross-entropy on the noisy labels, scored by its own head (``test``) and by both probes
    of its frozen h (``probe``)."""
    config = classifier.Config(task_name(p, args.epochs, args.quick), args.epochs)
    encoder = cu.Task(config.task, config.encoder, config.augment, args.epochs, config.batch, ())
    fit = features_probe(clean, (p,), args.seed)

    def probe(params: dict) -> dict:
        return fit(cu.features(encoder, params, clean.x_train),
                   cu.features(encoder, params, clean.x_test))

    return classifier.run_classifier(
        config, "ce", cross_entropy, False, clean.x_train,
        noisy_labels(clean.y_train, p, args.seed), clean.x_test, clean.y_test, args.seed,
        args.out, progress, extra={"noise": p}, probe=probe)


# ----------------------------------------------------------------------------- summary


def _top1(run: dict, probe: str, p: float) -> dict | None:
    """A run's final top-1 record: ``probe`` in {"clean", "noisy", "head"}."""
    if run["method"] == "ce":  # a _cifar_classifier record
        if probe == "head":
            return (run["test"] or {}).get("top1")
        rec = run["probe"] or {}
    else:
        rec = cu.final(run)
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
                            sincere._unbits(a["bits"], a["n"]), sincere._unbits(b["bits"], b["n"]),
                            resamples=cu.RESAMPLES)))
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
    cifar.add_run_options(parser, RUN_OPTIONS, quick_note=f", p {QUICK_NOISE}")
    args = parser.parse_args(argv)
    if any(not 0.0 <= p <= 1.0 for p in args.noise):
        raise ValueError(f"--noise levels must be in [0, 1], got {args.noise}")
    num_train, num_test = cifar.resolve_run_options(args, RUN_OPTIONS)
    if args.quick:
        args.noise = list(QUICK_NOISE)
    args.noise = tuple(sorted(set(args.noise)))
    methods = tuple(m for m in METHODS if m in args.methods)
    clean = cifar.cifar_data(num_train, num_test, cifar_proxy.DOWNSAMPLE)
    grid = [(m, p) for p in args.noise for m in methods
            if not (m in LABEL_FREE and p != args.noise[0])]
    progress = common.Progress(len(grid) * len(args.seeds), "cifar_label_noise")
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
                run = ce_run(p, clean, args, progress)
            else:
                run = contrastive_run(m, p, clean, args, progress)
            for level in args.noise if m in LABEL_FREE else (p,):
                runs.setdefault((m, level), []).append(run)
    table, summary = summarise(runs, args.noise, methods)
    name = f"{'quick_' if args.quick else ''}cifar_labelnoise_{args.epochs}ep"
    common.save_json(args.out / f"{name}_summary.json", summary)
    plot(summary, args.noise, methods, args.out / f"{name}.png")
    text = (f"## {name} ({args.epochs} epochs, {num_train} training / {num_test} test images, "
            f"seeds {args.seeds}, tau {TAU})\n\n{table}")
    (args.out / f"{name}_table.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
