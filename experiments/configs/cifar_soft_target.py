"""The CPU proxy of soft-target InfoNCE's Table 1: a CIFAR-10 classifier trained with four losses.

Paper: J. Hugger and V. Uhlmann (2024), "Towards noise contrastive estimation with soft targets
for conditional models", arXiv:2404.14076.

``get_config("METHOD[,EPOCHS]")``, METHOD one of :data:`METHODS`::

    python -m contrastive_jax.pretrain --workdir runs/cifar_sti \
        --config experiments/configs/cifar_soft_target.py:sti \
        --config.data.data_dir=PATH/TO/cifar10

``python -m experiments.reproduce.cifar_soft_target`` runs the four methods and scores them.

Data, encoder and optimiser are the CIFAR proxy's (``experiments/configs/cifar_proxy.py``):
class-balanced subsets of the CIFAR-10 image folder (5,000 training / 2,000 test images at 32x32,
``data_seed`` 0), the ``cifar_proxy`` augmentation, the ``small_cnn`` encoder (3x3 stride-2 ReLU
convolutions 32-64-128, global average pool), AdamW at a constant lr 1e-3 with weight decay 5e-5
(not on biases and BN). One augmented view per image, batch 256 (the last partial batch of an
epoch dropped), 36 epochs.

Head: the class scores are ``simclr_v2``'s MLP Linear(128, 128)-BN-ReLU-Linear(128, 10) (no
biases; BatchNorm statistics over the global batch in training, the running averages at test
time, so a test prediction does not depend on the rest of its batch).

Methods (the paper's Eqs. 1, 3, 5, 12; :mod:`contrastive_jax.losses`), all at tau 1:

* ``nll``: ``label_cross_entropy`` on the labels (no smoothing, no mixing);
* ``stce``: ``label_cross_entropy`` on the soft targets of ``config.loss.mixing`` (label
  smoothing 0.1, MixUp 0.8 / CutMix 1.0, mixup_prob 1.0, switch_prob 0.5, batch mode);
* ``infonce``: ``label_soft_target_infonce`` on the one-hot labels (hard InfoNCE, Eq. 5);
* ``sti``: ``label_soft_target_infonce`` on the mixed soft targets.

The InfoNCE types take the class prior eta as ``config.loss.kwargs.<term>.class_prior`` (None:
uniform); the driver passes the training subset's class frequencies.
"""

from __future__ import annotations

import ml_collections

from experiments.configs import cifar_proxy

#: method -> (the label term of ``config.loss.name``, trained on mixed soft targets).
METHODS = {
    "nll": ("label_cross_entropy", False),
    "stce": ("label_cross_entropy", True),
    "infonce": ("label_soft_target_infonce", False),
    "sti": ("label_soft_target_infonce", True),
}
NUM_CLASSES, NUM_TRAIN, NUM_TEST, EPOCHS, BATCH, TAU = 10, 5000, 2000, 36, 256, 1.0


def classifier_config(epochs: int, term: str, mixing: bool) -> ml_collections.ConfigDict:
    """The CIFAR proxy's data, encoder and AdamW with the MLP classifier head and one label term."""
    config = cifar_proxy.get_config(f"sincere,supcon,adamw,{epochs}")
    config.data.num_views = 1
    config.data.global_batch_size = BATCH
    config.model.head.out_features = NUM_CLASSES
    config.loss.name = term
    config.loss.kwargs = ml_collections.ConfigDict({term: {"temperature": TAU}})
    if mixing:
        config.loss.mixing = ml_collections.ConfigDict({"num_classes": NUM_CLASSES})
    return config


def get_config(spec: str = "sti") -> ml_collections.ConfigDict:
    """The training config of ``"METHOD[,EPOCHS]"`` (module docstring); ``data.data_dir`` unset."""
    method, *rest = spec.split(",")
    if method not in METHODS or len(rest) > 1 or (rest and not rest[0].isdigit()) or (
            rest and int(rest[0]) < 1):
        raise ValueError(
            f"cifar_soft_target config {spec!r}: give METHOD[,EPOCHS] with METHOD one of "
            f"{sorted(METHODS)} and EPOCHS >= 1"
        )
    return classifier_config(int(rest[0]) if rest else EPOCHS, *METHODS[method])
