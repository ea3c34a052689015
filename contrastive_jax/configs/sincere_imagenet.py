"""SINCERE on ImageNet: the SupCon ImageNet recipe with the SINCERE loss.

Feeney & Hughes (2023), "SINCERE: Supervised Information Noise-Contrastive Estimation
REvisited", arXiv:2309.14277, replace SupCon's loss by SINCERE (Sec. 3.2, Eq. 12) and keep
SupCon's recipe and temperature (Sec. 4.3: "hyperparameters suggested by Khosla et al.",
tau = 0.1). The paper trains on CIFAR-10 and CIFAR-100 only; this config is
:mod:`contrastive_jax.configs.supcon_imagenet` (every setting and its source, and what it
does not express, are listed there) with ``loss.name = "sincere"``, so the two differ in the
loss alone.

Expected: no published ImageNet number. On CIFAR the paper finds SINCERE's linear accuracy
indistinguishable from SupCon's (Table 2) and its final pretraining loss far lower (Table 1),
so the SupCon recipe's accuracy is the reference. Not run here.

    contrastive-jax-pretrain --workdir runs/sincere_imagenet \\
        --config "$(python -m contrastive_jax.configs sincere_imagenet)" \\
        --config.data.data_dir=DIR        # a TFDS data directory with imagenet2012 prepared
"""

from contrastive_jax.configs import supcon_imagenet


def get_config():
    config = supcon_imagenet.get_config()
    config.loss.name = "sincere"
    return config
