"""SINCERE vs SupCon on CIFAR-10 at 16x16: a 16-channel-stem ResNet-18, the CPU-scale proxy.

The CIFAR-10 proxy of Feeney & Hughes (2023), "SINCERE: Supervised Information
Noise-Contrastive Estimation REvisited", arXiv:2309.14277. ResNet-18 at width 0.25 (16-channel
stem, 128-d features) with a 128-d projection on CIFAR-10 resized to 16x16 (SimCLR CIFAR
augmentation), a class-balanced 10,000-image training subset, tau = 0.1, two views, batch 64
(about 13 same-class partners per anchor), 150 steps of AdamW at 1e-3 (15 warm-up steps, cosine
to 1e-6). On a 2-core CPU this is 1.4-2.8 s per step, and 150 steps leave both losses near their
constant-embedding values (``experiments/RESULTS.md`` of the source checkout, "Why not
CIFAR-10"); it is the starting point for a longer run elsewhere. The paper's own recipe (ResNet-50 at
32x32, batch 512, 1,000 epochs) is :mod:`contrastive_jax.configs.sincere_cifar10`.

The data come from TFDS ``cifar10`` in TFDS's data directory, or from
``--config.data.data_dir``: a prepared TFDS directory or a folder of images
``<root>/<split>/<class>/<image>``.

    python -m contrastive_jax.pretrain --workdir runs/sincere/cifar10_b64_supcon_s1 \
        --config "$(python -m contrastive_jax.configs sincere_cifar10_proxy)" \
        --config.data.data_dir=PATH --config.loss.name=supcon --config.seed=1
"""

from contrastive_jax.train.config import default_config


def get_config():
    config = default_config()
    config.data.dataset = "cifar10"
    config.data.image_size = 16
    config.data.augmentation = "simclr_cifar"
    config.data.train_subset = 10_000
    config.data.global_batch_size = 64
    config.model.encoder.name = "resnet18"
    config.model.encoder.width = 0.25
    config.model.head.hidden_features = 128
    config.model.head.out_features = 128
    config.loss.name = "sincere"
    config.loss.temperature = 0.1
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-3
    config.optimizer.lr_scaling = "none"
    config.optimizer.weight_decay = 1e-4
    config.optimizer.warmup_init = 1e-5
    config.optimizer.warmup_steps = 15
    config.optimizer.final_lr_factor = 0.001
    config.train.total_steps = 150
    config.train.log_every = 10
    config.train.checkpoint_every = 50
    return config
