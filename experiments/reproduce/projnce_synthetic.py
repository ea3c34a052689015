"""ProjNCE (Jeong & Hero 2025, arXiv:2506.09810), App. D.1: MI of the learned embeddings.

    python -m experiments.reproduce.projnce_synthetic            # full: 2 settings x 7 methods x 3 seeds
    python -m experiments.reproduce.projnce_synthetic --quick --out /tmp/projnce   # tiny version
    python -m experiments.reproduce.projnce_synthetic --aggregate_only   # tables from the records

Two settings, as in App. D.1: ``binary`` (C ~ Ber(1/2), X | C ~ N(+-1, I_5), MLP 5 -> 16 ->
16 -> 2, batch 256; true I(X; C) = 0.6587 nats) and ``gmm`` (32-class Gaussian mixture in R^4
seen through X = W Z in R^8, MLP 8 -> 32 -> 32 -> 4, batch 128; true I(X; C) by Monte Carlo).
Data, models, losses and optimiser are the configs ``experiments/configs/projnce_synthetic.py``
(``get_config("SETTING,METHOD")``: 12,800 training samples, 200 epochs, AdamW lr 1e-2,
tau = 0.07, NW kernel 1 - t^2 with l1 distance and h = 0.6, lower medians). Methods: SupCon,
ProjNCE (beta = 1), SoftSupCon, SoftNCE, MedSupCon, MedNCE and cross-entropy (CE: a linear
classifier on the d_z-dim MLP output; its features are normalised the same way before
measuring MI). Every run trains with the library's trainer
(``contrastive_jax.train.loop.train``), keeping a checkpoint every 40 epochs.

Measured at epoch 0 and at every checkpoint (every 40 epochs) on the held-out ``test`` split
of 12,800 fresh samples, from the frozen encoder's features (the MLP output):

* ``mi_ksg``: Mixed-KSG estimate (k = 5, nats) of I(Z; C), Z the normalised embedding
  (:func:`contrastive_jax.metrics.mixed_ksg`).
* ``bound``: ``1 + log N - (I_self-p + R)`` (Prop. 2.1), the batch loss with its
  adjustment term, averaged over held-out batches of the training size N. For
  ProjNCE, SoftSupCon and MedSupCon that is their own loss (beta = 1); for SupCon
  it is the ProjNCE loss of the SupCon-trained encoder (SupCon plus the R it
  omits); for SoftNCE and MedNCE, R = 1 exactly, so it is ``log N - loss``. CE
  has no such bound. The library's losses drop j = i from the SupCon-type
  denominators (docs/reproductions.md, "ProjNCE protocol") and use batch statistics
  as projections, for which the bound is only heuristic (Prop. 2.1 assumes the
  population projections), so it may exceed the true MI.

Resumable: each (setting, method, seed) run writes ``<out>/runs/<setting>/<method>/seed<k>.json``
when done and is then skipped; an unfinished run resumes from the newest Orbax checkpoint of its
work directory ``<out>/work/<setting>/<method>/seed<k>``. Summary table (``table.md``),
``summary.json`` and the plots ``mi_<setting>.png`` are written into ``<out>``;
``--aggregate_only`` writes them from the finished runs' records without training (a run
whose record is missing is left out; a record of another budget is refused).
"""

from __future__ import annotations

import argparse
import math
import time
from functools import partial
from pathlib import Path

import numpy as np
from scipy import special

from experiments.configs import projnce_synthetic as configs
from experiments.reproduce import _common as common

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "projnce"
METHODS = tuple(configs.METHODS)
LABELS = {
    "supcon": "SupCon",
    "projnce": "ProjNCE",
    "soft_supcon": "SoftSupCon",
    "soft_nce": "SoftNCE",
    "med_supcon": "MedSupCon",
    "med_nce": "MedNCE",
    "ce": "CE",
}
#: Epochs between MI measurements (checkpoints) of a full run.
EVAL_EVERY = 40
#: ``--quick``: samples per split, epochs (one measurement at the end).
QUICK_SAMPLES, QUICK_EPOCHS = 1024, 2


