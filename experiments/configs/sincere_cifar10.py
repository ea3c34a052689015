"""SINCERE vs SupCon (seed 000) at CPU scale: a 16-channel-stem ResNet-18 on CIFAR-10 at 16x16.

The paper's recipe (SGD, momentum 0.9, weight decay 1e-4 on every parameter, linear warm-up from
0.0005, cosine annealing to 0.001 x peak, tau = 0.1, two views, SimCLR/SupContrast CIFAR
augmentation, 128-d projection) at a proxy scale that fits a shared 2-core CPU: ResNet-18 at
width 0.25 (16-channel stem, 128-d features) on CIFAR-10 resized to 16x16, a class-balanced
10,000-image training subset, batch 64 and 150 steps (peak learning rate 0.1, one of the rates the
paper found equivalent; 15 warm-up steps) instead of ResNet-50, 32x32, 50,000 images, batch 512
and 1,000 epochs at 0.5.

    python -m contrastive_jax.pretrain --config experiments/configs/sincere_cifar10.py \
        --workdir runs/sincere/cifar10_b64_supcon_s1 --config.loss.name=supcon --config.seed=1

``experiments/reproduce/sincere.py`` runs it for both losses, three seeds and batch 64 and 16.
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
