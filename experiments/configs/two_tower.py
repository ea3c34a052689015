"""A two-tower toy: CLIP or SigLIP between the two augmented views of the built-in digits.

Papers: A. Radford et al. (2021), "Learning Transferable Visual Models From Natural Language
Supervision", arXiv:2103.00020 (CLIP); X. Zhai, B. Mustafa, A. Kolesnikov and L. Beyer (2023),
"Sigmoid Loss for Language Image Pre-Training", arXiv:2303.15343 (SigLIP).

``get_config("LOSS")`` or ``"LOSS,PAIRING[,EPOCHS]"``, LOSS one of :data:`LOSSES`, PAIRING
``paired`` (the two views of one example form a pair) or ``shuffled`` (the control: each
first view is paired with the second view of another example, a new partner every step)::

    python -m contrastive_jax.pretrain --workdir runs/clip_digits \\
        --config experiments/configs/two_tower.py:clip
    python -m contrastive_jax.pretrain --workdir runs/siglip_shuffled \\
        --config experiments/configs/two_tower.py:siglip,shuffled,15

``python -m experiments.reproduce.two_tower`` runs both losses, both pairings, 3 seeds, and
scores image->text retrieval on the test split.

The "image" tower is the first view, the "text" tower the second (``config.loss.targets``
picks the pairing; :mod:`contrastive_jax.train.objective`). One network embeds both (a
shared tower; the data has one modality). Recipe: the 16x16 built-in digits with the
``digits`` augmentation, the small encoder of the MIO and conditional-uniformity proxies
(conv3x3-32 s1, conv3x3-64 s2, ReLU, global average pool), the SimCLR v2 projection head
(hidden 128, output 64, BatchNorm over the global batch), batch 128 pairs, LARS at lr 1.5
(no batch scaling; the digits recipe of the MIO proxy), momentum 0.9, weight decay 1e-6,
warm-up over a tenth of the epochs then cosine decay. Fixed hyperparameters of the losses
(the trainer has no learnable loss parameters): CLIP temperature 0.07 (CLIP's
initialisation, Radford et al. Sec. 2.5), SigLIP t = 10 (temperature 0.1) and b = -10
(Zhai et al.'s initialisation, Sec. 3.2).
"""

from __future__ import annotations

import ml_collections

from contrastive_jax.train.config import default_config

#: loss -> its fixed hyperparameters.
LOSSES = {"clip": {"temperature": 0.07}, "siglip": {"temperature": 0.1, "bias": -10.0}}
#: config pairing -> the objective's second argument of a two-tower loss.
PAIRINGS = {"paired": "paired_embeddings", "shuffled": "shuffled_pairs"}
LR = 1.5
EPOCHS = 15


def get_config(spec: str = "clip") -> ml_collections.ConfigDict:
    """The pretraining config of ``"LOSS[,PAIRING[,EPOCHS]]"`` (see the module docstring)."""
    loss, *rest = spec.split(",")
    if loss not in LOSSES or len(rest) > 2 or (rest and rest[0] not in PAIRINGS):
        raise ValueError(
            f"two_tower config {spec!r}: give LOSS[,PAIRING[,EPOCHS]] with LOSS one of "
            f"{sorted(LOSSES)} and PAIRING one of {sorted(PAIRINGS)}"
        )
    pairing = rest[0] if rest else "paired"
    epochs = int(rest[1]) if len(rest) > 1 else EPOCHS
    config = default_config()
    config.data.dataset = "digits"
    config.data.augmentation = "digits"
    config.data.global_batch_size = 128
    config.model.encoder.name = "small_cnn"
    config.model.encoder.channels = (32, 64)
    config.model.encoder.strides = (1, 2)
    config.model.head.hidden_features = 128
    config.model.head.out_features = 64
    config.model.head.bn_axis_name = "data"
    config.loss.name = loss
    config.loss.targets = ml_collections.ConfigDict({loss: PAIRINGS[pairing]})
    config.loss.kwargs = ml_collections.ConfigDict({loss: dict(LOSSES[loss])})
    config.optimizer.name = "lars"
    config.optimizer.base_learning_rate = LR
    config.optimizer.lr_scaling = "none"
    config.optimizer.weight_decay = 1e-6
    config.optimizer.momentum = 0.9
    config.optimizer.warmup_epochs = float(max(1, epochs // 10))
    config.train.epochs = epochs
    config.train.log_every = 1
    return config
