"""Accelerator benchmark: losses against their matrix product, largest executed batch, the
reference PyTorch losses and pretraining step side by side, numerics; one GPU, short leases.

    # on a GPU machine, from the checkout root, after copying the reference files into the
    # git-ignored .device/peers/ (experiments/bench/README.md, "How to spend the next GPU
    # session", runs this script in three stages within 8 minutes):
    python -m experiments.bench.accelerator --json-out rows.jsonl \
        --supcon-dir .device/peers/HobbitLong-SupContrast \
        --sincere-dir .device/peers/tufts-ml-SupContrast
    # every part at tiny sizes on the CPU (what the test suite runs):
    python -m experiments.bench.accelerator --smoke --json-out rows.jsonl \
        --supcon-dir ../shared/peers/HobbitLong-SupContrast \
        --sincere-dir ../shared/peers/tufts-ml-SupContrast

Every row is appended to ``--json-out`` as one JSON line (``{"part": ..., ...}``) and
flushed the moment it exists, by this process and by each child process, so a run stopped
by ``timeout`` keeps everything it measured; the last line is the ``summary`` row.

Parts (``--parts``, all by default), each printed as a table as it runs:

* ``losses``: ``jax.value_and_grad`` of the losses (``--losses``; ``supcon``, ``sincere``,
  ``nt_xent`` and one loss of each other family by default) at ``--loss-sizes`` rows (8192,
  65,536, 262,144), D = 128, ``--dtypes`` inputs, for each ``--precisions`` (the losses'
  ``precision`` option: float32 at ``HIGHEST``, TF32, bfloat16 products; only the NCE
  losses have it) and each ``--block-sizes`` (``auto``: the library's choice). Beside each,
  one ``z @ z.T`` of the same shape timed in the same run at JAX's default precision and at
  each precision asked (where [N, N] does not fit in a quarter of the device's memory, in
  row blocks each summed over its columns: the same FLOPs, ``kind = "blocked"``): ratios
  to the default product, to the float32 ``HIGHEST`` product, and ``floor_multiple``, the
  time over three products at the loss's own precision (value + gradient need three
  [N, N, D] products, ``losses/blockwise.py``). XLA's compile-time memory estimate
  (``xla_estimate_bytes``, buffer assignment: an estimate, not a measurement) and the
  process's device peak so far. With several block sizes, the fastest per N and the
  block rule they suggest for ``losses/blockwise.py`` ``BLOCK_RULES`` (a ``block_rule``
  row, printed as the Python line to paste).
* ``largest``: the largest SupCon batch (float32, D = 128) whose value and gradient were
  *executed*, doubling N, each N in a fresh process, for ours and for the reference
  ``SupConLoss`` (HobbitLong/SupContrast ``losses.py``) and tufts-ml ``SINCERELoss``
  (``revised_losses.py``), loaded from their files (``--supcon-dir``, ``--sincere-dir``);
  each with its measured peak: ``memory_stats()["peak_bytes_in_use"]`` for JAX,
  ``torch.cuda.max_memory_allocated()`` for PyTorch (on the CPU neither exists: the child's
  host ``ru_maxrss`` is recorded instead, labelled so). Doubling stops at out-of-memory, the
  size cap, the budget, or where the next call is predicted (4.5x the last) over
  ``--longest-call`` seconds. Ours also reports XLA's compile-time estimate, labelled.
* ``peers``: ours on the reference's inputs at every N where a reference loss ran in
  ``largest`` (which then runs its reference half): time ratio ours/theirs and the relative
  difference of the values. At N <= 4096 the times are sub-millisecond with three repeats,
  and ours is one XLA program against PyTorch's eager kernel launches: launch overhead,
  not arithmetic.
* ``step``: the pretraining step of :mod:`contrastive_jax.train.step` (ResNet-50, ImageNet
  stem, 224 px, SimCLR-v2 head, LARS, bfloat16 compute, synthetic views on the device), for
  each ``--step-configs`` entry ``loss:batch[:variant]`` (SupCon at 128 and 256 images x 2
  views per device, SINCERE, and ``bn_one_pass``: Flax's one-pass BatchNorm variance),
  beside the reference step (``SupConResNet('resnet50')`` + ``SupConLoss`` + the SGD of
  ``util.set_optimizer``, bfloat16 autocast, channels-last, the CIFAR stem swapped for the
  ImageNet one at run time). Images/s, and MFU for both from ONE FLOP count: the
  analytic count of our traced step (:mod:`contrastive_jax.train.flops`: products and
  convolutions, what ``torch.utils.flop_counter`` counts), divided by each side's step time
  and the card's stated dense bf16 peak (:mod:`contrastive_jax.train.device_peaks`); PyTorch's own counter
  on the reference step is recorded beside it as a cross-check. ``--profile-dir``: a
  ``jax.profiler`` trace of a few steps of each configuration.
* ``numerics``: value and gradient of ``supcon``, ``sincere`` and ``nt_xent`` (float32
  inputs, N = 8192 or ``--numerics-n``) at each ``--precisions``, and a plain ``z @ z.T``
  at each, against the same formulas in float64 (relative L2 errors).

A global budget (``--budget`` seconds, 400 by default) is split between the selected parts
only (and their PyTorch halves), in proportion to :data:`SHARES`; time a part leaves
unused goes to the parts after it. A case that would start past its part's share is
recorded as ``skipped (budget)``. The PyTorch halves (:mod:`experiments.bench.accelerator_torch`)
run first, each in a child process that exits before JAX starts in this one (so neither
allocator holds memory the other needs), and so do the fresh processes of ``largest``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from experiments.bench._accelerator_rows import (
    NUM_CLASSES,
    TEMPERATURE,
    D,
    Rows,
    _jsonable,
    describe_error,
    emit,
    host_max_rss,
    row,
    unit_rows,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
#: One loss of each family besides SupCon/SINCERE/NT-Xent (``_nce``): ``_projnce``,
#: ``_kernel``, ``_mio``, ``_soft_target``.
LOSSES = ("supcon", "sincere", "nt_xent", "projnce", "y_aware_infonce", "mio",
          "soft_target_infonce")
#: The losses with a ``precision`` option (``losses/_precision.py``).
PRECISION_LOSSES = ("supcon", "sincere", "nt_xent")
PRECISIONS = ("float32", "tf32", "bf16")
DTYPES = ("float32", "bfloat16")
NUMERICS_LOSSES = ("supcon", "sincere", "nt_xent")
PARTS = ("losses", "largest", "peers", "step", "numerics")
VARIANTS = ("", "bn_one_pass")

#: Sizes of the full run and of ``--smoke``.
FULL = dict(
    loss_sizes=(8192, 65536, 262144), largest_start=65536, largest_cap=1 << 24,
    torch_start=8192, torch_cap=1 << 20, batches=(128, 256), image_size=224,
    encoder="resnet50", reference_encoder="resnet50", step_warmup=3, step_repeats=10, repeats=3,
    numerics_n=8192, budget=400.0, profile_steps=3,
)
SMOKE = dict(
    loss_sizes=(64,), largest_start=64, largest_cap=128, torch_start=32, torch_cap=64,
    batches=(2,), image_size=32, encoder="small_cnn", reference_encoder="resnet18",
    step_warmup=0, step_repeats=1, repeats=1, numerics_n=64, budget=1200.0, profile_steps=1,
)
#: Relative shares of the budget; only the selected parts (and the PyTorch halves they
#: need: ``reference_step`` for ``step``, ``reference_losses`` for ``largest``/``peers``)
#: take part, normalised to the whole budget.
SHARES = {"reference_step": 0.11, "reference_losses": 0.06, "largest": 0.08, "losses": 0.25,
          "peers": 0.05, "step": 0.35, "numerics": 0.06}
#: A call predicted to take longer than this is not run by ``largest`` (seconds, default
#: of ``--longest-call``).
LONGEST_CALL = 20.0


def peak_flops(device_kind: str) -> float | None:
    """The stated dense bfloat16 peak (FLOP/s) of a device kind, or None if not tabled
    (:func:`contrastive_jax.train.device_peaks.peak_flops`, the training log's MFU's too)."""
    from contrastive_jax.train.device_peaks import peak_flops as device_peak

    return device_peak(device_kind)


class Budget:
    """The global budget split between the selected parts in proportion to their shares.

    ``part(name)`` starts a part's clock: it gets the time left times its share over the
    shares of the parts not started yet (itself included), so the parts selected share the
    whole budget and time an earlier part left unused goes to the later ones.
    """

    def __init__(self, total: float, shares: dict[str, float]):
        if not shares:
            raise ValueError("`shares`: no part selected")
        self.start = time.monotonic()
        self.total = total
        self.deadline = self.start + total
        self.pending = dict(shares)

    def part(self, name: str) -> float:
        """The monotonic time by which ``name`` should end."""
        share = self.pending.pop(name)
        return time.monotonic() + self.left() * share / (share + sum(self.pending.values()))

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


def budget_shares(parts: list[str], reference: bool) -> dict[str, float]:
    """The entries of :data:`SHARES` that a run of ``parts`` uses (``reference``: the
    PyTorch halves run)."""
    names = [p for p in PARTS if p in parts]
    if reference and "step" in parts:
        names.append("reference_step")
    if reference and {"largest", "peers"} & set(parts):
        names.append("reference_losses")
    return {name: SHARES[name] for name in names}


def read_rows(path: str | Path) -> list[dict]:
    """The JSON lines of ``path`` (a ``--json-out`` file)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def parse_step_configs(text: str) -> list[tuple[str, int, str]]:
    """``"supcon:128,sincere:256,supcon:128:bn_one_pass"`` -> [(loss, batch, variant)].

    Raises:
      ValueError: an entry that is not ``loss:batch[:variant]`` with a loss of
        supcon/sincere, a positive batch and a variant of :data:`VARIANTS`.
    """
    configs = []
    for entry in filter(None, text.split(",")):
        fields = entry.split(":")
        if len(fields) not in (2, 3) or fields[0] not in ("supcon", "sincere") \
                or not fields[1].isdigit() or int(fields[1]) < 1 \
                or (len(fields) == 3 and fields[2] not in VARIANTS):
            raise ValueError(f"--step-configs: bad entry {entry!r}; want loss:batch[:variant] "
                             f"with loss supcon|sincere and variant in {VARIANTS[1:]}")
        configs.append((fields[0], int(fields[1]), fields[2] if len(fields) == 3 else ""))
    return configs


