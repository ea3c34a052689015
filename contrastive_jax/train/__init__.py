"""Pretraining: config, objective, optimiser, train step, checkpoints, logs and the loop.

Needs the ``train`` extra (``pip install 'contrastive_jax[train]'``).
"""

from contrastive_jax._extras import require

require(
    "contrastive_jax.train",
    ("flax", "optax", "orbax.checkpoint", "ml_collections", "tqdm", "tensorflow"),
)
