"""A supervised classifier trained from scratch on the CIFAR-10 proxy data (ProjNCE, STI).

Used by ``cifar_soft_target.py`` (soft-target InfoNCE, Table 1: NLL / STCE / InfoNCE / STI) and by
``cifar_label_noise.py`` (ProjNCE, the cross-entropy baseline on noisy labels): the training
labels are an explicit argument (they may be noisy) and the test labels a separate one; a run is
a ``method`` name, a ``loss_fn`` and a ``mix`` flag (or batch transform), with an optional
``probe`` of the trained parameters.

Model (``init_classifier`` / ``classifier_logits``):

* encoder: ``conditional_uniformity.encode`` with ``cifar_proxy.ARCH``'s convolutions (three 3x3
  stride-2 ReLU convolutions 32-64-128 on RGB, global average pool, h in R^128);
* head: MLP Linear(128, 128)-ReLU-Linear(128, K) with biases, **no BatchNorm**, so a test
  prediction does not depend on the other test images of its batch (there are no running
  statistics to keep either). The paper's head (soft-target InfoNCE App. A.4) is a 3-layer MLP (hidden 4096)
  with BN after each hidden layer and a non-affine BN on the K class scores.

Training (``train``), per step of ``Config.batch`` images (the last partial batch is dropped):

1. one augmented view per image (``Config.augment``, default ``_cifar_common.augment_cifar``);
2. optionally a batch transform ``(key, images, labels) -> (images, soft targets [B, K])``:
   ``mix=True`` is ``paper_mix`` (``contrastive_jax.data.mixing.mix_batch`` with the paper's
   recipe, docs/reproductions.md: label smoothing 0.1, MixUp 0.8, CutMix 1.0, mixup_prob 1.0, switch_prob 0.5);
   without a transform the targets are the one-hot training labels;
3. ``loss_fn(logits [B, K], labels int [B], targets float [B, K]) -> scalar`` (``labels`` are
   the un-mixed labels of the batch's images, whatever the transform did);
4. AdamW as ``conditional_uniformity.adamw`` (lr 1e-3 constant, weight decay 5e-5 on weights
   only), a Python loop over a jitted step (``conditional_uniformity.make_epoch`` explains why
   not ``lax.scan``).

A run is resumable like ``conditional_uniformity.run_one``: its JSON
``<out>/runs/<task>/<method>/seed<k>.json`` is written when it finishes (a finished run is then
skipped; a stored run of another budget is refused) and ``seed<k>.ckpt.npz`` holds the parameters
and optimiser state every ``Config.checkpoint_every`` epochs and at the end of training.

Evaluation (``evaluate``) on the test images, no augmentation: logits -> top-1 and top-5
correctness (``contrastive_jax.eval.topk_correct``, bootstrap accuracy over the test set, the
per-example correctness packed as hex ``bits`` as in ``sincere.py`` so paired bootstraps are
possible), class probabilities ``softmax(logits / tau)``, their 15-bin ECE and reliability bins
(``contrastive_jax.eval.calibration``), the per-example confidence (max probability), and the
test NLL ``mean -log softmax(logits / tau)[y]``.

Probabilities of the InfoNCE-type models: training scores are ``s_k = L_k / tau - log eta_k``
and model ``log p(k|x) / eta_k`` up to a per-example constant, so ``L_k / tau`` models
``log p(k|x)`` up to that constant and ``softmax_k(L_k / tau)`` is the model's class posterior
(the paper's inference model ``exp(z^T y_k / tau)``, its Sec. 3.2). ``softmax_k(L_k / tau - log eta_k)``
would divide the posterior by the prior once more; for a uniform eta (the class-balanced
subsets here) both are the same, so every method is evaluated with ``softmax(L / tau)``.
"""

from __future__ import annotations

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

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _cifar_common as cifar  # noqa: E402
import _legacy_cu as cu  # noqa: E402
import _synthetic_common as common  # noqa: E402
import cifar_proxy  # noqa: E402
import sincere  # noqa: E402

from contrastive_jax import eval as eval_lib  # noqa: E402
from contrastive_jax.data import mixing  # noqa: E402

#: Encoder convolutions of the CIFAR proxy (only ``convs`` and ``in_channels`` are used).
ENCODER = cifar_proxy.ARCH
BATCH = 256
EVAL_BATCH = 500
NUM_BINS = 15
RESAMPLES = cu.RESAMPLES

#: ``loss_fn(logits [B, K], labels int [B], targets float [B, K]) -> scalar``.
LossFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
#: ``transform(key, images [B, H, W, C], labels int [B]) -> (images, targets float [B, K])``.
BatchTransform = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


