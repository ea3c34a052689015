"""Soft-target InfoNCE (Hugger & Uhlmann 2024, arXiv:2404.14076), Sec. 3.1 / App. A.1 toy.

Estimating a conditional model, InfoNCE vs NLL (the paper's Fig. 1).

    python experiments/reproduce/soft_target_toy.py            # full: 2 constructions x 9 levels x 2 losses x 10 seeds
    python experiments/reproduce/soft_target_toy.py --quick    # tiny version (< 1 min), own --out
    python experiments/reproduce/soft_target_toy.py --constructions alt --levels 0 40 --losses nll

Set-up (paper Sec. 3.1 and App. A.1; our choices where it is silent: docs/reproductions.md):

* GMM ``p(x) = sum_i (1/20) N(x | 10 theta_i, I_20)``, K = d = 20, ``||theta_i|| = 1``.
  Mode alignment ``perc`` in {0, 10, ..., 80} %: ``phi = (pi/2)(1 - perc/100)`` is the
  angle between ``theta_1 = e_1`` and every other mode. ``alt`` construction (our
  default): ``theta_j = cos(phi) e_1 + sin(phi) e_j``; ``spherical``: the
  literal 20-spherical-coordinate reading, ``theta_j[m] = sin^{m-1}(phi) cos(phi)``
  for m < j and ``theta_j[j] = sin^{j-1}(phi)``.
* Data: 1,600 points from the GMM, subsampled with duplicates to 32,000; each
  copy gets its own label ``k ~ softmax_k(x . theta_k)``. 90 % train, 10 % validation.
* Model: linear softmax ``q(k | x) = softmax_k(x . theta_hat_k)`` (no bias),
  ``theta_hat`` [20, 20] initialised N(0, 0.01^2).
* Losses: NLL (cross-entropy) and InfoNCE (Eq. 5) with the labels of the other
  1,023 batch samples as negatives, tau = 1, eta = empirical label frequencies
  (``hard_infonce``: the exact O(B K) form of ``losses.soft_target_infonce``
  with one-hot targets).
* Adam lr 1e-3, batch 1024 (last incomplete batch dropped), at most 500 epochs,
  early stopping on the method's own validation loss (patience 20 epochs, best
  weights kept); 10 seeds per level; a seed fixes the data, so NLL and InfoNCE
  of one seed see the same data and the differences are paired.
* Metric: ``mean_{x in 1,600 points} KL(p(. | x, theta) || q(. | x, theta_hat))`` (nats).

Every (construction, level, loss) group trains its seeds at once (``vmap`` over
seeds of a ``lax.while_loop`` over epochs), in well under 2 minutes, so there is
no mid-run checkpoint: each seed's result is ``<out>/runs/<construction>_<level>/
<loss>/seed<k>.json`` and a group whose seeds all have results is skipped.
``summary.json``, ``table.md`` and ``kl_vs_alignment.png`` go into ``<out>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _synthetic_common as common  # noqa: E402

from contrastive_jax import losses  # noqa: E402

K = 20
LOSSES = ("nll", "infonce")
LABELS = {"nll": "NLL", "infonce": "InfoNCE"}
CONSTRUCTIONS = ("alt", "spherical")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "soft_target"


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes and optimisation of the toy."""

    unique: int = 1600
    samples: int = 32_000
    batch: int = 1024
    max_epochs: int = 500
    patience: int = 20
    lr: float = 1e-3
    levels: tuple[int, ...] = (0, 10, 20, 30, 40, 50, 60, 70, 80)
    seeds: int = 10


QUICK = Config(
    unique=400, samples=4096, batch=256, max_epochs=15, patience=5, levels=(0, 80), seeds=2
)


def modes(perc: float, construction: str) -> np.ndarray:
    """Unit mode directions theta [K, K] at ``perc`` % alignment (see module docstring)."""
    if construction not in CONSTRUCTIONS:
        raise ValueError(f"`construction` must be one of {CONSTRUCTIONS}, got {construction!r}")
    phi = 0.5 * math.pi * (1.0 - perc / 100.0)
    theta = np.zeros((K, K))
    theta[0, 0] = 1.0
    for j in range(1, K):
        if construction == "alt":
            theta[j, 0], theta[j, j] = math.cos(phi), math.sin(phi)
        else:
            theta[j, :j] = [math.sin(phi) ** m * math.cos(phi) for m in range(j)]
            theta[j, j] = math.sin(phi) ** j
    return theta


