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
recomputing backward (spec/sincere-supcon.md §5) needs four products for
SupCon and five for SINCERE.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core

Array = jax.Array
#: ``block_fn(dots [b, m], params, rows, cols) -> (contributions [b], aux)``.
RowBlockFn = Callable[[Array, Any, Any, Any], tuple[Array, Any]]

#: Above this many candidate rows (the global batch) the NCE-family losses
#: stream over row blocks instead of materialising the [n, m] logits. Measured
#: in ``experiments/bench/losses.py`` (one run, ratios to ``z @ z.T``): streaming
#: is faster than the dense form from N = 2048 on and level with it at 1024.
BLOCKWISE_THRESHOLD = 1024
#: Automatic block height: rows such that a [block, m] slab has about this many
#: entries (8 MiB in float32; 256 rows at m = 8192). Smaller slabs stay in cache
#: across the several passes of the row function: 256 rows beat 512 by 10-15 %
#: at N = 2048-8192 in the same benchmark.
BLOCK_ELEMENTS = 1 << 21


def choose_block(block_size: int | None, num_candidates: int) -> int | None:
    """Anchor rows per block, or None for the dense path.

    Args:
      block_size: user choice; None picks the dense form up to
        ``BLOCKWISE_THRESHOLD`` candidates and ``BLOCK_ELEMENTS // m`` rows above.
      num_candidates: m, the rows of the (global) batch scored against.

    Raises:
      ValueError: ``block_size`` is given and not a positive integer.
    """
    if block_size is None:
        if num_candidates <= BLOCKWISE_THRESHOLD:
            return None
        return max(8, BLOCK_ELEMENTS // num_candidates)
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


def _dot(x: Array, y: Array) -> Array:
    """``x @ y.T`` in float32 at full precision: [p, D] x [q, D] -> [p, q]."""
    return jnp.matmul(x, y.T, precision=jax.lax.Precision.HIGHEST)


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


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 6))
def stream_rows(
    block_fn: RowBlockFn,
    anchors: Array,
    candidates: Array,
    params: Any,
    row_data: Any,
    col_data: Any,
    block: int,
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
      candidates: float32 [m, D].
      params: pytree of float32 arrays (e.g. the temperature), differentiated.
        Inside ``shard_map`` give them the anchors' varying-axis type
        (``x + jnp.zeros_like(anchors[0, 0])``).
      row_data: pytree of [n, ...] per-anchor arrays (labels, indices, masks,
        squared norms); floating-point leaves are differentiated, others constant.
      col_data: pytree of [m, ...] per-candidate arrays, likewise.
      block: anchor rows per block (static); n need not be a multiple.

    Returns:
      ``(total, aux)``: float32 scalar and ``aux`` with leading dimension n.
    """
    a_blocks, r_blocks, live = _blocked_inputs(anchors, row_data, block)

    def body(total, x):
        a, rows, row_live = x
        value, aux = _block_total(block_fn, _dot(a, candidates), params, rows, col_data, row_live)
        return total + value, aux

    total, aux = jax.lax.scan(body, jnp.zeros_like(anchors[0, 0]), (a_blocks, r_blocks, live))
    return total, _unblock(aux, anchors.shape[0])


def _split_floats(tree: Any) -> tuple[list[Array], Callable[[list[Array]], Any]]:
    """The floating-point leaves of ``tree`` and a function that puts new ones back."""
    leaves, treedef = jax.tree.flatten(tree)
    is_float = [jnp.issubdtype(x.dtype, jnp.floating) for x in leaves]

    def merge(floats: list[Array], others: Callable[[Array], Any] = lambda x: x) -> Any:
        it = iter(floats)
        return treedef.unflatten(
            [next(it) if f else others(x) for x, f in zip(leaves, is_float, strict=True)]
        )

    return [x for x, f in zip(leaves, is_float, strict=True) if f], merge


def _stream_rows_fwd(block_fn, anchors, candidates, params, row_data, col_data, block):
    a_blocks, r_blocks, live = _blocked_inputs(anchors, row_data, block)
    col_floats, merge_cols = _split_floats(col_data)

    def body(carry, x):
        total, d_candidates, d_params, d_cols = carry
        a, rows, row_live = x
        row_floats, merge_rows = _split_floats(rows)

        def block_total(dots, p, rf, cf):
            return _block_total(block_fn, dots, p, merge_rows(rf), merge_cols(cf), row_live)

        value, vjp, aux = jax.vjp(
            block_total, _dot(a, candidates), params, row_floats, col_floats, has_aux=True
        )
        g_dots, g_params, g_rows, g_cols = vjp(jnp.ones_like(value))
        d_a = jnp.matmul(g_dots, candidates, precision=jax.lax.Precision.HIGHEST)
        d_candidates = d_candidates + jnp.matmul(
            g_dots.T, a, precision=jax.lax.Precision.HIGHEST
        )
        carry = (
            total + value,
            d_candidates,
            jax.tree.map(jnp.add, d_params, g_params),
            jax.tree.map(jnp.add, d_cols, g_cols),
        )
        return carry, (aux, d_a, g_rows)

    init = (
        jnp.zeros_like(anchors[0, 0]),
        jnp.zeros_like(candidates),
        jax.tree.map(jnp.zeros_like, params),
        jax.tree.map(jnp.zeros_like, col_floats),
    )
    (total, d_candidates, d_params, d_cols), (aux, d_a, d_rows) = jax.lax.scan(
        body, init, (a_blocks, r_blocks, live)
    )
    n = anchors.shape[0]
    grads = (_unblock(d_a, n), d_candidates, d_params, _unblock(d_rows, n), d_cols)
    return (total, _unblock(aux, n)), (grads, row_data, col_data)


def _float0_like(x: Array) -> Array:
    return jnp.zeros(x.shape, jax.dtypes.float0)


def _stream_rows_bwd(block_fn, block, residuals, cotangents):
    (d_anchors, d_candidates, d_params, d_rows, d_cols), row_data, col_data = residuals
    ct = cotangents[0]

    def scale(tree):
        return jax.tree.map(lambda g: ct * g, tree)

    return (
        ct * d_anchors,
        ct * d_candidates,
        scale(d_params),
        _split_floats(row_data)[1](scale(d_rows), _float0_like),
        _split_floats(col_data)[1](scale(d_cols), _float0_like),
    )


stream_rows.defvjp(_stream_rows_fwd, _stream_rows_bwd)


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
    index: Array
    anchor_valid: Array
    candidate_data: Array
    candidate_valid: Array


def gather_rows(
    embeddings: Array, data: Array, valid: Array | None, axis_name: str | None
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


def global_mean(total: Array, anchor_ok: Array, axis_name: str | None) -> Array:
    """``total`` (the sum of the per-anchor losses of this device's valid anchors)
    over the number of valid anchors of the global batch; 0 when there is none."""
    total = _core.differentiable_psum(total, axis_name)
    count = _core.psum_if(jnp.sum(anchor_ok.astype(jnp.float32)), axis_name)
    return total / jnp.maximum(count, 1.0)


def map_row_blocks(fn: Callable[[Any, Any], Any], row_data: Any, col_data: Any,
                   block: int) -> Any:
    """``fn(rows [b, ...], cols [m, ...]) -> [b, ...]`` over blocks of rows, restacked to [n, ...].

    For label-only statistics (pair counts) that need no embeddings; memory O(block·m).
    """
    n = jax.tree.leaves(row_data)[0].shape[0]
    block = min(block, n)
    num_blocks = -(-n // block)
    blocks = _to_blocks(row_data, block, num_blocks)
    return _unblock(jax.lax.map(lambda rows: fn(rows, col_data), blocks), n)
