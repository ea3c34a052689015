"""Building blocks shared by every loss: input checks, normalisation, masked
log-sum-exp, the cross-device gather and the mean over valid anchors.

Every embedding loss of :mod:`contrastive_jax.losses` follows one contract:

* ``embeddings`` float [N, D] holds the rows on this device; rows are
  L2-normalised inside the loss.
* With ``axis_name=None`` the call sees the whole batch. It runs on one device,
  under ``jax.jit`` on global arrays sharded by GSPMD (Auto mesh axes), and on
  arrays whose type is sharded over Explicit mesh axes (``jax.make_mesh``'s
  default): there :func:`explicit_sharding` runs the loss under ``jax.shard_map``
  over the mesh axes that shard the rows, so the cost is that of the
  ``axis_name`` path and the gradient is sharded like the embeddings.
* With ``axis_name`` (a mesh axis name, or a tuple of them when the rows are
  sharded over several axes, in mesh order) the call sits inside
  ``jax.shard_map`` (or ``jax.pmap``) over those axes: embeddings and labels
  are all-gathered, the local rows are the anchors, they are scored against the
  gathered (global) batch with self masks at *global* indices, and the global
  mean over valid anchors is returned on every device, typed as replicated
  (``out_specs=P()`` passes shard_map's checks). Value and gradient then equal
  a single-device call on the concatenated batch.
* ``valid`` bool [N] marks padded rows: they are neither anchors nor
  candidates (positives, negatives, denominators), and every floating row-wise
  argument is zeroed there before any arithmetic (:func:`mask_padding`), so NaN or
  inf padding changes no value or gradient.
* With ``axis_name`` a row-wise argument typed as replicated over one of its
  axes is a ``ValueError`` (:func:`check_rows_vary`).
* Hyperparameters are finite scalars: a concrete bad one raises ``ValueError``,
  a traced one of the wrong shape too, a traced bad value makes the loss NaN
  (and fails ``checkify``'s user checks) (:func:`check_positive`).
* Similarities and reductions run in float32 (bfloat16 embeddings included; the NCE
  losses' ``precision`` option runs their products in TF32 or bfloat16, ``_precision``);
  masks use finite large negatives and ``where`` so no NaN reaches a gradient.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from contrastive_jax.losses import _precision

#: Finite stand-in for -inf in masked logits. ``exp(-BIG - max)`` is exactly
#: 0 in float32, and a fully masked row still has a finite log-sum-exp.
BIG = 1e9

Array = jax.Array
#: A mesh axis name, a tuple of them (rows sharded over all, in mesh order), or None.
AxisName = str | tuple[str, ...] | None


# --------------------------------------------------------------------------- checks


def check_embeddings(embeddings: Array, name: str = "embeddings") -> Array:
    """Checks a float [N, D] array with N >= 1 and returns it as float32."""
    if not hasattr(embeddings, "ndim") or not hasattr(embeddings, "dtype"):
        raise ValueError(f"`{name}` must be an array of shape [N, D], got {type(embeddings)!r}")
    if embeddings.ndim != 2:
        raise ValueError(
            f"`{name}` must have shape [N, D] (rank 2), got shape {tuple(embeddings.shape)}"
        )
    if not jnp.issubdtype(embeddings.dtype, jnp.floating):
        raise ValueError(
            f"`{name}` must be a floating-point array, got dtype {embeddings.dtype}"
        )
    if embeddings.shape[0] < 1 or embeddings.shape[1] < 1:
        raise ValueError(f"`{name}` must be non-empty, got shape {tuple(embeddings.shape)}")
    return embeddings.astype(jnp.float32)


def check_labels(labels: Array, n: int, name: str = "labels") -> Array:
    """Checks integer labels of shape [n] and returns them as int32."""
    if not hasattr(labels, "ndim") or not hasattr(labels, "dtype"):
        raise ValueError(f"`{name}` must be an integer array of shape [{n}], got {type(labels)!r}")
    if labels.ndim != 1:
        raise ValueError(f"`{name}` must have shape [N] (rank 1), got shape {tuple(labels.shape)}")
    if labels.shape[0] != n:
        raise ValueError(
            f"`{name}` has {labels.shape[0]} rows but `embeddings` has {n}; they must match"
        )
    if not (jnp.issubdtype(labels.dtype, jnp.integer) or labels.dtype == jnp.bool_):
        raise ValueError(f"`{name}` must be an integer array, got dtype {labels.dtype}")
    return labels.astype(jnp.int32)


def check_valid(valid: Array | None, n: int, name: str = "valid") -> Array:
    """Checks an optional bool [n] mask of real (non-padded) rows; None means all."""
    if valid is None:
        return jnp.ones((n,), dtype=bool)
    if not hasattr(valid, "ndim") or not hasattr(valid, "dtype"):
        raise ValueError(f"`{name}` must be a bool array of shape [{n}], got {type(valid)!r}")
    if valid.ndim != 1 or valid.shape[0] != n:
        raise ValueError(f"`{name}` must have shape [{n}], got shape {tuple(valid.shape)}")
    if valid.dtype != jnp.bool_:
        raise ValueError(f"`{name}` must have dtype bool, got dtype {valid.dtype}")
    return valid


def _check_hyperparameter(value: float | Array, name: str, positive: bool) -> float | Array:
    """``value`` checked to be a finite scalar, > 0 (``positive``) or >= 0.

    A concrete value (Python or NumPy number, a concrete ``jax.Array``) that fails
    raises ``ValueError`` and is otherwise returned as given. A traced value (a ``jit``
    argument) of the wrong shape raises ``ValueError`` (its shape is static); its
    value is known only at run time, so a failing one becomes NaN (float32), which
    makes the loss and every gradient NaN, and under ``jax.experimental.checkify``
    (``errors=checkify.user_checks`` or wider) the check raises with the value.
    """
    bound = "> 0" if positive else ">= 0"
    shape = tuple(np.shape(value))
    if shape:
        raise ValueError(f"`{name}` must be a scalar, got shape {shape}")
    try:
        concrete = np.asarray(value, dtype=np.float64)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        traced = jnp.asarray(value, jnp.float32)
        ok = jnp.isfinite(traced) & ((traced > 0) if positive else (traced >= 0))
        checkify.debug_check(ok, f"`{name}` must be finite and {bound}, got {{}}", traced)
        # NaN, not a masked value: the hyperparameter's own gradient is NaN too.
        return traced + jnp.where(ok, 0.0, jnp.nan)
    if not np.isfinite(concrete) or (concrete <= 0 if positive else concrete < 0):
        raise ValueError(f"`{name}` must be finite and {bound}, got {float(concrete)}")
    return value


def check_positive(value: float | Array, name: str) -> float | Array:
    """``value`` if it is a finite scalar > 0; see :func:`_check_hyperparameter`.

    Raises:
      ValueError: ``value`` is not a scalar, or is concrete and not finite and > 0.
    """
    return _check_hyperparameter(value, name, positive=True)


def check_nonnegative(value: float | Array, name: str) -> float | Array:
    """``value`` if it is a finite scalar >= 0; see :func:`_check_hyperparameter`.

    Raises:
      ValueError: ``value`` is not a scalar, or is concrete and not finite and >= 0.
    """
    return _check_hyperparameter(value, name, positive=False)


def mask_padding(x: Any, valid: Any) -> Any:
    """``x`` [N, ...] with the rows where ``valid`` [N] is False set to zero.

    Applied to every row-wise floating argument before any arithmetic, so NaN or
    inf in padded rows reaches neither the real rows' values nor any gradient
    (the rows' gradient is exactly zero). Anything else (non-floating ``x``, no
    or malformed ``valid``, mismatched rows) is returned as is, for the loss's own
    checks to report.
    """
    if (
        valid is None
        or not hasattr(x, "dtype") or not hasattr(valid, "dtype")
        or not jnp.issubdtype(x.dtype, jnp.floating)
        or valid.dtype != jnp.bool_ or valid.ndim != 1 or x.ndim < 1
        or x.shape[0] != valid.shape[0]
    ):
        return x
    keep = jnp.reshape(valid, (-1,) + (1,) * (x.ndim - 1))
    return jnp.where(keep, x, jnp.zeros((), x.dtype))


# --------------------------------------------------------------------------- numerics


def l2_normalize(x: Array, eps: float = 1e-6) -> Array:
    """Row-wise ``x / max(||x||, eps)`` in float32, [N, D] -> [N, D].

    A zero row maps to a zero row with a finite (1/eps-scaled) gradient.
    """
    x = x.astype(jnp.float32)
    sq = jnp.sum(x * x, axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(jnp.maximum(sq, eps * eps))


def similarity_logits(
    anchors: Array, candidates: Array, temperature: float | Array, precision: str = "float32"
) -> Array:
    """``anchors @ candidates.T / temperature``, float32, the product at ``precision``
    (one of ``_precision.PRECISIONS``; the default is float32 at full precision).

    Shapes: [n, D] x [m, D] -> [n, m].
    """
    dots = _precision.dot_t(
        anchors.astype(jnp.float32), candidates.astype(jnp.float32), precision
    )
    return dots / jnp.asarray(temperature, jnp.float32)


def masked_logsumexp(logits: Array, mask: Array, axis: int = -1) -> Array:
    """``log sum_{mask} exp(logits)`` along ``axis``; masked entries get -BIG.

    A fully masked slice returns about ``-BIG`` (finite), and masked entries get
    exactly zero gradient.
    """
    return jax.nn.logsumexp(jnp.where(mask, logits, -BIG), axis=axis)


def safe_divide(numerator: Array, denominator: Array) -> Array:
    """``numerator / denominator`` where ``denominator > 0``, else 0 (NaN-free grads)."""
    ok = denominator > 0
    return jnp.where(ok, numerator / jnp.where(ok, denominator, 1), 0)


# --------------------------------------------------------------------------- devices


def axis_names(axis_name: AxisName) -> tuple[str, ...]:
    """``axis_name`` as a tuple of mesh axis names (empty for None).

    Raises:
      ValueError: ``axis_name`` is neither None, a string nor a non-empty tuple of strings.
    """
    if axis_name is None:
        return ()
    if isinstance(axis_name, str):
        return (axis_name,)
    if (
        isinstance(axis_name, (tuple, list))
        and axis_name
        and all(isinstance(a, str) for a in axis_name)
    ):
        return tuple(axis_name)
    raise ValueError(
        f"`axis_name` must be None, a mesh axis name or a tuple of them, got {axis_name!r}"
    )


def num_devices(axis_name: AxisName) -> int:
    """Devices the rows are split over: the product of the sizes of ``axis_name``'s axes."""
    names = axis_names(axis_name)
    return 1 if not names else jax.lax.axis_size(names)