# ----------------------------------------------------------------------------- ground truth


def true_mi_binary() -> float:
    """I(X; C) in nats for Eq. (35), d_x = 5, sigma = 1, by quadrature.

    ``s = 1^T x / sqrt(5)`` is sufficient, ``s | c ~ N(+-sqrt 5, 1)`` and
    ``p(c = 1 | s) = sigmoid(2 sqrt(5) s)``, so ``I = log 2 - E[H(C | s)]``.
    """
    a = math.sqrt(5.0)
    s = np.linspace(a - 12.0, a + 12.0, 200_001)
    density = np.exp(-0.5 * (s - a) ** 2) / math.sqrt(2.0 * math.pi)
    p = special.expit(2.0 * a * s)
    entropy = -(special.xlogy(p, p) + special.xlogy(1.0 - p, 1.0 - p))
    return float(math.log(2.0) - np.trapezoid(density * entropy, s))


def gmm_log_posterior(gmm: configs.Gmm, z: np.ndarray) -> np.ndarray:
    """``log p(c | z)`` [n, M] under the uniform-prior GMM."""
    diff = z[:, None, :] - gmm.means[None]  # [n, M, 4]
    sol = np.linalg.solve(gmm.chols[None], diff[..., None])[..., 0]
    logdet = np.log(np.diagonal(gmm.chols, axis1=1, axis2=2)).sum(1)
    loglik = -0.5 * (sol**2).sum(-1) - logdet[None]
    return loglik - special.logsumexp(loglik, axis=1, keepdims=True)


def true_mi_gmm(gmm: configs.Gmm, n: int = 200_000, seed: int = 1) -> tuple[float, float]:
    """Monte Carlo ``I(X; C) = I(Z; C) = log M + E[log p(c | z)]`` (W injective); (mean, s.e.)."""
    rng = np.random.default_rng(seed)
    m = gmm.means.shape[0]
    c = rng.integers(0, m, size=n)
    z = gmm.means[c] + np.einsum("nij,nj->ni", gmm.chols[c], rng.standard_normal((n, 4)))
    terms = math.log(m) + gmm_log_posterior(gmm, z)[np.arange(n), c]
    return float(terms.mean()), float(terms.std(ddof=1) / math.sqrt(n))


# ----------------------------------------------------------------------------- measurements


def bound_loss(method: str):
    """``fn(embeddings [N, d_z], labels [N]) -> I_self-p + R`` (see module docstring), None for CE."""
    from contrastive_jax import losses

    if method == "ce":
        return None
    name, kwargs = configs.METHODS["projnce" if method == "supcon" else method]
    fn = partial(losses.get(name), **kwargs[name])
    if method in ("soft_nce", "med_nce"):
        return lambda z, c: fn(z, c) + 1.0
    return fn


def mi_probe(method: str, batch: int):
    """``probe(epoch, {"test"} embeddings or None)``: held-out Mixed-KSG MI and bound."""
    import jax
    import jax.numpy as jnp

    from contrastive_jax.metrics import mixed_ksg

    bound_fn = bound_loss(method)
    batched = None if bound_fn is None else jax.jit(jax.vmap(bound_fn))

    def probe(epoch: int, emb: dict | None) -> dict:
        if emb is None:
            return {"epoch": epoch, "mi_ksg": None, "bound": None, "summary": "diverged"}
        z, c = emb["test"].features, emb["test"].labels
        unit = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
        record = {"epoch": epoch, "mi_ksg": mixed_ksg(unit.astype(np.float64), c, k=5),
                  "bound": None}
        if batched is not None:
            nb = len(z) // batch
            zb = jnp.asarray(z[: nb * batch].reshape(nb, batch, -1))
            cb = jnp.asarray(c[: nb * batch].reshape(nb, batch))
            record["bound"] = 1.0 + math.log(batch) - float(batched(zb, cb).mean())
        bound = "n/a" if record["bound"] is None else f"{record['bound']:.4f}"
        record["summary"] = f"MI {record['mi_ksg']:.4f} bound {bound}"
        return record

    return probe


