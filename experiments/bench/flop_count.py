"""Matrix-product and convolution FLOPs of a traced JAX program, counted analytically.

One FLOP count for both sides of the accelerator benchmark's MFU: the FLOPs of our
pretraining step, counted here from its jaxpr, divide both our step time and the reference
PyTorch step time (both compute the same ResNet-50 on the same batch). It counts what
PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` counts, so the two agree on the same
work (``tests/experiments/test_bench_accelerator.py`` checks it on a small network on the
CPU):

* ``dot_general``: 2 x (output elements) x (contracted size);
* ``conv_general_dilated``: 2 x (output elements) x (kernel elements / output features),
  divided by the product of the input dilation (the input gradient of a strided
  convolution is a convolution over a dilated cotangent; its zeros are not work, and
  PyTorch counts that gradient as the forward convolution's FLOPs).

Elementwise work, reductions and normalisation are not counted (neither does PyTorch's
counter). Nested programs (``jit``, ``custom_vjp``, ``remat``, ``cond`` branches: the
largest) are walked; a ``scan`` body counts ``length`` times; a ``while`` body, whose trip
count is not static, counts once and is reported in ``while_loops``. XLA's
``compiled.cost_analysis()`` is not used: on GPU it has returned -1 or missed the FLOPs of
library calls (cuBLAS, cuDNN) in some JAX versions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.extend


class FlopCount(NamedTuple):
    """``flops``: 2 x multiply-adds of every product and convolution; ``while_loops``: the
    number of ``while`` bodies counted once (0 when the count is exact)."""

    flops: float
    while_loops: int


def _dot_flops(eqn) -> float:
    lhs = eqn.invars[0].aval
    (contract_lhs, _), _ = eqn.params["dimension_numbers"]
    contracted = math.prod(lhs.shape[d] for d in contract_lhs)
    return 2.0 * math.prod(eqn.outvars[0].aval.shape) * contracted


def _conv_flops(eqn) -> float:
    rhs = eqn.invars[1].aval
    numbers = eqn.params["dimension_numbers"]
    out_features = rhs.shape[numbers.rhs_spec[0]]
    dilation = math.prod(eqn.params.get("lhs_dilation") or (1,))
    per_output = math.prod(rhs.shape) / out_features
    return 2.0 * math.prod(eqn.outvars[0].aval.shape) * per_output / dilation


def _subjaxprs(value: Any) -> list:
    if isinstance(value, jax.extend.core.ClosedJaxpr):
        return [value.jaxpr]
    if isinstance(value, jax.extend.core.Jaxpr):
        return [value]
    if isinstance(value, (tuple, list)):
        return [j for v in value for j in _subjaxprs(v)]
    return []


def _count(jaxpr) -> tuple[float, int]:
    flops, loops = 0.0, 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            flops += _dot_flops(eqn)
            continue
        if name == "conv_general_dilated":
            flops += _conv_flops(eqn)
            continue
        if name == "cond":
            branches = [_count(j) for j in _subjaxprs(eqn.params["branches"])]
            flops += max(f for f, _ in branches)
            loops += sum(n for _, n in branches)
            continue
        if name == "while":
            loops += 1
        times = eqn.params.get("length", 1) if name == "scan" else 1
        for sub in (j for v in eqn.params.values() for j in _subjaxprs(v)):
            f, n = _count(sub)
            flops += times * f
            loops += n
    return flops, loops


def count_jaxpr(closed_jaxpr) -> FlopCount:
    """The FLOPs of a (closed) jaxpr, e.g. ``jax.jit(f).trace(*args).jaxpr``."""
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    flops, loops = _count(jaxpr)
    return FlopCount(flops, loops)


def count(fn: Callable, *args: Any) -> FlopCount:
    """The FLOPs of ``fn(*args)`` (``fn`` jitted or not; args may be ShapeDtypeStructs)."""
    jitted = fn if hasattr(fn, "trace") else jax.jit(fn)
    return count_jaxpr(jitted.trace(*args).jaxpr)
