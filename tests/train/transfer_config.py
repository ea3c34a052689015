"""A tiny linear evaluation for the CLI tests: a classifier on the frozen encoder of
:mod:`tests.train.cli_config`'s network, pass its work directory as
``--config.model.init_from``.

Digits (a class-balanced training subset of 64: two steps of batch 32 per epoch), SGD at
lr 0.1 decayed x 0.2 from epoch 2, top-1/top-5 on the test split after every epoch.
"""

from __future__ import annotations

import ml_collections

from tests.train.cli_config import tiny_config


def transfer_config(total_steps: int = 8, checkpoint_every: int = 2) -> ml_collections.ConfigDict:
    config = tiny_config(total_steps, checkpoint_every)
    config.data.train_subset = 64
    config.data.num_views = 1
    config.model.head.name = "classifier"
    config.model.head.num_classes = 10
    config.model.trainable = "head"
    config.loss.name = "label_cross_entropy"
    config.optimizer.name = "sgd"
    config.optimizer.base_learning_rate = 0.1
    config.optimizer.decay = "step"
    config.optimizer.decay_epochs = (2,)
    config.optimizer.decay_rate = 0.2
    config.train.validate_every_epochs = 1
    return config


def get_config() -> ml_collections.ConfigDict:
    return transfer_config()