def all_gather_rows(x: Array, axis_name: AxisName) -> Array:
    """Concatenates the rows of ``x`` over the devices of ``axis_name``.

    [n, ...] -> [n * num_devices, ...] in device order (over several axes: the
    order of ``jax.lax.axis_index`` of the tuple, i.e. mesh order for rows
    sharded as ``P(axis_name)``); identity when ``axis_name`` is None. The
    gather is differentiable: its transpose reduce-scatters the cotangents back
    to the owning device.
    """
    names = axis_names(axis_name)
    if not names:
        return x
    return jax.lax.all_gather(x, names, axis=0, tiled=True)


def local_row_offset(n_local: int, axis_name: AxisName) -> Array:
    """Global index of this device's first row (0 without ``axis_name``)."""
    names = axis_names(axis_name)
    if not names:
        return jnp.zeros((), jnp.int32)
    return jax.lax.axis_index(names).astype(jnp.int32) * n_local


def psum_if(x: Array, axis_name: AxisName) -> Array:
    """``lax.psum`` over ``axis_name``, identity when it is None."""
    names = axis_names(axis_name)
    return x if not names else jax.lax.psum(x, names)


def _varying_axes(x: Array) -> frozenset:
    """Mesh axes over which ``x`` is typed as varying inside ``shard_map``.

    Empty under ``jax.pmap`` and ``shard_map(check_vma=False)``. JAX has named
    this type field ``vma`` and, later, ``mat.varying``; both are read.
    """
    aval = jax.typeof(x)
    vma = getattr(aval, "vma", None)
    if vma is None:
        vma = getattr(getattr(aval, "mat", None), "varying", None)
    return frozenset(vma or ())


