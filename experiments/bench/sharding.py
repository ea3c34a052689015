"""A loss on a batch sharded over 8 devices: ``jax.jit`` on sharded arrays vs ``shard_map``.

    python experiments/bench/sharding.py                       # N = 8192, D = 128
    python experiments/bench/sharding.py --n 2048 --repeats 3 --losses supcon

The script sets ``--xla_force_host_platform_device_count=8`` itself (8 simulated
CPU devices). For each loss, in one process and in interleaved rounds after an
untimed warm-up (median of ``--repeats``), it times ``jax.value_and_grad`` of
the loss (streamed: the default above ``BLOCKWISE_THRESHOLD`` rows) on the same
batch, rows sharded 8 ways, three ways:

* ``shard_map``: ``jax.shard_map`` over the mesh axis with ``axis_name="batch"``;
* ``jit_auto``: ``jax.jit`` on arrays placed with a ``NamedSharding`` over an
  Auto (GSPMD) mesh axis, ``axis_name=None``: GSPMD partitions the global program;
* ``jit_explicit``: the same over an Explicit mesh axis (``jax.make_mesh``'s
  default), which the losses run under ``shard_map`` themselves;

and prints each time and its ratio to ``shard_map``. Only ratios within one run
mean anything: 8 simulated devices share the machine's cores. ``--dots`` prints
instead the shapes of the matrix products in each path's compiled per-device
program (no run): a partitioned program multiplies 1/8 of the [N, N] work per
device, a replicated one all of it.
"""

from __future__ import annotations

import argparse
import os
import re
import time

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from contrastive_jax import losses  # noqa: E402

#: The NCE losses and one loss of each other family.
LOSSES = ("nt_xent", "supcon", "sincere", "projnce", "mio", "y_aware_infonce",
          "soft_target_infonce")
NUM_CLASSES = 100


def _inputs(name: str, n: int, d: int):
    rng = np.random.default_rng(0)
    kind = losses.second_argument(name)
    first = rng.normal(size=(n, d)).astype(np.float32)
    if kind == "instance":
        second = np.repeat(np.arange(n // 2), 2).astype(np.int32)
    elif kind == "label":
        second = rng.integers(0, NUM_CLASSES, n).astype(np.int32)
    elif kind == "metadata":
        second = rng.uniform(20, 80, n).astype(np.float32)
    else:  # soft targets over d classes: logits [n, d]
        second = rng.dirichlet(np.ones(d), n).astype(np.float32)
    return first, second


def _programs(name: str, first, second, block_size: int | None = None):
    """``{path: (jitted value_and_grad, args)}`` for the three paths."""
    loss = losses.get(name)
    kwargs = {"temperature": 0.5} if name != "soft_target_infonce" else {}
    kwargs["block_size"] = block_size
    programs = {}
    mesh = jax.make_mesh((8,), ("batch",), axis_types=(AxisType.Auto,))
    rows = NamedSharding(mesh, P("batch"))
    local = jax.shard_map(
        lambda x, y: loss(x, y, axis_name="batch", **kwargs),
        mesh=mesh, in_specs=(P("batch"), P("batch")), out_specs=P(),
    )
    args = tuple(jax.device_put(x, rows) for x in (first, second))
    programs["shard_map"] = (jax.jit(jax.value_and_grad(local)), args)
    programs["jit_auto"] = (
        jax.jit(jax.value_and_grad(lambda x, y: loss(x, y, **kwargs))), args
    )
    explicit = jax.make_mesh((8,), ("batch",), axis_types=(AxisType.Explicit,))
    args = tuple(jax.device_put(x, NamedSharding(explicit, P("batch"))) for x in (first, second))
    programs["jit_explicit"] = (
        jax.jit(jax.value_and_grad(lambda x, y: loss(x, y, **kwargs))), args
    )
    return programs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--losses", default=",".join(LOSSES))
    parser.add_argument("--block-size", type=int, default=None,
                        help="anchor rows per block on every path (default: the loss's choice)")
    parser.add_argument("--dots", action="store_true",
                        help="print the per-device matrix products of each path; no timing")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.device_count()} devices, N = {args.n}, D = {args.d}, "
          f"median of {args.repeats}, block_size={args.block_size}")
    if args.dots:
        for name in args.losses.split(","):
            programs = _programs(name, *_inputs(name, args.n, args.d), args.block_size)
            for path, (fn, fn_args) in programs.items():
                hlo = fn.lower(*fn_args).compile().as_text()
                shapes = sorted(set(re.findall(r"(f32\[[0-9,]+\])\S* dot\(", hlo)))
                print(f"{name} {path}: {' '.join(shapes)}", flush=True)
        return
    print("| loss | shard_map s | jit_auto s | ratio | jit_explicit s | ratio |")
    print("|---|---|---|---|---|---|")
    for name in args.losses.split(","):
        programs = _programs(name, *_inputs(name, args.n, args.d), args.block_size)
        values = {}
        for path, (fn, fn_args) in programs.items():  # compile and warm up
            value, grad = fn(*fn_args)
            values[path] = float(value)
            jax.block_until_ready(grad)
        reference = values["shard_map"]
        for path, value in values.items():
            if not np.isclose(value, reference, rtol=1e-4):
                raise AssertionError(f"{name} {path}: {value} != shard_map {reference}")
        times = {path: [] for path in programs}
        for _ in range(args.repeats):
            for path, (fn, fn_args) in programs.items():
                start = time.perf_counter()
                jax.block_until_ready(fn(*fn_args))
                times[path].append(time.perf_counter() - start)
        med = {path: float(np.median(t)) for path, t in times.items()}
        base = med["shard_map"]
        print(f"| {name} | {base:.3f} | {med['jit_auto']:.3f} | {med['jit_auto'] / base:.2f} | "
              f"{med['jit_explicit']:.3f} | {med['jit_explicit'] / base:.2f} |", flush=True)


if __name__ == "__main__":
    main()
