"""ProjNCE (Jeong & Hero 2025, arXiv:2506.09810), App. D.1: MI of the learned embeddings.

    python experiments/reproduce/projnce_synthetic.py            # full: 2 settings x 7 methods x 3 seeds
    python experiments/reproduce/projnce_synthetic.py --quick    # tiny version (< 2 min), own --out

Two settings, as in App. D.1 (our choices where it is silent: docs/reproductions.md):

* ``binary``: C ~ Ber(1/2), X | C ~ N(+-1, I_5); MLP 5 -> 16 -> 16 -> 2 (ReLU),
  batch 256; true I(X; C) = 0.6587 nats.
* ``gmm``: 32-class Gaussian mixture in R^4 (uniform prior), X = W Z in R^8;
  MLP 8 -> 32 -> 32 -> 4 (ReLU), batch 128; true I(X; C) by Monte Carlo.

Both: 12,800 training samples, 200 epochs, AdamW lr 1e-2 (weight decay 1e-4,
constant lr), tau = 0.07, kernel K(t) = 1 - t^2 with l1 distance and h = 0.6 for
the NW-projection losses, lower coordinate-wise median for the median losses.
The embedding is the L2-normalised MLP output (the losses normalise it
themselves). Methods: SupCon, ProjNCE (beta = 1), SoftSupCon, SoftNCE,
MedSupCon, MedNCE and cross-entropy (CE: a linear classifier on the d_z-dim MLP
output, trained with softmax cross-entropy; its features are normalised the same
way before measuring MI).

Measured every 40 epochs (and at epoch 0) on a fresh held-out set of 12,800 samples:

* ``mi_ksg``: Mixed-KSG estimate (k = 5, nats) of I(Z; C), Z the normalised embedding.
* ``bound``: ``1 + log N - (I_self-p + R)`` (Prop. 2.1), the batch loss with its
  adjustment term, averaged over held-out batches of the training size N. For
  ProjNCE, SoftSupCon and MedSupCon that is their own loss (beta = 1); for SupCon
  it is the ProjNCE loss of the SupCon-trained encoder (SupCon plus the R it
  omits); for SoftNCE and MedNCE, R = 1 exactly, so it is ``log N - loss``. CE
  has no such bound. The library's losses drop j = i from the SupCon-type
  denominators (docs/reproductions.md, "ProjNCE protocol") and use batch statistics
  as projections, for which the bound is only heuristic (Prop. 2.1 assumes the
  population projections), so it may exceed the true MI.

Resumable: each (setting, method, seed) run writes
``<out>/runs/<setting>/<method>/seed<k>.json`` and is skipped when that exists;
a run in progress saves its parameters and optimiser state after every
evaluation chunk (``seed<k>.ckpt.npz``) and resumes from it. Summary table,
``summary.json`` and the plots ``mi_<setting>.png`` are written into ``<out>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _synthetic_common as common  # noqa: E402

from contrastive_jax import losses  # noqa: E402
from contrastive_jax.metrics import mixed_ksg  # noqa: E402

TAU = 0.07
BANDWIDTH = 0.6
GMM_SEED = 0
METHODS = ("supcon", "projnce", "soft_supcon", "soft_nce", "med_supcon", "med_nce", "ce")
LABELS = {
    "supcon": "SupCon",
    "projnce": "ProjNCE",
    "soft_supcon": "SoftSupCon",
    "soft_nce": "SoftNCE",
    "med_supcon": "MedSupCon",
    "med_nce": "MedNCE",
    "ce": "CE",
}
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "projnce"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One synthetic experiment of App. D.1."""

    name: str
    d_in: int
    hidden: int
    d_z: int
    classes: int
    n: int
    batch: int
    epochs: int
    lr: float
    eval_every: int


