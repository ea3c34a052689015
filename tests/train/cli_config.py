"""The tiny pretraining config of the reliability tests, for the CLI and in-process runs.

    python -m contrastive_jax.pretrain --config tests/train/cli_config.py --workdir DIR \
        --config.train.total_steps=12 --config.train.checkpoint_every=3

Digits, a CIFAR-stem ResNet-18 of width 0.125 (8 base channels), batch 32,
AdamW at a constant-after-no-warm-up cosine schedule, a log line every step.
"""

from __future__ import annotations

import ml_collections

from contrastive_jax.train.config import default_config


def tiny_config(total_steps: int = 6, checkpoint_every: int = 2) -> ml_collections.ConfigDict:
    config = default_config()
    config.data.dataset = "digits"
    config.data.global_batch_size = 32
    config.model.encoder.width = 0.125
    config.model.head.hidden_features = 32
    config.model.head.out_features = 16
    config.loss.name = "sincere"
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-3
    config.optimizer.lr_scaling = "none"
    config.optimizer.warmup_epochs = 0
    config.train.total_steps = total_steps
    config.train.checkpoint_every = checkpoint_every
    config.train.keep_checkpoints = 3
    config.train.log_every = 1
    return config


def get_config() -> ml_collections.ConfigDict:
    return tiny_config()
