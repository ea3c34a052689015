"""Quickstart: SINCERE pretraining of a narrow CIFAR-stem ResNet-18 on the
built-in digits (scikit-learn, 1,437 training images of 16x16), a few minutes
on a laptop CPU.

    python -m contrastive_jax.pretrain --config experiments/configs/quickstart.py \
        --workdir runs/quickstart
    python -m contrastive_jax.linear_eval --workdir runs/quickstart
"""

from contrastive_jax.train.config import default_config


def get_config():
    config = default_config()
    config.data.dataset = "digits"
    config.data.global_batch_size = 128
    config.model.encoder.name = "resnet18"
    config.model.encoder.width = 0.125
    config.model.head.hidden_features = 128
    config.model.head.out_features = 64
    config.loss.name = "sincere"
    config.loss.temperature = 0.1
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-3
    config.optimizer.lr_scaling = "none"
    config.optimizer.weight_decay = 1e-4
    config.optimizer.warmup_epochs = 2
    config.train.epochs = 30
    config.train.log_every = 10
    config.train.checkpoint_every = 100
    config.train.online_probe = True
    return config