@dataclasses.dataclass(frozen=True)
class Config:
    """One training setting (everything but the method, the data and the seed).

    ``task`` names the run directory; ``temperature`` is the tau of the evaluation softmax
    (the losses get theirs from ``loss_fn``).
    """

    task: str
    epochs: int
    batch: int = BATCH
    num_classes: int = cifar.NUM_CLASSES
    hidden: int = 128
    temperature: float = 1.0
    checkpoint_every: int = 4
    encoder: cu.Arch = ENCODER
    augment: Callable[[jax.Array, jax.Array], jax.Array] = cifar.augment_cifar

    def __post_init__(self):
        if self.epochs < 1 or self.batch < 2 or self.checkpoint_every < 1:
            raise ValueError(f"need epochs >= 1, batch >= 2, checkpoint_every >= 1: {self}")


def class_prior(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Empirical class frequencies of int labels [N]: float32 [K] (the paper's eta)."""
    counts = np.bincount(np.asarray(labels), minlength=num_classes)
    if counts.shape != (num_classes,):
        raise ValueError(f"labels must be in [0, {num_classes})")
    return (counts / counts.sum()).astype(np.float32)


@functools.cache
def paper_mix(num_classes: int) -> BatchTransform:
    """The soft-target InfoNCE paper's soft targets: label smoothing 0.1 + MixUp 0.8 / CutMix 1.0 (batch mode,
    mixup_prob 1.0, switch_prob 0.5), ``mixing.mix_batch``'s defaults. Cached, so every run
    gets the same function (and shares the compiled step)."""

    def transform(key, images, labels):
        return mixing.mix_batch(images, labels, key, num_classes=num_classes)

    return transform


# ----------------------------------------------------------------------------- model


def init_classifier(config: Config, key: jax.Array) -> dict:
    """Encoder convolutions (``cu.init_params``) + MLP head ``fc0``, ``fc1`` (He init; weights
    named ``w`` so ``cu.weight_mask`` decays them, biases ``b`` zero). Jitted (one compilation
    instead of one per eager op)."""
    return _init_fn(model_identity(config))(key)


def model_identity(config: Config) -> Config:
    """``config`` with the fields that do not change the model or the training step
    (task, epochs, checkpointing, evaluation temperature) reset: a key for compilations."""
    return dataclasses.replace(config, task="", epochs=1, checkpoint_every=1, temperature=1.0)


@functools.cache
def _init_fn(config: Config):
    return jax.jit(functools.partial(_init_classifier, config))


def _init_classifier(config: Config, key: jax.Array) -> dict:
    k_enc, k0, k1 = jax.random.split(key, 3)
    params = {k: v for k, v in cu.init_params(config.encoder, k_enc).items()
              if k.startswith("conv")}
    width = config.encoder.convs[-1][0]
    params["fc0"] = {"w": jax.random.normal(k0, (width, config.hidden)) * np.sqrt(2.0 / width),
                     "b": jnp.zeros(config.hidden)}
    params["fc1"] = {"w": jax.random.normal(k1, (config.hidden, config.num_classes))
                     * np.sqrt(1.0 / config.hidden),
                     "b": jnp.zeros(config.num_classes)}
    return params


def classifier_logits(config: Config, params: dict, x: jax.Array) -> jax.Array:
    """Class scores: images float [N, H, W, 3] -> logits float [N, K] (no batch statistics)."""
    h = cu.encode(config.encoder, params, x)
    h = jax.nn.relu(h @ params["fc0"]["w"] + params["fc0"]["b"])
    return h @ params["fc1"]["w"] + params["fc1"]["b"]


@functools.cache
def _logits_fn(config: Config):
    return jax.jit(functools.partial(classifier_logits, config))


def predict_logits(config: Config, params: dict, x: np.ndarray) -> np.ndarray:
    """Logits of un-augmented images float [N, H, W, 3], in chunks: float64 [N, K]."""
    fn = _logits_fn(model_identity(config))
    return np.concatenate([np.asarray(fn(params, jnp.asarray(x[i:i + EVAL_BATCH])))
                           for i in range(0, len(x), EVAL_BATCH)]).astype(np.float64)


# ----------------------------------------------------------------------------- training

_EPOCH_CACHE: dict = {}


def make_epoch(config: Config, loss_fn: LossFn, transform: BatchTransform | None,
               opt: optax.GradientTransformation, cache_key: tuple):
    """``epoch(params, opt_state, rng, x [N, H, W, 3], labels int [N]) -> (params, opt_state,
    mean loss)``: one pass over the shuffled training set, last partial batch dropped, a Python
    loop over a jitted step. Compiled once per ``cache_key`` (shared by the seeds)."""
    if cache_key in _EPOCH_CACHE:
        return _EPOCH_CACHE[cache_key]
    b = config.batch

    def objective(params, rng, xb, yb):
        k_aug, k_mix = jax.random.split(rng)
        xb = config.augment(k_aug, xb)
        if transform is None:
            targets = jax.nn.one_hot(yb, config.num_classes, dtype=jnp.float32)
        else:
            xb, targets = transform(k_mix, xb, yb)
        return loss_fn(classifier_logits(config, params, xb), yb, targets)

    @jax.jit
    def step(params, opt_state, rng, x, labels, rows):
        loss, grads = jax.value_and_grad(objective)(params, rng, x[rows], labels[rows])
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def epoch(params, opt_state, rng, x, labels):
        return cu.epoch_loop(step, params, opt_state, rng, (x, labels), b)

    _EPOCH_CACHE[cache_key] = epoch
    return epoch


def _transform(config: Config, mix: bool | BatchTransform) -> BatchTransform | None:
    if mix is True:
        return paper_mix(config.num_classes)
    return mix or None


def train(config: Config, loss_fn: LossFn, mix: bool | BatchTransform, x_train: np.ndarray,
          y_train: np.ndarray, seed: int, ckpt: Path, log: Callable[[str], None],
          cache_key: tuple) -> tuple[dict | None, list[float]]:
    """Train one run from ``init_classifier(PRNGKey(seed) split 0)``, resuming from ``ckpt``.

    Args:
      x_train: float [N, H, W, 3] in [0, 1]; y_train: int [N] training labels (may be noisy);
        N >= ``config.batch``.
      mix: False (one-hot targets), True (``paper_mix``) or a batch transform.

    Returns:
      (final parameters, or None if the loss became non-finite; per-epoch mean losses).
    """
    if len(x_train) < config.batch or len(y_train) != len(x_train):
        raise ValueError(f"need len(y_train) == len(x_train) >= batch {config.batch}, got "
                         f"{len(y_train)}, {len(x_train)}")
    k_init, k_train = jax.random.split(jax.random.PRNGKey(seed))
    params = init_classifier(config, k_init)
    opt = cu.adamw(len(x_train) // config.batch, config.epochs)
    epoch_fn = make_epoch(config, loss_fn, _transform(config, mix), opt, cache_key)
    x, y = jnp.asarray(x_train), jnp.asarray(y_train, jnp.int32)
    state = (params, opt.init(params))
    progress = {"epoch": 0, "losses": []}
    restored = common.load_checkpoint(ckpt, state)
    if restored is not None:
        state, progress = restored
        log(f"resumed at epoch {progress['epoch']}")
    params, opt_state = state
    start = time.time()
    for epoch in range(progress["epoch"], config.epochs):
        params, opt_state, loss = epoch_fn(params, opt_state, jax.random.fold_in(k_train, epoch),
                                           x, y)
        progress["losses"].append(float(loss))
        progress["epoch"] = epoch + 1
        if not np.isfinite(float(loss)):
            log(f"epoch {epoch + 1}: non-finite loss, stopping the run")
            return None, progress["losses"]
        if (epoch + 1) % config.checkpoint_every == 0 or epoch + 1 == config.epochs:
            common.save_checkpoint(ckpt, (params, opt_state), progress)
            log(f"epoch {epoch + 1}/{config.epochs} loss {float(loss):.4f} "
                f"({time.time() - start:.0f}s)")
    return params, progress["losses"]


# ----------------------------------------------------------------------------- evaluation


def softmax_np(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row softmax of ``logits / temperature`` in float64: [N, K] -> [N, K]."""
    z = np.asarray(logits, np.float64) / temperature
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def evaluate_logits(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0,
                    seed: int = 0) -> dict:
    """Test metrics of logits float [N, K] against labels int [N] (see the module docstring).

    Returns ``top1``/``top5`` (``bootstrap_accuracy`` + hex ``bits``), ``ece`` (15 bins, in
    [0, 1]), ``nll`` (nats), ``confidence`` (per-example max probability, rounded to 1e-6) and
    ``reliability`` (per-bin ``count``, ``accuracy``, ``confidence``; None for empty bins).
    """
    labels = np.asarray(labels)
    record: dict = {}
    for k in (1, 5):
        correct = eval_lib.topk_correct(logits, labels, min(k, logits.shape[1]))
        record[f"top{k}"] = {**eval_lib.bootstrap_accuracy(correct, resamples=RESAMPLES, seed=seed),
                             "bits": sincere._bits(correct)}
    probs = softmax_np(logits, temperature)
    bins = eval_lib.reliability_bins(probs, labels, NUM_BINS)
    record["ece"] = eval_lib.expected_calibration_error(probs, labels, NUM_BINS)
    log_probs = np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-300))
    record["nll"] = float(-np.mean(log_probs))
    record["confidence"] = [round(float(c), 6) for c in probs.max(axis=1)]
    record["reliability"] = {
        name: [None if not np.isfinite(v) else float(v) for v in bins[name]]
        for name in ("accuracy", "confidence")}
    record["reliability"]["count"] = [int(c) for c in bins["count"]]
    return record


def evaluate(config: Config, params: dict, x_test: np.ndarray, y_test: np.ndarray) -> dict:
    """``evaluate_logits`` of the classifier's logits on un-augmented test images."""
    return evaluate_logits(predict_logits(config, params, x_test), y_test, config.temperature)


def summary_line(record: dict | None) -> str:
    """One-line summary of an ``evaluate`` record (None: diverged)."""
    if record is None:
        return "diverged"
    return (f"top-1 {record['top1']['accuracy']:.3f} top-5 {record['top5']['accuracy']:.3f} "
            f"ECE {record['ece']:.3f} NLL {record['nll']:.3f}")


def correct_bits(record: dict, which: str = "top1") -> np.ndarray:
    """Per-example correctness bool [N] stored in an ``evaluate`` record."""
    return sincere._unbits(record[which]["bits"], len(record["confidence"]))


# ----------------------------------------------------------------------------- runs


def run_classifier(config: Config, method: str, loss_fn: LossFn, mix: bool | BatchTransform,
                   x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                   y_test: np.ndarray, seed: int, out: Path, progress: common.Progress,
                   extra: dict | None = None,
                   probe: Callable[[dict], dict] | None = None) -> dict:
    """One (task, method, seed) run: loaded if its JSON exists (and has this budget), else
    trained (resumably), evaluated and stored.

    Args:
      config: the setting (``config.task`` names the directory).
      method: the run's name; ``loss_fn``, ``mix``: see ``train``. Runs of one method must use
        the same ``loss_fn`` and ``mix`` objects to share the compiled step.
      x_train, y_train: training images float [N, H, W, 3] and labels int [N] (possibly noisy).
      x_test, y_test: test images [M, H, W, 3] and true labels int [M].
      seed: initialisation and data-order seed.
      out: results root; the JSON is ``common.run_path(out, config.task, method, seed)``.
      extra: JSON-able fields stored in the record (e.g. a noise rate).
      probe: optional ``probe(params) -> JSON-able dict`` of the trained parameters (e.g. a
        linear probe of the frozen encoder), stored as ``probe`` (None if diverged).

    Returns:
      The record: task, method, seed, epochs, batch, num_train, num_test, epoch_losses,
      seconds, diverged, test (``evaluate`` record, None if diverged), probe (when ``probe``
      is given) and ``extra``'s fields.
    """
    path = common.run_path(out, config.task, method, seed)
    budget = {"epochs": config.epochs, "batch": config.batch, "num_train": len(y_train),
              "num_test": len(y_test)}
    done = common.load_finished(path, budget, progress, f"{config.task}/{method}/seed{seed}")
    if done is not None:
        return done
    ckpt = path.with_name(f"seed{seed}.ckpt.npz")
    start = time.time()

    def log(msg: str) -> None:
        progress.log(f"{config.task}/{method}/seed{seed}: {msg}", finished=False)

    transform = _transform(config, mix)
    params, epoch_losses = train(config, loss_fn, transform, x_train, y_train, seed, ckpt, log,
                                 (model_identity(config), method, loss_fn, transform))
    test = None if params is None else evaluate(config, params, x_test, y_test)
    result = {**(extra or {}), "task": config.task, "method": method, "seed": seed, **budget,
              "epoch_losses": epoch_losses, "diverged": params is None, "test": test}
    if probe is not None:
        result["probe"] = None if params is None else probe(params)
    result["seconds"] = time.time() - start
    common.save_json(path, result)
    ckpt.unlink(missing_ok=True)
    progress.log(f"{config.task}/{method}/seed{seed}: {summary_line(test)} "
                 f"({result['seconds']:.0f}s)")
    return result