def differentiable_psum(x: Array, axis_name: AxisName) -> Array:
    """Sum of ``x`` over the devices of ``axis_name`` whose gradient is right everywhere.

    Inside ``jax.shard_map`` with varying-axis tracking (the default),
    ``lax.psum`` transposes to a broadcast and is used as is; its result is typed
    as replicated over ``axis_name``, so ``out_specs=P()`` accepts it. Under
    ``jax.pmap`` (and ``shard_map(check_vma=False)``) ``psum`` transposes to
    another psum, which would multiply gradients by the number of devices; there
    the value is the psum but the gradient flows through the local term only.
    Either way each device's gradient is that of the global sum, because the
    cotangents of gathered rows return to their owners through the gather's
    transpose.

    Use it only for the final reduction of a loss (the value every device
    returns). An intermediate statistic that other devices' terms depend on
    (class sums, counts feeding later terms) must be computed from gathered
    rows instead: under ``pmap`` this function keeps only the local gradient.
    """
    names = axis_names(axis_name)
    if not names:
        return x
    if _varying_axes(x) & set(names):
        return jax.lax.psum(x, names)
    return x + jax.lax.stop_gradient(jax.lax.psum(x, names) - x)


def valid_anchor_mean(per_anchor: Array, anchor_ok: Array, axis_name: AxisName) -> Array:
    """Mean of ``per_anchor`` [n] over anchors with ``anchor_ok`` [n], over all devices.

    ``sum_{ok} per_anchor / max(#ok, 1)`` with both sums taken over the global
    batch, so every device returns the same scalar; 0 (with zero gradient) when
    no anchor is valid.
    """
    total = differentiable_psum(jnp.sum(jnp.where(anchor_ok, per_anchor, 0.0)), axis_name)
    count = psum_if(jnp.sum(anchor_ok.astype(jnp.float32)), axis_name)
    return total / jnp.maximum(count, 1.0)


