"""The default pretraining config; experiment configs start from it.

    from contrastive_jax.train.config import default_config
    def get_config():
        config = default_config()
        config.loss.name = "sincere"
        return config
"""

from __future__ import annotations

import ml_collections

from contrastive_jax import data, models
from contrastive_jax.train import optim


def default_config() -> ml_collections.ConfigDict:
    """Every field the trainer reads, with defaults (CIFAR-stem ResNet-18, SINCERE, LARS)."""
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.data = data.default_data_config()
    config.model = ml_collections.ConfigDict()
    config.model.encoder = models.default_encoder_config()
    config.model.head = models.default_head_config()
    config.loss = ml_collections.ConfigDict(
        {
            "name": "sincere",  # a loss of contrastive_jax.losses, or "a+b" for a weighted sum
            "weights": (),  # one weight per term; empty means 1.0 each
            "temperature": 0.1,
            "kwargs": ml_collections.ConfigDict(),  # per-term hyperparameters by loss name
        }
    )
    config.optimizer = optim.default_optimizer_config()
    config.train = ml_collections.ConfigDict(
        {
            "epochs": 100,
            "total_steps": 0,  # > 0 overrides epochs
            "log_every": 10,
            "checkpoint_every": 500,
            "keep_checkpoints": 3,
            "online_probe": False,  # SimCLR's linear probe on stop-gradient features
            "skip_nonfinite": False,  # skip NaN/inf steps instead of stopping
        }
    )
    return config
