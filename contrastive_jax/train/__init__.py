"""Pretraining: config, objective, optimiser, train step, checkpoints, logs and the loop.

Needs the ``train`` extra (``pip install 'contrastive_jax[train]'``). The training core
(:mod:`.step`, :mod:`.optim`, :mod:`.objective`, :mod:`.checkpoint`) needs no
ml_collections; the config and the loop do. Nothing here needs TensorFlow.
"""

from contrastive_jax._extras import require

require(
    "contrastive_jax.train",
    ("flax", "optax", "orbax.checkpoint"),
)
