"""LEGACY: the hand-made training stack of the former ``conditional_uniformity.py``, kept only because
the CIFAR proxy scripts (``cifar_proxy``, ``cifar_label_noise``, ``_cifar_common``,
``_cifar_classifier``) still train with it; they and this file go once they run on the
library's trainer. ``python -m experiments.reproduce.conditional_uniformity`` is the reproduction.

Reproduce conditional alignment and uniformity (Dufumier et al. 2021) at CPU scale.

Paper: B. Dufumier, P. Gori, J. Victor, A. Grigis, E. Duchesnay (2021), "Conditional Alignment and
Uniformity for Contrastive Learning with Continuous Proxy Labels", arXiv:2111.05643.

    python experiments/reproduce/conditional_uniformity.py             # digits + phantoms grid
    python experiments/reproduce/conditional_uniformity.py --quick     # tiny smoke version
    python experiments/reproduce/conditional_uniformity.py --epochs 30 --seeds 0 1 2

Two proxies described in docs/reproductions.md (real CIFAR and BIOBD do not fit the budget):

* ``digits`` (the CIFAR-with-labels analogue, categorical metadata): the cluttered 16x16
  built-in digits, a 2-conv encoder (conv3x3-32 s1, conv3x3-64 s2, ReLU, global average pool,
  h in R^64) and projector Linear(64,128)-BN-ReLU-Linear(128,64); AdamW lr 1e-3, wd 5e-5,
  batch 128 (256 views); augmentations pad-4 random crop, gain U(0.6, 1.4), N(0, 0.1) noise.
  Methods: SimCLR (NT-Xent, tau 0.5), Align-Uniform (Wang-Isola, alpha = t = 2, lambda 1),
  SupCon (tau 0.1; y-Aware InfoNCE with a delta kernel on the class label is the same loss minus
  the constant log N, which follows from the paper's Eq. 1, so this run stands for both) and the proposed conditional
  alignment + conditional uniformity (delta kernel on the class label, tau 0.1, lambda 1). The
  linear probe (logistic regression on standardised frozen h; all labels and 5 per class) is run
  at several epochs of each run: the paper's Fig. 2 accuracy-against-epochs curves.
* ``phantoms`` (the BHB-10K -> BIOBD analogue, continuous metadata): 32x32 synthetic
  "brain phantoms" (``contrastive_jax.data.synthetic``), pretraining on healthy subjects with
  (age, sex) metadata, kernel w_5y(age) * delta(sex), tau 0.1; encoder conv 16-32-64-128 (stride
  2), projector 128-128-64. Methods: SimCLR, y-Aware InfoNCE (global uniformity) and conditional
  alignment + conditional uniformity (lambda 1). Downstream: diagnosis on the 662-subject set,
  5-fold stratified CV logistic regression on frozen h with the training folds sub-sampled to
  N_train in {100, 200, 400, 530} (the paper's Fig. 3, right).

Resumable: each (task, method, seed) run writes ``runs/<task>/<method>/seed<k>.json`` when done
and is then skipped; an unfinished run resumes from its ``.ckpt.npz`` (saved every few epochs).
``summary.json``, ``table.md`` and PNG plots go to ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score, roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _synthetic_common as common  # noqa: E402

from contrastive_jax import losses, metrics  # noqa: E402
from contrastive_jax.data.digits import digits_splits  # noqa: E402
from contrastive_jax.data.synthetic import phantom_splits  # noqa: E402
from contrastive_jax.eval import bootstrap_accuracy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "results" / "conditional_uniformity"
#: Bandwidth that turns the RBF kernel on one-hot labels (squared distance 2) into a delta kernel:
#: w = exp(-2 / (2 * 0.05^2)) = exp(-400), 0 in float32.
DELTA_SIGMA = 0.05
#: Scale of the sex coordinate of the phantom metadata: with sigma = 5 years, subjects of
#: different sex get w = exp(-1000^2 / 50) = 0, i.e. the product kernel w_sigma(age) * delta(sex).
SEX_SCALE = 1000.0
AGE_SIGMA = 5.0
N_TRAIN_SIZES = (100, 200, 400, 530)
SHOTS = 5
RESAMPLES = 1000
#: Evenly spaced probe epochs of a digits run (accuracy against epoch, Fig. 2).
DIGITS_PROBES = 4


# ----------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True)
class Data:
    """Training and test arrays of one task (images float32 [N, H, W, C] in [0, 1])."""

    x_train: np.ndarray
    y_train: np.ndarray
    meta_train: np.ndarray  # float32 [N, p], the kernel's metadata coordinates
    x_test: np.ndarray
    y_test: np.ndarray


def digits_data(cluttered: bool = True) -> Data:
    """Built-in digits (docs/reproductions.md); metadata = one-hot class labels (delta kernel with DELTA_SIGMA)."""
    s = digits_splits(cluttered=cluttered)
    x = {k: s[k].images[..., :1].astype(np.float32) / 255.0 for k in s}
    onehot = np.eye(10, dtype=np.float32)[s["train"].labels]
    return Data(x["train"], s["train"].labels, onehot, x["test"], s["test"].labels)


def phantom_data(num_train: int) -> Data:
    """Synthetic phantoms (docs/reproductions.md); metadata = (age, SEX_SCALE * sex); test = diagnosis set."""
    s = phantom_splits(num_train=num_train)
    x = {k: s[k].images[..., :1].astype(np.float32) / 255.0 for k in s}
    meta = s["train"].metadata * np.array([1.0, SEX_SCALE], np.float32)
    return Data(x["train"], s["train"].labels, meta, x["test"], s["test"].labels)


# ----------------------------------------------------------------------------- model


@dataclasses.dataclass(frozen=True)
class Arch:
    """Conv encoder (channels, stride) per 3x3 layer, then an MLP projector.

    ``in_channels`` is the input's channel count (1 for the digits and phantoms, 3 for RGB).
    The projector is ``hidden_layers`` x [Linear(hidden, no bias) -> BN -> ReLU] -> Linear(out),
    followed by BN when ``last_bn`` (the MIO projector); BN uses batch statistics only
    (the projector is dropped after pretraining, so no running averages are needed).
    """

    convs: tuple[tuple[int, int], ...]
    hidden: int = 128
    out: int = 64
    hidden_layers: int = 1
    last_bn: bool = False
    in_channels: int = 1


DIGITS_ARCH = Arch(convs=((32, 1), (64, 2)))
PHANTOM_ARCH = Arch(convs=((16, 2), (32, 2), (64, 2), (128, 2)))


def init_params(arch: Arch, key: jax.Array) -> dict:
    """He-initialised parameters; weights are named ``w`` (the only leaves with weight decay)."""
    params: dict = {}
    c_in = arch.in_channels
    keys = iter(jax.random.split(key, len(arch.convs) + arch.hidden_layers + 1))
    for i, (c_out, _) in enumerate(arch.convs):
        w = jax.random.normal(next(keys), (3, 3, c_in, c_out)) * np.sqrt(2.0 / (9 * c_in))
        params[f"conv{i}"] = {"w": w, "b": jnp.zeros(c_out)}
        c_in = c_out
    for i in range(arch.hidden_layers):
        w = jax.random.normal(next(keys), (c_in, arch.hidden)) * np.sqrt(2.0 / c_in)
        params[f"lin{i}"] = {"w": w}
        params[f"bn{i}"] = {"scale": jnp.ones(arch.hidden), "b": jnp.zeros(arch.hidden)}
        c_in = arch.hidden
    w = jax.random.normal(next(keys), (c_in, arch.out)) * np.sqrt(1.0 / c_in)
    params["head"] = {"w": w, "b": jnp.zeros(arch.out)}
    if arch.last_bn:
        params["bn_out"] = {"scale": jnp.ones(arch.out), "b": jnp.zeros(arch.out)}
    return params


def encode(arch: Arch, params: dict, x: jax.Array) -> jax.Array:
    """Encoder features h: float [N, H, W, in_channels] -> [N, C_last].

    ReLU convolutions, then a global average pool.
    """
    for i, (_, stride) in enumerate(arch.convs):
        p = params[f"conv{i}"]
        x = jax.lax.conv_general_dilated(
            x, p["w"], (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        x = jax.nn.relu(x + p["b"])
    return x.mean((1, 2))


def _batch_norm(p: dict, x: jax.Array) -> jax.Array:
    mean = x.mean(0)
    var = x.var(0)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["b"]


def project(arch: Arch, params: dict, h: jax.Array) -> jax.Array:
    """Projector output z: [N, C_last] -> [N, out] (batch-statistics BN)."""
    for i in range(arch.hidden_layers):
        h = jax.nn.relu(_batch_norm(params[f"bn{i}"], h @ params[f"lin{i}"]["w"]))
    z = h @ params["head"]["w"] + params["head"]["b"]
    return _batch_norm(params["bn_out"], z) if arch.last_bn else z


# ----------------------------------------------------------------------------- augmentation


def _random_crop(key: jax.Array, x: jax.Array, pad: int) -> jax.Array:
    """Zero-pad by ``pad`` and crop back at a random offset, per image. x: [N, H, W, C]."""
    n, h, w, _ = x.shape
    padded = jnp.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    offsets = jax.random.randint(key, (n, 2), 0, 2 * pad + 1)
    return jax.vmap(lambda img, o: jax.lax.dynamic_slice(img, (o[0], o[1], 0), (h, w, img.shape[-1])))(
        padded, offsets
    )


def augment_digits(key: jax.Array, x: jax.Array, pad: int = 4) -> jax.Array:
    """Digits proxy: pad-``pad`` random crop, gain U(0.6, 1.4), additive N(0, 0.1) noise."""
    k_crop, k_gain, k_noise = jax.random.split(key, 3)
    x = _random_crop(k_crop, x, pad)
    gain = jax.random.uniform(k_gain, (x.shape[0], 1, 1, 1), minval=0.6, maxval=1.4)
    return x * gain + 0.1 * jax.random.normal(k_noise, x.shape)


def _gaussian_blur(x: jax.Array, sigma: jax.Array) -> jax.Array:
    """Separable 5-tap Gaussian blur of one image [H, W, 1] with std ``sigma`` pixels."""
    taps = jnp.arange(-2, 3, dtype=jnp.float32)
    k = jnp.exp(-0.5 * (taps / sigma) ** 2)
    k = k / k.sum()
    img = x[..., 0]
    img = jax.vmap(lambda r: jnp.convolve(r, k, mode="same"))(img)
    img = jax.vmap(lambda c: jnp.convolve(c, k, mode="same"), in_axes=1, out_axes=1)(img)
    return img[..., None]


def augment_phantoms(key: jax.Array, x: jax.Array) -> jax.Array:
    """Phantom proxy (the paper's "as in [8]"): pad-2 crop, 8x8 cutout (p 0.5), blur sigma~U(0.1, 1),
    noise sigma~U(0, 0.05), left-right flip (p 0.5)."""
    n, h, w, _ = x.shape
    ks = jax.random.split(key, 7)
    x = _random_crop(ks[0], x, 2)
    corner = jax.random.randint(ks[1], (n, 2), 0, h - 8 + 1)
    rows = jnp.arange(h)[None, :, None]
    cols = jnp.arange(w)[None, None, :]
    inside = (
        (rows >= corner[:, 0, None, None]) & (rows < corner[:, 0, None, None] + 8)
        & (cols >= corner[:, 1, None, None]) & (cols < corner[:, 1, None, None] + 8)
    )
    cut = jax.random.bernoulli(ks[2], 0.5, (n, 1, 1)) & inside
    x = jnp.where(cut[..., None], 0.0, x)
    x = jax.vmap(_gaussian_blur)(x, jax.random.uniform(ks[3], (n,), minval=0.1, maxval=1.0))
    noise_std = jax.random.uniform(ks[4], (n, 1, 1, 1), maxval=0.05)
    x = x + noise_std * jax.random.normal(ks[5], x.shape)
    flip = jax.random.bernoulli(ks[6], 0.5, (n, 1, 1, 1))
    return jnp.where(flip, x[:, :, ::-1], x)


# ----------------------------------------------------------------------------- methods

#: loss(z [2B, D] = concat(view1, view2), ids [2B], labels [2B], metadata [2B, p]) -> scalar
LossFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]


def _align_uniform(z: jax.Array, ids, labels, meta) -> jax.Array:
    """Wang-Isola: align(alpha=2) + 1 * (uniform(z1, t=2) + uniform(z2, t=2)) / 2."""
    z1, z2 = jnp.split(z, 2)
    unif = (metrics.uniformity(z1, t=2.0) + metrics.uniformity(z2, t=2.0)) / 2
    return metrics.alignment(z1, z2, alpha=2.0) + unif


def _conditional(sigma: float) -> LossFn:
    """The paper's proposed objective L^y_align + 1 * L^y_unif (Eqs. 2 and 4, lambda = 1)."""

    def loss(z, ids, labels, meta):
        kw = {"temperature": 0.1, "sigma": sigma}
        return losses.conditional_alignment(z, meta, **kw) + losses.conditional_uniformity(
            z, meta, **kw
        )

    return loss


DIGITS_METHODS: dict[str, LossFn] = {
    "simclr": lambda z, ids, labels, meta: losses.nt_xent(z, ids, temperature=0.5),
    "align_uniform": _align_uniform,
    "supcon": lambda z, ids, labels, meta: losses.supcon(z, labels, temperature=0.1),
    "conditional": _conditional(DELTA_SIGMA),
}
PHANTOM_METHODS: dict[str, LossFn] = {
    "simclr": lambda z, ids, labels, meta: losses.nt_xent(z, ids, temperature=0.1),
    "y_aware": lambda z, ids, labels, meta: losses.y_aware_infonce(
        z, meta, temperature=0.1, sigma=AGE_SIGMA
    ),
    "conditional": _conditional(AGE_SIGMA),
}


# ----------------------------------------------------------------------------- training


@dataclasses.dataclass(frozen=True)
class Task:
    """One pretraining setting: architecture, augmentation, budget and probe epochs."""

    name: str
    arch: Arch
    augment: Callable[[jax.Array, jax.Array], jax.Array]
    epochs: int
    batch: int
    probe_epochs: tuple[int, ...]  # epochs after which h is probed (the last one is `epochs`)


def adamw(steps_per_epoch: int, epochs: int) -> optax.GradientTransformation:
    """The paper's optimiser (its CIFAR appendix): AdamW lr 1e-3 (constant), weight decay 5e-5 on weights only."""
    del steps_per_epoch, epochs
    return optax.adamw(1e-3, weight_decay=5e-5, mask=weight_mask)


def weight_mask(params: dict) -> dict:
    """True on conv/linear weights, False on biases and BN parameters."""
    return {k: {n: n == "w" for n in v} for k, v in params.items()}


_EPOCH_CACHE: dict = {}


def make_epoch(task: Task, loss_fn: LossFn, opt: optax.GradientTransformation, key: tuple):
    """``epoch(params, opt_state, rng, x, labels, meta)``: one pass over the shuffled training set
    (last partial batch dropped), a Python loop over a jitted step. Not ``lax.scan``: XLA:CPU runs
    the convolutions of a loop body about 25x slower than the same step dispatched on its own
    (measured on this encoder, 0.25 s against 6 s per step). Compiled once per ``key`` (the run's
    identity minus its seed), so the seeds of one method share the compilation."""
    if key in _EPOCH_CACHE:
        return _EPOCH_CACHE[key]
    b = task.batch

    def objective(params, rng, xb, lb, mb):
        k1, k2 = jax.random.split(rng)
        views = jnp.concatenate([task.augment(k1, xb), task.augment(k2, xb)])
        z = project(task.arch, params, encode(task.arch, params, views))
        ids = jnp.tile(jnp.arange(b), 2)
        return loss_fn(z, ids, jnp.tile(lb, 2), jnp.tile(mb, (2, 1)))

    @jax.jit
    def step(params, opt_state, rng, x, labels, meta, rows):
        loss, grads = jax.value_and_grad(objective)(params, rng, x[rows], labels[rows], meta[rows])
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def epoch(params, opt_state, rng, x, labels, meta):
        return epoch_loop(step, params, opt_state, rng, (x, labels, meta), b)

    _EPOCH_CACHE[key] = epoch
    return epoch


@functools.partial(jax.jit, static_argnums=(1, 2))
def batch_schedule(rng: jax.Array, n: int, batch: int) -> tuple[jax.Array, jax.Array]:
    """One epoch's step keys [n // batch, 2] and shuffled rows int [n // batch, batch] (the last
    partial batch dropped)."""
    k_perm, k_steps = jax.random.split(rng)
    order = jax.random.permutation(k_perm, n)[: (n // batch) * batch].reshape(n // batch, batch)
    return jax.random.split(k_steps, n // batch), order


def epoch_loop(step: Callable, params, opt_state, rng: jax.Array, arrays: tuple, batch: int):
    """One shuffled pass: ``step(params, opt_state, key, *arrays, rows) -> (params, opt_state,
    loss)`` for every batch of :func:`batch_schedule`; returns (params, opt_state, mean loss)."""
    keys, order = batch_schedule(rng, arrays[0].shape[0], batch)
    step_losses = []
    for k, rows in zip(keys, order, strict=True):
        params, opt_state, loss = step(params, opt_state, k, *arrays, rows)
        step_losses.append(loss)
    return params, opt_state, jnp.stack(step_losses).mean()


@functools.cache
def _encoder_fn(arch: Arch):
    return jax.jit(lambda p, xb: encode(arch, p, xb))


def features(task: Task, params: dict, x: np.ndarray) -> np.ndarray:
    """Frozen encoder features h of ``x`` (no augmentation), float64 [N, C]."""
    fn = _encoder_fn(task.arch)
    return np.concatenate(
        [np.asarray(fn(params, jnp.asarray(x[i : i + 512]))) for i in range(0, len(x), 512)]
    ).astype(np.float64)


def pretrain(
    task: Task,
    loss_fn: LossFn,
    opt_factory: Callable[[int, int], optax.GradientTransformation],
    data: Data,
    seed: int,
    ckpt: Path,
    on_probe: Callable[[int, dict], dict],
    log: Callable[[str], None],
    cache_key: tuple,
) -> tuple[list[dict], list[float]]:
    """Pretrain one run, resuming from ``ckpt``; ``on_probe(epoch, params)`` after probe epochs.

    ``cache_key`` identifies the compiled epoch function (everything but the seed).

    Returns the list of probe records and the per-epoch mean training losses.
    """
    key = jax.random.PRNGKey(seed)
    k_init, k_train = jax.random.split(key)
    params = init_params(task.arch, k_init)
    opt = opt_factory(len(data.x_train) // task.batch, task.epochs)
    epoch_fn = make_epoch(task, loss_fn, opt, cache_key)
    arrays = tuple(jnp.asarray(a) for a in (data.x_train, data.y_train, data.meta_train))
    state = (params, opt.init(params))
    progress = {"epoch": 0, "probes": [], "losses": []}
    restored = common.load_checkpoint(ckpt, state)
    if restored is not None:
        state, progress = restored
        log(f"resumed at epoch {progress['epoch']}")
    params, opt_state = state
    start = time.time()
    for epoch in range(progress["epoch"], task.epochs):
        params, opt_state, loss = epoch_fn(params, opt_state, jax.random.fold_in(k_train, epoch), *arrays)
        progress["losses"].append(float(loss))
        progress["epoch"] = epoch + 1
        if not np.isfinite(float(loss)):
            log(f"epoch {epoch + 1}: non-finite loss, stopping the run")
            progress["probes"].append(on_probe(epoch + 1, None))
            break
        if epoch + 1 in task.probe_epochs:
            progress["probes"].append(on_probe(epoch + 1, params))
            common.save_checkpoint(ckpt, (params, opt_state), progress)
            log(f"epoch {epoch + 1}/{task.epochs} loss {float(loss):.4f} "
                f"probe {progress['probes'][-1]['summary']} ({time.time() - start:.0f}s)")
    return progress["probes"], progress["losses"]


# ----------------------------------------------------------------------------- probes


def logistic_scores(h_train, y_train, h_test) -> np.ndarray:
    """Class scores of a logistic regression on standardised frozen features.

    h_train float [N, C], y_train int [N] with K >= 3 classes, h_test float [M, C] -> float [M, K]
    (columns in sorted label order).
    """
    scaler = StandardScaler().fit(h_train)
    clf = LogisticRegression(max_iter=2000).fit(scaler.transform(h_train), y_train)
    return clf.decision_function(scaler.transform(h_test))


def logistic_probe(h_train, y_train, h_test) -> np.ndarray:
    """Predicted labels [M] (the arg max of :func:`logistic_scores`, as ``predict`` does)."""
    return np.unique(y_train)[logistic_scores(h_train, y_train, h_test).argmax(1)]


def digits_probe(task: Task, data: Data, seed: int) -> Callable[[int, dict | None], dict]:
    """Full-label and 5-shot probe accuracies with 95 % bootstrap intervals (1,000 resamples)."""
    rng = np.random.default_rng(seed)
    few = np.concatenate(
        [rng.choice(np.flatnonzero(data.y_train == c), SHOTS, replace=False) for c in range(10)]
    )

    def probe(epoch: int, params: dict | None) -> dict:
        record: dict = {"epoch": epoch}
        if params is None:
            record.update(full=None, shot5=None, summary="diverged")
            return record
        h_train, h_test = features(task, params, data.x_train), features(task, params, data.x_test)
        for name, rows in (("full", slice(None)), ("shot5", few)):
            correct = logistic_probe(h_train[rows], data.y_train[rows], h_test) == data.y_test
            record[name] = bootstrap_accuracy(correct, resamples=RESAMPLES, seed=seed)
        record["summary"] = f"full {record['full']['accuracy']:.3f} 5-shot {record['shot5']['accuracy']:.3f}"
        return record

    return probe


def phantom_probe(task: Task, data: Data, seed: int) -> Callable[[int, dict | None], dict]:
    """5-fold stratified CV logistic regression on h with training folds sub-sampled to N_train."""

    def probe(epoch: int, params: dict | None) -> dict:
        record: dict = {"epoch": epoch}
        if params is None:
            record.update(n_train={}, summary="diverged")
            return record
        h = features(task, params, data.x_test)
        y = data.y_test
        out = {}
        for n_train in N_TRAIN_SIZES:
            rng = np.random.default_rng([seed, n_train])
            aucs, baccs = [], []
            folds = StratifiedKFold(5, shuffle=True, random_state=seed).split(h, y)
            for train_rows, test_rows in folds:
                rows = rng.choice(train_rows, min(n_train, len(train_rows)), replace=False)
                scaler = StandardScaler().fit(h[rows])
                clf = LogisticRegression(max_iter=2000).fit(scaler.transform(h[rows]), y[rows])
                score = clf.decision_function(scaler.transform(h[test_rows]))
                aucs.append(roc_auc_score(y[test_rows], score))
                baccs.append(balanced_accuracy_score(y[test_rows], score > 0))
            out[str(n_train)] = {"auc": float(np.mean(aucs)), "bacc": float(np.mean(baccs))}
        record["n_train"] = out
        record["summary"] = " ".join(f"N{k}:auc {v['auc']:.3f}" for k, v in out.items())
        return record

    return probe


# ----------------------------------------------------------------------------- driver


def run_one(task, method, loss_fn, opt_factory, data, probe_factory, seed, out, progress) -> dict:
    """One (task, method, seed) run: skipped if its JSON exists, else trained (resumably)."""
    path = common.run_path(out, task.name, method, seed)
    done = common.load_finished(path, {"epochs": task.epochs}, progress,
                                f"{task.name}/{method}/seed{seed}")
    if done is not None:
        return done
    ckpt = path.with_name(f"seed{seed}.ckpt.npz")
    start = time.time()

    def log(msg: str) -> None:
        progress.log(f"{task.name}/{method}/seed{seed}: {msg}", finished=False)

    probes, losses_ = pretrain(task, loss_fn, opt_factory, data, seed, ckpt,
                               probe_factory(task, data, seed), log, (task, method))
    result = {
        "task": task.name, "method": method, "seed": seed, "epochs": task.epochs,
        "batch": task.batch, "probes": probes, "epoch_losses": losses_,
        "seconds": time.time() - start,
    }
    common.save_json(path, result)
    ckpt.unlink(missing_ok=True)
    progress.log(f"{task.name}/{method}/seed{seed}: finished in {result['seconds']:.0f}s")
    return result


def random_init_run(task: Task, data: Data, probe_factory, seed: int, out: Path,
                    progress: common.Progress) -> dict:
    """The probe of the seed's random-init encoder (the key ``pretrain`` initialises with),
    stored as the ``random_init`` method with ``epochs`` 0; skipped when stored."""
    path = common.run_path(out, task.name, "random_init", seed)
    done = common.load_json(path)
    if done is not None:
        progress.log(f"{task.name}/random_init/seed{seed}: done, skipped")
        return done
    start = time.time()
    k_init, _ = jax.random.split(jax.random.PRNGKey(seed))
    record = probe_factory(task, data, seed)(0, init_params(task.arch, k_init))
    result = {"task": task.name, "method": "random_init", "seed": seed, "epochs": 0,
              "probes": [record], "seconds": time.time() - start}
    common.save_json(path, result)
    progress.log(f"{task.name}/random_init/seed{seed}: {record['summary']} "
                 f"({result['seconds']:.0f}s)")
    return result


def probe_epochs(epochs: int, count: int = 4) -> tuple[int, ...]:
    """``count`` evenly spaced probe epochs ending at ``epochs``."""
    return tuple(sorted({max(1, round(epochs * (i + 1) / count)) for i in range(count)}))


def final(result: dict) -> dict:
    """The last probe record of a run."""
    return result["probes"][-1]


def _acc(result: dict, which: str, probe: dict | None = None) -> float:
    rec = probe or final(result)
    return float("nan") if rec.get(which) is None else rec[which]["accuracy"]


def summarise_digits(results: dict[str, list[dict]]) -> tuple[str, dict]:
    """Markdown table (final probe, and accuracy against epoch) and a JSON summary."""
    rows, summary = [], {}
    for method, runs in results.items():
        full = [_acc(r, "full") for r in runs]
        shot = [_acc(r, "shot5") for r in runs]
        ci_full = [f"[{final(r)['full']['low']:.3f}, {final(r)['full']['high']:.3f}]" for r in runs
                   if final(r).get("full")]
        curve = {}
        for i, rec in enumerate(runs[0]["probes"]):
            curve[rec["epoch"]] = common.mean_std([_acc(r, "full", r["probes"][i]) for r in runs])
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
        ok = [r for r in runs if final(r)["n_train"]]
        summary[method] = {}
        row = [method, len(ok)]
        for n in N_TRAIN_SIZES:
            auc = [final(r)["n_train"][str(n)]["auc"] for r in ok]
            bacc = [final(r)["n_train"][str(n)]["bacc"] for r in ok]
            summary[method][str(n)] = {"auc": common.mean_std(auc), "bacc": common.mean_std(bacc)}
            row.append(f"{common.fmt_mean_std(auc)} / {common.fmt_mean_std(bacc)}")
        rows.append(row)
    header = ["method", "seeds", *[f"N_train={n}: AUC / bal. acc" for n in N_TRAIN_SIZES]]
    return common.markdown_table(header, rows), summary


def plot_digits(summary: dict, path: Path) -> None:
    """Fig. 2 analogue: full-label probe accuracy against epoch, mean ± std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_phantoms(summary: dict, path: Path) -> None:
    """Fig. 3 (right) analogue: diagnosis AUC against N_train, mean ± std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for method, s in summary.items():
        m = np.array([s[str(n)]["auc"][0] for n in N_TRAIN_SIZES])
        sd = np.array([s[str(n)]["auc"][1] for n in N_TRAIN_SIZES])
        ax.errorbar(N_TRAIN_SIZES, m, yerr=sd, marker="o", capsize=3, label=method)
    ax.set(xlabel="N_train (downstream)", ylabel="diagnosis AUC (5-fold CV)",
           title="Phantoms: AUC vs training-set size")
    if summary:  # no legend for a grid with no finished run
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
            raise ValueError(f"--{name} must be >= 1")
    if args.quick:
        args.epochs, args.phantom_epochs, args.phantom_train, args.seeds = 2, 1, 300, [0]
    out = args.out
    for task_name in args.tasks:
        if task_name == "digits":
            name = f"{'quick_' if args.quick else ''}digits_{args.epochs}ep"
            if args.digits_probes != DIGITS_PROBES:
                name += f"_{args.digits_probes}probes"
            task = Task(name, DIGITS_ARCH, augment_digits, args.epochs, 128,
                        probe_epochs(args.epochs, args.digits_probes))
            data, methods, probe = digits_data(), DIGITS_METHODS, digits_probe
        else:
            name = (f"{'quick_' if args.quick else ''}phantoms_{args.phantom_epochs}ep"
                    f"_n{args.phantom_train}")
            task = Task(name, PHANTOM_ARCH,
                        augment_phantoms, args.phantom_epochs, 128, (args.phantom_epochs,))
            data, methods, probe = phantom_data(args.phantom_train), PHANTOM_METHODS, phantom_probe
        chosen = {m: f for m, f in methods.items() if args.methods is None or m in args.methods}
        progress = common.Progress(len(chosen) * len(args.seeds), task.name)
        results: dict[str, list[dict]] = {m: [] for m in chosen}
        for seed in args.seeds:  # seed-major: a first seed of every method before more seeds
            for m, f in chosen.items():
                if args.aggregate_only:
                    done = common.load_json(common.run_path(out, task.name, m, seed))
                    results[m] += [done] if done is not None else []
                else:
                    results[m].append(run_one(task, m, f, adamw, data, probe, seed, out, progress))
        results = {m: r for m, r in results.items() if r}
        if task_name == "digits":
            table, summary = summarise_digits(results)
            plot_digits(summary, out / f"{task.name}_accuracy_vs_epoch.png")
        else:
            table, summary = summarise_phantoms(results)
            plot_phantoms(summary, out / f"{task.name}_auc_vs_ntrain.png")
        common.save_json(out / f"{task.name}_summary.json", summary)
        text = f"## {task.name} ({task.epochs} epochs, seeds {args.seeds})\n\n{table}"
        (out / f"{task.name}_table.md").write_text(text)
        print(text)


if __name__ == "__main__":
    main()