def settings(quick: bool) -> dict[str, Setting]:
    """The paper's settings, or tiny ones for ``--quick``."""
    if quick:
        return {
            "binary": Setting("binary", 5, 16, 2, 2, 1024, 256, 2, 1e-2, 2),
            "gmm": Setting("gmm", 8, 32, 4, 32, 1024, 128, 2, 1e-2, 2),
        }
    return {
        "binary": Setting("binary", 5, 16, 2, 2, 12_800, 256, 200, 1e-2, 40),
        "gmm": Setting("gmm", 8, 32, 4, 32, 12_800, 128, 200, 1e-2, 40),
    }


# ----------------------------------------------------------------------------- data


def sample_binary(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (35): ``c ~ Ber(1/2)``, ``x | c ~ N((2c - 1) 1, I_5)``. Returns x [n, 5], c [n]."""
    c = rng.integers(0, 2, size=n)
    x = (2.0 * c[:, None] - 1.0) + rng.standard_normal((n, 5))
    return x.astype(np.float32), c.astype(np.int32)


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


@dataclasses.dataclass(frozen=True)
class Gmm:
    """32-component GMM in R^4 and its projection W [8, 4] (generator: docs/reproductions.md)."""

    means: np.ndarray  # [M, 4]
    chols: np.ndarray  # [M, 4, 4], Cholesky factors of K_i
    proj: np.ndarray  # [8, 4]


def make_gmm(seed: int = GMM_SEED, classes: int = 32) -> Gmm:
    """mu_i ~ N(0, 3^2 I_4), K_i = A_i A_i^T / 4 + 0.1 I (A_i standard normal), W ~ N(0, 1)."""
    rng = np.random.default_rng(seed)
    means = 3.0 * rng.standard_normal((classes, 4))
    a = rng.standard_normal((classes, 4, 4))
    cov = a @ np.swapaxes(a, 1, 2) / 4.0 + 0.1 * np.eye(4)
    return Gmm(means, np.linalg.cholesky(cov), rng.standard_normal((8, 4)))


def sample_gmm(gmm: Gmm, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Returns ``x = W z`` [n, 8] and the component labels c [n] (uniform prior)."""
    c = rng.integers(0, gmm.means.shape[0], size=n)
    z = gmm.means[c] + np.einsum("nij,nj->ni", gmm.chols[c], rng.standard_normal((n, 4)))
    return (z @ gmm.proj.T).astype(np.float32), c.astype(np.int32)


def gmm_log_posterior(gmm: Gmm, z: np.ndarray) -> np.ndarray:
    """``log p(c | z)`` [n, M] under the uniform-prior GMM."""
    diff = z[:, None, :] - gmm.means[None]  # [n, M, 4]
    sol = np.linalg.solve(gmm.chols[None], diff[..., None])[..., 0]
    logdet = np.log(np.diagonal(gmm.chols, axis1=1, axis2=2)).sum(1)
    loglik = -0.5 * (sol**2).sum(-1) - logdet[None]
    return loglik - special.logsumexp(loglik, axis=1, keepdims=True)


def true_mi_gmm(gmm: Gmm, n: int = 200_000, seed: int = 1) -> tuple[float, float]:
    """Monte Carlo ``I(X; C) = I(Z; C) = log M + E[log p(c | z)]`` (W injective); (mean, s.e.)."""
    rng = np.random.default_rng(seed)
    m = gmm.means.shape[0]
    c = rng.integers(0, m, size=n)
    z = gmm.means[c] + np.einsum("nij,nj->ni", gmm.chols[c], rng.standard_normal((n, 4)))
    terms = math.log(m) + gmm_log_posterior(gmm, z)[np.arange(n), c]
    return float(terms.mean()), float(terms.std(ddof=1) / math.sqrt(n))


def sample(setting: Setting, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Inputs [n, d_in] and labels [n] of ``setting``."""
    if setting.name == "binary":
        return sample_binary(n, rng)
    return sample_gmm(make_gmm(GMM_SEED, setting.classes), n, rng)


# ----------------------------------------------------------------------------- model


def init_params(setting: Setting, method: str, key: jax.Array) -> dict:
    """MLP d_in -> hidden -> hidden -> d_z (plus a d_z -> classes head for CE).

    PyTorch's default ``nn.Linear`` initialisation: U(+-1/sqrt(fan_in)) for weights and biases.
    """
    dims = [setting.d_in, setting.hidden, setting.hidden, setting.d_z]
    if method == "ce":
        dims.append(setting.classes)
    layers = []
    for fan_in, fan_out, k in zip(
        dims[:-1], dims[1:], jax.random.split(key, len(dims) - 1), strict=True
    ):
        kw, kb = jax.random.split(k)
        bound = 1.0 / math.sqrt(fan_in)
        layers.append(
            {
                "w": jax.random.uniform(kw, (fan_in, fan_out), minval=-bound, maxval=bound),
                "b": jax.random.uniform(kb, (fan_out,), minval=-bound, maxval=bound),
            }
        )
    return {"mlp": layers[:3], "head": layers[3:]}


def embed(params: dict, x: jax.Array) -> jax.Array:
    """The MLP output [B, d_z] (not normalised); ReLU between layers."""
    h = x
    for i, layer in enumerate(params["mlp"]):
        h = h @ layer["w"] + layer["b"]
        if i < len(params["mlp"]) - 1:
            h = jax.nn.relu(h)
    return h


def normalise(z: jax.Array) -> jax.Array:
    """Rows on the unit sphere (the embedding whose MI is measured)."""
    return z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-12)


# ----------------------------------------------------------------------------- losses


def contrastive_loss(method: str):
    """``fn(embeddings [N, d_z], labels [N]) -> scalar`` for a ProjNCE-family method."""
    kernel = {"bandwidth": BANDWIDTH, "distance": "l1"}
    return {
        "supcon": partial(losses.supcon, temperature=TAU),
        "projnce": partial(losses.projnce, temperature=TAU, beta=1.0),
        "soft_supcon": partial(losses.soft_supcon, temperature=TAU, **kernel),
        "soft_nce": partial(losses.soft_nce, temperature=TAU, **kernel),
        "med_supcon": partial(losses.med_supcon, temperature=TAU, median_mode="lower"),
        "med_nce": partial(losses.med_nce, temperature=TAU, median_mode="lower"),
    }[method]


def train_loss(method: str):
    """``fn(params, x [B, d_in], c [B]) -> scalar``: the objective ``method`` minimises."""
    if method == "ce":

        def ce(params, x, c):
            logits = embed(params, x) @ params["head"][0]["w"] + params["head"][0]["b"]
            return optax.softmax_cross_entropy_with_integer_labels(logits, c).mean()

        return ce
    fn = contrastive_loss(method)
    return lambda params, x, c: fn(embed(params, x), c)


def bound_loss(method: str):
    """``fn(embeddings, labels) -> I_self-p + R`` (see module docstring), None for CE."""
    if method == "ce":
        return None
    if method == "supcon":
        return contrastive_loss("projnce")
    fn = contrastive_loss(method)
    if method in ("soft_nce", "med_nce"):
        return lambda z, c: fn(z, c) + 1.0
    return fn


# ----------------------------------------------------------------------------- training


def make_chunk(setting: Setting, method: str, optimizer: optax.GradientTransformation):
    """jit ``(params, opt_state, x, c, keys [E]) -> (params, opt_state, mean losses [E])``.

    Runs E epochs; each epoch is a ``lax.scan`` over the n // batch steps of a
    random permutation (the incomplete last batch is dropped).
    """
    loss_fn = train_loss(method)
    steps = setting.n // setting.batch

    def step(carry, idx):
        params, opt_state, x, c = carry
        loss, grads = jax.value_and_grad(loss_fn)(params, x[idx], c[idx])
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, x, c), loss

    def epoch(carry, key):
        perm = jax.random.permutation(key, setting.n)[: steps * setting.batch]
        carry, step_losses = jax.lax.scan(step, carry, perm.reshape(steps, setting.batch))
        return carry, step_losses.mean()

    @jax.jit
    def chunk(params, opt_state, x, c, keys):
        (params, opt_state, _, _), epoch_losses = jax.lax.scan(
            epoch, (params, opt_state, x, c), keys
        )
        return params, opt_state, epoch_losses

    return chunk


def make_evaluate(setting: Setting, method: str):
    """``(params, x_test, c_test) -> dict`` of the held-out MI estimate and bound."""
    bound_fn = bound_loss(method)

    @jax.jit
    def features_and_bound(params, x, c):
        z = embed(params, x)
        if bound_fn is None:
            return normalise(z), jnp.nan
        nb = x.shape[0] // setting.batch
        zb = z[: nb * setting.batch].reshape(nb, setting.batch, -1)
        cb = c[: nb * setting.batch].reshape(nb, setting.batch)
        return normalise(z), jax.vmap(bound_fn)(zb, cb).mean()

    def evaluate(params, x, c):
        z, loss = features_and_bound(params, x, c)
        bound = 1.0 + math.log(setting.batch) - float(loss)
        return {
            "mi_ksg": mixed_ksg(np.asarray(z, np.float64), np.asarray(c), k=5),
            "bound": None if math.isnan(bound) else bound,
        }

    return evaluate


def run_one(setting: Setting, method: str, seed: int, out: Path, log) -> dict:
    """Train one encoder (resuming from its checkpoint) and return its result dict."""
    ckpt = common.run_path(out, setting.name, method, seed).with_suffix(".ckpt.npz")
    rng = np.random.default_rng([seed, setting.d_in])
    x_train, c_train = sample(setting, setting.n, rng)
    x_test, c_test = sample(setting, setting.n, rng)
    x_train, c_train = jnp.asarray(x_train), jnp.asarray(c_train)
    optimizer = optax.adamw(setting.lr, weight_decay=1e-4)
    params = init_params(setting, method, jax.random.key(seed))
    state = (params, optimizer.init(params))
    progress = {"epoch": 0, "curve": [], "train_loss": [], "seconds": 0.0}
    restored = common.load_checkpoint(ckpt, state)
    if restored is not None:
        state, progress = restored
        log(f"resumed {setting.name}/{method}/seed{seed} at epoch {progress['epoch']}")
    chunk = make_chunk(setting, method, optimizer)
    evaluate = make_evaluate(setting, method)
    epoch_keys = jax.random.split(jax.random.key(10_000 + seed), setting.epochs)
    if progress["epoch"] == 0 and not progress["curve"]:
        progress["curve"].append({"epoch": 0, **evaluate(state[0], x_test, c_test)})
    while progress["epoch"] < setting.epochs:
        start = time.time()
        e0 = progress["epoch"]
        e1 = min(e0 + setting.eval_every, setting.epochs)
        params, opt_state, epoch_losses = chunk(*state, x_train, c_train, epoch_keys[e0:e1])
        state = (params, opt_state)
        epoch_losses = np.asarray(epoch_losses)
        if not np.all(np.isfinite(epoch_losses)):
            raise FloatingPointError(f"{setting.name}/{method}/seed{seed}: non-finite loss")
        point = {"epoch": e1, **evaluate(params, x_test, c_test)}
        progress["curve"].append(point)
        progress["train_loss"] += epoch_losses.tolist()
        progress["epoch"] = e1
        progress["seconds"] += time.time() - start
        common.save_checkpoint(ckpt, state, progress)
        log(
            f"{setting.name}/{method}/seed{seed} epoch {e1}: loss {epoch_losses[-1]:.4f} "
            f"MI {point['mi_ksg']:.4f} bound {point['bound']}",
            finished=False,
        )
    final = progress["curve"][-1]
    return {
        "setting": setting.name,
        "method": method,
        "seed": seed,
        "config": dataclasses.asdict(setting) | {"tau": TAU, "bandwidth": BANDWIDTH},
        "mi_ksg": final["mi_ksg"],
        "bound": final["bound"],
        "curve": progress["curve"],
        "train_loss": progress["train_loss"],
        "seconds": progress["seconds"],
    }


# ----------------------------------------------------------------------------- report


def summarise(out: Path, setts: dict[str, Setting], seeds: list[int], truth: dict) -> str:
    """Write ``summary.json``, ``table.md`` and ``mi_<setting>.png``; return the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, text = {}, ""
    for name in setts:
        results = {
            m: [common.load_json(common.run_path(out, name, m, s)) for s in seeds] for m in METHODS
        }
        rows, summary[name] = [], {"true_mi": truth[name], "methods": {}}
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for m in METHODS:
            runs = [r for r in results[m] if r is not None]
            if not runs:
                continue
            mi = [r["mi_ksg"] for r in runs]
            bounds = [r["bound"] for r in runs if r["bound"] is not None]
            secs = [r["seconds"] for r in runs]
            summary[name]["methods"][m] = {
                "mi_ksg": mi,
                "bound": bounds,
                "seconds": secs,
                "seeds": [r["seed"] for r in runs],
            }
            supcon = {r["seed"]: r["mi_ksg"] for r in results["supcon"] if r is not None}
            paired = [r["mi_ksg"] - supcon[r["seed"]] for r in runs if r["seed"] in supcon]
            rows.append(
                [
                    LABELS[m],
                    len(runs),
                    common.fmt_mean_std(mi, 4),
                    common.fmt_mean_std(paired, 4) if paired else "n/a",
                    common.fmt_mean_std(bounds, 4) if bounds else "n/a",
                    f"{np.mean(secs):.0f}",
                ]
            )
            epochs = np.array([p["epoch"] for p in runs[0]["curve"]])
            for ax, key in zip(axes, ("mi_ksg", "bound"), strict=True):
                curves = np.array(
                    [[np.nan if p[key] is None else p[key] for p in r["curve"]] for r in runs]
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
        fig.tight_layout()
        fig.savefig(Path(out) / f"mi_{name}.png", dpi=120)
        plt.close(fig)
        text += f"\n### {name} (true I(X;C) = {truth[name]:.4f} nats)\n\n"
        text += common.markdown_table(
            [
                "method",
                "seeds",
                "Mixed-KSG MI (nats)",
                "MI - SupCon's (paired by seed)",
                "bound 1+log N-(loss+R)",
                "train s/run",
            ],
            rows,
        )
    common.save_json(Path(out) / "summary.json", summary)
    (Path(out) / "table.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny version (< 2 min)")
    parser.add_argument("--out", type=Path, default=None, help=f"default {DEFAULT_OUT}")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..S-1 (default 3; quick 1)")
    parser.add_argument("--settings", nargs="+", default=["binary", "gmm"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    args = parser.parse_args(argv)
    if args.quick and args.out is None:
        parser.error("--quick needs --out (keep tiny runs out of the results directory)")
    out = args.out or DEFAULT_OUT
    seeds = list(range(args.seeds or (1 if args.quick else 3)))
    setts = {k: v for k, v in settings(args.quick).items() if k in args.settings}
    for m in args.methods:
        if m not in METHODS:
            raise ValueError(f"`--methods`: unknown method {m!r}; choose from {METHODS}")
    truth = {"binary": true_mi_binary(), "gmm": true_mi_gmm(make_gmm())[0]}
    print(f"true MI: binary {truth['binary']:.4f} nats, gmm {truth['gmm']:.4f} nats", flush=True)
    todo = [(s, m, k) for s in setts.values() for k in seeds for m in args.methods]
    progress = common.Progress(len(todo), "projnce")
    for setting, method, seed in todo:
        path = common.run_path(out, setting.name, method, seed)
        if path.exists():
            progress.log(f"skip {setting.name}/{method}/seed{seed} (done)")
            continue
        result = run_one(setting, method, seed, out, progress.log)
        common.save_json(path, result)
        path.with_suffix(".ckpt.npz").unlink(missing_ok=True)
        progress.log(
            f"done {setting.name}/{method}/seed{seed}: MI {result['mi_ksg']:.4f} "
            f"bound {result['bound']} ({result['seconds']:.0f}s)"
        )
    print(summarise(out, setts, seeds, truth), flush=True)


if __name__ == "__main__":
    main()
