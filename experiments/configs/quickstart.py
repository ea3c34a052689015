"""The packaged config ``contrastive_jax/configs/quickstart.py``, under its experiments path.

    python -m contrastive_jax.pretrain --config experiments/configs/quickstart.py --workdir runs/quickstart

The recipe and its description live in :mod:`contrastive_jax.configs.quickstart`.
"""

from contrastive_jax.configs.quickstart import get_config

__all__ = ["get_config"]
