"""The CPU proxies of conditional alignment and uniformity (Dufumier et al. 2021).

Paper: B. Dufumier, P. Gori, J. Victor, A. Grigis and E. Duchesnay (2021), "Conditional
Alignment and Uniformity for Contrastive Learning with Continuous Proxy Labels",
arXiv:2111.05643.

``get_config("TASK,METHOD")``, TASK ``digits`` or ``phantoms``, METHOD one of
:data:`METHODS` of the task::

    python -m contrastive_jax.pretrain --workdir runs/cu_digits_conditional \
        --config experiments/configs/conditional_uniformity.py:digits,conditional
    python -m contrastive_jax.pretrain --workdir runs/cu_phantoms_y_aware \
        --config experiments/configs/conditional_uniformity.py:phantoms,y_aware \
        --config.seed=1

``python -m experiments.reproduce.conditional_uniformity`` runs the grid, with the budget
(``train.total_steps``) and checkpoint steps set from its ``--epochs``.

* ``digits`` (CIFAR-with-labels analogue, categorical metadata): the cluttered 16x16 built-in
  digits with the ``digits`` augmentation (shift by a quarter side, gain U(0.6, 1.4), N(0, 0.1)
  noise); encoder conv3x3-32 s1, conv3x3-64 s2, ReLU, global average pool (h in R^64);
  projector Linear(64, 128)-BN-ReLU-Linear(128, 64); AdamW at a constant 1e-3, weight decay
  5e-5 (not on biases and BN), batch 128 (256 views). Methods: SimCLR (NT-Xent, tau 0.5),
  Align-Uniform (Wang & Isola, alpha = t = 2, lambda 1), SupCon (tau 0.1; y-Aware InfoNCE
  with a class-delta kernel is the same loss minus the constant log(N - 1), which follows from
  the paper's Eq. 1, so this run stands for both) and the proposed conditional alignment +
  conditional uniformity (Eqs. 2 and 4, lambda 1, tau 0.1) with a class-delta kernel: the
  metadata is the one-hot label and sigma = 0.05 (different classes at squared distance 2
  weigh exp(-400) = 0 in float32).
* ``phantoms`` (BHB-10K -> BIOBD analogue, continuous metadata): 32x32 synthetic brain phantoms
  (healthy subjects for pretraining, 5,000 by default), (age, 1000 x sex) metadata so the RBF
  kernel of sigma = 5 years is w(age) * delta(sex); the ``phantoms`` augmentation; encoder conv
  16-32-64-128, stride 2 each; projector 128-128-64; tau 0.1. Methods: SimCLR, y-Aware InfoNCE
  (its global uniformity) and conditional alignment + conditional uniformity.

The projector's BatchNorm uses the statistics of the whole global batch (``bn_axis_name``
``"data"``), as one device would.
"""

from __future__ import annotations

import ml_collections

from contrastive_jax.train.config import default_config

#: RBF bandwidth that makes the kernel on one-hot labels a class-delta kernel.
DELTA_SIGMA = 0.05
#: Factor of the phantoms' sex column: subjects of different sex are 1000 "years" apart.
SEX_SCALE = 1000.0
AGE_SIGMA = 5.0
BATCH = 128

#: task -> method -> (config.loss.name, config.loss.kwargs).
METHODS: dict[str, dict[str, tuple[str, dict]]] = {
    "digits": {
        "simclr": ("nt_xent", {"nt_xent": {"temperature": 0.5}}),
        "align_uniform": ("align_uniform", {"align_uniform": {"alpha": 2.0, "t": 2.0}}),
        "supcon": ("supcon", {"supcon": {"temperature": 0.1}}),
        "conditional": (
            "conditional_alignment+conditional_uniformity",
            {
                "conditional_alignment": {"temperature": 0.1, "sigma": DELTA_SIGMA},
                "conditional_uniformity": {"temperature": 0.1, "sigma": DELTA_SIGMA},
            },
        ),
    },
    "phantoms": {
        "simclr": ("nt_xent", {"nt_xent": {"temperature": 0.1}}),
        "y_aware": (
            "y_aware_infonce", {"y_aware_infonce": {"temperature": 0.1, "sigma": AGE_SIGMA}}
        ),
        "conditional": (
            "conditional_alignment+conditional_uniformity",
            {
                "conditional_alignment": {"temperature": 0.1, "sigma": AGE_SIGMA},
                "conditional_uniformity": {"temperature": 0.1, "sigma": AGE_SIGMA},
            },
        ),
    },
}
#: Encoder convolutions (channels, strides) per task.
ENCODERS = {"digits": ((32, 64), (1, 2)), "phantoms": ((16, 32, 64, 128), (2, 2, 2, 2))}


def constant_adamw() -> ml_collections.ConfigDict:
    """The paper's optimiser (its CIFAR appendix), as ``config.optimizer``: AdamW at a constant
    lr 1e-3 (no warm-up, decay or batch-size scaling), weight decay 5e-5; the library's other
    defaults (no decay on biases and BN)."""
    optimizer = default_config().optimizer
    optimizer.name = "adamw"
    optimizer.base_learning_rate = 1e-3
    optimizer.lr_scaling = "none"
    optimizer.weight_decay = 5e-5
    optimizer.warmup_steps = 0
    optimizer.final_lr_factor = 1.0
    return optimizer


def get_config(spec: str = "digits,conditional") -> ml_collections.ConfigDict:
    """The pretraining config of ``"TASK,METHOD"`` (see the module docstring)."""
    task, _, method = spec.partition(",")
    if task not in METHODS or method not in METHODS[task]:
        choices = "; ".join(f"{t},{m}" for t in METHODS for m in METHODS[t])
        raise ValueError(f"conditional_uniformity config {spec!r}: choose one of {choices}")
    config = default_config()
    config.data.global_batch_size = BATCH
    if task == "digits":
        config.data.dataset = "digits_cluttered"
        config.data.augmentation = "digits"
        if method == "conditional":
            config.data.metadata = "label_onehot"
    else:
        config.data.dataset = "phantoms"
        config.data.augmentation = "phantoms"
        config.data.source_kwargs.num_train = 5000
        config.data.metadata_scale = (1.0, SEX_SCALE)
    channels, strides = ENCODERS[task]
    config.model.encoder.name = "small_cnn"
    config.model.encoder.channels = channels
    config.model.encoder.strides = strides
    config.model.head.name = "simclr_v2"
    config.model.head.num_hidden_layers = 1
    config.model.head.hidden_features = 128
    config.model.head.out_features = 64
    config.model.head.bn_axis_name = "data"
    name, kwargs = METHODS[task][method]
    config.loss.name = name
    config.loss.kwargs = ml_collections.ConfigDict(kwargs)
    config.optimizer = constant_adamw()
    config.train.epochs = 100 if task == "digits" else 10
    config.train.log_every = 1
    config.train.checkpoint_every = 10_000
    return config
