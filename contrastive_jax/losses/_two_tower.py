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

Both are sums over rows of a function of one row of ``d`` and the row's own positive
``d_ii``, which is computed once outside the [N, N] products and passed as per-row
data. Above :data:`blockwise.BLOCKWISE_THRESHOLD` pairs (or with ``block_size``) the
rows are streamed with :func:`blockwise.stream_rows` (custom VJP, no [N, N] array):
SigLIP in one pass (image rows against all text rows), CLIP in two (image rows against
text rows, and text rows against image rows), each pass three N x N x D products for
value and gradient. The dense form evaluates the same row function on the whole
[N, N] product, so both paths share their formula.

With ``axis_name`` (one mesh axis or a tuple of them) both towers are all-gathered;
each device scores its local rows of one tower against the gathered other tower, and
the global sum is divided by the global number of valid pairs.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from contrastive_jax.losses import _blockwise as blockwise
from contrastive_jax.losses import _core

Array = jax.Array
AxisName = str | Sequence[str] | None


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


def _axis_size(axis_name: AxisName) -> int:
    return 1 if axis_name is None else jax.lax.axis_size(axis_name)


def _global_sum(x: Array, axis_name: AxisName) -> Array:
    """The sum of the per-device ``x`` over ``axis_name``, with the right gradient.

    As ``_core.differentiable_psum``, for one axis name or a tuple of them: ``psum``
    where ``x`` is typed as varying over every axis (``shard_map`` with varying-axis
    checks; its transpose is a broadcast), else (``pmap``, ``check_vma=False``) the
    psum's value with the gradient of the local term.
    """
    if axis_name is None:
        return x
    axes = set(axis_name) if isinstance(axis_name, (tuple, list)) else {axis_name}
    if axes <= _core._varying_axes(x):
        return jax.lax.psum(x, axis_name)
    return x + jax.lax.stop_gradient(jax.lax.psum(x, axis_name) - x)


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

    def __init__(self, image_embeddings, text_embeddings, valid, axis_name, block_size):
        a, b = _check_towers(image_embeddings, text_embeddings)
        n = a.shape[0]
        self.valid = _core.check_valid(valid, n)
        self.a = _core.l2_normalize(a)
        self.b = _core.l2_normalize(b)
        # d_ii, differentiated through both towers outside the streamed products.
        self.positive = jnp.sum(self.a * self.b, axis=1)
        self.all_valid = _core.all_gather_rows(self.valid, axis_name)
        self.block = blockwise.choose_block(block_size, n * _axis_size(axis_name))
        self.axis_name = axis_name

    def gathered(self, x: Array) -> Array:
        return _core.all_gather_rows(x, self.axis_name)

    def mean(self, total: Array) -> Array:
        """``total`` (this device's sum) over the valid pairs of the global batch."""
        count = _core.psum_if(jnp.sum(self.valid.astype(jnp.float32)), self.axis_name)
        return _global_sum(total, self.axis_name) / jnp.maximum(count, 1.0)


# --------------------------------------------------------------------------- losses


def clip(
    image_embeddings: Array,
    text_embeddings: Array,
    *,
    temperature: float | Array = 0.07,
    axis_name: AxisName = None,
    valid: Array | None = None,
    block_size: int | None = None,
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
      axis_name: mesh axis name (or tuple of names) the batch is sharded over, when the
        call sits inside ``jax.shard_map``/``jax.pmap``; both towers are all-gathered.
      valid: optional bool [N]; False marks a padded pair (neither a positive nor a
        negative of any row).
      block_size: stream over blocks of this many rows (custom VJP, O(block·N) memory
        instead of O(N²)); None chooses the dense form up to
        ``BLOCKWISE_THRESHOLD`` global pairs and streams above.

    Returns:
      float32 scalar, the mean over valid pairs of the global batch (0 if none).

    Raises:
      ValueError: an embedding array is not float [N, D], the towers differ in shape,
        ``valid`` is not bool [N], ``temperature`` is not > 0 or ``block_size`` is not a
        positive integer.

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
    """
    _core.check_positive(temperature, "temperature")
    axis_name = _axis_tuple(axis_name)
    t = _Towers(image_embeddings, text_embeddings, valid, axis_name, block_size)
    tau = blockwise.like_anchors(temperature, t.a)
    rows = (t.positive, t.valid)
    cols = (t.all_valid,)
    image_to_text = _row_total(_clip_rows, t.a, t.gathered(t.b), tau, rows, cols, t.block)
    text_to_image = _row_total(_clip_rows, t.b, t.gathered(t.a), tau, rows, cols, t.block)
    return t.mean(0.5 * (image_to_text + text_to_image))


def siglip(
    image_embeddings: Array,
    text_embeddings: Array,
    *,
    temperature: float | Array = 0.1,
    bias: float | Array = -10.0,
    axis_name: AxisName = None,
    valid: Array | None = None,
    block_size: int | None = None,
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
      bias: ``b``, a finite number or (traced) scalar array.
      axis_name: mesh axis name (or tuple of names) the batch is sharded over, when the
        call sits inside ``jax.shard_map``/``jax.pmap``; both towers are all-gathered
        (each device scores its image rows against every text row).
      valid: optional bool [N]; False marks a padded pair (it is in no term, and not
        counted in |B|).
      block_size: stream over blocks of this many image rows (custom VJP, O(block·N)
        memory instead of O(N²)); None chooses the dense form up to
        ``BLOCKWISE_THRESHOLD`` global pairs and streams above.

    Returns:
      float32 scalar: the summed pair losses over the number of valid pairs (0 if none).

    Raises:
      ValueError: an embedding array is not float [N, D], the towers differ in shape,
        ``valid`` is not bool [N], ``temperature`` is not > 0, ``bias`` is not a finite
        scalar or ``block_size`` is not a positive integer.

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
    """
    _core.check_positive(temperature, "temperature")
    _check_finite(bias, "bias")
    axis_name = _axis_tuple(axis_name)
    t = _Towers(image_embeddings, text_embeddings, valid, axis_name, block_size)
    params = (blockwise.like_anchors(temperature, t.a), blockwise.like_anchors(bias, t.a))
    total = _row_total(
        _siglip_rows, t.a, t.gathered(t.b), params, (t.positive, t.valid), (t.all_valid,),
        t.block,
    )
    return t.mean(total)
