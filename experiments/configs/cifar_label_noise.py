"""The CPU proxy of ProjNCE's label-noise table (its Table 3) on class-balanced CIFAR-10 subsets.

Paper: M. Jeong and A. Hero (2025), "Generalizing Supervised Contrastive Learning: A Projection
Perspective", arXiv:2506.09810.

``get_config("METHOD[,P[,EPOCHS]]")``, METHOD one of :data:`METHODS`, P the probability of
symmetric label noise on the training labels (``config.data.label_noise``; 0 for the label-free
methods)::

    python -m contrastive_jax.pretrain --workdir runs/cifar_projnce_p0.4 \
        --config experiments/configs/cifar_label_noise.py:projnce,0.4 \
        --config.data.data_dir=PATH/TO/cifar10

``python -m experiments.reproduce.cifar_label_noise`` runs the grid and probes it.

Every method trains on the CIFAR proxy's data, encoder and optimiser
(``experiments/configs/cifar_proxy.py``): class-balanced subsets (5,000 training / 2,000 test
images at 32x32, ``data_seed`` 0), the ``cifar_proxy`` augmentation, the ``small_cnn`` encoder
(3x3 stride-2 ReLU convolutions 32-64-128, global average pool, h in R^128), AdamW at a constant
lr 1e-3 with weight decay 5e-5 (not on biases and BN), :data:`EPOCHS` epochs. The noisy labels
are :func:`contrastive_jax.data.base.symmetric_label_noise` of the training subset's labels
with ``data_seed`` (each label replaced with probability P by a uniformly drawn class); the
evaluation always sees the clean labels.

* ``supcon``, ``projnce`` (beta 1), ``med_supcon`` (lower median): supervised contrastive
  pretraining on the noisy labels at the paper's tau 0.07; two views, batch 128, projector
  Linear(128, 128)-BN-ReLU-Linear(128, 64) (``simclr_v2``);
* ``simclr``: NT-Xent on instance ids at tau 0.07, same views and projector (label-free);
* ``random_init``: ``simclr``'s config, for the probe of the untrained network (label-free);
* ``ce``: the soft-target proxy's classifier (``experiments/configs/cifar_soft_target.py``: one
  view, batch 256, MLP head Linear(128, 128)-BN-ReLU-Linear(128, 10)) trained with cross-entropy
  (``label_cross_entropy``) on the noisy labels, the paper's "CE" row.
"""

from __future__ import annotations

import ml_collections

from experiments.configs import cifar_proxy, cifar_soft_target

#: contrastive method -> its loss (``config.loss.name``).
CONTRASTIVE = {"simclr": "nt_xent", "supcon": "supcon", "projnce": "projnce",
               "med_supcon": "med_supcon"}
METHODS = ("ce", "random_init", *CONTRASTIVE)
#: Methods that never see a label: one run per seed serves every noise level.
LABEL_FREE = ("random_init", "simclr")
NOISE, EPOCHS, TAU = (0.0, 0.2, 0.4), 24, 0.07


def get_config(spec: str = "projnce,0.4") -> ml_collections.ConfigDict:
    """The training config of ``"METHOD[,P[,EPOCHS]]"`` (module docstring); ``data_dir`` unset."""
    method, *rest = spec.split(",")
    try:
        p = float(rest[0]) if rest else 0.0
        epochs = int(rest[1]) if len(rest) > 1 else EPOCHS
    except ValueError:
        p, epochs = -1.0, 0
    if (method not in METHODS or len(rest) > 2 or not 0.0 <= p <= 1.0 or epochs < 1
            or (method in LABEL_FREE and p != 0.0)):
        raise ValueError(
            f"cifar_label_noise config {spec!r}: give METHOD[,P[,EPOCHS]] with METHOD one of "
            f"{list(METHODS)}, P in [0, 1] (0 for the label-free {list(LABEL_FREE)}), EPOCHS >= 1"
        )
    if method == "ce":
        config = cifar_soft_target.classifier_config(epochs, "label_cross_entropy", False)
    else:
        loss = CONTRASTIVE["simclr" if method == "random_init" else method]
        config = cifar_proxy.get_config(f"sincere,supcon,adamw,{epochs}")
        config.loss.name = loss
        config.loss.kwargs = ml_collections.ConfigDict({loss: {"temperature": TAU}})
    config.data.label_noise = p
    return config