def hard_infonce(logits: jax.Array, labels: jax.Array, prior: jax.Array) -> jax.Array:
    """Hard InfoNCE, Eq. (5), with the other batch samples' labels as negatives, tau = 1.

    The O(B K) count form (docs/reproductions.md, "Soft-target InfoNCE protocol"): with
    ``S = L - log eta`` and ``n_k`` the batch count of class k,
    ``l_a = logsumexp_k (S[a, k] + log n_k) - S[a, k_a]``. It equals
    ``losses.soft_target_infonce(logits, one_hot(labels), class_prior=prior)``
    (tested) without the [B, B] score matrix.

    Args:
      logits: float [B, K] class scores ``x . theta_hat_k``.
      labels: int [B].
      prior: float [K] noise distribution eta (all entries > 0).

    Returns:
      The mean over the batch.
    """
    scores = logits - jnp.log(prior)
    counts = jnp.bincount(labels, length=logits.shape[1])
    log_counts = jnp.where(counts > 0, jnp.log(jnp.maximum(counts, 1)), -jnp.inf)
    lse = jax.nn.logsumexp(scores + log_counts, axis=1)
    return jnp.mean(lse - jnp.take_along_axis(scores, labels[:, None], axis=1)[:, 0])


def make_group(cfg: Config, loss_name: str):
    """jit ``(keys [S], theta [K, K]) -> dict of [S] arrays``: one training run per key."""
    n_train = int(round(0.9 * cfg.samples))
    steps = n_train // cfg.batch
    n_val_batches = (cfg.samples - n_train) // cfg.batch
    if steps < 1 or n_val_batches < 1:
        raise ValueError(f"`cfg`: {cfg.samples} samples give no full batch of {cfg.batch}")

    def objective(theta_hat, x, k, prior):
        logits = x @ theta_hat.T
        if loss_name == "nll":
            return losses.soft_target_cross_entropy(logits, jax.nn.one_hot(k, K), temperature=1.0)
        return hard_infonce(logits, k, prior)

    def run(key, theta):
        k_comp, k_noise, k_sub, k_lab, k_init, k_shuffle = jax.random.split(key, 6)
        comp = jax.random.randint(k_comp, (cfg.unique,), 0, K)
        x_unique = 10.0 * theta[comp] + jax.random.normal(k_noise, (cfg.unique, K))
        x = x_unique[jax.random.randint(k_sub, (cfg.samples,), 0, cfg.unique)]
        k = jax.random.categorical(k_lab, x @ theta.T)
        prior = jnp.bincount(k, length=K) / cfg.samples
        x_tr, k_tr = x[:n_train], k[:n_train]
        val = n_val_batches * cfg.batch
        x_val = x[n_train : n_train + val].reshape(n_val_batches, cfg.batch, K)
        k_val = k[n_train : n_train + val].reshape(n_val_batches, cfg.batch)
        optimizer = optax.adam(cfg.lr)
        params = 0.01 * jax.random.normal(k_init, (K, K))

        def step(carry, idx):
            params, opt_state = carry
            grads = jax.grad(objective)(params, x_tr[idx], k_tr[idx], prior)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        def val_loss(params):
            return jax.vmap(lambda xb, kb: objective(params, xb, kb, prior))(x_val, k_val).mean()

        def body(s):
            perm = jax.random.permutation(jax.random.fold_in(k_shuffle, s["epoch"]), n_train)
            (params, opt_state), _ = jax.lax.scan(
                step, (s["params"], s["opt"]), perm[: steps * cfg.batch].reshape(steps, cfg.batch)
            )
            v = val_loss(params)
            better = v < s["best_val"]
            return {
                "epoch": s["epoch"] + 1,
                "params": params,
                "opt": opt_state,
                "best": jnp.where(better, params, s["best"]),
                "best_val": jnp.where(better, v, s["best_val"]),
                "best_epoch": jnp.where(better, s["epoch"] + 1, s["best_epoch"]),
                "since": jnp.where(better, 0, s["since"] + 1),
            }

        def cond(s):
            return (s["epoch"] < cfg.max_epochs) & (s["since"] < cfg.patience)

        init = {
            "epoch": jnp.int32(0),
            "params": params,
            "opt": optimizer.init(params),
            "best": params,
            "best_val": val_loss(params),
            "best_epoch": jnp.int32(0),
            "since": jnp.int32(0),
        }
        s = jax.lax.while_loop(cond, body, init)
        log_p = jax.nn.log_softmax(x_unique @ theta.T)
        log_q = jax.nn.log_softmax(x_unique @ s["best"].T)
        kl = jnp.mean(jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=1))
        return {
            "kl": kl,
            "epochs": s["epoch"],
            "best_epoch": s["best_epoch"],
            "best_val": s["best_val"],
        }

    return jax.jit(jax.vmap(run, in_axes=(0, None)))


def setting_name(construction: str, level: int) -> str:
    """Run-directory name of one dataset family, e.g. ``alt_40``."""
    return f"{construction}_{level:02d}"


