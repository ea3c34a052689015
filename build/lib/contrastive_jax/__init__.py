"""contrastive_jax: contrastive representation learning in JAX/Flax.

Importing the package imports nothing heavy. :mod:`contrastive_jax.losses` and
:mod:`contrastive_jax.metrics` need only the core install (jax, numpy, scipy);
:mod:`~contrastive_jax.models`, :mod:`~contrastive_jax.data`, :mod:`~contrastive_jax.train`,
:mod:`~contrastive_jax.eval` and the command-line tools need the ``train`` extra
(``pip install 'contrastive_jax[train]'``) and say so when it is missing.
"""

__version__ = "0.1.0"
