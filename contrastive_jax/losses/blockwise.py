"""Memory-lean losses: stream over blocks of anchor rows, gradient fused into the forward.

The dense losses hold the [n, m] logit matrix and, under autodiff, several
[n, m] residuals. Every loss of the NCE family is a sum over anchors of a
function of one *row* of logits (plus labels or metadata), so the anchors are
processed ``block`` rows at a time: each block scores its rows against all m
candidates, [block, m], evaluates the loss's own per-row function on that slab
(row statistics such as the log-sum-exp over a row are exact, no online
rescaling), and is then dropped. Memory is O(n·D + m·D + block·m) instead of
O(n·m); under ``axis_name`` a device holds its n_local anchors and the m
gathered candidates, so per-device memory is O(block·m), independent of n_local.

Gradient. ``stream_rows`` is a ``jax.custom_vjp`` whose forward rule, used only
under differentiation, also computes the gradient of the summed loss: inside
each block ``G = d total / d dots`` [block, m] comes from ``jax.vjp`` of the
loss's row function (the same code as the dense path), and

    d anchors[block] = G C,    d candidates += Gᵀ A[block],

so value and gradient cost three [n, m, D] products (S, G C, Gᵀ A), the minimum
for an O(n·m) memory-free backward; the undifferentiated call costs one. The
backward rule only scales the stored [n, D] and [m, D] gradients by the
(scalar) cotangent. A column-streamed variant with an online log-sum-exp and a
recomputing backward needs four products for SupCon and five for SINCERE.

Losses with class prototypes (the ProjNCE family) pass a second candidate
matrix, the [K, D] projections, and get both products per block.
``stream_rows_logsumexp`` does the same for a log-sum-exp over rows
(conditional uniformity), with an online maximum across blocks. Derivations:
``docs/losses.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core, _precision

Array = jax.Array
#: ``block_fn(dots [b, m], params, rows, cols) -> (contributions [b], aux)``.
RowBlockFn = Callable[[Array, Any, Any, Any], tuple[Array, Any]]

#: Above this many candidate rows (the global batch) every loss but
#: ``soft_target_cross_entropy`` streams over row blocks instead of materialising
#: the [n, m] logits. Measured in ``experiments/bench/losses.py`` (one run, ratios
#: to ``z @ z.T``): streaming is faster than the dense form from N = 2048 on and
#: level with it at 1024.
BLOCKWISE_THRESHOLD = 1024
#: Automatic block height on the CPU: rows such that a [block, m] slab has about
#: this many entries (8 MiB in float32; 256 rows at m = 8192). Smaller slabs stay
#: in cache across the several passes of the row function: 256 rows beat 512 by
#: 10-15 % at N = 2048-8192 in the same benchmark.
BLOCK_ELEMENTS = 1 << 21


class BlockRule(NamedTuple):
    """Automatic anchor rows per block on one platform for m candidates:
    ``min(max_rows, max(min_rows, elements // m))`` (``elements`` None:
    :data:`BLOCK_ELEMENTS`; ``max_rows`` None: no cap), with where it comes from."""

    elements: int | None
    min_rows: int
    max_rows: int | None
    provenance: str


_NOT_MEASURED = (
    "to be measured: experiments/bench/accelerator.py --parts losses --block-sizes ... "
    "prints the rule measured on the card (experiments/bench/README.md, 'How to spend the "
    "next GPU session'); until then the CPU rule"
)

#: The automatic block rule of each platform (``jax.default_backend()``); a platform
#: not listed gets the CPU rule.
BLOCK_RULES: dict[str, BlockRule] = {
    "cpu": BlockRule(
        None, 8, None,
        "measured: experiments/bench/losses.py on 2 CPU cores, N = 2048-8192 "
        "(256-row blocks beat 512 by 10-15 %)",
    ),
    "gpu": BlockRule(None, 8, None, _NOT_MEASURED),
    "tpu": BlockRule(None, 8, None, _NOT_MEASURED),
}


def automatic_block(num_candidates: int, platform: str | None = None) -> int:
    """Anchor rows per block for m = ``num_candidates`` by the rule of ``platform``
    (None: ``jax.default_backend()``) in :data:`BLOCK_RULES`."""
    platform = jax.default_backend() if platform is None else platform
    rule = BLOCK_RULES.get(platform, BLOCK_RULES["cpu"])
    elements = BLOCK_ELEMENTS if rule.elements is None else rule.elements
    rows = max(rule.min_rows, elements // num_candidates)
    return rows if rule.max_rows is None else min(rule.max_rows, rows)


def choose_block(block_size: int | None, num_candidates: int) -> int | None:
    """Anchor rows per block, or None for the dense path.

    Args:
      block_size: user choice; None picks the dense form up to
        ``BLOCKWISE_THRESHOLD`` candidates and :func:`automatic_block` rows above
        (``BLOCK_ELEMENTS // m`` on the CPU).
      num_candidates: m, the rows of the (global) batch scored against.

    Raises:
      ValueError: ``block_size`` is given and not a positive integer.
    """
    if block_size is None:
        if num_candidates <= BLOCKWISE_THRESHOLD:
            return None
        return automatic_block(num_candidates)
    if isinstance(block_size, bool) or int(block_size) != block_size or block_size < 1:
        raise ValueError(f"`block_size` must be a positive integer or None, got {block_size!r}")
    return int(block_size)


def _pad_rows(x: Array, total: int) -> Array:
    widths = [(0, total - x.shape[0])] + [(0, 0)] * (x.ndim - 1)
    return jnp.pad(x, widths)


def _to_blocks(tree: Any, block: int, num_blocks: int) -> Any:
    """Leaves [n, ...] -> [num_blocks, block, ...], zero-padded."""
    return jax.tree.map(
        lambda x: _pad_rows(x, num_blocks * block).reshape((num_blocks, block) + x.shape[1:]),
        tree,
    )


def _dot(x: Array, y: Array, precision: str = "float32") -> Array:
    """``x @ y.T`` at ``precision`` (``_precision``), float32: [p, D] x [q, D] -> [p, q]."""
    return _precision.dot_t(x, y, precision)


def _blocked_inputs(anchors, row_data, block):
    n = anchors.shape[0]
    block = min(block, n)
    num_blocks = -(-n // block)
    live = jnp.arange(num_blocks * block) < n
    return _to_blocks((anchors, row_data), block, num_blocks) + (
        live.reshape(num_blocks, block),
    )


def _block_total(block_fn, dots, params, rows, cols, live):
    contributions, aux = block_fn(dots, params, rows, cols)
    return jnp.sum(jnp.where(live, contributions, 0.0)), aux


def _unblock(tree: Any, n: int) -> Any:
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[:n], tree)


def _as_tuple(candidates: Any) -> tuple[Array, ...]:
    return tuple(candidates) if isinstance(candidates, (tuple, list)) else (candidates,)


def _block_dots(a: Array, candidates: Any, precision: str) -> Any:
    """``a @ c.T`` for the candidate matrix, or a tuple of them for a tuple of matrices."""
    if isinstance(candidates, (tuple, list)):
        return tuple(_dot(a, c, precision) for c in candidates)
    return _dot(a, candidates, precision)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 6, 7))
def stream_rows(
    block_fn: RowBlockFn,
    anchors: Array,
    candidates: Array | tuple[Array, ...],
    params: Any,
    row_data: Any,
    col_data: Any,
    block: int,
    precision: str = "float32",
) -> tuple[Array, Any]:
    """``sum_i contributions_i`` of a row-wise loss, streamed over blocks of anchor rows.

    Args:
      block_fn: ``(dots [b, m], params, rows, cols) -> (contributions [b], aux)``,
        the loss of b anchor rows given their raw products ``dots = A_b C^T``;
        ``rows`` are the [b, ...] slices of ``row_data``, ``cols`` is
        ``col_data`` whole. It must be row-separable: row i of the output may
        depend only on row i of ``dots`` and ``rows``. ``aux`` is a pytree of
        [b, ...] per-row statistics (not differentiated).
      anchors: float32 [n, D].
      candidates: float32 [m, D], or a tuple of matrices [m_k, D] (e.g. the rows
        and the class prototypes); then ``dots`` is the tuple of the
        [b, m_k] products, and each costs its own three products.
      params: pytree of float32 arrays (e.g. the temperature), differentiated.
        Inside ``shard_map`` give them the anchors' varying-axis type
        (``x + jnp.zeros_like(anchors[0, 0])``).
      row_data: pytree of [n, ...] per-anchor arrays (labels, indices, masks,
        squared norms); floating-point leaves are differentiated, others constant.
      col_data: pytree of per-candidate (or any whole-batch) arrays, likewise.
      block: anchor rows per block (static); n need not be a multiple.
      precision: arithmetic of the three products (static), one of
        ``_precision.PRECISIONS``.

    Returns:
      ``(total, aux)``: float32 scalar and ``aux`` with leading dimension n.
    """
    a_blocks, r_blocks, live = _blocked_inputs(anchors, row_data, block)

    def body(total, x):
        a, rows, row_live = x
        value, aux = _block_total(
            block_fn, _block_dots(a, candidates, precision), params, rows, col_data, row_live
        )
        return total + value, aux

    total, aux = jax.lax.scan(body, jnp.zeros_like(anchors[0, 0]), (a_blocks, r_blocks, live))
    return total, _unblock(aux, anchors.shape[0])


def _split_floats(tree: Any) -> tuple[list[Array], Callable[[list[Array]], Any]]:
    """The floating-point leaves of ``tree`` and a function that puts new ones back."""
    leaves, treedef = jax.tree.flatten(tree)
    is_float = [jnp.issubdtype(x.dtype, jnp.floating) for x in leaves]

    def merge(floats: list[Array], others: Callable[[Array], Any] = lambda x: x) -> Any:
        it = iter(floats)
        return jax.tree.unflatten(
            treedef, [next(it) if f else others(x) for x, f in zip(leaves, is_float, strict=True)]
        )

    return [x for x, f in zip(leaves, is_float, strict=True) if f], merge


def _fused_block(block_fn, a, candidates, params, rows, col_floats, merge_cols, row_live,
                 cotangent_of, precision, reduce=_block_total):
    """Value, aux and gradients of one block: ``(value, aux, d_a, d_cands, d_params,
    d_rows, d_cols)``. ``reduce(block_fn, dots, params, rows, cols, live)`` gives the
    block's value (its total, or its masked per-row values) and aux;
    ``cotangent_of(value)`` is the value's cotangent (1 for a plain sum)."""
    row_floats, merge_rows = _split_floats(rows)
    cands = _as_tuple(candidates)
    is_tuple = isinstance(candidates, (tuple, list))

    def block_total(dots, p, rf, cf):
        return reduce(
            block_fn, dots if is_tuple else dots[0], p, merge_rows(rf), merge_cols(cf), row_live
        )

    dots = tuple(_dot(a, c, precision) for c in cands)
    value, vjp, aux = jax.vjp(block_total, dots, params, row_floats, col_floats, has_aux=True)
    g_dots, g_params, g_rows, g_cols = vjp(cotangent_of(value))
    d_a = sum(_precision.matmul(g, c, precision) for g, c in zip(g_dots, cands, strict=True))
    d_cands = tuple(_precision.matmul(g.T, a, precision) for g in g_dots)
    return value, aux, d_a, d_cands, g_params, g_rows, g_cols


def _stream_rows_fwd(block_fn, anchors, candidates, params, row_data, col_data, block,
                     precision="float32"):
    a_blocks, r_blocks, live = _blocked_inputs(anchors, row_data, block)
    col_floats, merge_cols = _split_floats(col_data)
    cands = _as_tuple(candidates)

    def body(carry, x):
        total, d_cands, d_params, d_cols = carry
        a, rows, row_live = x
        value, aux, d_a, g_cands, g_params, g_rows, g_cols = _fused_block(
            block_fn, a, candidates, params, rows, col_floats, merge_cols, row_live,
            jnp.ones_like, precision,
        )
        carry = (
            total + value,
            tuple(d + g for d, g in zip(d_cands, g_cands, strict=True)),
            jax.tree.map(jnp.add, d_params, g_params),
            jax.tree.map(jnp.add, d_cols, g_cols),
        )
        return carry, (aux, d_a, g_rows)

    init = (
        jnp.zeros_like(anchors[0, 0]),
        tuple(jnp.zeros_like(c) for c in cands),
        jax.tree.map(jnp.zeros_like, params),
        jax.tree.map(jnp.zeros_like, col_floats),
    )
    (total, d_cands, d_params, d_cols), (aux, d_a, d_rows) = jax.lax.scan(
        body, init, (a_blocks, r_blocks, live)
    )
    n = anchors.shape[0]
    if not isinstance(candidates, (tuple, list)):
        d_cands = d_cands[0]
    grads = (_unblock(d_a, n), d_cands, d_params, _unblock(d_rows, n), d_cols)
    return (total, _unblock(aux, n)), (grads, row_data, col_data)


def _float0_like(x: Array) -> Array:
    return jnp.zeros(x.shape, jax.dtypes.float0)


def _stream_rows_bwd(block_fn, block, precision, residuals, cotangents):
    (d_anchors, d_candidates, d_params, d_rows, d_cols), row_data, col_data = residuals
    ct = cotangents[0]

    def scale(tree):
        return jax.tree.map(lambda g: ct * g, tree)

    return (
        ct * d_anchors,
        scale(d_candidates),
        scale(d_params),
        _split_floats(row_data)[1](scale(d_rows), _float0_like),
        _split_floats(col_data)[1](scale(d_cols), _float0_like),
    )


stream_rows.defvjp(_stream_rows_fwd, _stream_rows_bwd)


def _block_rows(block_fn, dots, params, rows, cols, live):
    """The block's per-row values, ``-BIG`` on padding rows of the last block."""
    values, aux = block_fn(dots, params, rows, cols)
    return jnp.where(live, values, -_core.BIG), aux


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 6, 7))
def stream_rows_logsumexp(
    block_fn: RowBlockFn,
    anchors: Array,
    candidates: Array | tuple[Array, ...],
    params: Any,
    row_data: Any,
    col_data: Any,
    block: int,
    precision: str = "float32",
) -> tuple[Array, Any]:
    """``log sum_i exp(r_i)`` over the rows of a row-wise function, streamed over row blocks.

    Same arguments as :func:`stream_rows`; ``block_fn`` returns the per-row values
    ``r`` [b] (``-BIG`` for a row that must not count) instead of contributions to a
    sum. The log-sum-exp runs online over the blocks (a running maximum rescales
    the running sum), so memory is O(block·m) and the value is exact. The gradient
    is fused into the forward as in :func:`stream_rows`: block i's gradients are
    those of ``sum_b e^{r_b - s_i}`` with ``s_i`` the running maximum, and every
    accumulated gradient is rescaled when the maximum grows and divided by the
    final sum at the end: one pass, three products per candidate matrix.

    Returns:
      ``(lse, aux)``: float32 scalar (about ``-BIG`` when every row is ``-BIG``)
      and ``aux`` with leading dimension n.
    """
    a_blocks, r_blocks, live = _blocked_inputs(anchors, row_data, block)

    def body(carry, x):
        shift, total = carry
        a, rows, row_live = x
        r, aux = _block_rows(
            block_fn, _block_dots(a, candidates, precision), params, rows, col_data, row_live
        )
        new = jnp.maximum(shift, jnp.max(r))
        return (new, total * jnp.exp(shift - new) + jnp.sum(jnp.exp(r - new))), aux

    init = (jnp.full_like(anchors[0, 0], -2 * _core.BIG), jnp.zeros_like(anchors[0, 0]))
    (shift, total), aux = jax.lax.scan(body, init, (a_blocks, r_blocks, live))
    return shift + jnp.log(total), _unblock(aux, anchors.shape[0])


