"""The soft-target InfoNCE toy (Hugger & Uhlmann 2024, Sec. 3.1 / App. A.1): a linear softmax
model of a 20-class conditional, trained with NLL or InfoNCE.

Paper: J. Hugger and V. Uhlmann (2024), "Towards noise contrastive estimation with soft targets
for conditional models", arXiv:2404.14076.

``get_config("CONSTRUCTION,LEVEL,LOSS")``, CONSTRUCTION in :data:`CONSTRUCTIONS`, LEVEL the
mode alignment in percent (0, 10, ..., 80), LOSS in :data:`LOSSES`::

    python -m contrastive_jax.pretrain --workdir runs/toy_alt_40_infonce \
        --config experiments/configs/soft_target_toy.py:alt,40,infonce

``python -m experiments.reproduce.soft_target_toy`` runs the grid, with early stopping on the
validation loss (the trainer itself runs ``train.epochs``).

* Data (registered as the vector dataset :func:`dataset_name` by :func:`register`): GMM
  ``p(x) = sum_i (1/20) N(x | 10 theta_i, I_20)``, K = d = 20, ``||theta_i|| = 1``; mode
  alignment ``perc``: ``phi = (pi/2)(1 - perc/100)`` is the angle between ``theta_1 = e_1``
  and every other mode (:func:`modes`; ``alt`` construction ``theta_j = cos(phi) e_1 +
  sin(phi) e_j``, ``spherical`` the literal 20-spherical-coordinate reading). 1,600 points
  from the GMM (the ``test`` split, where the KL is measured), subsampled with duplicates to
  32,000; each copy gets its own label ``k ~ softmax_k(x . theta_k)``. The first 90 % are the
  ``train`` split, the rest the ``val`` split. ``config.data.data_seed`` fixes the draw
  (:func:`sample`; the driver sets it to the run seed).
* Model: ``q(k | x) = softmax_k(x . theta_hat_k)``, the ``mlp`` encoder as one bias-free
  linear layer 20 -> 20 initialised N(0, 0.01^2), ``identity`` head (the features are the
  class scores).
* Losses: NLL (``label_cross_entropy``) and InfoNCE (Eq. 5, ``label_soft_target_infonce``
  with one-hot targets: the labels of the other batch samples as negatives), tau = 1,
  eta = the empirical label frequencies of the 32,000 samples (:func:`class_prior`;
  :func:`with_data_seed` sets it for the seed's data).
* Adam lr 1e-3 (AdamW without weight decay), batch 1024 (last incomplete batch dropped), one
  view per sample, at most 500 epochs.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import ml_collections
import numpy as np

from contrastive_jax import data
from contrastive_jax.train.config import default_config

K = 20
LOSSES = {"nll": "label_cross_entropy", "infonce": "label_soft_target_infonce"}
CONSTRUCTIONS = ("alt", "spherical")
LEVELS = (0, 10, 20, 30, 40, 50, 60, 70, 80)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Sizes and optimisation budget of the toy."""

    unique: int = 1600
    samples: int = 32_000
    batch: int = 1024
    max_epochs: int = 500


FULL = Sizes()
#: The ``--quick`` sizes of the driver.
QUICK = Sizes(unique=400, samples=4096, batch=256, max_epochs=8)


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


def num_train(sizes: Sizes) -> int:
    """Samples of the ``train`` split (90 %)."""
    return int(round(0.9 * sizes.samples))


