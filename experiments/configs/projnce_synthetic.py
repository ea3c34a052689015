"""ProjNCE App. D.1 (Jeong & Hero 2025): MLP encoders trained on synthetic Gaussians.

Paper: Y. Jeong and A. O. Hero (2025), "Generalizing Supervised Contrastive learning: A
Projection Perspective", arXiv:2506.09810, App. D.1.

``get_config("SETTING,METHOD")``, SETTING in :data:`SETTINGS`, METHOD in :data:`METHODS`::

    python -m contrastive_jax.pretrain --workdir runs/projnce_binary_projnce \
        --config experiments/configs/projnce_synthetic.py:binary,projnce

``python -m experiments.reproduce.projnce_synthetic`` runs the grid and measures the
mutual information of the learned embeddings.

Data (our choices where App. D.1 is silent: ``docs/reproductions.md``), registered as the
vector datasets ``projnce_binary`` and ``projnce_gmm`` (:func:`register`) when this module
builds a config; 12,800 training samples and a held-out ``test`` split of 12,800 fresh ones,
drawn with ``numpy.random.default_rng([data_seed, d_in])`` (the driver sets
``config.data.data_seed`` to the run seed, so a seed fixes the data):

* ``binary``: C ~ Ber(1/2), X | C ~ N((2C - 1) 1, I_5) (Eq. 35); MLP 5 -> 16 -> 16 -> 2
  (ReLU), batch 256.
* ``gmm``: 32-class Gaussian mixture in R^4 (uniform prior; mu_i ~ N(0, 3^2 I_4),
  K_i = A_i A_i^T / 4 + 0.1 I with A_i standard normal, drawn once with seed
  :data:`GMM_SEED`), observed through X = W Z in R^8 (W ~ N(0, 1) [8, 4]);
  MLP 8 -> 32 -> 32 -> 4 (ReLU), batch 128.

Both: 200 epochs, AdamW at a constant lr 1e-2 with weight decay 1e-4 on every parameter
(as PyTorch's AdamW), the MLP's PyTorch ``nn.Linear`` initialisation, one view per sample
(no augmentation: the supervised losses take the samples' classes as positives),
tau = 0.07, kernel K(t) = 1 - t^2 with l1 distance and h = 0.6 for the NW-projection
losses, the lower coordinate-wise median for the median losses. The embedding is the MLP
output (``identity`` head; the losses L2-normalise it). ``ce`` trains a linear classifier
(the ``classifier`` head) on the d_z-dim MLP output with softmax cross-entropy.
"""

from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np

from contrastive_jax import data
from contrastive_jax.train.config import default_config

TAU = 0.07
BANDWIDTH = 0.6
#: Seed of the GMM's means, covariances and projection W (fixed across runs).
GMM_SEED = 0
#: Training samples, and held-out samples of the ``test`` split.
NUM_SAMPLES = 12_800
EPOCHS = 200


@dataclasses.dataclass(frozen=True)
class Setting:
    """One synthetic experiment of App. D.1: input width, MLP widths, classes, batch."""

    d_in: int
    hidden: int
    d_z: int
    classes: int
    batch: int


SETTINGS = {
    "binary": Setting(d_in=5, hidden=16, d_z=2, classes=2, batch=256),
    "gmm": Setting(d_in=8, hidden=32, d_z=4, classes=32, batch=128),
}

_KERNEL = {"temperature": TAU, "bandwidth": BANDWIDTH, "distance": "l1"}
#: method -> (config.loss.name, config.loss.kwargs).
METHODS: dict[str, tuple[str, dict]] = {
    "supcon": ("supcon", {"supcon": {"temperature": TAU}}),
    "projnce": ("projnce", {"projnce": {"temperature": TAU, "beta": 1.0}}),
    "soft_supcon": ("soft_supcon", {"soft_supcon": _KERNEL}),
    "soft_nce": ("soft_nce", {"soft_nce": _KERNEL}),
    "med_supcon": ("med_supcon", {"med_supcon": {"temperature": TAU, "median_mode": "lower"}}),
    "med_nce": ("med_nce", {"med_nce": {"temperature": TAU, "median_mode": "lower"}}),
    "ce": ("label_cross_entropy", {}),
}


def sample_binary(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (35): ``c ~ Ber(1/2)``, ``x | c ~ N((2c - 1) 1, I_5)``. Returns x [n, 5], c [n]."""
    c = rng.integers(0, 2, size=n)
    x = (2.0 * c[:, None] - 1.0) + rng.standard_normal((n, 5))
    return x.astype(np.float32), c.astype(np.int32)


@dataclasses.dataclass(frozen=True)
class Gmm:
    """The 32-component GMM in R^4 and its projection W [8, 4]."""

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


def sample(setting: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Inputs [n, d_in] and labels [n] of ``setting``."""
    if setting == "binary":
        return sample_binary(n, rng)
    return sample_gmm(make_gmm(GMM_SEED, SETTINGS[setting].classes), n, rng)


def dataset_name(setting: str, num_samples: int = NUM_SAMPLES) -> str:
    """The registered dataset name of ``setting`` with ``num_samples`` per split."""
    suffix = "" if num_samples == NUM_SAMPLES else f"_n{num_samples}"
    return f"projnce_{setting}{suffix}"


def register(setting: str, num_samples: int = NUM_SAMPLES) -> str:
    """Registers the vector dataset of ``setting`` (``train`` and ``test`` of ``num_samples``
    each, drawn from ``default_rng([config.data_seed, d_in])``); returns its name."""
    name = dataset_name(setting, num_samples)
    d_in, classes = SETTINGS[setting].d_in, SETTINGS[setting].classes

    def factory(config: ml_collections.ConfigDict) -> data.Source:
        rng = np.random.default_rng([int(config.data_seed), d_in])
        train = sample(setting, num_samples, rng)
        test = sample(setting, num_samples, rng)
        return data.array_source(name, {"train": train, "test": test}, num_classes=classes)

    data.register_source(name, factory)
    return name


def get_config(spec: str = "binary,projnce") -> ml_collections.ConfigDict:
    """The pretraining config of ``"SETTING,METHOD"`` (see the module docstring)."""
    setting, _, method = spec.partition(",")
    if setting not in SETTINGS or method not in METHODS:
        raise ValueError(
            f"projnce_synthetic config {spec!r}: SETTING one of {sorted(SETTINGS)}, METHOD one "
            f"of {sorted(METHODS)}"
        )
    s = SETTINGS[setting]
    config = default_config()
    config.data.dataset = register(setting)
    config.data.global_batch_size = s.batch
    config.data.num_views = 1
    config.data.augmentation = "none"
    config.model.encoder.name = "mlp"
    config.model.encoder.in_features = s.d_in
    config.model.encoder.widths = (s.hidden, s.hidden, s.d_z)
    if method == "ce":
        config.model.head.name = "classifier"
        config.model.head.num_classes = s.classes
    else:
        config.model.head.name = "identity"
    name, kwargs = METHODS[method]
    config.loss.name = name
    config.loss.kwargs = ml_collections.ConfigDict(kwargs)
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-2
    config.optimizer.lr_scaling = "none"
    config.optimizer.weight_decay = 1e-4
    config.optimizer.decay_norm_and_bias = True
    config.optimizer.warmup_steps = 0
    config.optimizer.final_lr_factor = 1.0
    config.train.epochs = EPOCHS
    config.train.log_every = 1
    config.train.checkpoint_every = 10_000
    return config
