"""The packaged config ``contrastive_jax/configs/sincere_cifar10_proxy.py``, under its experiments path.

    python -m contrastive_jax.pretrain --config experiments/configs/sincere_cifar10_proxy.py --workdir runs/sincere_cifar10_proxy

The recipe and its description live in :mod:`contrastive_jax.configs.sincere_cifar10_proxy`.
"""

from contrastive_jax.configs.sincere_cifar10_proxy import get_config

__all__ = ["get_config"]