def step_configs(batches: tuple[int, ...]) -> list[tuple[str, int, str]]:
    """The default (loss, per-device batch, variant) in the order they run: SupCon (the loss
    of the reference step) at every batch first, then SINCERE from the largest batch down,
    then SupCon at the smallest batch with one-pass BatchNorm variance (``bn_one_pass``)."""
    return ([("supcon", b, "") for b in batches]
            + [("sincere", b, "") for b in sorted(batches)[::-1]]
            + [("supcon", min(batches), "bn_one_pass")])


def parse_block_sizes(text: str) -> list[int | None]:
    """``"auto,64,256"`` -> [None, 64, 256] (None: the library's automatic choice)."""
    out: list[int | None] = []
    for entry in filter(None, text.split(",")):
        if entry == "auto":
            out.append(None)
        elif entry.isdigit() and int(entry) > 0:
            out.append(int(entry))
        else:
            raise ValueError(f"--block-sizes: bad entry {entry!r}; want auto or a positive int")
    return out


def _child_env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


def run_child(args, child: list[str], seconds: float, echo: bool = True) -> dict:
    """This script as ``--child ...`` in a fresh process: its table lines echoed as they
    come, its last JSON line returned (``{"status": "failed ..."}`` if none or killed
    after ``seconds``). The child appends its own rows to ``--json-out``."""
    command = [sys.executable, "-m", "experiments.bench.accelerator", *child,
               "--budget", f"{max(seconds, 1.0):.0f}"]
    for flag in ("supcon_dir", "sincere_dir", "json_out"):
        if getattr(args, flag):
            command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.smoke:
        command.append("--smoke")
    if args.block_imports:
        command += ["--block-imports", args.block_imports]
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: no deadlock on a full pipe
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=_child_env(),
                                stdout=subprocess.PIPE, stderr=err, text=True)
        result = None
        killed = False
        try:
            for line in proc.stdout:
                if line.startswith("{"):
                    result = json.loads(line)
                elif echo:
                    print(line, end="", flush=True)
            proc.wait(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            killed = True
        err.seek(0)
        stderr = err.read()
    if killed:
        return {"status": f"killed after {seconds + 60:.0f} s"}
    if result is None:
        return {"status": f"failed (exit {proc.returncode}): {stderr[-500:]}"}
    return result


# --------------------------------------------------------------------------- JAX: helpers


def loss_inputs(name: str, n: int, dtype) -> tuple:
    """The loss's two array arguments for n rows, the first in ``dtype`` (deterministic)."""
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    if name == "soft_target_infonce":
        targets = jax.nn.softmax(3.0 * jax.random.normal(k2, (n, D), jnp.float32))
        return jax.random.normal(k1, (n, D), jnp.float32).astype(dtype), targets
    z = jax.random.normal(k1, (n, D), jnp.float32).astype(dtype)
    if name == "y_aware_infonce":
        return z, jax.random.uniform(k2, (n,), jnp.float32, 20.0, 80.0)
    if name == "nt_xent":
        return z, jnp.arange(n, dtype=jnp.int32) // 2
    return z, jax.random.randint(k2, (n,), 0, NUM_CLASSES, jnp.int32)


def loss_value_and_grad(name: str, block_size: int | None = None,
                        precision: str = "float32") -> Callable:
    """``value_and_grad`` (w.r.t. the first argument) of the loss at its defaults, with
    ``block_size`` and (the NCE losses) ``precision``.

    Raises:
      ValueError: a ``precision`` other than float32 for a loss without the option.
    """
    import jax

    from contrastive_jax import losses

    fn = losses.get(name)
    kwargs: dict[str, Any] = {} if name == "soft_target_infonce" else {
        "temperature": TEMPERATURE}
    if block_size is not None:
        kwargs["block_size"] = block_size
    if name in PRECISION_LOSSES:
        kwargs["precision"] = precision
    elif precision != "float32":
        raise ValueError(f"{name} has no `precision` option")
    return jax.value_and_grad(lambda x, y: fn(x, y, **kwargs))


def _memory_stats() -> dict | None:
    import jax

    try:
        return jax.devices()[0].memory_stats() or None
    except Exception:  # noqa: BLE001 - backends without statistics
        return None


def _device_memory() -> tuple[int | None, int]:
    """(device memory limit in bytes or None, bytes to plan with): the device's
    ``bytes_limit``, else the host's available memory (CPU)."""
    stats = _memory_stats()
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]), int(stats["bytes_limit"])
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return None, int(line.split()[1]) * 1024
    return None, 1 << 32


