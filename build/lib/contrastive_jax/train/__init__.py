"""Pretraining: config, objective, optimiser, train step, checkpoints, logs and the loop.

Needs the ``train`` extra (``pip install 'contrastive_jax[train]'``). The training core
(:mod:`.step`, :mod:`.optim`, :mod:`.objective`, :mod:`.checkpoint`) needs neither
TensorFlow nor ml_collections; the config and the loop need ml_collections, and the loop's
input pipeline TensorFlow (except on ``config.dataset = "synthetic"``).
"""

from contrastive_jax._extras import require

require(
    "contrastive_jax.train",
    ("flax", "optax", "orbax.checkpoint"),
)
