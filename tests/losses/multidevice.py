"""Shared check: a loss under ``jax.shard_map`` / ``jax.pmap`` with ``axis_name``
equals one device on the concatenated batch, in value and in gradient.

Usage from a loss test::

    from tests.losses.multidevice import assert_multidevice_matches
    assert_multidevice_matches(losses.supcon, z, labels, valid=valid, temperature=0.1)

``second`` is the loss's second positional argument (labels, metadata or soft
targets), sharded along its first axis like the embeddings.

:func:`run_style` runs a loss in one of the ways a JAX project shards a batch
(:data:`STYLES`) and returns the value and the gradient in the first argument.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "data"
#: Axes of the 2-D mesh; rows are sharded over both, in mesh order.
AXES_2D = ("data", "fsdp")
#: How a batch reaches a loss: one device; ``jax.jit`` on arrays sharded over an
#: Explicit mesh (``jax.make_mesh``'s default) or an Auto (GSPMD) one, with
#: ``axis_name=None``; ``jax.shard_map`` over one axis or over two (rows over both,
#: ``axis_name`` a tuple, default checks, ``out_specs=P()``); ``jax.pmap``.
STYLES = ("single", "jit_explicit", "jit_auto", "shard_map_1d", "shard_map_2d", "pmap")


def device_mesh(num_devices: int = 8) -> jax.sharding.Mesh:
    """A 1-D mesh with axis ``data`` over the first ``num_devices`` CPU devices."""
    devices = jax.devices()
    if len(devices) < num_devices:
        raise RuntimeError(
            f"need {num_devices} devices, have {len(devices)}; "
            "set XLA_FLAGS=--xla_force_host_platform_device_count=8"
        )
    return jax.sharding.Mesh(np.array(devices[:num_devices]), (AXIS,))


def _jit_on_sharded(loss_fn, first, second, valid, kwargs, axis_type):
    """``jax.jit`` of the global loss on arrays whose rows are sharded over 8 devices."""
    mesh = jax.make_mesh((8,), ("batch",), axis_types=(axis_type,))
    rows = NamedSharding(mesh, P("batch"))
    first, second, valid = (jax.device_put(x, rows) for x in (first, second, valid))

    def f(x):
        return loss_fn(x, second, valid=valid, **kwargs)

    value, grad = jax.jit(jax.value_and_grad(f))(first)
    if axis_type == AxisType.Explicit:  # GSPMD chooses an Auto output's sharding itself
        assert grad.sharding.is_equivalent_to(first.sharding, first.ndim), grad.sharding
    return value, grad


def _shard_map_2d(loss_fn, first, second, valid, kwargs):
    """shard_map over a (2, 4) mesh, rows over both axes, ``axis_name`` the tuple."""
    mesh = jax.make_mesh((2, 4), AXES_2D, axis_types=(AxisType.Explicit,) * 2)

    def local(x, y, v):
        return loss_fn(x, y, valid=v, axis_name=AXES_2D, **kwargs)

    rows = P(AXES_2D)
    sharded = jax.shard_map(local, mesh=mesh, in_specs=(rows, rows, rows), out_specs=P())
    first, second, valid = (
        jax.device_put(x, NamedSharding(mesh, rows)) for x in (first, second, valid)
    )
    return jax.jit(jax.value_and_grad(lambda x: sharded(x, second, valid)))(first)


def run_style(style, loss_fn, first, second, valid, **kwargs):
    """``(value, gradient in first)`` of ``loss_fn(first, second, valid=valid, **kwargs)``
    computed as :data:`STYLES` ``style`` says, on 8 devices (except ``single``)."""
    if style == "single":
        return _single_device(loss_fn, first, second, valid, kwargs)
    if style == "jit_explicit":
        return _jit_on_sharded(loss_fn, first, second, valid, kwargs, AxisType.Explicit)
    if style == "jit_auto":
        return _jit_on_sharded(loss_fn, first, second, valid, kwargs, AxisType.Auto)
    if style == "shard_map_1d":
        return _shard_map_outer_grad(loss_fn, first, second, valid, kwargs, device_mesh())
    if style == "shard_map_2d":
        return _shard_map_2d(loss_fn, first, second, valid, kwargs)
    if style == "pmap":
        return _pmap(loss_fn, first, second, valid, kwargs, 8)
    raise ValueError(f"unknown style {style!r}; choose from {STYLES}")


def _single_device(loss_fn, first, second, valid, kwargs):
    def f(x):
        return loss_fn(x, second, valid=valid, **kwargs)

    return jax.jit(jax.value_and_grad(f))(first)


def _shard_map_outer_grad(loss_fn, first, second, valid, kwargs, mesh, check_vma=True):
    """Gradient taken outside shard_map of the replicated global loss."""

    def local(x, y, v):
        return loss_fn(x, y, valid=v, axis_name=AXIS, **kwargs)

    sharded = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(AXIS), P(AXIS), P(AXIS)),
        out_specs=P(),
        check_vma=check_vma,
    )
    return jax.jit(jax.value_and_grad(lambda x: sharded(x, second, valid)))(first)


def _shard_map_inner_grad(loss_fn, first, second, valid, kwargs, mesh, check_vma=True):
    """Per-device value_and_grad inside shard_map (the trainer's pattern)."""

    def local(x, y, v):
        value, grad = jax.value_and_grad(
            lambda x_: loss_fn(x_, y, valid=v, axis_name=AXIS, **kwargs)
        )(x)
        return value, grad

    sharded = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(AXIS), P(AXIS), P(AXIS)),
        out_specs=(P(), P(AXIS)),
        check_vma=check_vma,
    )
    return jax.jit(sharded)(first, second, valid)


