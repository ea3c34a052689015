"""The edges of the loss contract, for every registered loss: garbage in padded rows,
replicated rows under ``axis_name``, and a traced temperature (``docs/conventions.md``).

* NaN and inf in the rows marked ``valid=False`` (of every floating argument) change
  nothing: value and gradient equal those of the zero-padded batch, are finite, and the
  padded rows' gradient is exactly zero; dense and streamed, on one device, inside
  ``jax.shard_map`` with ``axis_name`` and under ``jax.jit`` on an Explicit mesh.
* Inside ``jax.shard_map`` with ``axis_name``, a row-wise argument typed as replicated over
  the axis (``in_specs=P()``) is a ``ValueError`` at trace time naming it and the axis.
* A traced temperature that is not finite and > 0 gives a NaN loss and NaN gradients, and
  under ``checkify`` an error naming ``temperature``; one of the wrong shape is a
  ``ValueError`` naming it.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify
from jax.sharding import PartitionSpec as P

from contrastive_jax import losses
from tests.losses.cases import STREAMED, case, loss_kwargs, streams
from tests.losses.multidevice import AXIS, device_mesh, run_style

#: The ways of running a loss that reach the padding mask by different code paths.
SHARDED = ("shard_map_1d", "jit_explicit")
#: Losses that take a temperature.
WITH_TEMPERATURE = [
    name for name in losses.names()
    if "temperature" in inspect.signature(losses.get(name)).parameters
]


def _layouts(name: str) -> list[int | None]:
    return [None, STREAMED] if streams(name) else [None]


def _garbage(x: jax.Array, valid: jax.Array) -> jax.Array:
    """``x`` with NaN in the first padded row and +-inf in the others (floating ``x``)."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return x
    padded = np.flatnonzero(~np.asarray(valid))
    signs = np.where(np.arange(np.prod(x.shape[1:])) % 2, -1.0, 1.0).reshape(x.shape[1:])
    x = x.at[padded[1:]].set(jnp.asarray(signs * np.inf, x.dtype))
    return x.at[padded[0]].set(jnp.nan)


def _zero_padded(x: jax.Array, valid: jax.Array) -> jax.Array:
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return x
    return jnp.where(valid.reshape((-1,) + (1,) * (x.ndim - 1)), x, 0)


def _one_device(name: str, block_size: int | None):
    """The jitted value and gradient of ``name`` on one device, and its padded arguments
    ``{"zero": (first, second), "garbage": (first, second)}``."""
    loss_fn, first, second, valid = case(name)
    kwargs = loss_kwargs(name, block_size)
    step = jax.jit(jax.value_and_grad(lambda x, y: loss_fn(x, y, valid=valid, **kwargs)))
    inputs = {kind: (pad(first, valid), pad(second, valid))
              for kind, pad in (("zero", _zero_padded), ("garbage", _garbage))}
    return step, inputs


def _assert_matches_zero_padding(value, grad, ref_value, ref_grad, valid, exact: bool):
    assert np.all(np.isfinite(value)) and np.all(np.isfinite(grad))
    np.testing.assert_array_equal(np.asarray(grad)[~np.asarray(valid)], 0.0)
    value = np.asarray(value).reshape(-1)
    if exact:  # the same program on bitwise the same (masked) input
        np.testing.assert_array_equal(value, np.full_like(value, ref_value))
        np.testing.assert_array_equal(grad, ref_grad)
    else:  # another program: float32 reassociation, as in test_sharding
        np.testing.assert_allclose(value, np.full_like(value, ref_value), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("name", "block_size"),
    [(name, block) for name in losses.names() for block in _layouts(name)],
    ids=lambda v: v if isinstance(v, str) else ("dense" if v is None else "streamed"),
)
@pytest.mark.slow
def test_garbage_padding_equals_zero_padding_on_one_device(name, block_size):
    """Every loss: NaN and inf padding give the zero-padded value and gradient, bit for bit."""
    valid = case(name)[3]
    step, inputs = _one_device(name, block_size)
    ref_value, ref_grad = step(*inputs["zero"])
    value, grad = step(*inputs["garbage"])
    _assert_matches_zero_padding(value, grad, ref_value, ref_grad, valid, exact=True)


