"""The CPU proxy of MIO's CIFAR-10 Table 4: SimCLR vs MIO models (A)-(D) on cluttered digits.

Paper: S. Manna, S. Bhattacharya and U. Pal (2021), "MIO: Mutual Information Optimization using
Self-Supervised Binary Contrastive Learning", arXiv:2111.12664.

``get_config("METHOD")`` (or ``"METHOD,LR,TAU,EPOCHS"``), METHOD one of :data:`VARIANTS`::

    python -m contrastive_jax.pretrain --workdir runs/mio_D \
        --config experiments/configs/mio.py:mio_D
    python -m contrastive_jax.pretrain --workdir runs/mio_A_lr0.3 \
        --config experiments/configs/mio.py:mio_A,0.3,0.5,100

``python -m experiments.reproduce.mio`` runs the grid and its lr / tau ablations.

The cluttered 16x16 built-in digits with the ``digits`` augmentation, the small encoder of the
conditional-uniformity proxy (conv3x3-32 s1, conv3x3-64 s2, ReLU, global average pool), batch
128 (256 views), LARS at lr 1.5 (no batch scaling), momentum 0.9, weight decay 1e-6, biases and
BN excluded from decay and trust ratio; linear warm-up from 1e-4 over the first tenth of the
epochs, then a cosine towards 1e-4 over 4x the trained epochs (MIO's slow decay: the
schedule of 1,000 epochs stopped at 250). Projectors follow MIO's projection head (hidden 128,
output 64, BN after the output): (A)/(C) one hidden layer, (B)/(D) two; (C)/(D) add the L2
term (``l2_weight`` 1). MIO is self-supervised here: its positives are the two views of an
image (``loss.targets = {"mio": "instance"}``). SimCLR (NT-Xent, tau 0.5) uses projector (A),
so only the loss differs. The projector's BatchNorm uses the whole global batch.
"""

from __future__ import annotations

import ml_collections

from contrastive_jax.train.config import default_config

#: method -> (hidden layers of the projector, L2 weight); SimCLR uses projector (A).
VARIANTS = {"simclr": (1, 0.0), "mio_A": (1, 0.0), "mio_B": (2, 0.0), "mio_C": (1, 1.0),
            "mio_D": (2, 1.0)}
LR = 1.5
TAU = 0.5
EPOCHS = 100


def get_config(spec: str = "mio_A") -> ml_collections.ConfigDict:
    """The pretraining config of ``"METHOD[,LR,TAU,EPOCHS]"`` (see the module docstring).

    EPOCHS sets the warm-up (a tenth of it) and the schedule length (4x it) as well as
    ``train.epochs``.
    """
    method, *rest = spec.split(",")
    if method not in VARIANTS or len(rest) not in (0, 3):
        raise ValueError(
            f"mio config {spec!r}: give METHOD or METHOD,LR,TAU,EPOCHS with METHOD one of "
            f"{sorted(VARIANTS)}"
        )
    lr, tau, epochs = (float(rest[0]), float(rest[1]), int(rest[2])) if rest else (LR, TAU, EPOCHS)
    hidden_layers, l2_weight = VARIANTS[method]
    config = default_config()
    config.data.dataset = "digits_cluttered"
    config.data.augmentation = "digits"
    config.data.global_batch_size = 128
    config.model.encoder.name = "small_cnn"
    config.model.encoder.channels = (32, 64)
    config.model.encoder.strides = (1, 2)
    config.model.head.name = "mio"
    config.model.head.num_hidden_layers = hidden_layers
    config.model.head.hidden_features = 128
    config.model.head.out_features = 64
    config.model.head.bn_axis_name = "data"
    if method == "simclr":
        config.loss.name = "nt_xent"
        config.loss.kwargs = ml_collections.ConfigDict({"nt_xent": {"temperature": tau}})
    else:
        config.loss.name = "mio"
        config.loss.targets = ml_collections.ConfigDict({"mio": "instance"})
        config.loss.kwargs = ml_collections.ConfigDict(
            {"mio": {"temperature": tau, "l2_weight": l2_weight}}
        )
    config.optimizer.name = "lars"
    config.optimizer.base_learning_rate = lr
    config.optimizer.lr_scaling = "none"
    config.optimizer.weight_decay = 1e-6
    config.optimizer.momentum = 0.9
    config.optimizer.warmup_init = 1e-4
    config.optimizer.warmup_epochs = float(max(1, epochs // 10))
    config.optimizer.schedule_epochs = float(4 * epochs)
    config.optimizer.final_lr_factor = 1e-4 / lr
    config.train.epochs = epochs
    config.train.log_every = 1
    return config