class ContrastBatch(NamedTuple):
    """Local anchors and the global set of candidates they are scored against.

    Attributes:
      anchors: float32 [n, D], L2-normalised local rows.
      candidates: float32 [m, D], L2-normalised rows of the whole batch
        (m = n * devices with ``axis_name``, else m = n).
      anchor_labels: [n, ...] labels (or metadata) of the anchors.
      candidate_labels: [m, ...] labels (or metadata) of the candidates.
      anchor_valid: bool [n].
      candidate_valid: bool [m].
      is_self: bool [n, m], True at (r, offset + r): an anchor's own column.
    """

    anchors: Array
    candidates: Array
    anchor_labels: Array
    candidate_labels: Array
    anchor_valid: Array
    candidate_valid: Array
    is_self: Array


def contrast_batch(
    embeddings: Array,
    labels: Array,
    valid: Array | None,
    axis_name: AxisName,
) -> ContrastBatch:
    """Normalises, gathers and builds the global self mask. See :class:`ContrastBatch`.

    ``embeddings`` and ``valid`` must already be checked; ``labels`` may be any
    array with leading dimension N (class ids, instance ids or metadata).
    """
    n = embeddings.shape[0]
    valid = check_valid(valid, n)
    anchors = l2_normalize(embeddings)
    candidates = all_gather_rows(anchors, axis_name)
    m = candidates.shape[0]
    offset = local_row_offset(n, axis_name)
    is_self = (offset + jnp.arange(n))[:, None] == jnp.arange(m)[None, :]
    return ContrastBatch(
        anchors=anchors,
        candidates=candidates,
        anchor_labels=labels,
        candidate_labels=all_gather_rows(labels, axis_name),
        anchor_valid=valid,
        candidate_valid=all_gather_rows(valid, axis_name),
        is_self=is_self,
    )


# --------------------------------------------------------------------------- explicit sharding