def _sharded_params():
    """Every loss in both ``SHARDED`` styles, dense and streamed; `make test` runs each loss
    once, the styles and layouts taking turns (the mask runs in the shared entry, before the
    loss's own code), `make test-all` the whole product."""
    for i, name in enumerate(losses.names()):
        layouts = _layouts(name)
        fast = (layouts[(i // 2) % len(layouts)], SHARDED[i % 2])
        for block in layouts:
            for style in SHARDED:
                mode = "dense" if block is None else "streamed"
                yield pytest.param(
                    name, block, style, id=f"{name}-{mode}-{style}",
                    marks=() if (block, style) == fast else (pytest.mark.slow,),
                )


@pytest.mark.parametrize(("name", "block_size", "style"), list(_sharded_params()))
@pytest.mark.matrix
def test_garbage_padding_equals_zero_padding_sharded(name, block_size, style):
    """Inside ``shard_map`` with ``axis_name`` and under ``jit`` on an Explicit mesh."""
    loss_fn, first, second, valid = case(name)
    step, inputs = _one_device(name, block_size)
    ref_value, ref_grad = step(*inputs["zero"])
    value, grad = run_style(style, loss_fn, _garbage(first, valid), _garbage(second, valid),
                            valid, **loss_kwargs(name, block_size))
    _assert_matches_zero_padding(value, grad, ref_value, ref_grad, valid, exact=False)


def _replicated_call(name: str, replicated: int):
    """Traces ``name`` inside ``shard_map`` over ``data`` with argument ``replicated`` (0: the
    first, 1: the second) typed as replicated (``in_specs=P()``)."""
    loss_fn, first, second, valid = case(name)
    kwargs = loss_kwargs(name, None)

    def local(x, y, v):
        return loss_fn(x, y, valid=v, axis_name=AXIS, **kwargs)

    specs = [P(AXIS), P(AXIS), P(AXIS)]
    specs[replicated] = P()
    sharded = jax.shard_map(local, mesh=device_mesh(), in_specs=tuple(specs), out_specs=P())
    jax.eval_shape(sharded, first, second, valid)


def _argument_names(name: str) -> list[str]:
    parameters = inspect.signature(losses.get(name)).parameters.values()
    return [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]


@pytest.mark.parametrize("name", losses.names())
def test_replicated_rows_under_axis_name_raise(name):
    """The issue's case: replicated embeddings were gathered as 8 stacked copies."""
    for position, argument in enumerate(_argument_names(name)):
        with pytest.raises(ValueError, match=rf"`{argument}` is replicated over mesh axis 'data'"):
            _replicated_call(name, position)


@pytest.mark.slow
def test_replicated_rows_without_varying_types_are_not_checked():
    """Under ``shard_map(check_vma=False)`` (and ``pmap``) no array carries a varying-axis
    type: the replicated rows run, 8 stacked copies, as documented."""
    loss_fn, first, second, valid = case("supcon")

    def local(x, y, v):
        return loss_fn(x, y, valid=v, axis_name=AXIS, temperature=0.5)

    stacked = jax.shard_map(local, mesh=device_mesh(), in_specs=(P(), P(), P()),
                            out_specs=P(), check_vma=False)(first, second, valid)
    tiled = [jnp.tile(x, (8,) + (1,) * (x.ndim - 1)) for x in (first, second, valid)]
    expected = jax.jit(lambda x, y, v: loss_fn(x, y, valid=v, temperature=0.5))(*tiled)
    np.testing.assert_allclose(stacked, expected, rtol=1e-5)


def _with_temperature(name: str):
    loss_fn, first, second, valid = case(name)
    kwargs = loss_kwargs(name, None)
    del kwargs["temperature"]

    def f(x, tau):
        return loss_fn(x, second, valid=valid, temperature=tau, **kwargs)

    return f, first, valid


@pytest.mark.parametrize("name", WITH_TEMPERATURE)
@pytest.mark.slow
def test_traced_bad_temperature_gives_nan(name):
    """tau <= 0, inf or NaN passed to ``jit``: the loss and the real rows' gradient are NaN
    (never a finite wrong value, never inf); a good traced tau is the concrete one's loss."""
    f, first, valid = _with_temperature(name)
    step = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))
    for tau in (0.0, -0.1, np.inf, np.nan):
        value, (grad, grad_tau) = step(first, jnp.float32(tau))
        assert np.isnan(value), (tau, value)
        assert np.all(np.isnan(np.asarray(grad)[np.asarray(valid)])), tau
        assert np.isnan(grad_tau), tau
    value, _ = step(first, jnp.float32(0.5))
    np.testing.assert_allclose(value, f(first, 0.5), rtol=1e-6)


@pytest.mark.parametrize("name", WITH_TEMPERATURE)
@pytest.mark.matrix
def test_checkify_reports_a_bad_traced_temperature(name):
    f, first, _ = _with_temperature(name)
    checked = checkify.checkify(jax.jit(f), errors=checkify.user_checks)
    error, _ = checked(first, jnp.float32(-0.1))
    with pytest.raises(checkify.JaxRuntimeError, match=r"`temperature` must be finite and > 0"):
        error.throw()
    error, value = checked(first, jnp.float32(0.5))
    assert error.get() is None and np.isfinite(value)


@pytest.mark.parametrize("name", WITH_TEMPERATURE)
def test_temperature_of_the_wrong_shape_names_it(name):
    f, first, _ = _with_temperature(name)
    with pytest.raises(ValueError, match=r"`temperature` must be a scalar, got shape \(2,\)"):
        jax.jit(f)(first, jnp.array([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"`temperature` must be a scalar"):
        f(first, np.array([0.5, 0.5]))