def sample(theta: np.ndarray, sizes: Sizes, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The splits of one data set, drawn with ``numpy.random.default_rng(seed)``: ``train`` /
    ``val`` (x float32 [n, K], k [n]) and ``test`` (the unique points and their components)."""
    rng = np.random.default_rng(seed)
    comp = rng.integers(0, K, sizes.unique)
    x_unique = 10.0 * theta[comp] + rng.standard_normal((sizes.unique, K))
    x = x_unique[rng.integers(0, sizes.unique, sizes.samples)]
    logits = x @ theta.T
    p = np.exp(logits - logits.max(1, keepdims=True))
    cdf = np.cumsum(p / p.sum(1, keepdims=True), axis=1)
    k = np.minimum((cdf < rng.random((sizes.samples, 1))).sum(1), K - 1)  # k ~ softmax(x theta^T)
    x, k, n = x.astype(np.float32), k.astype(np.int32), num_train(sizes)
    return {"train": (x[:n], k[:n]), "val": (x[n:], k[n:]),
            "test": (x_unique.astype(np.float32), comp.astype(np.int32))}


def dataset_name(construction: str, level: int, sizes: Sizes = FULL) -> str:
    """The registered dataset name of a (construction, level) family, e.g. ``soft_target_toy_alt_40``."""
    suffix = "" if sizes == FULL else f"_u{sizes.unique}_n{sizes.samples}"
    return f"soft_target_toy_{construction}_{level:02d}{suffix}"


def register(construction: str, level: int, sizes: Sizes = FULL) -> str:
    """Registers the vector dataset of (construction, level) drawn with ``config.data_seed``;
    returns its name."""
    name = dataset_name(construction, level, sizes)
    theta = modes(level, construction)

    @functools.lru_cache(maxsize=4)
    def draw(seed: int) -> data.Source:
        return data.array_source(name, sample(theta, sizes, seed), num_classes=K)

    def factory(config: ml_collections.ConfigDict) -> data.Source:
        return draw(int(config.data_seed))

    data.register_source(name, factory)
    return name


def class_prior(data_config: ml_collections.ConfigDict) -> tuple[float, ...]:
    """eta: the label frequencies of all samples (``train`` and ``val``) of the data set."""
    source = data.load_source(data_config)
    labels = np.concatenate([source.split(s).labels for s in ("train", "val")])
    return tuple(float(v) for v in np.bincount(labels, minlength=K) / len(labels))


def with_data_seed(config: ml_collections.ConfigDict, seed: int) -> ml_collections.ConfigDict:
    """``config`` on the data set of ``seed`` (``data.data_seed``), InfoNCE's eta set to match."""
    config.data.data_seed = int(seed)
    if config.loss.name == LOSSES["infonce"]:
        config.loss.kwargs[LOSSES["infonce"]].class_prior = class_prior(config.data)
    return config


def get_config(spec: str = "alt,40,infonce", sizes: Sizes = FULL) -> ml_collections.ConfigDict:
    """The pretraining config of ``"CONSTRUCTION,LEVEL,LOSS"`` (see the module docstring)."""
    parts = spec.split(",")
    if (len(parts) != 3 or parts[0] not in CONSTRUCTIONS or not parts[1].isdigit()
            or int(parts[1]) not in LEVELS or parts[2] not in LOSSES):
        raise ValueError(
            f"soft_target_toy config {spec!r}: give CONSTRUCTION,LEVEL,LOSS with CONSTRUCTION "
            f"in {CONSTRUCTIONS}, LEVEL in {LEVELS}, LOSS in {tuple(LOSSES)}"
        )
    construction, level, loss = parts[0], int(parts[1]), parts[2]
    config = default_config()
    config.data.dataset = register(construction, level, sizes)
    config.data.global_batch_size = sizes.batch
    config.data.num_views = 1
    config.data.augmentation = "none"
    config.model.encoder.name = "mlp"
    config.model.encoder.in_features = K
    config.model.encoder.widths = (K,)
    config.model.encoder.use_bias = False
    config.model.encoder.init_std = 0.01
    config.model.head.name = "identity"
    config.loss.name = LOSSES[loss]
    config.loss.kwargs = ml_collections.ConfigDict({LOSSES[loss]: {"temperature": 1.0}})
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-3
    config.optimizer.lr_scaling = "none"
    config.optimizer.weight_decay = 0.0
    config.optimizer.warmup_steps = 0
    config.optimizer.final_lr_factor = 1.0
    config.train.epochs = sizes.max_epochs
    config.train.log_every = 100
    config.train.checkpoint_every = 10_000
    return with_data_seed(config, 0)
