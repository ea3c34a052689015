"""Speed and peak memory of every loss, dense and streamed.

    XLA_FLAGS= python experiments/bench/losses.py                 # full table (long)
    XLA_FLAGS= python experiments/bench/losses.py --quick         # smoke test, seconds
    XLA_FLAGS= python experiments/bench/losses.py --sizes 8192 --losses supcon,sincere
    XLA_FLAGS= python experiments/bench/losses.py --sizes 65536 --memory-only \
        --losses supcon,projnce --variants block,classes       # one call per case

For each N (D = 128) one process times, side by side and in interleaved rounds
(median of ``--repeats``), ``jax.value_and_grad`` of every case and one
``z @ z.T`` product, and prints each time and its ratio to the product. Cases
``loss:variant``: ``dense`` (the [N, N] path, forced at every N), ``block``
(streamed, ``blockwise.BLOCK_ELEMENTS // N`` anchor rows per block; the class
losses without ``num_classes``, so they pick their class slots at run time) or
``block<rows>``, ``classes`` (streamed with ``num_classes=100``, the losses with
class projections), ``auto`` (``block_size=None``: what a caller gets, dense up
to ``blockwise.BLOCKWISE_THRESHOLD`` rows; the same program as ``block`` above
it), ``naive`` (the formula written the obvious way, jitted) and ``optax``
(``optax.losses.ntxent``). ``soft_supcon`` and ``soft_nce`` use their default
ℓ1 distance; ``soft_supcon_cosine`` and ``soft_nce_cosine`` are the same losses
with ``distance="cosine"`` (a matrix-product kernel); their rows are clustered by
class (``SOFT_CLUSTER_NOISE``), so every row has kernel neighbours, its classmates,
as a trained encoder's embeddings would. A second table gives, for
the dense, streamed and automatic paths, the per-round ratio of their time to
the naive one's (median and interquartile range over rounds: a ratio of the
times of the same round, so load that hits both cancels). Then each case runs
once more in its own subprocess, which reports its peak resident memory
(``VmHWM``, which includes the ~0.3 GiB of the Python/JAX runtime). A case whose
compiled arguments and temporaries exceed half the available memory is
reported as ``does not fit`` and not run. ``--memory-only`` skips the timing
rounds: each case runs once in its own subprocess, which also times one
``z @ z.T`` (when its [N, N] output takes under a quarter of the available
memory) and reports the ratio of the two single calls.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

D = 128
TEMPERATURE = 0.1
SIZES = (2048, 8192, 32768, 65536)
LOSSES = (
    "supcon", "sincere", "nt_xent", "projnce", "soft_supcon", "soft_nce", "med_supcon",
    "med_nce", "y_aware_infonce", "conditional_alignment", "conditional_uniformity",
    "global_uniformity", "mio", "soft_target_infonce", "soft_target_cross_entropy",
    "soft_supcon_cosine", "soft_nce_cosine", "align_uniform",
)
#: Losses with class projections: they take ``num_classes`` (the ``classes`` variant).
CLASS_LOSSES = ("projnce", "soft_supcon", "soft_nce", "med_supcon", "med_nce")
#: Metadata (continuous proxy label) losses.
METADATA_LOSSES = ("y_aware_infonce", "conditional_alignment", "conditional_uniformity")
#: Losses without an [N, N] form: no streamed variant.
NOT_STREAMED = ("soft_target_cross_entropy",)
#: Classes of the supervised losses' labels (CIFAR-100-like); NT-Xent uses pairs.
NUM_CLASSES = 100
#: SoftSupCon/SoftNCE rows: unit class centres plus Gaussian noise of this norm, so two
#: rows of a class are about 12.8 x this apart in l1 (0.38), inside the kernel's support
#: (bandwidth 0.6), and rows of different classes about 13 apart, outside it.
SOFT_CLUSTER_NOISE = 0.03


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("MemAvailable not found in /proc/meminfo")


def _inputs(name: str, n: int):
    """The loss's two array arguments for N rows (deterministic)."""
    import jax
    import jax.numpy as jnp

    key_z, key_second = jax.random.split(jax.random.PRNGKey(0))
    if name.startswith("soft_target"):
        logits = jax.random.normal(key_z, (n, D), jnp.float32)
        targets = jax.nn.softmax(3.0 * jax.random.normal(key_second, (n, D), jnp.float32))
        return logits, targets
    z = jax.random.normal(key_z, (n, D), jnp.float32)
    if name in METADATA_LOSSES or name == "global_uniformity":
        return z, jax.random.uniform(key_second, (n,), jnp.float32, 20.0, 80.0)
    if name in ("nt_xent", "mio", "optax_ntxent", "align_uniform"):
        return z, jnp.arange(n) // 2
    labels = jax.random.randint(key_second, (n,), 0, NUM_CLASSES)
    if name.startswith(("soft_supcon", "soft_nce")):
        # Clustered rows: each has its classmates as kernel neighbours, so no row block
        # of the Nadaraya-Watson backward is skipped (random rows have none).
        centres = jax.random.normal(jax.random.PRNGKey(1), (NUM_CLASSES, D), jnp.float32)
        centres = centres / jnp.linalg.norm(centres, axis=1, keepdims=True)
        z = centres[labels] + SOFT_CLUSTER_NOISE * z / jnp.sqrt(D)
    return z, labels


