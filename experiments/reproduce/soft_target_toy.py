"""Soft-target InfoNCE (Hugger & Uhlmann 2024, arXiv:2404.14076), Sec. 3.1 / App. A.1 toy.

Estimating a conditional model, InfoNCE vs NLL (the paper's Fig. 1).

    python -m experiments.reproduce.soft_target_toy            # full: 2 constructions x 9 levels x 2 losses x 10 seeds
    python -m experiments.reproduce.soft_target_toy --quick --out /tmp/toy   # tiny version
    python -m experiments.reproduce.soft_target_toy --constructions alt --levels 0 40 --losses nll

Set-up (paper Sec. 3.1 and App. A.1; our choices where it is silent: docs/reproductions.md):
the data, the linear softmax model ``q(k | x) = softmax_k(x . theta_hat_k)``, the losses (NLL;
InfoNCE, Eq. 5, with the other batch samples' labels as negatives, tau = 1, eta = empirical
label frequencies) and Adam (lr 1e-3, batch 1024) are the configs
``experiments/configs/soft_target_toy.py`` (``get_config("CONSTRUCTION,LEVEL,LOSS")``). A seed
fixes the data (``data_seed``) and the run (``seed``), so NLL and InfoNCE of one seed see the
same data and their differences are paired; 10 seeds per level.

Every run trains with the library's trainer (``contrastive_jax.train.loop.train``), keeping a
checkpoint every ``--eval_every`` epochs (default 5; ``--eval_every 1`` is the paper's per-epoch
check, at about three times the cost: each check saves, restores and embeds a checkpoint).
Early stopping on the method's own validation loss (patience 20 epochs, at most 500, best
weights kept) is done on those checkpoints: the run trains up to the earliest epoch at which it
could stop (best epoch + patience; the trainer resumes from its last checkpoint), the
validation loss of each new checkpoint is measured (the objective the run trains, on the full
``val`` batches), and it stops once ``patience`` epochs pass without improvement. Metric:
``mean_{x in 1,600 points} KL(p(. | x, theta) || q(. | x, theta_hat))`` (nats) of the best
checkpoint's network.

Resumable: each run writes ``<out>/runs/<construction>_<level>/<loss>/seed<k>.json`` when done
and is then skipped; an unfinished run resumes from the newest checkpoint of its work directory
``<out>/work/<construction>_<level>/<loss>/seed<k>``: its checkpoints are measured again, in
order, to rebuild the early-stopping state before it trains on.
``summary.json``, ``table.md`` and ``kl_vs_alignment.png`` go into ``<out>``; ``--aggregate_only``
writes them from the finished runs without training (e.g. ``--constructions alt spherical
--aggregate_only`` tables both constructions at the levels each has).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from experiments.configs import soft_target_toy as configs
from experiments.reproduce import _common as common

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "soft_target"
LOSSES = tuple(configs.LOSSES)
LABELS = {"nll": "NLL", "infonce": "InfoNCE"}
#: Early-stopping patience (epochs), epochs between validation measurements, and seeds of the
#: full grid and of ``--quick``.
PATIENCE, EVAL_EVERY, SEEDS = 20, 5, 10
QUICK_PATIENCE, QUICK_EVAL_EVERY, QUICK_SEEDS, QUICK_LEVELS = 3, 1, 2, (0, 80)


def setting_name(construction: str, level: int) -> str:
    """Run-directory name of one dataset family, e.g. ``alt_40``."""
    return f"{construction}_{level:02d}"


def validation_loss(config):
    """``fn(logits [n, K], labels [n]) -> float``: the run's objective, averaged over the full
    batches of ``config.data.global_batch_size`` rows (the incomplete last one dropped)."""
    import jax
    import jax.numpy as jnp

    from contrastive_jax.train import objective

    (term,) = objective.parse_terms(config.loss)
    batch = int(config.data.global_batch_size)
    batched = jax.jit(jax.vmap(lambda logits, labels: term.fn(logits, labels, **term.kwargs)))

    def fn(logits: np.ndarray, labels: np.ndarray) -> float:
        nb = len(labels) // batch
        if nb < 1:
            raise ValueError(f"the val split has {len(labels)} samples, less than a batch of {batch}")
        lb = jnp.asarray(logits[: nb * batch].reshape(nb, batch, -1))
        return float(batched(lb, jnp.asarray(labels[: nb * batch].reshape(nb, batch))).mean())

    return fn


def kl_to_truth(theta: np.ndarray, x: np.ndarray, logits: np.ndarray) -> float:
    """``mean_x KL(p(. | x, theta) || q(. | x))`` (nats) with ``p = softmax(x theta^T)`` and
    ``q = softmax(logits)``, x [n, K] the unique points and logits [n, K] the network's scores."""
    from scipy import special

    log_p = special.log_softmax(x.astype(np.float64) @ theta.T, axis=1)
    log_q = special.log_softmax(logits.astype(np.float64), axis=1)
    return float(np.mean(np.sum(np.exp(log_p) * (log_p - log_q), axis=1)))