def _pmap(loss_fn, first, second, valid, kwargs, num_devices):
    def local(x, y, v):
        return jax.value_and_grad(
            lambda x_: loss_fn(x_, y, valid=v, axis_name=AXIS, **kwargs)
        )(x)

    def split(a):
        return a.reshape((num_devices, a.shape[0] // num_devices) + a.shape[1:])

    value, grad = jax.pmap(local, axis_name=AXIS)(split(first), split(second), split(valid))
    return value, grad.reshape(first.shape)


def assert_multidevice_matches(
    loss_fn,
    first,
    second,
    *,
    valid=None,
    num_devices: int = 8,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    **kwargs,
) -> None:
    """Asserts shard_map (grad outside and inside, with and without varying-axis
    checks) and pmap give the single-device value and gradient."""
    first = jnp.asarray(first, jnp.float32)
    second = jnp.asarray(second)
    if valid is None:
        valid = jnp.ones((first.shape[0],), bool)
    valid = jnp.asarray(valid)
    assert first.shape[0] % num_devices == 0, "batch must split evenly over devices"
    mesh = device_mesh(num_devices)

    ref_value, ref_grad = _single_device(loss_fn, first, second, valid, kwargs)
    assert np.isfinite(ref_value) and np.all(np.isfinite(ref_grad))
    check = functools.partial(np.testing.assert_allclose, rtol=rtol, atol=atol)
    for name, run in (
        ("shard_map, grad outside", lambda: _shard_map_outer_grad(
            loss_fn, first, second, valid, kwargs, mesh)),
        ("shard_map, grad inside", lambda: _shard_map_inner_grad(
            loss_fn, first, second, valid, kwargs, mesh)),
        ("shard_map(check_vma=False), grad inside", lambda: _shard_map_inner_grad(
            loss_fn, first, second, valid, kwargs, mesh, check_vma=False)),
        ("pmap", lambda: _pmap(loss_fn, first, second, valid, kwargs, num_devices)),
    ):
        value, grad = run()
        value = np.asarray(value).reshape(-1)
        check(value, np.full_like(value, ref_value), err_msg=f"{name}: value")
        check(np.asarray(grad), np.asarray(ref_grad), err_msg=f"{name}: gradient")