def _stream_lse_fwd(block_fn, anchors, candidates, params, row_data, col_data, block,
                    precision="float32"):
    a_blocks, r_blocks, live = _blocked_inputs(anchors, row_data, block)
    col_floats, merge_cols = _split_floats(col_data)
    cands = _as_tuple(candidates)

    def body(carry, x):
        shift, total, d_cands, d_params, d_cols = carry
        a, rows, row_live = x
        r, aux, d_a, g_cands, g_params, g_rows, g_cols = _fused_block(
            block_fn, a, candidates, params, rows, col_floats, merge_cols, row_live,
            lambda rv: jnp.exp(rv - jnp.maximum(shift, jnp.max(rv))), precision, _block_rows,
        )
        new = jnp.maximum(shift, jnp.max(r))
        decay = jnp.exp(shift - new)

        def rescaled(acc, g):
            return jax.tree.map(lambda u, v: decay * u + v, acc, g)

        carry = (
            new,
            total * decay + jnp.sum(jnp.exp(r - new)),
            rescaled(d_cands, g_cands),
            rescaled(d_params, g_params),
            rescaled(d_cols, g_cols),
        )
        return carry, (aux, d_a, g_rows, new)

    zero = jnp.zeros_like(anchors[0, 0])
    init = (
        zero - 2 * _core.BIG,
        zero,
        tuple(jnp.zeros_like(c) for c in cands),
        jax.tree.map(jnp.zeros_like, params),
        jax.tree.map(jnp.zeros_like, col_floats),
    )
    (shift, total, d_cands, d_params, d_cols), (aux, d_a, d_rows, shifts) = jax.lax.scan(
        body, init, (a_blocks, r_blocks, live)
    )
    n = anchors.shape[0]
    # Block i's row gradients were taken at its own running maximum s_i.
    per_block = jnp.exp(shifts - shift) / total

    def finish_rows(g):
        return _unblock(g * per_block.reshape((-1,) + (1,) * (g.ndim - 1)), n)

    def finish(tree):
        return jax.tree.map(lambda g: g / total, tree)

    if not isinstance(candidates, (tuple, list)):
        d_cands = d_cands[0]
    grads = (
        finish_rows(d_a),
        finish(d_cands),
        finish(d_params),
        jax.tree.map(finish_rows, d_rows),
        finish(d_cols),
    )
    return (shift + jnp.log(total), _unblock(aux, n)), (grads, row_data, col_data)


