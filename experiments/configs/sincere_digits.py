"""SINCERE vs SupCon (seed 000) on the built-in cluttered digits: the CPU proxy of spec §7.7.

scikit-learn's digits in the cluttered 16x16 variant (1,437 training and 360 test images, 10
classes; spec/yaware-mio.md §A12.1), a ResNet-18 at width 0.125 (8-channel stem, 64-d
features) with a 128-d projection, tau = 0.1, two views, batch 128 (about 25 same-class partners
per anchor), 200 steps (about 18 epochs), AdamW at 1e-3 with 20 warm-up steps and cosine
annealing to 1e-6. Same encoder, schedule and tau for both losses; only ``loss.name`` changes.

    python -m contrastive_jax.pretrain --config experiments/configs/sincere_digits.py \\
        --workdir runs/sincere/digits_cluttered_b128_supcon_s1 \\
        --config.loss.name=supcon --config.seed=1

``experiments/reproduce/sincere.py`` runs it for both losses, three seeds and batch 128 and 32.
"""

from contrastive_jax.train.config import default_config


def get_config():
    config = default_config()
    config.data.dataset = "digits_cluttered"
    config.data.global_batch_size = 128
    config.model.encoder.name = "resnet18"
    config.model.encoder.width = 0.125
    config.model.head.hidden_features = 128
    config.model.head.out_features = 128
    config.loss.name = "sincere"
    config.loss.temperature = 0.1
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-3
    config.optimizer.lr_scaling = "none"
    config.optimizer.weight_decay = 1e-4
    config.optimizer.warmup_init = 1e-5
    config.optimizer.warmup_steps = 20
    config.optimizer.final_lr_factor = 0.001
    config.train.total_steps = 200
    config.train.log_every = 5
    config.train.checkpoint_every = 50
    return config
