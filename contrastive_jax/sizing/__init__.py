"""Sizing a run before it is booked: the dry run (:mod:`.dry_run`), the gradient-caching
micro-batch search (:mod:`.micro_batch_search`) and the printed config with the run's sizes
(:mod:`.print_config`).

Each builds the run through :mod:`contrastive_jax.train` (``parse``, ``build``) and compiles or
counts it without data; nothing in :mod:`contrastive_jax.train` imports this package. Needs the
``train`` extra (``pip install 'contrastive_jax[train]'``).
"""

from contrastive_jax._extras import require

require("contrastive_jax.sizing", ("flax", "optax", "orbax.checkpoint", "ml_collections"))
