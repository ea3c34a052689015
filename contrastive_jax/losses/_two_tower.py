"""Two-tower losses: CLIP's symmetric InfoNCE (Radford et al.) and SigLIP's pairwise sigmoid
loss (Zhai et al.).

Row i of ``image_embeddings`` a [N, D] pairs with row i of ``text_embeddings`` b [N, D].
With unit rows ``â_i``, ``b̂_j`` and ``d_ij = â_i . b̂_j``:

* CLIP: ``S_ij = d_ij / tau``;
  ``l_i = (LSE_j S_ij - S_ii) / 2 + (LSE_j S_ji - S_ii) / 2`` (image->text and
  text->image cross-entropy), averaged over the valid pairs of the global batch.
* SigLIP: ``L_ij = d_ij / tau + bias``; every (i, j) is a binary problem with
  label ``z_ij = +1`` on the diagonal and -1 elsewhere;
  ``loss = (1/|B|) sum_i sum_j softplus(-z_ij L_ij)``, where |B| is the number of
  valid pairs (the paper's normalisation). Since ``softplus(-x) = softplus(x) - x``,
  row i is ``sum_j softplus(L_ij) - L_ii``.

Three forms compute the same value and gradients:

* dense (up to :data:`blockwise.BLOCKWISE_THRESHOLD` global pairs): the [N, N] product
  and autodiff;
* streamed on one device (above it, or with ``block_size``; also under ``jax.jit`` on
  sharded arrays): fused kernels with a custom VJP that keep no [N, N] array.
  SigLIP sweeps blocks of image rows against the text rows once (one N x N x D product
  for the value, three with the gradient). CLIP needs every row's and every column's
  log-sum-exp before any gradient: a statistics sweep (one product, online
  log-sum-exps along both axes) and a gradient sweep (three products);
* under ``axis_name`` (one mesh axis or a tuple of them), ``exchange="gather"``
  all-gathers both towers; each device scores its local rows of one tower against
  the gathered other tower (for CLIP in both directions, each with
  :func:`blockwise.stream_rows` when streamed, three products apiece).
  ``exchange="ring"`` runs the fused kernels with the text rows travelling around the
  devices (``lax.ppermute``) with their column statistics and gradients, so no device
  holds more than its own rows of each tower plus one visiting block.

Without ``axis_name``, towers whose rows are sharded over Explicit mesh axes (under
``jax.jit`` with ``jax.sharding.set_mesh``) are handled per device: the loss wraps itself
in ``jax.shard_map`` over those axes (the previous item), so it is partitioned like
the rows, not replicated. The positives ``d_ii`` are computed once, outside the
products, and differentiated by autodiff. Every form divides the global sum by the
global number of valid pairs.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from contrastive_jax.losses import _core, _docs, blockwise

Array = jax.Array
AxisName = _core.AxisName
#: How the towers meet across devices: ``"gather"`` all-gathers both towers;
#: ``"ring"`` passes the text rows around the devices with ``lax.ppermute``.
EXCHANGES = ("gather", "ring")


# --------------------------------------------------------------------------- checks


def _check_towers(image_embeddings: Array, text_embeddings: Array) -> tuple[Array, Array]:
    """Both towers as float32 [N, D]; raises ValueError naming the offending argument."""
    a = _core.check_embeddings(image_embeddings, "image_embeddings")
    b = _core.check_embeddings(text_embeddings, "text_embeddings")
    if b.shape != a.shape:
        raise ValueError(
            f"`text_embeddings` must have the shape of `image_embeddings` {tuple(a.shape)} "
            f"(row i of each is one pair), got {tuple(b.shape)}"
        )
    return a, b


def _check_finite(value: float | Array, name: str) -> None:
    """Raises ValueError if a concrete hyperparameter is not a finite scalar."""
    try:
        concrete = np.asarray(value, dtype=np.float64)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return
    if concrete.ndim != 0 or not np.isfinite(concrete):
        raise ValueError(f"`{name}` must be a finite scalar, got {value!r}")


def _axis_tuple(axis_name: AxisName) -> AxisName:
    return tuple(axis_name) if isinstance(axis_name, list) else axis_name


# --------------------------------------------------------------------------- row functions


def _clip_rows(dots: Array, temperature: Array, rows, cols) -> tuple[Array, None]:
    """One direction of CLIP for b rows: ``LSE_{j valid} d_ij / tau - d_ii / tau`` [b].

    ``rows = (positive d_ii [b], valid [b])``, ``cols = (valid [m],)``; invalid rows give 0.
    """
    positive, row_valid = rows
    (col_valid,) = cols
    lse = _core.masked_logsumexp(dots / temperature, col_valid[None, :], axis=1)
    return jnp.where(row_valid, lse - positive / temperature, 0.0), None


def _siglip_rows(dots: Array, params, rows, cols) -> tuple[Array, None]:
    """SigLIP for b image rows: ``sum_{j valid} softplus(L_ij) - L_ii`` [b], ``L = d / tau + bias``.

    ``params = (tau, bias)``; ``rows``, ``cols`` as in :func:`_clip_rows`.
    """
    temperature, bias = params
    positive, row_valid = rows
    (col_valid,) = cols
    pairs = jax.nn.softplus(dots / temperature + bias)
    negatives = jnp.sum(jnp.where(col_valid[None, :], pairs, 0.0), axis=1)
    return jnp.where(row_valid, negatives - (positive / temperature + bias), 0.0), None


def _row_total(row_fn, anchors, candidates, params, rows, cols, block):
    """``sum_i row_fn(anchors_i . candidates^T)``: dense (autodiff) or streamed (custom VJP)."""
    if block is None:
        dots = jnp.matmul(anchors, candidates.T, precision=jax.lax.Precision.HIGHEST)
        return jnp.sum(row_fn(dots, params, rows, cols)[0])
    total, _ = blockwise.stream_rows(row_fn, anchors, candidates, params, rows, cols, block)
    return total


class _Towers:
    """Normalised local rows of both towers, their gathered copies and the pair masks."""

    def __init__(self, image_embeddings, text_embeddings, valid, axis_name, block_size,
                 exchange):
        if exchange not in EXCHANGES:
            raise ValueError(f"`exchange` must be one of {EXCHANGES}, got {exchange!r}")
        a, b = _check_towers(image_embeddings, text_embeddings)
        n = a.shape[0]
        # Typed like the rows (varying under shard_map), so it can travel the ring.
        self.valid = _core.check_valid(valid, n) & jnp.ones_like(a[:, 0], dtype=bool)
        self.a = _core.l2_normalize(a)
        self.b = _core.l2_normalize(b)
        # d_ii, differentiated through both towers outside the streamed products.
        self.positive = jnp.sum(self.a * self.b, axis=1)
        self.all_valid = _core.all_gather_rows(self.valid, axis_name)
        self.block = blockwise.choose_block(block_size, n * _core.num_devices(axis_name))
        # The fused kernels (streamed on one device, or the ring) stream image rows
        # against the n text rows of one device at a time.
        self.fused = exchange == "ring" or (axis_name is None and self.block is not None)
        self.ring_block = min(n, self.block or n)
        self.axis_name = axis_name

    def gathered(self, x: Array) -> Array:
        return _core.all_gather_rows(x, self.axis_name)

    def mean(self, total: Array) -> Array:
        """``total`` (this device's sum) over the valid pairs of the global batch."""
        count = _core.psum_if(jnp.sum(self.valid.astype(jnp.float32)), self.axis_name)
        return _core.differentiable_psum(total, self.axis_name) / jnp.maximum(count, 1.0)


# --------------------------------------------------------------------------- fused kernels
#
# The gathered form above reuses ``blockwise.stream_rows``: three products per pass, so
# CLIP's two passes cost six. The kernels below take both directions of CLIP together
# (statistics sweep: one product; gradient sweep: three). On one device the "ring" has
# one step; under ``axis_name`` with ``exchange="ring"`` they never gather: the text rows
# travel around the ring of devices (``lax.ppermute``) with their column statistics and
# gradient accumulators, and are back on their own device after one turn.
#
# Each kernel returns this device's share of a global sum (its image rows' terms, and for
# CLIP its own text rows' column terms). Its custom VJP computes, during the forward,
# the gradient of the *global* sum with respect to the local inputs, so it is exact when
# every device's share enters the loss with the same cotangent, as in the global sum
# :meth:`_Towers.mean` takes (under ``shard_map`` the psum's transpose broadcasts one
# cotangent; under ``pmap`` every device gets the same one). The temperature's and the
# bias' gradients are the device's share; their broadcast to the devices sums them.


def _dot(x: Array, y: Array) -> Array:
    return jnp.matmul(x, y.T, precision=jax.lax.Precision.HIGHEST)


def _matmul(x: Array, y: Array) -> Array:
    return jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST)


