"""Shared helpers of the model tests: parameter counts, abstract shapes, the data mesh,
and train-mode forwards on one device or under ``jax.shard_map``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import PartitionSpec as P

AXIS = "data"


def count_params(module: nnx.Module) -> int:
    """Number of scalars in the module's ``nnx.Param`` variables (works on abstract modules)."""
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(nnx.state(module, nnx.Param)))


def param_leaves(module: nnx.Module) -> list[jax.Array]:
    return jax.tree.leaves(nnx.state(module, nnx.Param))


def output_shape(module: nnx.Module, x_shape: tuple[int, ...]) -> Any:
    """Abstract output (ShapeDtypeStruct pytree) of ``module`` on a float32 input of ``x_shape``."""
    graphdef, state = nnx.split(module)
    x = jax.ShapeDtypeStruct(x_shape, jnp.float32)
    return jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state, x)


def data_mesh(num_devices: int = 8) -> jax.sharding.Mesh:
    """A 1-D mesh with axis ``data`` over the first ``num_devices`` (simulated CPU) devices."""
    devices = jax.devices()
    assert len(devices) >= num_devices, "tests/conftest.py should set 8 host devices"
    return jax.sharding.Mesh(np.array(devices[:num_devices]), (AXIS,))


@functools.cache
def forward(graphdef: nnx.GraphDef) -> Callable:
    """Jitted ``(state, x) -> (outputs, new_state)`` of the merged module on one device
    (one per graphdef, so tests sharing a model and input shape compile once)."""

    def run(state, x):
        module = nnx.merge(graphdef, state)
        return module(x), nnx.state(module)

    return jax.jit(run)


def sharded_forward(graphdef: nnx.GraphDef, *, return_state: bool) -> Callable:
    """Jitted ``(state, x) -> outputs`` (or ``(outputs, new_state)``) with the forward inside
    ``jax.shard_map`` over the data mesh: batch sharded, state replicated, as in the trainer."""

    def local(state, x):
        module = nnx.merge(graphdef, state)
        out = module(x)
        return (out, nnx.state(module)) if return_state else out

    out_specs = (P(AXIS), P()) if return_state else P(AXIS)
    fn = jax.shard_map(local, mesh=data_mesh(), in_specs=(P(), P(AXIS)), out_specs=out_specs)
    return jax.jit(fn)