stream_rows_logsumexp.defvjp(_stream_lse_fwd, _stream_rows_bwd)


def like_anchors(value: float | Array, anchors: Array) -> Array:
    """A float32 hyperparameter with the anchors' varying-axis type.

    Inside ``shard_map`` the custom VJP returns a per-device cotangent for it;
    the transpose of this broadcast sums those over devices.
    """
    return jnp.asarray(value, jnp.float32) + jnp.zeros_like(anchors[0, 0])


class GatheredRows(NamedTuple):
    """Local anchors and the gathered candidates, without any [n, m] array.

    Attributes:
      anchors: float32 [n, D], L2-normalised local rows.
      candidates: float32 [m, D], the normalised rows of the global batch.
      index: int32 [n], global row index of each anchor (its own column).
      anchor_valid: bool [n].
      candidate_data: [m, ...], the gathered second argument (labels, metadata).
      candidate_valid: bool [m].
    """

    anchors: Array
    candidates: Array
    index: Array  # type: ignore[assignment]  # a field, shadowing tuple.index
    anchor_valid: Array
    candidate_data: Array
    candidate_valid: Array


def gather_rows(
    embeddings: Array, data: Array, valid: Array | None, axis_name: str | tuple[str, ...] | None
) -> GatheredRows:
    """Normalises and gathers rows like ``_core.contrast_batch``, minus the [n, m] self mask.

    ``embeddings`` and ``data`` must already be checked.
    """
    n = embeddings.shape[0]
    valid = _core.check_valid(valid, n)
    anchors = _core.l2_normalize(embeddings)
    return GatheredRows(
        anchors=anchors,
        candidates=_core.all_gather_rows(anchors, axis_name),
        index=_core.local_row_offset(n, axis_name) + jnp.arange(n, dtype=jnp.int32),
        anchor_valid=valid,
        candidate_data=_core.all_gather_rows(data, axis_name),
        candidate_valid=_core.all_gather_rows(valid, axis_name),
    )


def global_mean(total: Array, anchor_ok: Array, axis_name: str | tuple[str, ...] | None) -> Array:
    """``total`` (the sum of the per-anchor losses of this device's valid anchors)
    over the number of valid anchors of the global batch; 0 when there is none."""
    total = _core.differentiable_psum(total, axis_name)
    count = _core.psum_if(jnp.sum(anchor_ok.astype(jnp.float32)), axis_name)
    return total / jnp.maximum(count, 1.0)