def _naive(kind: str) -> Callable:
    """The formula written the obvious way (SupContrast style), jitted as is."""
    import jax
    import jax.numpy as jnp

    def loss(z, labels):
        z = z / jnp.linalg.norm(z, axis=1, keepdims=True)
        s = z @ z.T / TEMPERATURE
        eye = jnp.eye(z.shape[0], dtype=bool)
        pos = (labels[:, None] == labels[None, :]) & ~eye
        count = pos.sum(1)
        if kind == "sincere":
            lse_neg = jax.nn.logsumexp(jnp.where(labels[:, None] != labels[None, :], s, -jnp.inf), 1)
            pair = jnp.logaddexp(s, lse_neg[:, None]) - s
        else:
            pair = jax.nn.logsumexp(jnp.where(eye, -jnp.inf, s), 1)[:, None] - s
        per_anchor = jnp.sum(jnp.where(pos, pair, 0.0), 1) / jnp.maximum(count, 1)
        ok = count > 0
        return jnp.sum(jnp.where(ok, per_anchor, 0.0)) / jnp.maximum(ok.sum(), 1)

    return loss


def case_fn(case: str, n: int) -> tuple[Callable, tuple]:
    """(jitted value_and_grad, arguments) of a case ``loss:variant``; ``matmul`` is z @ z.T."""
    import jax

    from contrastive_jax import losses
    from contrastive_jax.losses import blockwise

    if case == "matmul":
        z, _ = _inputs("supcon", n)
        return jax.jit(lambda x: x @ x.T), (z,)
    name, variant = case.split(":")
    first, second = _inputs(name, n)
    if variant == "naive":
        fn = _naive("sincere" if name == "sincere" else "supcon")
    elif variant == "optax":
        import optax

        def fn(x, y):
            return optax.losses.ntxent(x, y, temperature=TEMPERATURE)
    else:
        if variant in ("dense", "auto"):
            block = None
        elif variant in ("block", "classes"):
            block = max(8, blockwise.BLOCK_ELEMENTS // n)
        else:
            block = int(variant.removeprefix("block"))
        loss_name, _, distance = name.partition("_cosine")
        loss = losses.get(loss_name)
        # Wang & Isola's loss has no temperature (its t and alpha keep their defaults, 2).
        no_temperature = name.startswith("soft_target") or name == "align_uniform"
        kwargs = {} if no_temperature else {"temperature": TEMPERATURE}
        if name not in NOT_STREAMED:
            kwargs["block_size"] = block
        if name.endswith("_cosine"):
            kwargs["distance"] = "cosine"
        if variant == "classes":
            kwargs["num_classes"] = NUM_CLASSES

        if name == "global_uniformity":
            def fn(x, y):
                return loss(x, **kwargs)
        else:
            def fn(x, y):
                return loss(x, y, **kwargs)

        if variant == "dense":
            # block_size=None is dense only up to the threshold: force the [N, N] path.
            threshold = blockwise.BLOCKWISE_THRESHOLD
            blockwise.BLOCKWISE_THRESHOLD = max(threshold, n)
            try:
                compiled = jax.jit(jax.value_and_grad(fn)).lower(first, second).compile()
            finally:
                blockwise.BLOCKWISE_THRESHOLD = threshold
            return compiled, (first, second)
    return jax.jit(jax.value_and_grad(fn)), (first, second)


def fits(fn: Callable, args: tuple) -> bool:
    """Compiled argument, output and temporary bytes below half the available memory
    (the machine is shared)."""
    compiled = fn.lower(*args).compile() if hasattr(fn, "lower") else fn
    mem = compiled.memory_analysis()
    need = mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes
    return need < 0.5 * _available_bytes()


def _block(x):
    import jax

    return jax.block_until_ready(x)


def time_cases(cases: list[str], n: int, repeats: int) -> dict[str, list[float] | str]:
    """Seconds per call of every case in each of ``repeats`` interleaved rounds
    (or ``"does not fit"``); round r of every case ran back to back."""
    built = {}
    for case in cases:
        fn, args = case_fn(case, n)
        if not fits(fn, args):
            built[case] = None
            continue
        _block(fn(*args))  # compile and warm up
        built[case] = (fn, args)
    times: dict[str, list[float]] = {c: [] for c, b in built.items() if b is not None}
    # optax's ntxent allocates gigabytes; interleaved, it slowed the cases after it by up to
    # 0.5 s a call (the allocator returning and re-faulting memory), so it is timed last.
    heavy = [c for c in times if c.endswith(":optax")]
    for group in ([c for c in times if c not in heavy], heavy):
        for _ in range(repeats + 1):  # the first round is an untimed warm-up of the group
            for case in group:
                fn, args = built[case]
                start = time.perf_counter()
                _block(fn(*args))
                times[case].append(time.perf_counter() - start)
    return {c: (times[c][1:] if c in times else "does not fit") for c in built}


def paired_ratio(times: list[float], reference: list[float]) -> str:
    """Median and interquartile range of the per-round ratios ``times / reference``."""
    ratios = np.asarray(times) / np.asarray(reference)
    low, mid, high = np.percentile(ratios, [25, 50, 75])
    return f"{mid:.2f} [{low:.2f}-{high:.2f}]"


def child(case: str, n: int, with_matmul: bool = False) -> None:
    """Runs one (compiled) case once in this process; prints its time and peak memory as
    JSON (and, ``with_matmul``, the time of one ``z @ z.T`` run after it, if its
    [N, N] output fits)."""
    fn, args = case_fn(case, n)
    fn = fn.lower(*args).compile() if hasattr(fn, "lower") else fn
    if not fits(fn, args):
        print(json.dumps({"case": case, "n": n, "status": "does not fit"}))
        return
    start = time.perf_counter()
    _block(fn(*args))
    seconds = time.perf_counter() - start
    result = {"case": case, "n": n, "status": "ok", "seconds": seconds,
              "peak_mib": _peak_rss_kib() / 1024}
    if with_matmul and 4 * n * n < 0.25 * _available_bytes():
        matmul, (z,) = case_fn("matmul", n)
        _block(matmul(z))
        start = time.perf_counter()
        _block(matmul(z))
        result["matmul_seconds"] = time.perf_counter() - start
    print(json.dumps(result))


def _peak_rss_kib() -> int:
    """High-water resident set of this process (``VmHWM``). Not ``ru_maxrss``: Linux carries
    that over ``exec`` from the parent, so a child of a large benchmark process reported the
    parent's peak."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("VmHWM not found in /proc/self/status")


def run_child(case: str, n: int, with_matmul: bool = False) -> dict:
    """:func:`child` in a fresh process: its JSON result, or ``{"status": "failed ..."}``."""
    env = dict(os.environ, XLA_FLAGS="", TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")
    command = [sys.executable, __file__, "--child", case, "--sizes", str(n)]
    proc = subprocess.run(
        command + (["--memory-only"] if with_matmul else []),
        capture_output=True, text=True, env=env, check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"status": f"failed (exit {proc.returncode})"}
    return json.loads(lines[-1])


def peak_memory(case: str, n: int) -> str:
    result = run_child(case, n)
    return result["status"] if result["status"] != "ok" else f"{result['peak_mib']:.0f} MiB"


#: Variants of ``cases_for`` unless told otherwise.
DEFAULT_VARIANTS = ("dense", "block", "classes", "auto", "naive", "optax")


def cases_for(losses: list[str], blocks: list[int] = (),
              variants: tuple[str, ...] = DEFAULT_VARIANTS) -> list[str]:
    """The cases ``loss:variant`` of these losses: each variant the loss has."""
    cases = []
    for name in losses:
        streamed = name not in NOT_STREAMED
        has = {
            "dense": True,
            "block": streamed,
            # With the l1 distance the class sums are negligible next to the distances.
            "classes": name.removesuffix("_cosine") in CLASS_LOSSES
            and name not in ("soft_supcon", "soft_nce"),
            "auto": streamed,
            "naive": name in ("supcon", "sincere", "nt_xent"),
            "optax": name == "nt_xent",
        }
        for variant in variants:
            if has.get(variant, False):
                cases.append(f"{name}:{variant}")
            if variant == "block" and streamed:
                cases += [f"{name}:block{b}" for b in blocks]
    return cases


def memory_only(cases: list[str], n: int) -> None:
    """One call per case, each in its own process, with a ``z @ z.T`` timed after it."""
    print("\n| N | case | value_and_grad s (one call) | ratio to z@z.T (one call each) "
          "| peak memory |\n|---|---|---|---|---|")
    for case in cases:
        result = run_child(case, n, with_matmul=True)
        if result["status"] != "ok":
            print(f"| {n} | {case} | - | - | {result['status']} |", flush=True)
            continue
        matmul = result.get("matmul_seconds")
        ratio = "-" if matmul is None else f"{result['seconds'] / matmul:.2f}"
        print(f"| {n} | {case} | {result['seconds']:.3g} | {ratio} "
              f"| {result['peak_mib']:.0f} MiB |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--losses", default=",".join(LOSSES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--blocks", default="",
                        help="extra streamed cases with these block heights, e.g. 128,512")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help="variants of each loss to run (those it has)")
    parser.add_argument("--no-memory", action="store_true", help="skip the subprocesses")
    parser.add_argument("--memory-only", action="store_true",
                        help="no timing rounds: one call per case in its own process")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: N=256, SupCon and NT-Xent, one repeat")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.losses, args.repeats = "256", "supcon,nt_xent", 1
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        child(args.child, sizes[0], with_matmul=args.memory_only)
        return
    import jax

    cases = cases_for(args.losses.split(","), [int(b) for b in args.blocks.split(",") if b],
                      tuple(args.variants.split(",")))
    if args.memory_only:
        print(f"# jax {jax.__version__}, {os.cpu_count()} CPUs, D={D}")
        for n in sizes:
            memory_only(cases, n)
        return
    print(f"# jax {jax.__version__}, {os.cpu_count()} CPUs, D={D}, "
          f"median of {args.repeats} interleaved rounds; ratio = time / time(z @ z.T)")
    print("| N | case | value_and_grad s | ratio to z@z.T | peak memory |")
    print("|---|---|---|---|---|")
    all_times = {}
    for n in sizes:
        times = time_cases(["matmul", *cases], n, args.repeats)
        medians = {c: float(np.median(t)) if isinstance(t, list) else t for c, t in times.items()}
        reference = medians["matmul"]
        for case in ["matmul", *cases]:
            t = medians[case]
            ratio = f"{t / reference:.2f}" if isinstance(t, float) and isinstance(
                reference, float) else "-"
            shown = f"{t:.3g}" if isinstance(t, float) else t
            memory = "-" if args.no_memory else peak_memory(case, n)
            print(f"| {n} | {case} | {shown} | {ratio} | {memory} |", flush=True)
        all_times[n] = times
    print_against_naive(all_times)


def print_against_naive(all_times: dict[int, dict[str, list[float] | str]]) -> None:
    """Per-round time ratios of the dense, streamed and automatic paths to the naive one."""
    rows = []
    for n, times in all_times.items():
        for case, t in times.items():
            name, _, variant = case.partition(":")
            naive = times.get(f"{name}:naive")
            if variant in ("dense", "block", "auto") and isinstance(t, list) and isinstance(
                    naive, list):
                rows.append(f"| {n} | {case} | {paired_ratio(t, naive)} |")
    if rows:
        print("\n| N | case | time / naive, per round: median [IQR] |\n|---|---|---|")
        print("\n".join(rows))


if __name__ == "__main__":
    main()
