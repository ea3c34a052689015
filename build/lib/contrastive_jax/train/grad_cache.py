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

the loop over micro-batches takes one of two forms (``config.train.micro_batch_loop``):

* ``"unrolled"``: one call per micro-batch in the traced program, each a
  :func:`jax.custom_vjp` whose forward keeps nothing but its inputs and whose backward
  re-runs the micro-batch's forward pass and its VJP with its slice of the cached
  gradient (pass 3). Data dependencies chain the micro-batches so that XLA runs them one
  after another: micro-batch ``j + 1``'s input waits for micro-batch ``j``'s projections
  (pass 1), and micro-batch ``j``'s backward waits for the parameter gradient summed over
  micro-batches ``j + 1 .. k - 1`` (pass 3). Without that chain XLA schedules independent
  micro-batches side by side (XLA:CPU's scheduler removes ``optimization_barrier`` ops and
  favours concurrency) and their activations are live together. The compiled program
  holds one copy of the encoder's forward and backward pass per micro-batch: its compile
  time grows with ``k``.
* ``"scan"`` (the default): the micro-batches run in a ``lax.scan`` whose body is under
  ``jax.checkpoint`` (nothing saved but the body's inputs), so differentiating the step's
  loss through it computes the loss's gradient w.r.t. all projections first (pass 2) and
  then, scanning the micro-batches in reverse, re-runs each one's forward pass and its VJP
  (pass 3). One copy of the encoder whatever ``k``; on XLA:CPU, convolutions inside the
  loop run about 20x slower than outside one (``experiments/bench/README.md``).

Either way the live activations are those of one micro-batch; the cost is one extra
forward pass.

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

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from contrastive_jax.errors import ConfigError

Array = jax.Array

#: The forms of the loop over micro-batches (``config.train.micro_batch_loop``).
LOOPS = ("unrolled", "scan")


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


def check_loop(loop: str) -> str:
    """``loop`` if it is one of :data:`LOOPS`, else a ConfigError naming the field.

    Examples:
      >>> check_loop("scan")
      'scan'
    """
    if loop not in LOOPS:
        raise ConfigError(
            f"`loop` (config.train.micro_batch_loop) must be one of {LOOPS}, got {loop!r}"
        )
    return loop


def _after(x: Any, dependency: Any) -> Any:
    """``x`` unchanged, but computed by XLA only once every float leaf of ``dependency`` is.

    Adds ``0 * s`` to each float leaf of ``x``, where ``s`` is the finite-masked sum of
    ``dependency``'s float leaves: a data dependency that XLA cannot fold away (it does not
    simplify ``0 * y`` for floats), exact for every ``x`` (``s`` is finite, so ``0 * s`` is
    a zero), costing one read of ``dependency``.
    """
    total = sum(
        (jnp.sum(leaf, dtype=jnp.float32) for leaf in jax.tree.leaves(dependency)
         if jnp.issubdtype(leaf.dtype, jnp.inexact)),
        start=jnp.zeros((), jnp.float32),
    )
    zero = 0 * jnp.where(jnp.isfinite(total), total, 0)
    return jax.tree.map(
        lambda a: a + zero.astype(a.dtype) if jnp.issubdtype(a.dtype, jnp.inexact) else a, x
    )


@jax.custom_vjp
def _link(outputs: Any, params: Any) -> tuple[Any, Any]:
    """Identity; in the backward pass ``outputs``' cotangent waits for ``params``'."""
    return outputs, params


def _link_fwd(outputs, params):
    return (outputs, params), None


def _link_bwd(_, cotangents):
    outputs_ct, params_ct = cotangents
    return _after(outputs_ct, params_ct), params_ct


_link.defvjp(_link_fwd, _link_bwd)


def _varying_axes(a: Any) -> frozenset:
    """The shard_map mesh axes ``a`` varies over (``manual_axis_type``; ``vma`` in older JAX)."""
    aval = jax.typeof(a)
    axis_type = getattr(aval, "manual_axis_type", None)
    return frozenset(axis_type.varying if axis_type is not None else getattr(aval, "vma", ()))


def _varying_like(reference: Array, tree: Any) -> Any:
    """``tree``'s leaves cast to vary over the mesh axes ``reference`` varies over (shard_map)."""
    axes = _varying_axes(reference)

    def cast(a):
        missing = tuple(sorted(axes - _varying_axes(a)))
        return jax.lax.pcast(a, missing, to="varying") if missing else a

    return jax.tree.map(cast, tree)


def _recomputed(forward: Callable) -> Callable:
    """``forward(params, rest, x, key)`` that saves only its inputs for the backward pass.

    The backward pass re-runs ``forward`` and pulls the cotangent back through it; the
    re-run's input ``x`` waits for the cotangent (:func:`_after`), so XLA cannot start it
    before the micro-batch's turn.
    """

    @jax.custom_vjp
    def run(params, rest, x, key):
        return forward(params, rest, x, key)

    def run_fwd(params, rest, x, key):
        return forward(params, rest, x, key), (params, rest, x, key)

    def run_bwd(inputs, cotangents):
        params, rest, x, key = inputs
        _, pull_back = jax.vjp(forward, params, rest, _after(x, cotangents), key)
        return pull_back(cotangents)

    run.defvjp(run_fwd, run_bwd)
    return run


def embed(
    network: nnx.Module,
    rows: Array,
    *,
    num_micro_batches: int,
    key: Array,
    loop: str = "scan",
) -> tuple[Array, Array]:
    """``network(rows)`` in micro-batches whose activations are recomputed for the gradient.

    Runs ``network`` (a :class:`contrastive_jax.models.ContrastiveModel`: rows -> (features,
    projections)) on ``num_micro_batches`` consecutive slices of ``rows``, one after another,
    keeping none of their activations: differentiating a loss of the outputs re-runs each
    slice's forward pass during the backward pass (module docstring), so the memory of the
    activations is that of one slice. Updates the network's batch statistics in place
    (nnx) to the mean of the slices' updated statistics; reseeds its RNG streams per slice
    with ``fold_in(key, slice index)``.

    Args:
      network: the module; called in its current (train/eval) mode.
      rows: float [n, ...] the device's flat rows (views of an example on consecutive rows).
      num_micro_batches: k >= 1 dividing n.
      key: the device's PRNG key; slice ``j`` uses ``fold_in(key, j)`` for dropout.
      loop: ``"unrolled"`` (one chained call per slice: fast, compile time grows with k) or
        ``"scan"`` (a ``lax.scan`` under ``jax.checkpoint``: one copy of the network; slow
        convolutions on XLA:CPU); the module docstring compares them.

    Returns:
      (features [n, F], projections [n, D]), row for row as ``network(rows)`` for a network
      without batch statistics.

    Raises:
      ValueError: k < 1 or k does not divide n; ``loop`` is not one of :data:`LOOPS`.

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
    check_loop(loop)
    # Flax types split's result as a variadic tuple; with two filters it has three parts.
    graphdef, params, rest = nnx.split(network, nnx.Param, ...)  # type: ignore[misc]
    slices = rows.reshape((num_micro_batches, n // num_micro_batches) + rows.shape[1:])
    keys = jax.vmap(lambda j: jax.random.fold_in(key, j))(jnp.arange(num_micro_batches))

    def forward(params, rest, x, slice_key):
        module = nnx.merge(graphdef, params, rest)
        nnx.reseed(module, default=slice_key, dropout=slice_key)
        features, projections = module(x)
        return features, projections, nnx.state(module, nnx.BatchStat)

    if loop == "scan":
        checkpointed = jax.checkpoint(forward, prevent_cse=False)
        _, (features, projections, stats) = jax.lax.scan(
            lambda carry, inputs: (carry, checkpointed(params, rest, *inputs)),
            None, (slices, keys),
        )
    else:
        # Inside shard_map the rows vary over the mesh axes and the replicated state does
        # not; a custom_vjp's cotangents must have its inputs' types, so the state is cast
        # to varying first (whose transpose sums the summed gradient over devices once).
        params, rest = _varying_like(rows, (params, rest))
        run = _recomputed(forward)
        outputs, x = [], slices[0]
        for j in range(num_micro_batches):
            out = run(params, rest, x, keys[j])
            if j + 1 < num_micro_batches:
                x = _after(slices[j + 1], out[:2])  # slice j + 1 starts after slice j
                out, params = _link(out, params)  # slice j's backward after slice j + 1's
            outputs.append(out)
        features, projections, stats = jax.tree.map(lambda *a: jnp.stack(a), *outputs)
    nnx.update(network, jax.tree.map(lambda s: jnp.mean(s, axis=0), stats))
    return (
        features.reshape((n,) + features.shape[2:]),
        projections.reshape((n,) + projections.shape[2:]),
    )
