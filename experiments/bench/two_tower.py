"""Speed and peak memory of the two-tower losses (CLIP, SigLIP), dense and streamed.

    XLA_FLAGS= python experiments/bench/two_tower.py --sizes 4096,16384 --repeats 5
    XLA_FLAGS= python experiments/bench/two_tower.py --sizes 65536 --memory-only \
        --cases clip:block,siglip:block,products:block
    XLA_FLAGS= python experiments/bench/two_tower.py --quick            # smoke test
    python experiments/bench/two_tower.py --devices 8 --sizes 16384 \
        --cases clip:gather@8,clip:ring@8,siglip:gather@8,siglip:ring@8

For each N (pairs, D = 512 by default) one process times, side by side in interleaved
rounds after an untimed warm-up round (median of ``--repeats``), ``jax.value_and_grad``
with respect to both towers, the temperature and (SigLIP) the bias of each case, and the
two N x N x D products a two-tower loss needs (``a @ b.T`` and ``b @ a.T``), and prints
each time and its ratio to those two products. Cases ``loss:variant``: ``dense`` (the
[N, N] path, forced), ``block`` (streamed, the default above
``blockwise.BLOCKWISE_THRESHOLD`` pairs), ``naive`` (the formula written the obvious
way, as open_clip / big_vision's single-device code does, jitted). ``products:dense``
is the reference: the two products materialised; ``products:block`` computes them in
row blocks of the loss's height and sums each block (no [N, N] array, so it runs at
any N). ``loss:gather@P`` and ``loss:ring@P`` run the loss under ``jax.shard_map`` over P
simulated CPU devices (``--devices P``; N is the global batch), with ``exchange="gather"``
(all-gather both towers) or ``exchange="ring"`` (``lax.ppermute``), the gradient taken
inside (the training step's pattern); their ``per-device`` column is XLA's compiled
per-device memory (arguments + outputs + temporaries, ``memory_analysis``), which a
process-wide peak cannot separate. With ``--memory-only`` every case runs once in its own subprocess, which
reports the time of that one call and its peak resident memory (``VmHWM``, including
the ~0.3 GiB of the Python/JAX runtime). Without it, the memory column is measured in
the same way after the timing rounds. A case whose compiled arguments and temporaries
exceed half the available memory is reported as ``does not fit`` and not run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

D = 512
TEMPERATURE, BIAS = 0.1, -10.0
CASES = ("products:dense", "products:block", "clip:dense", "clip:block", "clip:naive",
         "siglip:dense", "siglip:block", "siglip:naive")


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("MemAvailable not found")


def _peak_rss_mib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("VmHWM not found")


def _inputs(n: int, d: int):
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    a = rng.normal(size=(n, d)).astype(np.float32)
    b = (a + rng.normal(size=(n, d))).astype(np.float32)
    return jnp.asarray(a), jnp.asarray(b)


def _naive(loss: str):
    """The loss written the obvious way (one [N, N] logits array, autodiff)."""
    import jax
    import jax.numpy as jnp

    def normalise(x):
        return x / jnp.linalg.norm(x, axis=1, keepdims=True)

    def fn(a, b, t, c):
        logits = normalise(a) @ normalise(b).T / t
        if loss == "clip":
            diag = jnp.diagonal(logits)
            return 0.5 * (jnp.mean(jax.nn.logsumexp(logits, 1) - diag)
                          + jnp.mean(jax.nn.logsumexp(logits, 0) - diag))
        labels = 2 * jnp.eye(a.shape[0]) - 1
        return -jnp.sum(jax.nn.log_sigmoid(labels * (logits + c))) / a.shape[0]

    return fn


def case_fn(case: str, n: int, d: int = D):
    """(jitted function, args) of ``case`` at N = ``n``."""
    import jax
    import jax.numpy as jnp

    from contrastive_jax import losses
    from contrastive_jax.losses import blockwise

    loss, variant = case.split(":")
    a, b = _inputs(n, d)
    block = min(n, max(8, blockwise.BLOCK_ELEMENTS // n))
    if "@" in variant:
        return _sharded(loss, variant, a, b, block)
    if loss == "products":
        if variant == "dense":
            fn = jax.jit(lambda x, y: (x @ y.T, y @ x.T))
        else:
            def blocked(x, y):
                def one(p, q):
                    rows = p.reshape(n // block, block, d)
                    return jax.lax.map(lambda r: jnp.sum(r @ q.T), rows).sum()
                return one(x, y) + one(y, x)
            fn = jax.jit(blocked)
        return fn, (a, b)
    args = (a, b, jnp.float32(TEMPERATURE), jnp.float32(BIAS))
    if variant == "naive":
        f = _naive(loss)
    else:
        size = n if variant == "dense" else block
        call = losses.clip if loss == "clip" else losses.siglip

        def f(x, y, t, c):
            extra = {} if loss == "clip" else {"bias": c}
            if variant == "dense":  # force the [N, N] path at any N
                with _threshold(n):
                    return call(x, y, temperature=t, **extra)
            return call(x, y, temperature=t, block_size=size, **extra)
    return jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2, 3))), args


def _sharded(loss: str, variant: str, a, b, block: int):
    """value_and_grad inside shard_map over P devices, ``exchange`` gather or ring."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from contrastive_jax import losses

    exchange, devices = variant.split("@")
    mesh = jax.sharding.Mesh(np.array(jax.devices()[: int(devices)]), ("data",))
    call = losses.clip if loss == "clip" else losses.siglip

    def per_device(x, y, t, c):
        def f(x, y, t, c):
            extra = {} if loss == "clip" else {"bias": c}
            return call(x, y, temperature=t, axis_name="data", exchange=exchange,
                        block_size=block, **extra)
        return jax.value_and_grad(f, argnums=(0, 1, 2, 3))(x, y, t, c)

    rows = P("data")
    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(rows, rows, P(), P()),
                               out_specs=(P(), (rows, rows, P(), P()))))
    put = NamedSharding(mesh, rows)
    args = (jax.device_put(a, put), jax.device_put(b, put), jnp.float32(TEMPERATURE),
            jnp.float32(BIAS))
    return fn, args


