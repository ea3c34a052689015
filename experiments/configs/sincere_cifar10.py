"""The packaged config ``contrastive_jax/configs/sincere_cifar10.py``, under its experiments path.

    python -m contrastive_jax.pretrain --config experiments/configs/sincere_cifar10.py --workdir runs/sincere_cifar10

The recipe and its description live in :mod:`contrastive_jax.configs.sincere_cifar10`.
"""

from contrastive_jax.configs.sincere_cifar10 import get_config

__all__ = ["get_config"]