def _type_spec(x: Any) -> tuple[Any, Any] | None:
    """``(mesh, spec)`` of ``x``'s type when it is sharded over Explicit mesh axes, else None.

    Only Explicit axes appear in an array's type: GSPMD (Auto) shardings and the
    manual axes of an enclosing ``shard_map`` do not.
    """
    if not isinstance(x, (jax.Array, np.ndarray)):
        return None
    sharding = getattr(jax.typeof(x), "sharding", None)
    spec = getattr(sharding, "spec", None)
    if sharding is None or spec is None or not any(entry is not None for entry in spec):
        return None
    return sharding.mesh, spec


def _spec_names(entry: Any) -> tuple[str, ...]:
    """The mesh axes of one PartitionSpec entry."""
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _replicated(x: Any, mesh: Any, rows: tuple[str, ...] = ()) -> Any:
    """``x`` resharded to rows over ``rows`` (none: replicated), other axes replicated."""
    if not isinstance(x, (jax.Array, np.ndarray)):
        return x
    spec = () if x.ndim == 0 else (rows or None, *([None] * (x.ndim - 1)))
    typed = _type_spec(x)
    if typed is not None and typed[0] == mesh and [_spec_names(e) for e in typed[1]] + [
        ()
    ] * (x.ndim - len(typed[1])) == [_spec_names(e) for e in spec]:
        return x  # already placed so
    return jax.sharding.reshard(
        jnp.asarray(x), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
    )


def _check_bound(axis_name: AxisName) -> None:
    """Raises ValueError unless every axis of ``axis_name`` is bound by a map."""
    names = axis_names(axis_name)
    if not names:
        return
    try:
        jax.lax.axis_size(names)
    except NameError:
        raise ValueError(
            f"`axis_name={axis_name!r}` names a mesh axis that no enclosing `jax.shard_map` "
            "or `jax.pmap` binds. On global arrays (one device, or sharded under `jax.jit`) "
            "pass `axis_name=None`; to split the batch over that axis, call the loss inside "
            "`jax.shard_map(..., mesh=mesh)` over it."
        ) from None


def check_rows_vary(rowwise: dict[str, Any], axis_name: AxisName) -> None:
    """Raises ValueError if a row-wise argument is replicated over an axis of ``axis_name``.

    With ``axis_name`` each device passes its own rows; an argument typed as
    replicated over the axis (``jax.shard_map(..., in_specs=P())``, or an array
    made inside the map) would be gathered into as many stacked copies as there
    are devices, a silently wrong loss. Read from the varying-axis type
    (``jax.typeof(x).vma``) at trace time; under ``jax.pmap`` and
    ``shard_map(check_vma=False)`` there is no such type and nothing is checked.

    Args:
      rowwise: argument name -> [N, ...] array (None entries are skipped).
      axis_name: the loss's ``axis_name``, bound by an enclosing map.
    """
    names = axis_names(axis_name)
    if not names or not _varying_axes(jax.lax.axis_index(names)):
        return
    for arg, x in rowwise.items():
        if not isinstance(x, jax.Array):
            continue
        replicated = [a for a in names if a not in _varying_axes(x)]
        if replicated:
            raise ValueError(
                f"`{arg}` is replicated over mesh axis {', '.join(map(repr, replicated))} "
                f"but `axis_name={axis_name!r}` says each device holds its own rows: the loss "
                "would gather every device's identical copy. Shard its rows over the axis "
                f"(`in_specs=P({names[0]!r})`), or call the loss with `axis_name=None` on the "
                "whole batch."
            )


def _positional_names(loss: Callable[..., Array]) -> tuple[str, ...]:
    """The names of ``loss``'s positional (row-wise array) parameters, in order."""
    return tuple(
        name for name, p in inspect.signature(loss).parameters.items()
        if p.kind is p.POSITIONAL_OR_KEYWORD
    )


