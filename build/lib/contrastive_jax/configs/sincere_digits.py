"""SINCERE vs SupCon on scikit-learn's built-in digits: the CPU proxy of Feeney & Hughes (2023),
"SINCERE: Supervised Information Noise-Contrastive Estimation REvisited", arXiv:2309.14277.

The built-in digits (16x16, 1,437 training and 360 test images, 10 classes, the ``digits``
augmentation: shift, gain, noise), a ResNet-18 at width 0.125 (8-channel stem, 64-d features)
with a 128-d projection, tau = 0.1, two views, batch 128 (about 26 same-class partners per
anchor), 150 steps (about 13 epochs), AdamW at 1e-2 with 10 warm-up steps and cosine annealing
to 1e-5. Same encoder, schedule and tau for both losses; only ``loss.name`` changes.

    python -m contrastive_jax.pretrain --workdir runs/sincere/digits_b128_supcon_s1 \
        --config "$(python -m contrastive_jax.configs sincere_digits)" \
        --config.loss.name=supcon --config.seed=1

In a source checkout, ``experiments/reproduce/sincere.py`` runs it for both losses, three seeds
and batch 128 and 32.
"""

from contrastive_jax.train.config import default_config


def get_config():
    config = default_config()
    config.data.dataset = "digits"
    config.data.global_batch_size = 128
    config.model.encoder.name = "resnet18"
    config.model.encoder.width = 0.125
    config.model.head.hidden_features = 128
    config.model.head.out_features = 128
    config.loss.name = "sincere"
    config.loss.temperature = 0.1
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-2
    config.optimizer.lr_scaling = "none"
    config.optimizer.weight_decay = 1e-4
    config.optimizer.warmup_init = 1e-4
    config.optimizer.warmup_steps = 10
    config.optimizer.final_lr_factor = 0.001
    config.train.total_steps = 150
    config.train.log_every = 5
    config.train.checkpoint_every = 50
    return config
