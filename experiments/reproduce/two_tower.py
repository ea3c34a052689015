"""The two-tower losses train: CLIP and SigLIP retrieval on digits against a shuffled-pairs control.

Papers: A. Radford et al. (2021), "Learning Transferable Visual Models From Natural Language
Supervision", arXiv:2103.00020 (CLIP); X. Zhai, B. Mustafa, A. Kolesnikov and L. Beyer (2023),
"Sigmoid Loss for Language Image Pre-Training", arXiv:2303.15343 (SigLIP).

    python -m experiments.reproduce.two_tower               # 2 losses x 2 pairings x 3 seeds
    python -m experiments.reproduce.two_tower --quick       # 2 epochs, seed 0
    python -m experiments.reproduce.two_tower --aggregate_only

Claim checked (the premise of both papers, at toy scale): a network trained with the loss on
matched pairs retrieves the partner of a held-out example far above chance, and above the
same recipe trained on pairs whose partner is another example (the control). The two
"modalities" are the two augmented views of a digit (``experiments/configs/two_tower.py``:
first view = image tower, second view = text tower, one shared network). Retrieval:
the 360 test digits, two views each drawn once with a fixed seed (:data:`EVAL_SEED`, the
same views for every run), projected by the frozen network (BatchNorm running statistics);
image->text top-1 is the fraction of first views whose most cosine-similar second view among
all 360 is their own (chance 1/360), text->image the converse. The paired comparison with
the control uses the same seed: the difference of top-1 with a 95 % bootstrap interval over
the test examples (paired: the same resampled examples for both runs), and over seeds the
mean difference with a 95 % t-interval.

Resumable like the other drivers: per-run JSON under ``<out>/runs`` (skipped when present),
the library's checkpoints under ``<out>/work`` (an unfinished run resumes).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from experiments.configs import two_tower as configs
from experiments.reproduce import _common as common

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "two_tower"
#: Seed of the test views (one draw shared by every run).
EVAL_SEED = 20231
RESAMPLES = 2000
#: Two-sided 97.5 % quantiles of Student's t by degrees of freedom (seeds - 1).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776}


def test_pairs(config, source):
    """The test split's two views per example, [n, 2, S, S, 3] normalised, and labels [n]."""
    import dataclasses

    from contrastive_jax import data

    test = source.split("test")
    as_train = dataclasses.replace(source, splits={"train": test})
    n = test.num_examples
    batch = next(b for b in range(128, 0, -1) if n % b == 0)
    data_config = config.data.copy_and_resolve_references()
    data_config.global_batch_size = batch
    stream = data.make_pretrain_iterator(data_config, seed=EVAL_SEED, source=as_train,
                                         process_index=0, process_count=1)
    views, labels, index = [], [], []
    for _ in range(n // batch):
        b = next(stream)
        views.append(np.asarray(stream.on_device({k: b[k] for k in ("views", "index", "step")})[
            "views"]))
        labels.append(np.asarray(b["label"]))
        index.append(np.asarray(b["index"]))
    order = np.argsort(np.concatenate(index))
    return np.concatenate(views)[order], np.concatenate(labels)[order]


def project(network, views: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit projections of the first and second views, each [n, d]."""
    import jax
    from flax import nnx

    network.eval()
    graphdef, state = nnx.split(network)

    @jax.jit
    def forward(state, x):
        return nnx.merge(graphdef, state)(x)[1]

    out = []
    for v in (0, 1):
        z = np.concatenate([np.asarray(forward(state, views[i:i + 120, v]))
                            for i in range(0, len(views), 120)])
        out.append(z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12))
    return out[0], out[1]


def retrieval(images: np.ndarray, texts: np.ndarray) -> dict:
    """Top-1 retrieval both ways over the whole test set, with per-example correctness."""
    sims = images @ texts.T
    own = np.arange(len(images))
    i2t = np.argmax(sims, axis=1) == own
    t2i = np.argmax(sims, axis=0) == own
    return {"i2t": float(i2t.mean()), "t2i": float(t2i.mean()),
            "i2t_bits": common.pack_bits(i2t), "t2i_bits": common.pack_bits(t2i),
            "n": int(len(images))}


def run_one(name: str, loss: str, pairing: str, seed: int, epochs: int, out: Path,
            progress: common.Progress, pairs) -> dict:
    """Pretrain one (loss, pairing, seed) and score its retrieval (skipped when its JSON exists)."""
    from contrastive_jax import data
    from contrastive_jax.train.checkpoint import CHECKPOINT_DIR
    from contrastive_jax.train.pretrained import load_pretrained

    path = common.run_path(out, name, f"{loss}_{pairing}", seed)
    label = f"{name}/{loss}_{pairing}/seed{seed}"
    budget = {"epochs": epochs, "trainer": common.TRAINER}
    done = common.load_finished(path, budget, progress, label)
    if done is not None:
        return done
    config = configs.get_config(f"{loss},{pairing},{epochs}")
    config.seed = seed
    workdir = common.work_path(out, name, f"{loss}_{pairing}", seed)
    source = data.load_source(config.data)
    steps = epochs * common.steps_per_epoch(config)
    config = common.schedule_checkpoints(config, steps, [steps])
    start = time.time()
    diverged = common.train_or_diverge(config, workdir, progress, label)
    if diverged:
        record = {"diverged": True}
    else:
        network = load_pretrained(str(Path(workdir) / CHECKPOINT_DIR / str(steps))).network
        views, _ = pairs(config, source)
        record = {"diverged": False, **retrieval(*project(network, views))}
    result = {"task": name, "loss": loss, "pairing": pairing, "seed": seed, **budget,
              "steps": steps, "eval_seed": EVAL_SEED, **record,
              "epoch_losses": common.epoch_mean_losses(workdir, steps // epochs),
              "seconds": time.time() - start}
    common.save_json(path, result)
    summary = "diverged" if diverged else f"i2t {result['i2t']:.3f} t2i {result['t2i']:.3f}"
    progress.log(f"{label}: {summary} ({result['seconds']:.0f}s)")
    return result


def paired_difference(a: dict, b: dict, which: str, seed: int) -> dict:
    """``a - b`` of top-1 ``which`` with a paired bootstrap 95 % interval over test examples."""
    n = a["n"]
    x = common.unpack_bits(a[f"{which}_bits"], n).astype(float)
    y = common.unpack_bits(b[f"{which}_bits"], n).astype(float)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, n, size=(RESAMPLES, n))
    diffs = x[rows].mean(1) - y[rows].mean(1)
    return {"diff": float(x.mean() - y.mean()), "low": float(np.quantile(diffs, 0.025)),
            "high": float(np.quantile(diffs, 0.975))}


def summarise(results: dict, seeds: list[int]) -> tuple[str, dict]:
    """Markdown tables and JSON of top-1 per (loss, pairing) and paired - shuffled per loss."""
    rows, summary = [], {}
    for (loss, pairing), runs in sorted(results.items()):
        ok = [r for r in runs if not r.get("diverged")]
        if not ok:
            continue
        i2t, t2i = [r["i2t"] for r in ok], [r["t2i"] for r in ok]
        summary[f"{loss}/{pairing}"] = {"i2t": common.stat(i2t), "t2i": common.stat(t2i),
                                        "seeds": [r["seed"] for r in ok]}
        rows.append([loss, pairing, len(ok), common.fmt_mean_std(i2t),
                     common.fmt_mean_std(t2i), f"{1 / ok[0]['n']:.4f}"])
    table = common.markdown_table(
        ["loss", "pairing", "seeds", "image->text top-1", "text->image top-1", "chance"], rows)
    diff_rows = []
    for loss in configs.LOSSES:
        real = {r["seed"]: r for r in results.get((loss, "paired"), []) if not r.get("diverged")}
        ctrl = {r["seed"]: r for r in results.get((loss, "shuffled"), [])
                if not r.get("diverged")}
        common_seeds = [s for s in seeds if s in real and s in ctrl]
        if not common_seeds:
            continue
        per_seed = [paired_difference(real[s], ctrl[s], "i2t", s) for s in common_seeds]
        diffs = [d["diff"] for d in per_seed]
        mean, std = common.mean_std(diffs)
        k = len(diffs)
        half = T_975.get(k - 1, 1.96) * std / np.sqrt(k) if k > 1 else float("nan")
        summary[f"{loss}/paired_minus_shuffled"] = {
            "seeds": common_seeds, "per_seed": per_seed, "mean": mean, "std": std,
            "t_interval": [mean - half, mean + half]}
        cis = " ".join(f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" for d in per_seed)
        diff_rows.append([loss, k, f"{mean:+.3f} ± {std:.3f}",
                          f"[{mean - half:+.3f}, {mean + half:+.3f}]", cis])
    table += "\n" + common.markdown_table(
        ["loss", "seeds", "paired - shuffled, i->t top-1", "95 % t-interval over seeds",
         "per seed: difference [95 % paired bootstrap]"], diff_rows)
    return table, summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs, seed 0")
    parser.add_argument("--epochs", type=int, default=configs.EPOCHS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--losses", nargs="+", default=list(configs.LOSSES),
                        choices=list(configs.LOSSES))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--aggregate_only", action="store_true",
                        help="train nothing; summarise the finished runs")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be >= 1")
    if args.quick:
        args.epochs, args.seeds = 2, [0]
    name = f"{'quick_' if args.quick else ''}digits_{args.epochs}ep"
    grid = [(loss, pairing, seed) for seed in args.seeds for loss in args.losses
            for pairing in configs.PAIRINGS]
    progress = common.Progress(len(grid), name)
    cache: dict = {}

    def pairs(config, source):
        if "views" not in cache:
            cache["views"] = test_pairs(config, source)
        return cache["views"]

    results: dict = {}
    for loss, pairing, seed in grid:
        if args.aggregate_only:
            result = common.load_json(common.run_path(args.out, name, f"{loss}_{pairing}", seed))
            if result is None:
                continue
        else:
            result = run_one(name, loss, pairing, seed, args.epochs, args.out, progress, pairs)
        results.setdefault((loss, pairing), []).append(result)
    table, summary = summarise(results, args.seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    common.save_json(args.out / f"{name}_summary.json", summary)
    text = f"## {name} ({args.epochs} epochs)\n\n{table}"
    (args.out / f"{name}_table.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
