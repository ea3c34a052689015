"""Shared check: a loss under ``jax.shard_map`` / ``jax.pmap`` with ``axis_name``
equals one device on the concatenated batch, in value and in gradient.

Usage from a loss test::

    from tests.losses.multidevice import assert_multidevice_matches
    assert_multidevice_matches(losses.supcon, z, labels, valid=valid, temperature=0.1)

``second`` is the loss's second positional argument (labels, metadata or soft
targets), sharded along its first axis like the embeddings.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

AXIS = "data"


def device_mesh(num_devices: int = 8) -> jax.sharding.Mesh:
    """A 1-D mesh with axis ``data`` over the first ``num_devices`` CPU devices."""
    devices = jax.devices()
    if len(devices) < num_devices:
        raise RuntimeError(
            f"need {num_devices} devices, have {len(devices)}; "
            "set XLA_FLAGS=--xla_force_host_platform_device_count=8"
        )
    return jax.sharding.Mesh(np.array(devices[:num_devices]), (AXIS,))


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
