"""The tiny in-process pretraining config shared by the fast step tests and the slow end-to-end
tests (a plain module, so importing it pulls in no test module and no slow mark)."""

from __future__ import annotations

import ml_collections

from contrastive_jax.train.config import default_config

#: A one-layer CNN encoder (``config.model.encoder = dict(SMALL_CNN)``) for the tests whose
#: property does not depend on the encoder: it compiles in a fraction of the ResNet's time.
SMALL_CNN = {"name": "small_cnn", "channels": (8,), "strides": (2,)}


def tiny_config(**loss) -> ml_collections.ConfigDict:
    """Digits, a 8-channel-stem ResNet-18, global batch 64 (8 per device), 6 steps."""
    config = default_config()
    config.data.global_batch_size = 64
    config.model.encoder.width = 0.125
    config.model.head.hidden_features = 32
    config.model.head.out_features = 16
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-3
    config.optimizer.lr_scaling = "none"
    config.optimizer.warmup_epochs = 0
    config.train.total_steps = 6
    config.train.log_every = 2
    config.train.checkpoint_every = 3
    config.train.online_probe = True
    config.loss.update(loss)
    return config
