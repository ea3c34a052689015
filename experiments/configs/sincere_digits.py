"""The packaged config ``contrastive_jax/configs/sincere_digits.py``, under its experiments path.

    python -m contrastive_jax.pretrain --config experiments/configs/sincere_digits.py --workdir runs/sincere_digits

The recipe and its description live in :mod:`contrastive_jax.configs.sincere_digits`.
"""

from contrastive_jax.configs.sincere_digits import get_config

__all__ = ["get_config"]
