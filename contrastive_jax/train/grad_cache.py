"""Gradient caching: a contrastive batch whose encoder activations do not fit in memory at once.

A contrastive loss couples every row of the global batch, so the plain step keeps the
encoder's activations of all ``n`` local rows until the loss's gradient comes back. Gradient
caching (Gao et al. 2021) splits the local rows into ``k = n / m`` micro-batches of ``m`` rows
and computes the same gradient in three passes:

1. embed: ``z_j = f_theta(x_j)`` for each micro-batch ``j``, keeping only the projections
   ``z`` [n, D] (and the features), not the activations;
2. loss: ``L(z)`` over the global batch (the streamed losses with ``axis_name``, across
   devices as in the plain step) and its gradient ``g = dL/dz`` [n, D], the *cached gradient*;
3. backward: for each micro-batch, re-run ``f_theta(x_j)`` and pull ``g_j`` back through it,
   summing ``dL/dtheta = sum_j (dz_j/dtheta)^T g_j`` (Gao et al., Eq. 6-7).

:func:`embed` gets the three passes from JAX's autodiff rather than by hand: the micro-batches
run in a ``lax.scan`` whose body is under ``jax.checkpoint`` (nothing saved but the body's
inputs), so differentiating the step's loss through it computes the loss's gradient w.r.t.
all projections first (pass 2) and then, scanning the micro-batches in reverse, re-runs each
one's forward pass and its VJP with its slice of that gradient (pass 3). The live
activations are those of one micro-batch; the cost is one extra forward pass.

The gradient equals the full batch's for encoders without batch statistics (ViT, MLP,
CNNs without batch norm) up to float32 summation order. With batch norm, each micro-batch
is normalised with its own statistics (ghost batch norm, Hoffer et al. 2017: over the ``m``
rows of a device, or over the ``m`` rows of every device with ``bn_axis_name="data"``), and
the running statistics move once per step by the mean of the micro-batches' updates.
Dropout and stochastic depth draw each micro-batch's masks from
``fold_in(device key, micro-batch index)``, identically in the embedding and backward
passes, so the step stays a pure function of (state, batch) and resumes exactly.

References:
  Luyu Gao, Yunyi Zhang, Jiawei Han and Jamie Callan (2021). Scaling Deep Contrastive
  Learning Batch Size under Memory Limited Setup. RepL4NLP 2021, arXiv:2101.06983, Sec. 3.
  Elad Hoffer, Itay Hubara and Daniel Soudry (2017). Train longer, generalize better:
  closing the generalization gap in large batch training of neural networks. NeurIPS 2017,
  arXiv:1705.08741, Sec. 4 (ghost batch normalisation).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from contrastive_jax.errors import ConfigError

Array = jax.Array


def num_micro_batches(local_examples: int, micro_batch_size: int | None) -> int:
    """Micro-batches per device for ``micro_batch_size`` examples each (0 for None or 0: off).

    Args:
      local_examples: b, the examples of the global batch on one device.
      micro_batch_size: m, examples per micro-batch and device (``config.train.micro_batch_size``);
        None or 0 switches gradient caching off.

    Returns:
      ``b // m``, or 0 when off.

    Raises:
      ConfigError: (a ``ValueError``) ``m`` is negative or does not divide ``b``.

    Examples:
      >>> num_micro_batches(64, 16), num_micro_batches(64, None)
      (4, 0)
    """
    if not micro_batch_size:
        return 0
    if isinstance(micro_batch_size, bool) or int(micro_batch_size) != micro_batch_size or (
        micro_batch_size < 0
    ):
        raise ConfigError(
            f"`micro_batch_size` (config.train.micro_batch_size) must be a positive int or "
            f"0/None (off), got {micro_batch_size!r}"
        )
    if local_examples % micro_batch_size:
        raise ConfigError(
            f"`micro_batch_size` (config.train.micro_batch_size)={micro_batch_size} must divide "
            f"the {local_examples} examples of the batch on each device"
        )
    return local_examples // int(micro_batch_size)


def embed(
    network: nnx.Module, rows: Array, *, num_micro_batches: int, key: Array
) -> tuple[Array, Array]:
    """``network(rows)`` in micro-batches whose activations are recomputed for the gradient.

    Runs ``network`` (a :class:`contrastive_jax.models.ContrastiveModel`: rows -> (features,
    projections)) on ``num_micro_batches`` consecutive slices of ``rows`` in a ``lax.scan``
    whose body is under ``jax.checkpoint``: differentiating a loss of the outputs re-runs
    each slice's forward pass during the backward pass (module docstring), so the memory of
    the activations is that of one slice. Updates the network's batch statistics in place
    (nnx) to the mean of the slices' updated statistics; reseeds its RNG streams per slice
    with ``fold_in(key, slice index)``.

    Args:
      network: the module; called in its current (train/eval) mode.
      rows: float [n, ...] the device's flat rows (views of an example on consecutive rows).
      num_micro_batches: k >= 1 dividing n.
      key: the device's PRNG key; slice ``j`` uses ``fold_in(key, j)`` for dropout.

    Returns:
      (features [n, F], projections [n, D]), row for row as ``network(rows)`` for a network
      without batch statistics.

    Raises:
      ValueError: k < 1 or k does not divide n.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from contrastive_jax.models import ContrastiveModel, LinearHead, MLP
      >>> net = ContrastiveModel(MLP(3, (4,), rngs=nnx.Rngs(0)), LinearHead(4, 2, rngs=nnx.Rngs(1)))
      >>> x = jnp.arange(24.0).reshape(8, 3)
      >>> f, z = embed(net, x, num_micro_batches=4, key=jax.random.key(0))
      >>> bool(jnp.allclose(z, net(x)[1], atol=1e-5))
      True

    References:
      Gao et al. (2021), arXiv:2101.06983, Sec. 3.2 (representation gradient cache).
    """
    n = rows.shape[0]
    if num_micro_batches < 1 or n % num_micro_batches:
        raise ValueError(
            f"`num_micro_batches` must be >= 1 and divide the {n} rows, got {num_micro_batches}"
        )
    graphdef, state = nnx.split(network)
    slices = rows.reshape((num_micro_batches, n // num_micro_batches) + rows.shape[1:])

    def forward(state, x, index):
        module = nnx.merge(graphdef, state)
        slice_key = jax.random.fold_in(key, index)
        nnx.reseed(module, default=slice_key, dropout=slice_key)
        features, projections = module(x)
        return features, projections, nnx.state(module, nnx.BatchStat)

    forward = jax.checkpoint(forward, prevent_cse=False)

    def body(carry, inputs):
        return carry, forward(state, *inputs)

    _, (features, projections, stats) = jax.lax.scan(
        body, None, (slices, jnp.arange(num_micro_batches))
    )
    nnx.update(network, jax.tree.map(lambda s: jnp.mean(s, axis=0), stats))
    return (
        features.reshape((n,) + features.shape[2:]),
        projections.reshape((n,) + projections.shape[2:]),
    )
