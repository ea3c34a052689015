"""The evaluation protocols' common part: a training run from a pretraining checkpoint.

:func:`from_pretraining` makes the config of a linear evaluation (``trainable="head"``) or a
fine-tuning (``"all"``) of the network a pretraining recipe trains: the recipe's dataset,
image side and encoder (which must be the checkpoint's, :mod:`contrastive_jax.train.transfer`),
the same input scaling (``data.mean``, ``data.std``), one augmented view per example,
cross-entropy on the head's class scores, and top-1/top-5 on
the held-out split every epoch (:mod:`contrastive_jax.eval.validation`). Set
``--config.model.init_from`` to the pretraining work directory (or one of its checkpoints).
"""

from __future__ import annotations

import ml_collections

from contrastive_jax.train.config import default_config


def from_pretraining(pretraining: ml_collections.ConfigDict, *, trainable: str,
                     num_classes: int, augmentation: str, batch_size: int,
                     epochs: int) -> ml_collections.ConfigDict:
    """A run that trains a classifier (``trainable="head"``: on the frozen encoder) of
    ``num_classes`` classes from the network of the pretraining config ``pretraining``."""
    config = default_config()
    config.seed = pretraining.seed
    config.data.dataset = pretraining.data.dataset
    config.data.image_size = pretraining.data.image_size
    config.data.mean = pretraining.data.mean  # the input scaling the encoder was trained on
    config.data.std = pretraining.data.std
    # and the pretraining source's evaluation transform
    config.data.eval_transform = pretraining.data.eval_transform
    config.data.eval_crop_fraction = pretraining.data.eval_crop_fraction
    config.data.num_views = 1
    config.data.augmentation = augmentation
    config.data.global_batch_size = batch_size
    config.model.encoder = ml_collections.ConfigDict(pretraining.model.encoder.to_dict())
    config.model.head.name = "classifier"
    config.model.head.num_classes = num_classes
    config.model.trainable = trainable
    config.loss.name = "label_cross_entropy"
    config.optimizer.warmup_epochs = 0.0
    config.optimizer.weight_decay = 0.0
    config.train.epochs = epochs
    config.train.validate_every_epochs = 1
    config.train.log_every = 50
    config.train.checkpoint_every = 1000
    return config


def simclr_sgd(config: ml_collections.ConfigDict, base_learning_rate: float) -> None:
    """SimCLR's evaluation optimiser (paper App. B.5, B.6): Nesterov momentum 0.9, peak
    ``base_learning_rate`` x B/256, cosine decay to 0; sets ``config.optimizer``."""
    config.optimizer.name = "sgd"
    config.optimizer.momentum = 0.9
    config.optimizer.nesterov = True
    config.optimizer.base_learning_rate = base_learning_rate
    config.optimizer.lr_scaling = "linear"
    config.optimizer.decay = "cosine"
    config.optimizer.final_lr_factor = 0.0