def per_device_mib(fn, args) -> int:
    mem = fn.lower(*args).compile().memory_analysis()
    total = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
    return int(total // 2**20)


class _threshold:
    """Raises ``blockwise.BLOCKWISE_THRESHOLD`` to ``n`` while tracing (the dense path)."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        from contrastive_jax.losses import blockwise

        self.old, blockwise.BLOCKWISE_THRESHOLD = blockwise.BLOCKWISE_THRESHOLD, self.n

    def __exit__(self, *exc):
        from contrastive_jax.losses import blockwise

        blockwise.BLOCKWISE_THRESHOLD = self.old


def fits(fn, args) -> bool:
    mem = fn.lower(*args).compile().memory_analysis()
    need = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
    return need < _available_bytes() // 2


def _block_until_ready(x):
    import jax

    jax.tree.map(lambda y: y.block_until_ready(), x)


def time_cases(cases: list[str], n: int, d: int, repeats: int) -> dict:
    fns = {}
    for case in cases:
        fn, args = case_fn(case, n, d)
        fns[case] = (fn, args) if fits(fn, args) else None
    times = {c: ([] if fns[c] else "does not fit") for c in cases}
    for round_ in range(repeats + 1):
        for case in cases:
            if fns[case] is None:
                continue
            fn, args = fns[case]
            start = time.perf_counter()
            _block_until_ready(fn(*args))
            if round_:  # round 0 compiles and warms up
                times[case].append(time.perf_counter() - start)
    return times, fns


def child(case: str, n: int, d: int) -> None:
    """One call of ``case`` after compilation; prints JSON with its time and peak memory."""
    fn, args = case_fn(case, n, d)
    if not fits(fn, args):
        print(json.dumps({"seconds": None, "peak_mib": None}))
        return
    compiled = fn.lower(*args).compile()
    start = time.perf_counter()
    _block_until_ready(compiled(*args))
    print(json.dumps({"seconds": time.perf_counter() - start, "peak_mib": _peak_rss_mib(),
                      "per_device_mib": per_device_mib(fn, args)}))


def run_child(case: str, n: int, d: int) -> dict:
    devices = int(case.split("@")[1]) if "@" in case else 1
    flags = f"--xla_force_host_platform_device_count={devices}" if devices > 1 else ""
    proc = subprocess.run(
        [sys.executable, __file__, "--child", case, "--sizes", str(n), "--dim", str(d)],
        capture_output=True, text=True, check=True, env={**os.environ, "XLA_FLAGS": flags},
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,16384")
    parser.add_argument("--dim", type=int, default=D)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--analysis-only", action="store_true",
                        help="compile each case and print its per-device memory; run nothing")
    parser.add_argument("--quick", action="store_true", help="N = 256, D = 32, 1 repeat")
    parser.add_argument("--devices", type=int, default=1,
                        help="simulated CPU devices of this process (for the @P cases)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.devices > 1 and not args.child:
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    if args.quick:
        args.sizes, args.dim, args.repeats = "256", 32, 1
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = args.cases.split(",")
    if args.child:
        child(args.child, sizes[0], args.dim)
        return
    print(f"D = {args.dim}; value_and_grad wrt both towers, temperature and bias")
    print("| N | case | value_and_grad s | ratio to the two products | peak memory | "
          "per-device |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        if args.analysis_only:
            for case in cases:
                print(f"| {n} | {case} | - | - | - | {per_device_mib(*case_fn(case, n, args.dim))} "
                      "MiB |", flush=True)
            continue
        if args.memory_only:
            for case in cases:
                out = run_child(case, n, args.dim)
                if out["seconds"] is None:
                    print(f"| {n} | {case} | does not fit | - | does not fit | - |", flush=True)
                else:
                    print(f"| {n} | {case} | {out['seconds']:.3f} | - | {out['peak_mib']} MiB | "
                          f"{out['per_device_mib']} MiB |", flush=True)
            continue
        times, fns = time_cases(cases, n, args.dim, args.repeats)
        base = "products:dense" if isinstance(times.get("products:dense"), list) else \
            "products:block"
        ref = float(np.median(times[base])) if isinstance(times.get(base), list) else None
        for case in cases:
            t = times[case]
            if isinstance(t, str):
                print(f"| {n} | {case} | {t} | - | {t} | - |", flush=True)
                continue
            med = float(np.median(t))
            ratio = f"{med / ref:.2f}" if ref else "-"
            mem = "-" if args.no_memory else f"{run_child(case, n, args.dim)['peak_mib']} MiB"
            print(f"| {n} | {case} | {med:.3f} | {ratio} | {mem} | "
                  f"{per_device_mib(*fns[case])} MiB |", flush=True)
        print(f"(ratios to {base})", flush=True)


if __name__ == "__main__":
    main()
