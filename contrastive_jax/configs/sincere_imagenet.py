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
        --config.data.data_dir=DIR        # after `tfds build imagenet2012 --data_dir=DIR`
"""

from contrastive_jax.configs import supcon_imagenet
from contrastive_jax.configs._sources import Row


def get_config():
    config = supcon_imagenet.get_config()
    config.loss.name = "sincere"
    return config


#: Every setting beside the source's (``docs/recipes.md``): SupCon's, with SINCERE's loss.
SOURCE = tuple(
    Row("loss, temperature", ("loss.name", "loss.temperature"), "SINCERE, tau = 0.1",
        "SINCERE paper Sec. 3.2 (Eq. 12), Sec. 4.3", ("sincere", 0.1))
    if row.setting == "loss, temperature" else
    row._replace(expected=None, why="SupCon's recipe kept (Sec. 4.3: the paper keeps "
                 "Khosla et al.'s hyperparameters), so that the two differ in the loss alone")
    if row.setting == "loss scale" else row
    for row in supcon_imagenet.SOURCE
)
