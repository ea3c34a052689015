"""Quickstart: SINCERE pretraining of a narrow CIFAR-stem ResNet-18 on the
built-in cluttered digits (scikit-learn's digits at a random place of a 16x16
canvas with a half-contrast distractor digit and noise; 1,437 training and 360
test images), a few minutes on a laptop CPU. The cluttered digits get their own
augmentation preset (``digits_cluttered``, chosen by ``augmentation="auto"``) and SINCERE runs at
temperature 0.2: with the plain digits' preset and 0.1 the run stalled in its collapsed start on
some seeds (docs/collapse.md in the source repository). Plain digits would not do: a linear
classifier on their raw pixels is already nearly perfect, so the quickstart
prints the raw-pixel probe beside the learned one.

    python -m contrastive_jax.quickstart     # both steps below, and a raw-pixel baseline
    python -m contrastive_jax.pretrain --workdir runs/quickstart \
        --config "$(python -m contrastive_jax.configs quickstart)"
    python -m contrastive_jax.linear_eval --workdir runs/quickstart

From a source checkout ``--config experiments/configs/quickstart.py`` is the same file.
"""

from contrastive_jax.train.config import default_config


def get_config():
    config = default_config()
    config.dataset = "digits_cluttered"
    config.batch_size = 128
    config.model.encoder.name = "resnet18"
    config.model.encoder.width = 0.125
    config.model.head.hidden_features = 128
    config.model.head.out_features = 64
    config.loss.name = "sincere"
    # 0.2, not SINCERE's default 0.1: the slowest seeds leave the collapsed start of training
    # sooner (docs/collapse.md). Another --config.loss.name trains at this temperature too
    # unless --config.loss.temperature sets another.
    config.loss.temperature = 0.2
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-2
    config.optimizer.lr_scaling = "none"
    config.optimizer.weight_decay = 1e-4
    config.optimizer.warmup_init = 1e-4
    config.optimizer.warmup_steps = 10
    config.optimizer.final_lr_factor = 1e-3
    config.train.epochs = 60
    config.train.log_every = 10
    config.checkpoint_every = 100
    config.train.online_probe = True
    return config
