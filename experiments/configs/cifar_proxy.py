"""The CPU proxies of SINCERE's and MIO's CIFAR-10 experiments on class-balanced CIFAR-10 subsets.

Papers: P. Feeney and M. C. Hughes (2023), "SINCERE: Supervised Information Noise-Contrastive
Estimation REvisited", arXiv:2309.14277; S. Manna, S. Bhattacharya and U. Pal (2021), "MIO:
Mutual Information Optimization using Self-Supervised Binary Contrastive Learning",
arXiv:2111.12664.

``get_config("CLAIM,METHOD[,OPTIMIZER[,EPOCHS]]")``: CLAIM ``sincere`` (METHOD ``supcon`` or
``sincere``, OPTIMIZER ``adamw`` only) or ``mio`` (METHOD one of
``experiments.configs.mio.VARIANTS``, OPTIMIZER ``adamw`` (default) or ``lars``). The data are a
CIFAR-10 image folder ``<root>/{train,test}/<class>/<image>``, which the command line names::

    python -m contrastive_jax.pretrain --workdir runs/cifar_sincere \
        --config experiments/configs/cifar_proxy.py:sincere,sincere \
        --config.data.data_dir=PATH/TO/cifar10
    python -m contrastive_jax.pretrain --workdir runs/cifar_mio_D_lars \
        --config experiments/configs/cifar_proxy.py:mio,mio_D,lars,36 \
        --config.data.data_dir=PATH/TO/cifar10

``python -m experiments.reproduce.cifar_proxy`` runs both grids.

Shared by every method:

* data: deterministic class-balanced subsets (``data_seed`` 0, the same images for every run
  seed) of :data:`NUM_TRAIN` training and :data:`NUM_TEST` test images at 32x32, decoded into
  memory once (``train_subset``, ``source_kwargs.test_subset``, ``in_memory``); normalised with
  CIFAR-10's channel statistics;
* augmentation ``cifar_proxy``: pad 4 and crop back, flip, brightness and contrast U(0.6, 1.4),
  a gain U(0.8, 1.2) per channel; two views, batch 128 (256 views), the last partial batch of an
  epoch dropped;
* encoder ``small_cnn``: three 3x3 stride-2 ReLU convolutions 32-64-128 on RGB, global average
  pooling, h in R^128; the projector's BatchNorm uses the whole global batch.

``sincere`` (SINCERE's Tables 1-2 and Fig. 2): SupCon or SINCERE (Eq. 4 of the SINCERE paper) at
tau 0.1 on the class labels; projector Linear(128, 128)-BN-ReLU-Linear(128, 64) (``simclr_v2``,
no BN after the output); AdamW at a constant lr 1e-3, weight decay 5e-5 (not on biases and BN).

``mio`` (MIO's Table 4): SimCLR (NT-Xent) or MIO (A)-(D) at tau 0.5 with MIO's projection
heads (hidden 128, output 64, BN after the output; (A)/(C) one hidden layer, (B)/(D) two; (C)/(D)
with the L2 term), exactly ``experiments/configs/mio.py``'s losses and heads; MIO is
self-supervised (positives: the two views of an image). Optimiser ``adamw`` is the AdamW above;
``lars`` is ``mio.py``'s LARS at lr 1.5 with its warm-up and slow cosine decay over EPOCHS.
"""

from __future__ import annotations

import ml_collections

from contrastive_jax.train.config import default_config
from experiments.configs import conditional_uniformity
from experiments.configs import mio as mio_configs

#: claim -> its methods (SupCon / SimCLR first: the random-init probe uses its network).
METHODS = {"sincere": ("supcon", "sincere"), "mio": tuple(mio_configs.VARIANTS)}
OPTIMIZERS = {"sincere": ("adamw",), "mio": ("adamw", "lars")}
NUM_TRAIN, NUM_TEST, EPOCHS, BATCH = 5000, 2000, 36, 128
SINCERE_TAU, MIO_TAU, MIO_LARS_LR = 0.1, 0.5, 1.5


def get_config(spec: str = "sincere,sincere") -> ml_collections.ConfigDict:
    """The pretraining config of ``"CLAIM,METHOD[,OPTIMIZER[,EPOCHS]]"`` (module docstring).

    EPOCHS (default :data:`EPOCHS`) sets ``train.epochs`` and, for LARS, the warm-up and the
    schedule length. ``data.data_dir`` is left unset: give the CIFAR-10 image folder.
    """
    parts = spec.split(",")
    claim, method = (parts + ["", ""])[:2]
    optimizer = parts[2] if len(parts) > 2 else "adamw"
    epochs = parts[3] if len(parts) > 3 else str(EPOCHS)
    if (not 2 <= len(parts) <= 4 or claim not in METHODS or method not in METHODS[claim]
            or optimizer not in OPTIMIZERS[claim] or not epochs.isdigit() or int(epochs) < 1):
        choices = "; ".join(f"{c},{'|'.join(m)}[,{'|'.join(OPTIMIZERS[c])}[,EPOCHS]]"
                            for c, m in METHODS.items())
        raise ValueError(f"cifar_proxy config {spec!r}: give one of {choices}")
    epochs = int(epochs)
    if claim == "mio":
        config = mio_configs.get_config(f"{method},{MIO_LARS_LR},{MIO_TAU},{epochs}")
    else:
        config = default_config()
        config.model.head.name = "simclr_v2"
        config.model.head.num_hidden_layers = 1
        config.model.head.hidden_features = 128
        config.model.head.out_features = 64
        config.model.head.bn_axis_name = "data"
        config.loss.name = method
        config.loss.kwargs = ml_collections.ConfigDict({method: {"temperature": SINCERE_TAU}})
    if optimizer == "adamw":
        config.optimizer = conditional_uniformity.constant_adamw()
    config.data.dataset = "cifar10"
    config.data.train_subset = NUM_TRAIN
    config.data.source_kwargs = ml_collections.ConfigDict({"test_subset": NUM_TEST})
    config.data.in_memory = True
    config.data.augmentation = "cifar_proxy"
    config.data.global_batch_size = BATCH
    config.model.encoder.name = "small_cnn"
    config.model.encoder.channels = (32, 64, 128)
    config.model.encoder.strides = (2, 2, 2)
    config.train.epochs = epochs
    config.train.log_every = 1
    return config