def _peak() -> int | None:
    stats = _memory_stats()
    return None if stats is None else int(stats.get("peak_bytes_in_use", 0))


def xla_estimate_bytes(compiled) -> int | None:
    """Arguments + outputs + temporaries of a compiled program: XLA's compile-time buffer
    assignment, an estimate (nothing was run)."""
    try:
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes)
    except Exception:  # noqa: BLE001 - not every backend reports it
        return None


def time_compiled(compiled, args, repeats: int, deadline: float) -> dict:
    """Warm-up call, then up to ``repeats`` timed calls (fewer past ``deadline`` or when a call
    takes over 2 s): median seconds, and the process's device peak so far (``memory_stats``;
    None where the backend keeps none, e.g. the CPU)."""
    import jax

    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
        if times[-1] > 2.0 or time.monotonic() > deadline:
            break
    return {"seconds": float(np.median(times)), "process_peak_bytes": _peak()}


def matmul_fn(n: int, itemsize: int, plan_bytes: int, precision: str | None) -> tuple[Callable, str]:
    """One ``z @ z.T`` at ``precision`` (None: JAX's default; else one of
    :data:`PRECISIONS`, through the losses' own product): dense when its [n, n] output fits
    in a quarter of ``plan_bytes``, else in row blocks each summed over its columns (same
    FLOPs)."""
    import jax

    from contrastive_jax.losses import _precision

    def product(x, y):
        return x @ y.T if precision is None else _precision.dot_t(x, y, precision)

    if n * n * itemsize <= plan_bytes // 4:
        return jax.jit(lambda z: product(z, z)), "dense"
    rows = max(1, (plan_bytes // 16) // (n * itemsize))
    rows = 1 << (rows.bit_length() - 1)  # a power of two, dividing n (a power of two)
    rows = min(rows, n)

    def blocked(z):
        blocks = z.reshape(n // rows, rows, z.shape[1])
        return jax.lax.map(lambda b: product(b, z).sum(1), blocks)

    return jax.jit(blocked), "blocked"


# --------------------------------------------------------------------------- JAX: losses


def _matmul_rows(n, dtype_name, dtype, precisions, plan, sizes, deadline, rows) -> dict:
    """Times ``z @ z.T`` at JAX's default precision and at each precision: {label: s}."""
    import jax
    import jax.numpy as jnp

    reference = {}
    for label in dict.fromkeys(["default", "float32", *precisions]):
        record: dict[str, Any] = {"case": "matmul", "n": n, "dtype": dtype_name,
                                  "precision": label}
        try:
            if time.monotonic() > deadline:
                raise TimeoutError("skipped (budget)")
            fn, kind = matmul_fn(n, jnp.dtype(dtype).itemsize, plan,
                                 None if label == "default" else label)
            z = jax.random.normal(jax.random.PRNGKey(0), (n, D), jnp.float32).astype(dtype)
            start = time.perf_counter()
            compiled = fn.lower(z).compile()
            record.update(kind=kind, compile_s=time.perf_counter() - start,
                          xla_estimate_bytes=xla_estimate_bytes(compiled),
                          **time_compiled(compiled, (z,), sizes["repeats"], deadline))
            reference[label] = record["seconds"]
            del z, compiled
        except TimeoutError as err:
            record["status"] = str(err)
        except Exception as err:  # noqa: BLE001 - recorded, the run goes on
            record["status"] = describe_error(err)
        rows("losses", record)
        emit(row([n, dtype_name, f"z @ z.T ({label}, {record.get('kind', '-')})", "-", "-",
                  record.get("compile_s"), record.get("seconds", record.get("status")),
                  None, None, None, record.get("xla_estimate_bytes"),
                  record.get("process_peak_bytes")]))
    return reference


def part_losses(sizes: dict, args, deadline: float, rows: Rows) -> list[dict]:
    """The loss sweep: every (N, dtype, loss, precision, block size), with the products."""
    import jax
    import jax.numpy as jnp

    from contrastive_jax.losses import blockwise

    _, plan = _device_memory()
    emit("\n# losses: value + gradient, D = 128; ratios = time / time(z @ z.T); floor = "
         "time / (3 products at the loss's precision)")
    emit("| N | dtype | case | precision | block rows | compile s | s | / z@z.T default | "
         "/ z@z.T HIGHEST | / floor | XLA estimate bytes | process device peak |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|")
    records = []
    for n in args.loss_sizes:
        for dtype_name in args.dtypes:
            dtype = jnp.dtype(dtype_name)
            reference = _matmul_rows(n, dtype_name, dtype, args.precisions, plan, sizes,
                                     deadline, rows)
            for name in args.losses:
                for precision in args.precisions:
                    if precision != "float32" and name not in PRECISION_LOSSES:
                        continue
                    for block_size in args.block_sizes:
                        record = {"case": "loss", "loss": name, "n": n, "dtype": dtype_name,
                                  "precision": precision,
                                  "block_size": "auto" if block_size is None else block_size,
                                  "block_rows": blockwise.choose_block(block_size, n)}
                        try:
                            if time.monotonic() > deadline:
                                raise TimeoutError("skipped (budget)")
                            inputs = loss_inputs(name, n, dtype)
                            start = time.perf_counter()
                            compiled = jax.jit(loss_value_and_grad(
                                name, block_size, precision)).lower(*inputs).compile()
                            record.update(compile_s=time.perf_counter() - start,
                                          xla_estimate_bytes=xla_estimate_bytes(compiled),
                                          **time_compiled(compiled, inputs, sizes["repeats"],
                                                          deadline))
                            for label in ("default", "float32"):
                                if label in reference:
                                    key = "highest" if label == "float32" else label
                                    record[f"ratio_{key}"] = record["seconds"] / reference[label]
                            if precision in reference:
                                record["floor_multiple"] = (record["seconds"]
                                                            / (3 * reference[precision]))
                            del inputs, compiled
                        except TimeoutError as err:
                            record["status"] = str(err)
                        except Exception as err:  # noqa: BLE001 - recorded, the run goes on
                            record["status"] = describe_error(err)
                        records.append(rows("losses", record))
                        emit(row([n, dtype_name, name, precision, record["block_rows"],
                                  record.get("compile_s"),
                                  record.get("seconds", record.get("status")),
                                  record.get("ratio_default"), record.get("ratio_highest"),
                                  record.get("floor_multiple"),
                                  record.get("xla_estimate_bytes"),
                                  record.get("process_peak_bytes")]))
    if len(args.block_sizes) > 1:
        block_rule(records, rows)
    return records


def block_rule(records: list[dict], rows: Rows) -> dict | None:
    """The fastest block per (loss, dtype, precision, N) of the sweep, and the rule they
    suggest for ``blockwise.BLOCK_RULES`` (from the float32-precision bests of the first
    loss): ``elements`` the median of best rows x N, ``min_rows``/``max_rows`` the least and
    most best rows. Printed as the Python line to paste, with its provenance."""
    import jax

    best: dict[tuple, dict] = {}
    for r in records:
        if "seconds" not in r:
            continue
        key = (r["loss"], r["dtype"], r["precision"], r["n"])
        if key not in best or r["seconds"] < best[key]["seconds"]:
            best[key] = r
    emit("\n# fastest block per case\n| loss | dtype | precision | N | block rows | s | "
         "/ floor |\n|---|---|---|---|---|---|---|")
    for (loss, dtype, precision, n), r in sorted(best.items()):
        emit(row([loss, dtype, precision, n, r["block_rows"], r["seconds"],
                  r.get("floor_multiple")]))
    points = {k[3]: v["block_rows"] for k, v in sorted(best.items())
              if k[2] == "float32" and k[1] == "float32" and k[0] == records[0]["loss"]}
    points = {n: b for n, b in points.items() if b is not None}
    if not points:
        return None
    device = jax.devices()[0]
    products = sorted(b * n for n, b in points.items())
    rule = {"elements": int(products[len(products) // 2]), "min_rows": min(points.values()),
            "max_rows": max(points.values())}
    provenance = (f"measured: {device.device_kind}, jax {jax.__version__}, "
                  f"{datetime.date.today().isoformat()}, experiments/bench/accelerator.py "
                  f"--block-sizes, {records[0]['loss']} float32 value + gradient, fastest "
                  f"rows by N {points}")
    emit(f'\n# paste into contrastive_jax/losses/blockwise.py BLOCK_RULES:\n    '
         f'"{device.platform}": BlockRule({rule["elements"]}, {rule["min_rows"]}, '
         f'{rule["max_rows"]}, "{provenance}"),')
    return rows("block_rule", {"platform": device.platform, "best_rows_by_n": points,
                               **rule, "provenance": provenance})


# --------------------------------------------------------------------------- largest batch


def child_ours_loss(args, sizes: dict, rows: Rows) -> dict:
    """One N of our SupCon (float32, value + gradient) in this fresh process: compile,
    one timed call after a warm-up, the measured peak and XLA's estimate."""
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    record: dict[str, Any] = {"who": "ours", "n": args.n, "device": device.device_kind}
    try:
        z, labels = unit_rows(args.n)
        inputs = (jnp.asarray(z), jnp.asarray(labels))
        start = time.perf_counter()
        compiled = jax.jit(loss_value_and_grad("supcon")).lower(*inputs).compile()
        record.update(compile_s=time.perf_counter() - start,
                      xla_estimate_bytes=xla_estimate_bytes(compiled))
        jax.block_until_ready(compiled(*inputs))
        start = time.perf_counter()
        value, _ = jax.block_until_ready(compiled(*inputs))
        record.update(seconds=time.perf_counter() - start, value=float(value))
        peak = _peak()
        record.update({"peak_bytes": peak, "peak_source": "memory_stats peak_bytes_in_use"}
                      if peak is not None else
                      {"peak_bytes": host_max_rss(), "peak_source": "host ru_maxrss (CPU)"})
    except Exception as err:  # noqa: BLE001 - an out-of-memory error is the answer
        record["status"] = describe_error(err)
    return rows("largest", record)


def largest_executed(args, who: str, start_n: int, cap: int, deadline: float,
                     longest_call: float) -> dict:
    """Doubling N from ``start_n``, each in a fresh child process (``who``: ours,
    reference_supcon, reference_sincere), until a call fails, the cap, the deadline or a
    call predicted over ``longest_call`` seconds."""
    child = (["--child", "ours-loss"] if who == "ours"
             else ["--child", "reference-loss", "--loss", who.removeprefix("reference_")])
    emit(f"\n# largest executed batch: {who} (float32 SupCon/SINCERE, D = 128; each N a "
         "fresh process)\n| N | s (one call) | measured peak bytes | peak source | "
         "XLA estimate bytes | status |\n|---|---|---|---|---|---|")
    rows_out, stopped, last_s = [], "cap", None
    n = start_n
    while n <= cap:
        left = deadline - time.monotonic()
        predicted = None if last_s is None else 4.5 * last_s
        if left <= 0 or (predicted is not None and predicted > left):
            stopped = "budget"
            break
        if predicted is not None and predicted > longest_call:
            stopped = f"time (next call predicted {predicted:.0f} s > {longest_call:.0f} s)"
            break
        record = run_child(args, [*child, "--n", str(n)], left, echo=False)
        record.setdefault("n", n)
        rows_out.append(record)
        emit(row([n, record.get("seconds"), record.get("peak_bytes"), record.get("peak_source"),
                  record.get("xla_estimate_bytes"), record.get("status", "ran")]))
        if "seconds" not in record:
            stopped = "oom" if str(record.get("status", "")).startswith("oom") else "error"
            break
        last_s = record["seconds"]
        n *= 2
    ran = [r for r in rows_out if "seconds" in r]
    largest = max(ran, key=lambda r: r["n"]) if ran else None
    return {"who": who, "largest_n_executed": largest["n"] if largest else None,
            "peak_bytes": largest.get("peak_bytes") if largest else None,
            "peak_source": largest.get("peak_source") if largest else None,
            "seconds": largest.get("seconds") if largest else None,
            "stopped": stopped, "rows": rows_out}


def part_largest(args, sizes: dict, budget: Budget, rows: Rows, reference: bool) -> dict:
    """Ours and (with the reference files) both reference losses: the largest N executed."""
    result = {}
    if reference:
        deadline = budget.part("reference_losses")
        for name in ("supcon", "sincere"):
            left = (deadline - time.monotonic()) / (2 if name == "supcon" else 1)
            result[f"reference_{name}"] = largest_executed(
                args, f"reference_{name}", sizes["torch_start"], sizes["torch_cap"],
                time.monotonic() + left, args.longest_call)
    if "largest" in args.parts:
        result["ours"] = largest_executed(args, "ours", sizes["largest_start"],
                                          sizes["largest_cap"], budget.part("largest"),
                                          args.longest_call)
    emit("\n| who | largest N executed | measured peak bytes | s | stopped by |\n"
         "|---|---|---|---|---|")
    for who, r in result.items():
        emit(row([who, r["largest_n_executed"], r["peak_bytes"], r["seconds"], r["stopped"]]))
        rows("largest_summary", {k: v for k, v in r.items() if k != "rows"})
    return result


def part_peers(sizes: dict, largest: dict, deadline: float, rows: Rows) -> list[dict]:
    """Ours on the reference's inputs at every N where a reference loss ran."""
    import jax
    import jax.numpy as jnp

    emit("\n# peers: ours / reference PyTorch, value + gradient, same inputs (float32); at "
         "N <= 4096 sub-millisecond times: one XLA program against eager kernel launches")
    emit("| loss | N | ours s | theirs s | ours / theirs | value rel. diff |\n"
         "|---|---|---|---|---|---|")
    records = []
    for name in ("supcon", "sincere"):
        for ref in (largest.get(f"reference_{name}") or {}).get("rows", []):
            if "seconds" not in ref:
                continue
            n = ref["n"]
            record = {"loss": name, "n": n, "theirs_s": ref["seconds"]}
            try:
                if time.monotonic() > deadline:
                    raise TimeoutError("skipped (budget)")
                z, labels = unit_rows(n)
                inputs = (jnp.asarray(z), jnp.asarray(labels))
                compiled = jax.jit(loss_value_and_grad(name)).lower(*inputs).compile()
                ours = time_compiled(compiled, inputs, sizes["repeats"], deadline)
                value = float(compiled(*inputs)[0])
                record.update(ours_s=ours["seconds"], ratio=ours["seconds"] / ref["seconds"],
                              value_rel_diff=abs(value - ref["value"]) / abs(ref["value"]))
            except TimeoutError as err:
                record["status"] = str(err)
            except Exception as err:  # noqa: BLE001 - recorded, the run goes on
                record["status"] = describe_error(err)
            records.append(rows("peers", record))
            emit(row([name, n, record.get("ours_s", record.get("status")), ref["seconds"],
                      record.get("ratio"), record.get("value_rel_diff")]))
    return records


# --------------------------------------------------------------------------- JAX: the step


class _Fields(dict):
    """A dict whose keys are also attributes (what ``objective.parse_terms`` reads)."""

    __getattr__ = dict.__getitem__


def optimizer_config(**overrides) -> types.SimpleNamespace:
    """SimCLR's LARS recipe, every field :func:`contrastive_jax.train.optim.make_optimizer`
    reads (the values of ``optim.default_optimizer_config()``, without ml_collections)."""
    fields = dict(
        name="lars", base_learning_rate=0.3, lr_scaling="linear", weight_decay=1e-6,
        momentum=0.9, trust_coefficient=1e-3, nesterov=False, warmup_epochs=10.0,
        warmup_steps=None, warmup_init=0.0, final_lr_factor=0.0, schedule_epochs=None,
        schedule_steps=None, grad_clip_norm=None, decay_norm_and_bias=False, decay_biases=False,
    )
    fields.update(overrides)
    return types.SimpleNamespace(**fields)


def build_step(encoder: str, per_device_batch: int, image_size: int, loss: str,
               bn_one_pass: bool = False):
    """(jitted step, state, batch, global batch) of the library's pretraining step.

    ``bn_one_pass``: every BatchNorm computes its batch variance as Flax's default
    ``E[x^2] - E[x]^2`` (``use_fast_variance=True``) instead of the library's two passes
    ``E[(x - E[x])^2]``, to measure what the more accurate formula costs.

    Library calls: ``models.create_encoder``, ``models.create_head``,
    ``models.ContrastiveModel``, ``train.step.PretrainModel``, ``train.step.split_model``,
    ``train.optim.make_optimizer``, ``train.step.TrainState``, ``train.objective.parse_terms``,
    ``parallel.make_mesh``, ``train.step.make_train_step``.
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from contrastive_jax import models
    from contrastive_jax.parallel import DATA_AXIS, make_mesh
    from contrastive_jax.train import objective, optim
    from contrastive_jax.train import step as step_lib

    mesh = make_mesh()
    global_batch = per_device_batch * mesh.size
    rngs = nnx.Rngs(0)
    encoder_config = {"name": encoder, "dtype": "bfloat16"}
    if encoder.startswith("resnet"):
        encoder_config["stem"] = "imagenet"
    net = models.create_encoder(encoder_config, rngs=rngs)
    head = models.create_head({"name": "simclr_v2", "dtype": "bfloat16"}, net.num_features,
                              rngs=rngs)
    model = step_lib.PretrainModel(models.ContrastiveModel(net, head), net.num_features, None,
                                   rngs=rngs)
    model.train()
    if bn_one_pass:
        for _, module in nnx.iter_graph(model):
            if isinstance(module, nnx.BatchNorm):
                module.use_fast_variance = True
    graphdef, params, batch_stats, rest = step_lib.split_model(model)
    tx, schedule = optim.make_optimizer(optimizer_config(), params, steps_per_epoch=1000,
                                        global_batch_size=global_batch, total_steps=100_000)
    replicated = NamedSharding(mesh, P())
    sharded = NamedSharding(mesh, P(DATA_AXIS))
    state = jax.device_put(step_lib.TrainState(
        step=jnp.zeros((), jnp.int32), params=params, batch_stats=batch_stats,
        opt_state=tx.init(params), rng=jax.random.key_data(jax.random.key(0))), replicated)
    terms = objective.parse_terms(_Fields(name=loss, temperature=TEMPERATURE))
    step_fn = step_lib.make_train_step(graphdef, rest, tx, terms, schedule, mesh)
    shape = (global_batch, 2, image_size, image_size, 3)
    batch = {
        "views": jax.jit(lambda k: jax.random.normal(k, shape, jnp.float32),
                         out_shardings=sharded)(jax.random.PRNGKey(1)),
        "label": jax.jit(lambda k: jax.random.randint(k, (global_batch,), 0, 1000, jnp.int32),
                         out_shardings=sharded)(jax.random.PRNGKey(2)),
        "index": jax.device_put(np.arange(global_batch, dtype=np.int32), sharded),
    }
    return step_fn, state, batch, global_batch


def part_step(args, sizes: dict, reference_rows: list[dict], deadline: float,
              rows: Rows) -> list[dict]:
    """Each configuration traced, lowered, compiled and timed in turn, its row written as
    soon as it is timed (on an H200 five configurations compiled at once in threads had not
    finished after about 200 s, and the run was cut off with no row at all)."""
    import jax

    from contrastive_jax.train import flops as flop_count

    kind = jax.devices()[0].device_kind
    peak = peak_flops(kind)
    stem = " (ImageNet stem)" if sizes["encoder"].startswith("resnet") else ""
    same_network = sizes["encoder"] == sizes["reference_encoder"]
    emit(f"\n# pretraining step: {sizes['encoder']}{stem}, SimCLR-v2 head, LARS, "
         f"bf16 compute, {sizes['image_size']} px, 2 views; {jax.device_count()} x {kind}, "
         f"peak {peak}; FLOPs: analytic count of our traced step (both sides' MFU)")
    emit("| loss | batch / device | lower s | compile s | step s | images/s | FLOPs/step | "
         "MFU | PyTorch images/s | PyTorch MFU | ours / PyTorch | PyTorch counter / ours | "
         "device peak bytes |\n" + "|---" * 13 + "|")
    theirs = {r["batch_per_device"]: r for r in reference_rows if "images_per_s" in r}
    records = []
    for loss, batch, variant in args.step_configs:
        record: dict[str, Any] = {"loss": loss, "batch_per_device": batch, "variant": variant}
        try:
            if time.monotonic() > deadline and any("step_s" in r for r in records):
                raise TimeoutError("skipped (budget)")  # the first configuration runs anyway
            start = time.perf_counter()
            step_fn, state, data, global_batch = build_step(
                sizes["encoder"], batch, sizes["image_size"], loss,
                bn_one_pass=variant == "bn_one_pass")
            traced = step_fn.trace(state, data)
            count = flop_count.count_jaxpr(traced.jaxpr)
            lowered = traced.lower()
            record.update(global_batch=global_batch, lower_s=time.perf_counter() - start,
                          flops_per_step=count.flops, flops_source="analytic (our jaxpr)",
                          flops_while_loops=count.while_loops)
            emit(f"# {loss} {variant} {batch}: lowered in {record['lower_s']:.1f} s, compiling")
            start = time.perf_counter()
            compiled = lowered.compile()
            record["compile_s"] = time.perf_counter() - start
            state, timing = _time_step(compiled, state, data, global_batch, sizes)
            record.update(timing)
            scale = peak * jax.device_count() if peak else None
            record["mfu"] = count.flops / record["step_s"] / scale if scale else None
            ref = theirs.get(batch) if loss == "supcon" and not variant else None
            if ref is not None:
                record.update(
                    reference_images_per_s=ref["images_per_s"],
                    ours_over_reference=record["images_per_s"] / ref["images_per_s"],
                    reference_flop_counter_over_ours=ref["flop_counter_flops"] / count.flops)
                if same_network and scale:  # one FLOP count: ours, at the same batch
                    record["reference_mfu"] = count.flops / ref["step_s"] / scale
            if args.profile_dir:
                record["profile"] = _profile_step(compiled, state, data, sizes, Path(
                    args.profile_dir) / f"{loss}_{batch}{'_' + variant if variant else ''}")
            del compiled, lowered, traced, state, data
        except TimeoutError as err:
            record["status"] = str(err)
        except Exception as err:  # noqa: BLE001 - recorded, the run goes on
            record["status"] = describe_error(err)
        records.append(rows("step", record))
        emit(row([loss + (f" {variant}" if variant else ""), batch, record.get("lower_s"),
                  record.get("compile_s"), record.get("step_s", record.get("status")),
                  record.get("images_per_s"), record.get("flops_per_step"), record.get("mfu"),
                  record.get("reference_images_per_s"), record.get("reference_mfu"),
                  record.get("ours_over_reference"),
                  record.get("reference_flop_counter_over_ours"),
                  record.get("device_peak_bytes")]))
    return records


def _time_step(compiled, state, data, global_batch: int, sizes: dict) -> tuple[Any, dict]:
    """(state, timing) of a compiled step: warm-up, then the mean of ``step_repeats``
    steps; images/s, the device peak (``memory_stats``), the last loss."""
    import jax

    for _ in range(sizes["step_warmup"]):
        state, logged = compiled(state, data)
    jax.block_until_ready(state)
    start = time.perf_counter()
    for _ in range(sizes["step_repeats"]):
        state, logged = compiled(state, data)
    jax.block_until_ready(logged)
    seconds = (time.perf_counter() - start) / sizes["step_repeats"]
    return state, {
        "step_s": seconds, "images_per_s": global_batch / seconds,
        "device_peak_bytes": _peak(), "loss_value": float(logged["loss"]),
        "finite": float(logged["finite"]),
    }


def _profile_step(compiled, state, data, sizes: dict, directory: Path) -> str:
    """A ``jax.profiler`` trace of ``profile_steps`` steps under ``directory``."""
    import jax

    directory.mkdir(parents=True, exist_ok=True)
    with jax.profiler.trace(str(directory)):
        for _ in range(sizes["profile_steps"]):
            state, logged = compiled(state, data)
        jax.block_until_ready(logged)
    return str(directory)


# --------------------------------------------------------------------------- JAX: numerics


def naive_loss(z, labels, kind: str, temperature: float = TEMPERATURE):
    """SupCon (Khosla et al. 2020, Eq. 2, L_out) or SINCERE (Feeney & Hughes, Eq. 12) written
    densely in the dtype of ``z``; NT-Xent is SupCon with instance ids as labels."""
    import jax
    import jax.numpy as jnp

    z = z / jnp.linalg.norm(z, axis=1, keepdims=True)
    s = jnp.matmul(z, z.T, precision=jax.lax.Precision.HIGHEST) / temperature
    eye = jnp.eye(z.shape[0], dtype=bool)
    pos = (labels[:, None] == labels[None, :]) & ~eye
    if kind == "sincere":
        lse_neg = jax.nn.logsumexp(jnp.where(labels[:, None] != labels[None, :], s, -jnp.inf), 1)
        pair = jnp.logaddexp(s, lse_neg[:, None]) - s
    else:
        pair = jax.nn.logsumexp(jnp.where(eye, -jnp.inf, s), 1)[:, None] - s
    count = pos.sum(1)
    per_anchor = jnp.sum(jnp.where(pos, pair, 0.0), 1) / jnp.maximum(count, 1)
    ok = count > 0
    return jnp.sum(jnp.where(ok, per_anchor, 0.0)) / jnp.maximum(ok.sum(), 1)


def _rel(a, ref) -> float:
    a = np.asarray(a, np.float64)
    ref = np.asarray(ref, np.float64)
    return float(np.linalg.norm(a - ref) / max(np.linalg.norm(ref), 1e-300))


def part_numerics(n: int, precisions: list[str], deadline: float, rows: Rows) -> dict:
    """Relative errors (L2 over the whole array) of value and gradient against float64, at
    each precision of the losses' products; and of a plain ``z @ z.T`` at JAX's default
    precision, at each precision and with bfloat16 inputs."""
    import jax
    import jax.numpy as jnp

    from contrastive_jax.losses import _precision

    z_np, _ = unit_rows(n)
    z_np = z_np * 3.0  # the losses normalise; not unit on input
    rng = np.random.default_rng(1)
    labels = {"supcon": rng.integers(0, NUM_CLASSES, n).astype(np.int32),
              "nt_xent": (np.arange(n) // 2).astype(np.int32)}
    labels["sincere"] = labels["supcon"]
    emit(f"\n# numerics vs float64, N = {n}, D = {D} (relative L2 error)")
    emit("| quantity | precision | relative error |\n|---|---|---|")
    result: dict[str, Any] = {"n": n}
    with jax.enable_x64(True):
        z64 = jnp.asarray(z_np, jnp.float64)
        exact = {}
        for name in NUMERICS_LOSSES:
            kind = "sincere" if name == "sincere" else "supcon"
            value, grad = jax.jit(jax.value_and_grad(
                lambda x, y, k=kind: naive_loss(x, y, k)))(z64, jnp.asarray(labels[name]))
            exact[name] = (np.asarray(value), np.asarray(grad))
        u64 = z64 / jnp.linalg.norm(z64, axis=1, keepdims=True)
        gram64 = np.asarray(jnp.matmul(u64, u64.T, precision=jax.lax.Precision.HIGHEST))
    u32 = jnp.asarray(z_np / np.linalg.norm(z_np, axis=1, keepdims=True), jnp.float32)

    def record(quantity: str, precision: str, compute: Callable[[], float]) -> None:
        entry: dict[str, Any] = {"quantity": quantity, "precision": precision, "n": n}
        try:
            if time.monotonic() > deadline:
                raise TimeoutError("skipped (budget)")
            entry["rel_error"] = compute()
        except TimeoutError as err:
            entry["status"] = str(err)
        except Exception as err:  # noqa: BLE001 - e.g. TF32 on the CPU
            entry["status"] = describe_error(err)
        result[f"{quantity}_{precision}"] = entry.get("rel_error", entry.get("status"))
        rows("numerics", entry)
        emit(row([quantity, precision, entry.get("rel_error", entry.get("status"))]))

    record("gram", "default", lambda: _rel(jax.jit(lambda u: u @ u.T)(u32), gram64))
    record("gram", "bfloat16 inputs", lambda: _rel(
        jax.jit(lambda u: (u @ u.T).astype(jnp.float32))(u32.astype(jnp.bfloat16)), gram64))
    for precision in precisions:
        record("gram", precision, lambda p=precision: _rel(
            jax.jit(lambda u: _precision.dot_t(u, u, p))(u32), gram64))
        for name in NUMERICS_LOSSES:
            computed: dict[str, Any] = {}

            def value_and_grad(name=name, precision=precision, computed=computed):
                if not computed:
                    computed["v"] = jax.jit(loss_value_and_grad(name, precision=precision))(
                        jnp.asarray(z_np), jnp.asarray(labels[name]))
                return computed["v"]

            record(f"{name}_value", precision,
                   lambda f=value_and_grad, name=name: _rel(f()[0], exact[name][0]))
            record(f"{name}_grad", precision,
                   lambda f=value_and_grad, name=name: _rel(f()[1], exact[name][1]))
    return result


# --------------------------------------------------------------------------- main


def block_imports(names: list[str]) -> None:
    """Makes ``import name`` fail for each name, as on an accelerator image without them."""
    for name in names:
        sys.modules[name] = None  # type: ignore[assignment]


def _choices(text: str, allowed: tuple[str, ...], flag: str, parser) -> list[str]:
    values = [v for v in text.split(",") if v]
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        parser.error(f"{flag}: unknown {unknown}; choose from {allowed}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="every part at tiny sizes (CPU)")
    parser.add_argument("--supcon-dir", help="HobbitLong/SupContrast checkout (PyTorch parts)")
    parser.add_argument("--sincere-dir", help="tufts-ml/SupContrast checkout (PyTorch parts)")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts")
    parser.add_argument("--losses", default=",".join(LOSSES),
                        help="comma-separated losses of the losses part (default: all seven)")
    parser.add_argument("--loss-sizes", default=None,
                        help="comma-separated N of the losses part, in the order they run "
                             "(default 8192,65536,262144; --smoke 64)")
    parser.add_argument("--dtypes", default=",".join(DTYPES),
                        help="input dtypes of the losses part (float32,bfloat16)")
    parser.add_argument("--precisions", default="float32",
                        help="comma-separated precisions of the losses' products for the "
                             "losses and numerics parts: float32 (HIGHEST), tf32 (GPU "
                             "only), bf16")
    parser.add_argument("--block-sizes", default="auto",
                        help="comma-separated block sizes of the losses part (auto: the "
                             "library's choice); several print the block rule they suggest")
    parser.add_argument("--step-configs", default=None,
                        help="comma-separated loss:batch[:variant] of the step part, e.g. "
                             "supcon:128,supcon:256,sincere:256,supcon:128:bn_one_pass "
                             "(default: those)")
    parser.add_argument("--profile-dir", default=None,
                        help="write a jax.profiler trace of a few steps of each step "
                             "configuration under this folder")
    parser.add_argument("--numerics-n", type=int, default=None,
                        help="rows of the numerics part (default 8192; --smoke 64)")
    parser.add_argument("--longest-call", type=float, default=LONGEST_CALL,
                        help="largest: do not run an N whose call is predicted longer (s)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the selected parts (default 400; --smoke 1200)")
    parser.add_argument("--block-imports", default="",
                        help="comma-separated modules made unimportable first, e.g. "
                             "tensorflow,ml_collections (an accelerator image without them)")
    parser.add_argument("--json-out", default=None,
                        help="append one JSON line per row here, flushed as it is measured")
    parser.add_argument("--child", choices=("reference-step", "reference-loss", "ours-loss"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--loss", choices=("supcon", "sincere"), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.parts = _choices(args.parts, PARTS, "--parts", parser)
    args.losses = _choices(args.losses, LOSSES, "--losses", parser)
    args.dtypes = _choices(args.dtypes, DTYPES, "--dtypes", parser)
    args.precisions = _choices(args.precisions, PRECISIONS, "--precisions", parser)
    sizes = SMOKE if args.smoke else FULL
    try:
        args.block_sizes = parse_block_sizes(args.block_sizes)
        args.step_configs = (parse_step_configs(args.step_configs) if args.step_configs
                             else step_configs(sizes["batches"]))
        args.loss_sizes = ([int(n) for n in args.loss_sizes.split(",") if n]
                           if args.loss_sizes else list(sizes["loss_sizes"]))
    except ValueError as err:
        parser.error(str(err))
    if args.budget is None:
        args.budget = sizes["budget"]
    for flag in ("supcon_dir", "sincere_dir", "json_out", "profile_dir"):
        if getattr(args, flag):  # the children run from the checkout root
            setattr(args, flag, str(Path(getattr(args, flag)).resolve()))
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    block_imports([m for m in args.block_imports.split(",") if m])
    sizes = SMOKE if args.smoke else FULL
    rows = Rows(args.json_out)
    if args.child in ("reference-step", "reference-loss"):
        from experiments.bench import accelerator_torch

        child = (accelerator_torch.child_reference_step if args.child == "reference-step"
                 else accelerator_torch.child_reference_loss)
        out = child(args, sizes, rows)
    elif args.child == "ours-loss":
        out = child_ours_loss(args, sizes, rows)
    if args.child:
        print(json.dumps(out, default=_jsonable), flush=True)
        return out

    torch_parts = {"largest", "peers", "step"} & set(args.parts)
    reference = bool(torch_parts and args.supcon_dir and args.sincere_dir)
    budget = Budget(args.budget, budget_shares(args.parts, reference))
    result: dict[str, Any] = {"smoke": args.smoke, "parts": args.parts, "budget_s": args.budget,
                              "argv": sys.argv[1:] if argv is None else argv}
    rows("run", {k: v for k, v in result.items()})
    reference_step: dict[str, Any] = {"rows": []}
    if not reference and torch_parts:
        result["reference"] = {"status": "not run: give --supcon-dir and --sincere-dir"}
        emit(f"# reference parts: {result['reference']['status']}")
    if reference and "step" in args.parts:
        seconds = budget.part("reference_step") - time.monotonic()
        reference_step = run_child(
            args, ["--child", "reference-step", "--step-configs",
                   ",".join(":".join(map(str, filter(None, c))) for c in args.step_configs)],
            seconds)
        result["reference"] = {"step": reference_step}
    largest: dict[str, Any] = {}
    if "largest" in args.parts or (reference and "peers" in args.parts):
        largest = part_largest(args, sizes, budget, rows, reference)  # before JAX starts here
        result["largest"] = largest

    import jax  # after the child processes: JAX claims its device memory when it starts

    device = jax.devices()[0]
    result["device"] = {"platform": device.platform, "kind": device.device_kind,
                        "count": jax.device_count(), "jax": jax.__version__,
                        "memory_limit_bytes": _device_memory()[0],
                        "peak_bf16_flops": peak_flops(device.device_kind)}
    rows("device", result["device"])
    emit(f"# {jax.device_count()} x {device.device_kind} ({device.platform}), jax "
         f"{jax.__version__}")
    parts = {
        "losses": lambda: part_losses(sizes, args, budget.part("losses"), rows),
        "peers": lambda: part_peers(sizes, largest, budget.part("peers"), rows),
        "step": lambda: part_step(args, sizes, reference_step.get("rows", []),
                                  budget.part("step"), rows),
        "numerics": lambda: part_numerics(args.numerics_n or sizes["numerics_n"],
                                          args.precisions, budget.part("numerics"), rows),
    }
    for name in ("losses", "peers", "step", "numerics"):
        if name in args.parts:
            start = time.monotonic()
            try:
                result[name] = parts[name]()
            except Exception as err:  # noqa: BLE001 - one part failing keeps the others
                result[name] = {"status": describe_error(err)}
                rows(name, result[name])
                emit(f"part {name} failed: {describe_error(err)}")
            result[f"{name}_s"] = time.monotonic() - start
    result["elapsed_s"] = time.monotonic() - budget.start
    result["tensorflow_imported"] = sys.modules.get("tensorflow") is not None
    rows("summary", {k: result[k] for k in ("elapsed_s", "tensorflow_imported", "parts")})
    print(json.dumps(result, default=_jsonable), flush=True)
    return result


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Let JAX grow into (almost) the whole card for the largest-batch part; the PyTorch
    # children have exited before JAX starts.
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    main()