def _row_blocks(x: Array, block: int) -> Array:
    """[n, ...] -> [nb, block, ...], zero (and False) padded."""
    n = x.shape[0]
    num_blocks = -(-n // block)
    x = jnp.pad(x, [(0, num_blocks * block - n)] + [(0, 0)] * (x.ndim - 1))
    return x.reshape((num_blocks, block) + x.shape[1:])


def _unblock(x: Array, n: int) -> Array:
    return x.reshape((-1,) + x.shape[2:])[:n]


def _ring(step, travelling, local, axis_name: AxisName):
    """Runs ``step(travelling, local) -> (travelling, local)`` once per device of the ring,
    passing ``travelling`` to the next device after each step (home after the last)."""
    size = _core.num_devices(axis_name)
    perm = [(k, (k + 1) % size) for k in range(size)]

    def body(carry, _):
        moving, here = step(*carry)
        if axis_name is not None:
            moving = jax.tree.map(lambda x: jax.lax.ppermute(x, axis_name, perm), moving)
        return (moving, here), None

    return jax.lax.scan(body, (travelling, local), None, length=size)[0]


def _online(stats, x: Array, mask: Array, axis: int):
    """Log-sum-exp statistics ``(max, sum)`` along ``axis`` updated with ``x`` where ``mask``."""
    old_max, old_sum = stats
    new_max = jnp.maximum(old_max, jnp.max(jnp.where(mask, x, -_core.BIG), axis=axis))
    fresh = jnp.where(mask, jnp.exp(x - jnp.expand_dims(new_max, axis)), 0.0)
    return new_max, old_sum * jnp.exp(old_max - new_max) + jnp.sum(fresh, axis=axis)


def _finish(stats, valid: Array) -> Array:
    """The log-sum-exp of ``(max, sum)`` statistics; 0 where not ``valid``."""
    top, total = stats
    return jnp.where(valid, top + jnp.log(jnp.where(valid, total, 1.0)), 0.0)


def _clip_statistics(a, b, tau, valid, block, axis_name):
    """``(rowLSE [n], colLSE [n])`` of ``S = A Bᵀ / tau`` over valid pairs, the columns those
    of this device's text rows, the rows its image rows: one product."""
    n = a.shape[0]
    a_blocks, v_blocks = _row_blocks(a, block), _row_blocks(valid, block)
    floor = jnp.zeros_like(a_blocks[..., 0])

    def step(moving, rows):
        b_cur, b_valid, col = moving

        def inner(col, x):
            a_blk, v_blk, row = x
            s = _dot(a_blk, b_cur) / tau
            mask = v_blk[:, None] & b_valid[None, :]
            return _online(col, s, mask, 0), _online(row, s, mask, 1)

        col, rows = jax.lax.scan(inner, col, (a_blocks, v_blocks, rows))
        return (b_cur, b_valid, col), rows

    col0 = (jnp.zeros_like(b[:, 0]) - _core.BIG, jnp.zeros_like(b[:, 0]))
    (_, _, col), rows = _ring(step, (b, valid, col0), (floor - _core.BIG, floor), axis_name)
    return _unblock(_finish(rows, v_blocks), n), _finish(col, valid)


def _clip_gradients(a, b, tau, valid, row_lse, col_lse, block, axis_name):
    """Gradients of ``1/2 (sum_i rowLSE_i + sum_j colLSE_j)`` (global) with respect to the
    local A, B and this device's share of tau: three products."""
    n = a.shape[0]
    blocks = (_row_blocks(a, block), _row_blocks(valid, block), _row_blocks(row_lse, block))

    def step(moving, here):
        b_cur, b_valid, c_cur, d_b = moving
        d_a, d_tau = here

        def inner(carry, x):
            d_b, d_tau = carry
            a_blk, v_blk, r_blk = x
            s = _dot(a_blk, b_cur) / tau
            mask = v_blk[:, None] & b_valid[None, :]
            g = jnp.where(mask, 0.5 * (jnp.exp(s - r_blk[:, None]) + jnp.exp(s - c_cur)), 0.0)
            d_tau = d_tau - jnp.sum(g * s) / tau
            g = g / tau
            return (d_b + _matmul(g.T, a_blk), d_tau), _matmul(g, b_cur)

        (d_b, d_tau), d_a_now = jax.lax.scan(inner, (d_b, d_tau), blocks)
        return (b_cur, b_valid, c_cur, d_b), (d_a + d_a_now, d_tau)

    moving = (b, valid, col_lse, jnp.zeros_like(b))
    here = (jnp.zeros_like(blocks[0]), jnp.zeros_like(tau))
    (_, _, _, d_b), (d_a, d_tau) = _ring(step, moving, here, axis_name)
    return _unblock(d_a, n), d_b, d_tau


def _float0_like(x: Array) -> Array:
    return jnp.zeros(x.shape, jax.dtypes.float0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _clip_partition(block, axis_name, a, b, tau, valid):
    """This device's share of ``1/2 (sum_i rowLSE_i + sum_j colLSE_j)``."""
    row_lse, col_lse = _clip_statistics(a, b, tau, valid, block, axis_name)
    return 0.5 * (jnp.sum(row_lse) + jnp.sum(col_lse))


def _clip_partition_fwd(block, axis_name, a, b, tau, valid):
    row_lse, col_lse = _clip_statistics(a, b, tau, valid, block, axis_name)
    grads = _clip_gradients(a, b, tau, valid, row_lse, col_lse, block, axis_name)
    return 0.5 * (jnp.sum(row_lse) + jnp.sum(col_lse)), (grads, valid)


def _scaled_bwd(block, axis_name, residuals, cotangent):
    grads, valid = residuals
    return (*(cotangent * g for g in grads), _float0_like(valid))


_clip_partition.defvjp(_clip_partition_fwd, _scaled_bwd)


def _siglip_sweep(a, b, tau, bias, valid, block, axis_name, grads: bool):
    """``sum_{i local, j global, valid} softplus(A_i . B_j / tau + bias)`` and, with ``grads``,
    its gradients (local A, local B, this device's share of tau and bias): one product for
    the value, three with gradients."""
    n = a.shape[0]
    blocks = (_row_blocks(a, block), _row_blocks(valid, block))
    zero = jnp.zeros_like(tau)

    def step(moving, here):
        b_cur, b_valid, d_b = moving
        value, d_a, d_tau, d_bias = here

        def inner(carry, x):
            value, d_b, d_tau, d_bias = carry
            a_blk, v_blk = x
            s = _dot(a_blk, b_cur) / tau
            mask = v_blk[:, None] & b_valid[None, :]
            logits = s + bias
            value = value + jnp.sum(jnp.where(mask, jax.nn.softplus(logits), 0.0))
            if not grads:
                return (value, d_b, d_tau, d_bias), None
            g = jnp.where(mask, jax.nn.sigmoid(logits), 0.0)
            d_bias = d_bias + jnp.sum(g)
            d_tau = d_tau - jnp.sum(g * s) / tau
            g = g / tau
            return (value, d_b + _matmul(g.T, a_blk), d_tau, d_bias), _matmul(g, b_cur)

        (value, d_b, d_tau, d_bias), d_a_now = jax.lax.scan(
            inner, (value, d_b, d_tau, d_bias), blocks)
        d_a = d_a if d_a_now is None else d_a + d_a_now
        return (b_cur, b_valid, d_b), (value, d_a, d_tau, d_bias)

    d_b0 = jnp.zeros_like(b) if grads else None
    here = (zero, jnp.zeros_like(blocks[0]) if grads else None, zero, zero)
    (_, _, d_b), (value, d_a, d_tau, d_bias) = _ring(step, (b, valid, d_b0), here, axis_name)
    if not grads:
        return value, None
    return value, (_unblock(d_a, n), d_b, d_tau, d_bias)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _siglip_partition(block, axis_name, a, b, tau, bias, valid):
    """This device's share of ``sum_{i, j valid} softplus(L_ij)``."""
    return _siglip_sweep(a, b, tau, bias, valid, block, axis_name, grads=False)[0]


def _siglip_partition_fwd(block, axis_name, a, b, tau, bias, valid):
    value, grads = _siglip_sweep(a, b, tau, bias, valid, block, axis_name, grads=True)
    return value, (grads, valid)


_siglip_partition.defvjp(_siglip_partition_fwd, _scaled_bwd)


# --------------------------------------------------------------------------- losses


@_core.explicit_sharding
@_docs.shared_args
def clip(
    image_embeddings: Array,
    text_embeddings: Array,
    *,
    temperature: float | Array = 0.07,
    axis_name: AxisName = None,
    valid: Array | None = None,
    block_size: int | None = None,
    exchange: str = "gather",
) -> Array:
    """CLIP's symmetric InfoNCE between two towers: image->text and text->image cross-entropy.

    With unit rows ``â_i``, ``b̂_j`` and ``S_ij = â_i . b̂_j / tau``, pair i's loss is::

      l_i = 1/2 ( LSE_j S_ij - S_ii ) + 1/2 ( LSE_j S_ji - S_ii ),

    averaged over the valid pairs of the global batch; j runs over the valid pairs.
    CLIP learns ``log(1 / tau)`` (initialised at ``log(1 / 0.07)``, clipped so that
    ``1 / tau <= 100``): pass ``temperature=jnp.exp(-log_scale)`` from the caller's
    parameters and the loss differentiates through it.

    Args:
      image_embeddings: float [N, D], one tower's rows on this device (normalised
        inside); bfloat16 is accumulated in float32.
      text_embeddings: float [N, D], the other tower; row i pairs with row i of
        ``image_embeddings``.
      temperature: tau > 0, a number or a (traced) scalar array; it divides the cosine
        similarities once.
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      {axis_name}
        With ``exchange="gather"`` both towers are all-gathered.
      valid: optional bool [N]; False marks a padded pair (neither a positive nor a
        negative of any row).
      {block_size}
        The rows here are pairs, streamed by a custom VJP of this module.
      exchange: with ``axis_name``, ``"gather"`` all-gathers both towers; ``"ring"``
        passes the text rows around the devices (``lax.ppermute``) instead, holding
        O(N_local·D) per device rather than O(N·D), and computes both directions in
        four products instead of six. Same value and gradients.

    Returns:
      float32 scalar, the mean over valid pairs of the global batch (0 if none).

    Raises:
      ValueError: an embedding array is not float [N, D], the towers differ in shape,
        ``valid`` is not bool [N], ``temperature`` is not > 0, ``block_size`` is not a
        positive integer or ``exchange`` is unknown.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> images = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.2]])
      >>> texts = jnp.array([[0.9, 0.1], [0.1, 0.9], [-1.0, 0.0]])
      >>> round(float(losses.clip(images, texts, temperature=0.5)), 4)
      0.2043
      >>> log_scale = jnp.log(1 / 0.07)  # CLIP's learnable logit scale, as a parameter
      >>> grad = jax.grad(lambda s: losses.clip(images, texts, temperature=jnp.exp(-s)))
      >>> bool(grad(log_scale) < 0)  # matched pairs: sharper logits lower the loss
      True

    References:
      Alec Radford et al. (2021). Learning Transferable Visual Models From Natural
      Language Supervision. arXiv:2103.00020, Sec. 2.3 and Figure 3 (the symmetric
      cross-entropy and its learnable temperature).
      Aaron van den Oord, Yazhe Li and Oriol Vinyals (2018). Representation Learning with
      Contrastive Predictive Coding. arXiv:1807.03748, Eq. (4) (InfoNCE).
      BibTeX: ``radford2021clip``, ``oord2018cpc`` (docs/losses.md, "Citing the papers").
    """
    temperature = _core.check_positive(temperature, "temperature")
    axis_name = _axis_tuple(axis_name)
    t = _Towers(image_embeddings, text_embeddings, valid, axis_name, block_size, exchange)
    tau = blockwise.like_anchors(temperature, t.a)
    if t.fused:
        positives = jnp.sum(jnp.where(t.valid, t.positive, 0.0)) / tau
        return t.mean(_clip_partition(t.ring_block, axis_name, t.a, t.b, tau, t.valid)
                      - positives)
    rows = (t.positive, t.valid)
    cols = (t.all_valid,)
    image_to_text = _row_total(_clip_rows, t.a, t.gathered(t.b), tau, rows, cols, t.block)
    text_to_image = _row_total(_clip_rows, t.b, t.gathered(t.a), tau, rows, cols, t.block)
    return t.mean(0.5 * (image_to_text + text_to_image))


@_core.explicit_sharding
@_docs.shared_args
def siglip(
    image_embeddings: Array,
    text_embeddings: Array,
    *,
    temperature: float | Array = 0.1,
    bias: float | Array = -10.0,
    axis_name: AxisName = None,
    valid: Array | None = None,
    block_size: int | None = None,
    exchange: str = "gather",
) -> Array:
    """SigLIP's pairwise sigmoid loss: every (image, text) pair is a binary classification.

    With unit rows, ``L_ij = â_i . b̂_j / tau + bias`` and ``z_ij = 1`` if i = j else -1::

      loss = -(1/|B|) sum_i sum_j log sigmoid(z_ij L_ij)
           =  (1/|B|) sum_i ( sum_j softplus(L_ij) - L_ii ),

    i and j over the valid pairs of the global batch, |B| their number (the paper
    normalises by the batch size, not by the |B|² terms). The paper writes the logits as
    ``t x.y + b`` with a learnable ``t = exp(t')``; here ``temperature = 1 / t`` divides,
    as in every loss of this package, so the paper's initialisation ``t' = log 10``,
    ``b = -10`` is ``temperature=0.1, bias=-10.0`` (the defaults). Both may be traced
    scalars (e.g. ``temperature=jnp.exp(-t_prime)``) and receive gradients.

    Args:
      image_embeddings: float [N, D], one tower's rows on this device (normalised
        inside); bfloat16 is accumulated in float32.
      text_embeddings: float [N, D], the other tower; row i pairs with row i of
        ``image_embeddings``.
      temperature: ``1 / t > 0``, a number or a (traced) scalar array.
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      bias: ``b``, a finite number or (traced) scalar array.
      {axis_name}
        With ``exchange="gather"`` both towers are all-gathered (each device scores its
        image rows against every text row).
      valid: optional bool [N]; False marks a padded pair (it is in no term, and not
        counted in |B|).
      {block_size}
        The rows here are pairs (blocks of image rows), streamed by a custom VJP.
      exchange: with ``axis_name``, ``"gather"`` all-gathers both towers; ``"ring"``
        passes the text rows around the devices (``lax.ppermute``) instead, holding
        O(N_local·D) per device rather than O(N·D). Same value and gradients.

    Returns:
      float32 scalar: the summed pair losses over the number of valid pairs (0 if none).

    Raises:
      ValueError: an embedding array is not float [N, D], the towers differ in shape,
        ``valid`` is not bool [N], ``temperature`` is not > 0, ``bias`` is not a finite
        scalar, ``block_size`` is not a positive integer or ``exchange`` is unknown.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> images = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.2]])
      >>> texts = jnp.array([[0.9, 0.1], [0.1, 0.9], [-1.0, 0.0]])
      >>> round(float(losses.siglip(images, texts)), 4)  # t = 10, b = -10 (paper's init)
      0.7479
      >>> g_t, g_b = jax.grad(
      ...     lambda t, b: losses.siglip(images, texts, temperature=1 / t, bias=b),
      ...     argnums=(0, 1))(10.0, -10.0)
      >>> bool(g_t < 0), bool(g_b < 0)  # at the initialisation both t and b grow
      (True, True)

    References:
      Xiaohua Zhai, Basil Mustafa, Alexander Kolesnikov and Lucas Beyer (2023). Sigmoid
      Loss for Language Image Pre-Training. arXiv:2303.15343, Sec. 3.2, Eq. (1) and
      Algorithm 1 (the loss, its normalisation and the initialisation t' = log 10,
      b = -10); Sec. 3.3 (the chunked multi-device form).
      BibTeX: ``zhai2023siglip`` (docs/losses.md, "Citing the papers").
    """
    temperature = _core.check_positive(temperature, "temperature")
    _check_finite(bias, "bias")
    axis_name = _axis_tuple(axis_name)
    t = _Towers(image_embeddings, text_embeddings, valid, axis_name, block_size, exchange)
    params = (blockwise.like_anchors(temperature, t.a), blockwise.like_anchors(bias, t.a))
    if t.fused:
        positives = jnp.sum(jnp.where(t.valid, t.positive / params[0] + params[1], 0.0))
        partition = _siglip_partition(t.ring_block, axis_name, t.a, t.b, *params, t.valid)
        return t.mean(partition - positives)
    total = _row_total(
        _siglip_rows, t.a, t.gathered(t.b), params, (t.positive, t.valid), (t.all_valid,),
        t.block,
    )
    return t.mean(total)