def summarise(out: Path, cfg: Config, constructions: list[str]) -> str:
    """Write ``summary.json``, ``table.md`` and ``kl_vs_alignment.png``; return the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, text = {}, ""
    fig, axes = plt.subplots(1, len(constructions), figsize=(5.5 * len(constructions), 4))
    for ax, construction in zip(np.atleast_1d(axes), constructions, strict=True):
        rows, summary[construction] = [], {}
        curves = {name: [] for name in LOSSES}
        for level in cfg.levels:
            res = {
                name: [
                    common.load_json(
                        common.run_path(out, setting_name(construction, level), name, s)
                    )
                    for s in range(cfg.seeds)
                ]
                for name in LOSSES
            }
            if any(r is None for rs in res.values() for r in rs):
                continue
            kl = {name: np.array([r["kl"] for r in res[name]]) for name in LOSSES}
            diff = kl["infonce"] - kl["nll"]
            epochs = {name: [r["epochs"] for r in res[name]] for name in LOSSES}
            summary[construction][level] = {
                "kl": {n: v.tolist() for n, v in kl.items()},
                "epochs": epochs,
            }
            for name in LOSSES:
                curves[name].append((level, *common.mean_std(kl[name])))
            rows.append(
                [
                    f"{level} %",
                    common.fmt_mean_std(kl["nll"] * 1e3, 2),
                    common.fmt_mean_std(kl["infonce"] * 1e3, 2),
                    common.fmt_mean_std(diff * 1e3, 2),
                    f"{int((diff < 0).sum())}/{diff.size}",
                    f"{np.mean(epochs['nll']):.0f} / {np.mean(epochs['infonce']):.0f}",
                ]
            )
        for name in LOSSES:
            if curves[name]:
                lv, m, s = np.array(curves[name]).T
                ax.errorbar(lv, m, yerr=s, marker="o", capsize=3, label=LABELS[name])
        ax.set(
            title=f"{construction} construction ({cfg.seeds} seeds, mean ± std)",
            xlabel="mode alignment (%)",
            ylabel="KL(p || q) (nats)",
        )
        ax.legend()
        text += (
            f"\n### {construction} construction (KL x 1e3, mean ± std over {cfg.seeds} seeds)\n\n"
        )
        text += common.markdown_table(
            [
                "alignment",
                "NLL",
                "InfoNCE",
                "InfoNCE - NLL (paired)",
                "seeds InfoNCE < NLL",
                "epochs run NLL / InfoNCE",
            ],
            rows,
        )
    fig.tight_layout()
    fig.savefig(Path(out) / "kl_vs_alignment.png", dpi=120)
    plt.close(fig)
    common.save_json(Path(out) / "summary.json", summary)
    (Path(out) / "table.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny version (< 1 min)")
    parser.add_argument("--out", type=Path, default=None, help=f"default {DEFAULT_OUT}")
    parser.add_argument("--constructions", nargs="+", default=list(CONSTRUCTIONS))
    parser.add_argument("--levels", nargs="+", type=int, default=None, help="subset of levels")
    parser.add_argument("--losses", nargs="+", default=list(LOSSES), help="subset of losses")
    args = parser.parse_args(argv)
    if args.quick and args.out is None:
        parser.error("--quick needs --out (keep tiny runs out of the results directory)")
    for c in args.constructions:
        if c not in CONSTRUCTIONS:
            raise ValueError(f"`--constructions`: unknown {c!r}; choose from {CONSTRUCTIONS}")
    out = args.out or DEFAULT_OUT
    cfg = QUICK if args.quick else Config()
    levels = cfg.levels if args.levels is None else args.levels
    for name in args.losses:
        if name not in LOSSES:
            raise ValueError(f"`--losses`: unknown {name!r}; choose from {LOSSES}")
    for level in levels:
        if level not in cfg.levels:
            raise ValueError(f"`--levels`: {level} is not one of {cfg.levels}")
    groups = {name: make_group(cfg, name) for name in args.losses}
    todo = [(c, lv, n) for c in args.constructions for lv in levels for n in args.losses]
    progress = common.Progress(len(todo), "soft_target_toy")
    keys = jax.random.split(jax.random.key(0), cfg.seeds)
    for construction, level, name in todo:
        setting = setting_name(construction, level)
        paths = [common.run_path(out, setting, name, s) for s in range(cfg.seeds)]
        if all(p.exists() for p in paths):
            progress.log(f"skip {setting}/{name} (done)")
            continue
        start = time.time()
        res = jax.device_get(
            groups[name](keys, jnp.asarray(modes(level, construction), jnp.float32))
        )
        seconds = time.time() - start
        for s, path in enumerate(paths):
            common.save_json(
                path,
                {
                    "construction": construction,
                    "alignment": level,
                    "loss": name,
                    "seed": s,
                    "config": dataclasses.asdict(cfg),
                    "group_seconds": seconds,
                    **{key: np.asarray(v[s]).item() for key, v in res.items()},
                },
            )
        progress.log(
            f"{setting}/{name}: KL {common.fmt_mean_std(res['kl'] * 1e3, 2)} e-3, "
            f"epochs {np.mean(res['epochs']):.0f} ({seconds:.0f}s for {cfg.seeds} seeds)"
        )
    print(summarise(out, cfg, args.constructions), flush=True)


if __name__ == "__main__":
    main()