def run_one(construction: str, level: int, loss: str, seed: int, sizes: configs.Sizes,
            patience: int, eval_every: int, out: Path, progress: common.Progress) -> dict:
    """One (construction, level, loss, seed) run with early stopping (see the module docstring):
    the validation loss is measured every ``eval_every`` epochs."""
    from contrastive_jax import data
    from contrastive_jax.errors import NonFiniteLoss

    setting = setting_name(construction, level)
    path = common.run_path(out, setting, loss, seed)
    label = f"{setting}/{loss}/seed{seed}"
    budget = {"max_epochs": sizes.max_epochs, "patience": patience, "eval_every": eval_every,
              "samples": sizes.samples, "unique": sizes.unique, "trainer": common.TRAINER}
    done = common.load_finished(path, budget, progress, label)
    if done is not None:
        return done
    config = configs.with_data_seed(configs.get_config(f"{construction},{level},{loss}", sizes), seed)
    config.seed = seed
    source = data.load_source(config.data)
    per_epoch = source.split("train").num_examples // sizes.batch
    val_loss = validation_loss(config)
    workdir = common.work_path(out, setting, loss, seed)
    start = time.time()

    def measure(emb: dict) -> float:
        return val_loss(emb["val"].features, emb["val"].labels)

    initial = common.initial_embeddings(config, ("val", "test"), source)
    curve = {0: measure(initial)}  # epoch -> validation loss
    best, epoch, diverged = 0, 0, False
    progress.log(f"{label}: training in {workdir}", finished=False)
    while True:
        # Measure the checkpoints not measured yet, in order: after a restart these are the
        # ones the interrupted run left, so the early-stopping state is rebuilt before training.
        saved = set(common.checkpoint_steps(workdir))
        while (epoch - best < patience and epoch < sizes.max_epochs
               and (epoch + eval_every) * per_epoch in saved):
            epoch += eval_every
            curve[epoch] = measure(common.embeddings_at(workdir, epoch * per_epoch, ("val",),
                                                        source))
            best = epoch if curve[epoch] < curve[best] else best
        if diverged or epoch >= sizes.max_epochs or epoch - best >= patience:
            break
        if saved and max(saved) > epoch * per_epoch:
            raise ValueError(
                f"{workdir} has a checkpoint at step {max(saved)} but none at step "
                f"{(epoch + eval_every) * per_epoch} (epoch {epoch + eval_every}), so its "
                f"early-stopping curve cannot be rebuilt; delete the directory to rerun {label}")
        target = min(best + patience, sizes.max_epochs)  # the earliest epoch it could stop at
        chunk = common.schedule_checkpoints(
            config, target * per_epoch,
            [e * per_epoch for e in range(eval_every, target + 1, eval_every)],
        )
        try:
            common.pretrain(chunk, workdir)
        except NonFiniteLoss as err:
            progress.log(f"{label}: {err}", finished=False)
            diverged = True
    final = (initial if best == 0
             else common.embeddings_at(workdir, best * per_epoch, ("test",), source))
    theta = configs.modes(level, construction)
    result = {
        "construction": construction, "alignment": level, "loss": loss, "seed": seed, **budget,
        "batch": sizes.batch,
        "kl": kl_to_truth(theta, source.split("test").features, final["test"].features),
        "epochs": epoch, "best_epoch": best, "best_val": curve[best],
        "val_curve": [[e, v] for e, v in sorted(curve.items())],
        "diverged": diverged, "seconds": time.time() - start,
    }
    common.save_json(path, result)
    progress.log(f"{label}: KL {result['kl'] * 1e3:.2f}e-3, best epoch {best} of {epoch} "
                 f"({result['seconds']:.0f}s)")
    return result


