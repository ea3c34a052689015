"""FLOPs of a traced JAX program, counted analytically from its jaxpr: the one count of the
trainer's MFU, the dry run (:mod:`contrastive_jax.sizing.dry_run`), ``--fit``
(:mod:`contrastive_jax.sizing.micro_batch_search`) and the accelerator benchmark
(``experiments/bench/accelerator.py``).

It counts what PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` counts, so that a
benchmark's MFU divides the same work on both sides (``tests/experiments/
test_bench_accelerator.py`` checks it on a small network):

* ``dot_general``: 2 x (output elements) x (contracted size);
* ``conv_general_dilated``: 2 x (output elements) x (kernel elements / output features),
  divided by the product of the input dilation (the input gradient of a strided
  convolution is a convolution over a dilated cotangent; its zeros are not work, and
  PyTorch counts that gradient as the forward convolution's FLOPs).

Elementwise work, reductions and normalisation are not counted (neither does PyTorch's
counter). Nested programs are walked: ``jit``, ``custom_vjp``, ``remat`` (``jax.checkpoint``:
its re-forward is in the differentiated program), ``cond`` (the largest branch); a ``scan``
body counts ``length`` times, so each micro-batch of gradient caching's ``"scan"`` loop counts,
its re-forward included; a ``shard_map`` body (one device's share, local shapes) counts once per
device of its manual mesh axes, so the count is always the whole program's, over every
device. A ``while`` body, whose trip count is not static, counts once and is reported in
``while_loops``.

XLA's ``compiled.cost_analysis()`` is not used: it counts a loop's body once whatever its
trip count (a step with 16 micro-batches reported a twelfth of the plain step's FLOPs), and
on GPU it has returned -1 or missed the FLOPs of library calls (cuBLAS, cuDNN) in some JAX
versions.

Example::

    >>> import jax.numpy as jnp
    >>> count(lambda a, b: a @ b, jnp.ones((4, 3)), jnp.ones((3, 5))).flops
    120.0
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


def _times(eqn) -> int:
    """How many times a nested program of ``eqn`` runs: a scan's length, a shard_map's
    devices, else once."""
    name = eqn.primitive.name
    if name == "scan":
        return int(eqn.params["length"])
    if name == "shard_map":
        mesh = eqn.params["mesh"]
        return math.prod(mesh.shape[a] for a in eqn.params["newly_manual_axes"])
    return 1


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
        times = _times(eqn)
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