def explicit_sharding(loss: Callable[..., Array]) -> Callable[..., Array]:
    """Makes ``loss`` accept arrays sharded over Explicit mesh axes.

    ``loss(first, *second, axis_name=..., valid=..., **hparams)`` is any loss of
    the package. With ``axis_name=None`` and a first argument whose type is
    sharded (``jax.typeof(x).sharding``, e.g. placed with
    ``NamedSharding(jax.make_mesh((8,), ("batch",)), P("batch"))``), the call runs
    ``jax.shard_map`` over the mesh axes that shard its rows, with those axes as
    ``axis_name``: the second arguments and ``valid`` are resharded to the rows'
    sharding, array hyperparameters are replicated, and a sharded feature axis is
    gathered. Value and gradient equal the single-device call; the gradient has
    the sharding of the input. Rows replicated but another argument (or the
    feature axis) sharded: the arguments are replicated and the loss runs as on
    one device. With ``axis_name`` (inside a ``shard_map`` over some mesh axes)
    arguments still sharded over the remaining Explicit axes are replicated over
    them. Any other call (GSPMD/Auto axes, one device, ``pmap``) goes straight to
    ``loss``.

    Every call also checks the contract's edges before running ``loss``: an unbound
    ``axis_name`` (:func:`_check_bound`), replicated rows under ``axis_name``
    (:func:`check_rows_vary`), and it zeroes the padded rows of the row-wise
    arguments (:func:`mask_padding`), positional or passed by keyword.

    Why not Explicit sharding rules throughout: the code slices single entries of
    sharded rows (the streamed forms' scalars), for which JAX has no Explicit rule,
    contracts a feature axis that may be sharded (JAX then asks for an
    ``out_sharding``), and the streamed forms scan over blocks of rows, which with
    sharded rows would run one block at a time across the devices. Read from the
    input's type, the mesh makes a ``shard_map`` instead.
    """

    rowwise_names = _positional_names(loss)

    def masked(first, second, valid, axis_name, hparams):
        """``loss`` on the arguments with their padded rows zeroed (:func:`mask_padding`)."""
        return loss(
            mask_padding(first, valid), *(mask_padding(x, valid) for x in second),
            axis_name=axis_name, valid=valid, **hparams,
        )

    @functools.wraps(loss)
    def wrapped(first, *second, axis_name: AxisName = None, valid: Array | None = None,
                **hparams):
        # Row-wise arguments passed by keyword join the positional ones.
        keyed = rowwise_names[1 + len(second):]
        second = second + tuple(hparams.pop(k) for k in keyed if k in hparams)
        _check_bound(axis_name)
        check_rows_vary(dict(zip(rowwise_names, (first, *second), strict=False)), axis_name)
        leaves, treedef = jax.tree.flatten(hparams)
        is_array = [isinstance(x, (jax.Array, np.ndarray)) for x in leaves]
        typed = [_type_spec(x) for x in (first, *second, valid, *leaves)]
        meshes = [t[0] for t in typed if t is not None]
        n = first.shape[0] if getattr(first, "ndim", 0) >= 1 else None
        rowwise = [x for x in (*second, valid) if x is not None]
        if not meshes or n is None or any(
            getattr(x, "ndim", 0) < 1 or x.shape[0] != n for x in rowwise
        ):
            # Nothing sharded, or a shape error that the loss's own checks report.
            return masked(first, second, valid, axis_name, hparams)
        mesh = meshes[0]
        row_axes = () if typed[0] is None or axis_name is not None else _spec_names(
            typed[0][1][0]
        )
        hp_arrays = [_replicated(x, mesh) for x, a in zip(leaves, is_array, strict=True) if a]

        def with_hparams(arrays):
            it = iter(arrays)
            return treedef.unflatten(
                [next(it) if a else x for x, a in zip(leaves, is_array, strict=True)]
            )

        first = _replicated(first, mesh, row_axes)
        second = tuple(_replicated(x, mesh, row_axes) for x in second)
        valid = _replicated(valid, mesh, row_axes)
        if not row_axes:
            return masked(first, second, valid, axis_name, with_hparams(hp_arrays))
        name = row_axes[0] if len(row_axes) == 1 else row_axes
        rows = jax.sharding.PartitionSpec(row_axes)

        def local(first, second, valid, arrays):
            return masked(first, second, valid, name, with_hparams(arrays))

        return jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(rows, rows, rows, jax.sharding.PartitionSpec()),
            out_specs=jax.sharding.PartitionSpec(),
            axis_names=set(row_axes),
        )(first, second, valid, hp_arrays)

    return wrapped