def summarise(out: Path, results: dict[tuple[str, int, str], list[dict]],
              constructions: list[str], levels: list[int]) -> str:
    """Write ``summary.json``, ``table.md`` and ``kl_vs_alignment.png``; return the table."""
    from matplotlib.figure import Figure

    summary, text = {}, ""
    fig = Figure(figsize=(5.5 * len(constructions), 4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(constructions)))
    for ax, construction in zip(axes, constructions, strict=True):
        rows, summary[construction] = [], {}
        curves = {name: [] for name in LOSSES}
        for level in levels:
            res = {name: results.get((construction, level, name), []) for name in LOSSES}
            if any(not runs for runs in res.values()):
                continue
            by_seed = {name: {r["seed"]: r for r in runs} for name, runs in res.items()}
            seeds = sorted(set(by_seed["nll"]) & set(by_seed["infonce"]))
            kl = {name: np.array([by_seed[name][s]["kl"] for s in seeds]) for name in LOSSES}
            diff = kl["infonce"] - kl["nll"]
            epochs = {name: [by_seed[name][s]["epochs"] for s in seeds] for name in LOSSES}
            summary[construction][level] = {
                "seeds": seeds, "kl": {n: v.tolist() for n, v in kl.items()}, "epochs": epochs,
            }
            for name in LOSSES:
                curves[name].append((level, *common.mean_std(kl[name])))
            rows.append([
                f"{level} %", len(seeds),
                common.fmt_mean_std(kl["nll"] * 1e3, 2),
                common.fmt_mean_std(kl["infonce"] * 1e3, 2),
                common.fmt_mean_std(diff * 1e3, 2),
                f"{int((diff < 0).sum())}/{diff.size}",
                f"{np.mean(epochs['nll']):.0f} / {np.mean(epochs['infonce']):.0f}",
            ])
        for name in LOSSES:
            if curves[name]:
                lv, m, s = np.array(curves[name]).T
                ax.errorbar(lv, m, yerr=s, marker="o", capsize=3, label=LABELS[name])
        ax.set(title=f"{construction} construction (mean ± std over seeds)",
               xlabel="mode alignment (%)", ylabel="KL(p || q) (nats)")
        if rows:
            ax.legend()
        text += f"\n### {construction} construction (KL x 1e3, mean ± std over seeds)\n\n"
        text += common.markdown_table(
            ["alignment", "seeds", "NLL", "InfoNCE", "InfoNCE - NLL (paired)",
             "seeds InfoNCE < NLL", "epochs run NLL / InfoNCE"],
            rows,
        )
    fig.savefig(Path(out) / "kl_vs_alignment.png", dpi=120)
    common.save_json(Path(out) / "summary.json", summary)
    (Path(out) / "table.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"tiny version (levels {QUICK_LEVELS}, {QUICK_SEEDS} seeds, "
                             f"at most {configs.QUICK.max_epochs} epochs)")
    parser.add_argument("--out", type=Path, default=None, help=f"default {DEFAULT_OUT}")
    parser.add_argument("--constructions", nargs="+", default=list(configs.CONSTRUCTIONS),
                        choices=list(configs.CONSTRUCTIONS))
    parser.add_argument("--levels", nargs="+", type=int, default=None, help="subset of levels")
    parser.add_argument("--losses", nargs="+", default=list(LOSSES), choices=list(LOSSES),
                        help="subset of losses")
    parser.add_argument("--eval_every", type=int, default=None,
                        help=f"epochs between validation measurements (default {EVAL_EVERY}; "
                             f"quick {QUICK_EVAL_EVERY}); must divide the patience and max epochs")
    parser.add_argument("--aggregate_only", action="store_true",
                        help="train nothing; summarise the finished runs (a level is listed "
                             "when both losses have runs)")
    args = parser.parse_args(argv)
    if args.quick and args.out is None:
        parser.error("--quick needs --out (keep tiny runs out of the results directory)")
    out = args.out or DEFAULT_OUT
    sizes, patience, eval_every, seeds, all_levels = (
        (configs.QUICK, QUICK_PATIENCE, QUICK_EVAL_EVERY, QUICK_SEEDS, QUICK_LEVELS) if args.quick
        else (configs.FULL, PATIENCE, EVAL_EVERY, SEEDS, configs.LEVELS)
    )
    eval_every = args.eval_every or eval_every
    if eval_every < 1 or patience % eval_every or sizes.max_epochs % eval_every:
        parser.error(f"--eval_every {eval_every} must divide the patience {patience} and the "
                     f"{sizes.max_epochs} epochs")
    levels = list(all_levels if args.levels is None else args.levels)
    for level in levels:
        if level not in all_levels:
            parser.error(f"--levels: {level} is not one of {all_levels}")
    todo = [(c, lv, n, s) for c in args.constructions for lv in levels for s in range(seeds)
            for n in args.losses]
    progress = common.Progress(len(todo), "soft_target_toy")
    results: dict[tuple[str, int, str], list[dict]] = {}
    for construction, level, name, seed in todo:
        if args.aggregate_only:
            result = common.load_json(
                common.run_path(out, setting_name(construction, level), name, seed))
            if result is None:
                continue
        else:
            result = run_one(construction, level, name, seed, sizes, patience, eval_every, out,
                             progress)
        results.setdefault((construction, level, name), []).append(result)
    out.mkdir(parents=True, exist_ok=True)
    print(summarise(out, results, args.constructions, levels), flush=True)


if __name__ == "__main__":
    main()