def run_one(setting: str, method: str, seed: int, epochs: int, eval_every: int, samples: int,
            out: Path, progress: common.Progress) -> dict:
    """One (setting, method, seed) run: skipped if its JSON exists, else trained (resumably)
    with the library and measured at epoch 0 and every ``eval_every`` epochs."""
    path = common.run_path(out, setting, method, seed)
    label = f"{setting}/{method}/seed{seed}"
    budget = {"epochs": epochs, "samples": samples, "trainer": common.TRAINER}
    done = common.load_finished(path, budget, progress, label)
    if done is not None:
        return done
    config = configs.get_config(f"{setting},{method}")
    config.data.dataset = configs.register(setting, samples)
    config.seed = seed
    config.data.data_seed = seed  # a seed fixes the data, as in the paper's independent trials
    from contrastive_jax import data

    source = data.load_source(config.data)
    batch = int(config.data.global_batch_size)
    # Logged every 10 steps (at least once an epoch): an epoch's training loss is the mean of
    # its logged steps.
    config.train.log_every = min(10, source.split("train").num_examples // batch)
    probe = mi_probe(method, batch)
    start = time.time()
    initial = probe(0, common.initial_embeddings(config, ("test",), source))
    probes = tuple(range(eval_every, epochs + 1, eval_every))
    if not probes or probes[-1] != epochs:
        probes += (epochs,)
    outcome = common.pretrain_and_probe(
        config, common.work_path(out, setting, method, seed), epochs=epochs, probes=probes,
        splits=("test",), probe=probe, progress=progress, label=label, source=source,
    )
    curve = [initial, *outcome["probes"]]
    last = curve[-1]
    result = {
        "setting": setting, "method": method, "seed": seed, **budget, "batch": batch,
        "tau": configs.TAU, "bandwidth": configs.BANDWIDTH,
        "mi_ksg": last["mi_ksg"], "bound": last["bound"], "curve": curve,
        "train_loss": outcome["epoch_losses"], "diverged": outcome["diverged"],
        "seconds": time.time() - start,
    }
    common.save_json(path, result)
    progress.log(f"{label}: {last['summary']} ({result['seconds']:.0f}s)")
    return result


# ----------------------------------------------------------------------------- report


def summarise(out: Path, results: dict[str, dict[str, list[dict]]], truth: dict) -> str:
    """Write ``summary.json``, ``table.md`` and ``mi_<setting>.png``; return the table."""
    from matplotlib.figure import Figure

    summary, text = {}, ""
    for name, by_method in results.items():
        rows, summary[name] = [], {"true_mi": truth[name], "methods": {}}
        fig = Figure(figsize=(11, 4), layout="constrained")
        axes = fig.subplots(1, 2)
        supcon = {r["seed"]: r["mi_ksg"] for r in by_method.get("supcon", [])
                  if r["mi_ksg"] is not None}
        for m, runs in by_method.items():
            ok = [r for r in runs if r["mi_ksg"] is not None]
            mi = [r["mi_ksg"] for r in ok]
            bounds = [r["bound"] for r in ok if r["bound"] is not None]
            secs = [r["seconds"] for r in runs]
            summary[name]["methods"][m] = {
                "mi_ksg": mi, "bound": bounds, "seconds": secs, "seeds": [r["seed"] for r in ok],
                "diverged": [r["seed"] for r in runs if r["mi_ksg"] is None],
            }
            paired = [r["mi_ksg"] - supcon[r["seed"]] for r in ok if r["seed"] in supcon]
            rows.append([
                LABELS[m], f"{len(ok)}/{len(runs)}",
                common.fmt_mean_std(mi, 4) if mi else "diverged",
                common.fmt_mean_std(paired, 4) if paired else "n/a",
                common.fmt_mean_std(bounds, 4) if bounds else "n/a",
                f"{np.mean(secs):.0f}",
            ])
            if not ok:
                continue
            epochs = np.array([p["epoch"] for p in ok[0]["curve"]])
            for ax, key in zip(axes, ("mi_ksg", "bound"), strict=True):
                curves = np.array(
                    [[np.nan if p[key] is None else p[key] for p in r["curve"]] for r in ok]
                )
                if np.all(np.isnan(curves)):
                    continue
                mean, std = curves.mean(0), curves.std(0)
                ax.plot(epochs, mean, label=LABELS[m])
                ax.fill_between(epochs, mean - std, mean + std, alpha=0.2)
        for ax, title in zip(
            axes, ("Mixed-KSG I(Z;C), held-out", "1 + log N - (loss + R)"), strict=True
        ):
            ax.axhline(truth[name], color="k", ls="--", lw=1, label="true I(X;C)")
            ax.set(title=f"{name}: {title}", xlabel="epoch", ylabel="nats")
        axes[0].legend(fontsize=8)
        fig.savefig(Path(out) / f"mi_{name}.png", dpi=120)
        text += f"\n### {name} (true I(X;C) = {truth[name]:.4f} nats)\n\n"
        text += common.markdown_table(
            ["method", "seeds (finite)", "Mixed-KSG MI (nats)", "MI - SupCon's (paired by seed)",
             "bound 1+log N-(loss+R)", "s/run"],
            rows,
        )
    common.save_json(Path(out) / "summary.json", summary)
    (Path(out) / "table.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"tiny version ({QUICK_SAMPLES} samples, {QUICK_EPOCHS} epochs, 1 seed)")
    parser.add_argument("--out", type=Path, default=None, help=f"default {DEFAULT_OUT}")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..S-1 (default 3; quick 1)")
    parser.add_argument("--settings", nargs="+", default=list(configs.SETTINGS),
                        choices=list(configs.SETTINGS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--aggregate_only", action="store_true",
                        help="train nothing; summarise the finished runs' records")
    args = parser.parse_args(argv)
    if args.quick and args.out is None:
        parser.error("--quick needs --out (keep tiny runs out of the results directory)")
    out = args.out or DEFAULT_OUT
    seeds = list(range(args.seeds or (1 if args.quick else 3)))
    epochs, samples = ((QUICK_EPOCHS, QUICK_SAMPLES) if args.quick
                       else (configs.EPOCHS, configs.NUM_SAMPLES))
    eval_every = epochs if args.quick else EVAL_EVERY

    def true_mi() -> dict[str, float]:
        truth = {"binary": true_mi_binary(), "gmm": true_mi_gmm(configs.make_gmm())[0]}
        print(f"true MI: binary {truth['binary']:.4f} nats, gmm {truth['gmm']:.4f} nats",
              flush=True)
        return truth

    truth = None if args.aggregate_only else true_mi()  # before a long training, at once
    todo = [(s, m, k) for s in args.settings for k in seeds for m in args.methods]
    progress = common.Progress(len(todo), "projnce")
    results: dict[str, dict[str, list[dict]]] = {s: {} for s in args.settings}
    budget = {"epochs": epochs, "samples": samples, "trainer": common.TRAINER}
    for setting, method, seed in todo:
        if args.aggregate_only:
            result = common.load_finished(common.run_path(out, setting, method, seed), budget,
                                          progress, f"{setting}/{method}/seed{seed}")
            if result is None:
                continue
        else:
            result = run_one(setting, method, seed, epochs, eval_every, samples, out, progress)
        results[setting].setdefault(method, []).append(result)
    results = {setting: runs for setting, runs in results.items() if runs}
    if not results:
        parser.error(f"--aggregate_only: no finished run under {out / 'runs'}")
    out.mkdir(parents=True, exist_ok=True)
    print(summarise(out, results, truth or true_mi()), flush=True)


if __name__ == "__main__":
    main()
