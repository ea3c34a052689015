"""Accelerator benchmark: losses against their matrix product, largest batch, the reference
PyTorch losses and pretraining step side by side, numerics; one GPU, at most 8 minutes.

    # on a GPU machine, from the checkout root, after copying the reference files into the
    # git-ignored .device/peers/ (experiments/bench/README.md, "On an accelerator"):
    python -m experiments.bench.accelerator \
        --supcon-dir .device/peers/HobbitLong-SupContrast \
        --sincere-dir .device/peers/tufts-ml-SupContrast
    # every part at tiny sizes on the CPU (what the test suite runs):
    python -m experiments.bench.accelerator --smoke \
        --supcon-dir ../shared/peers/HobbitLong-SupContrast \
        --sincere-dir ../shared/peers/tufts-ml-SupContrast

Parts (``--parts``, all by default), each printed as a table as it runs:

* ``losses``: ``jax.value_and_grad`` of ``supcon``, ``sincere``, ``nt_xent`` and one loss of
  each other family (``projnce``, ``y_aware_infonce``, ``mio``, ``soft_target_infonce``) at
  N = 8192, 65,536 and 262,144 rows, D = 128, float32 and bfloat16 inputs, each at the
  library's default (``block_size=None``: dense up to the streaming threshold, streamed
  above); its time over that of one ``z @ z.T`` of the same shape and dtype timed in the
  same run, at JAX's default matmul precision and, for float32, at ``HIGHEST`` (where the
  [N, N] product does not fit in a quarter of the device's memory it is computed in row
  blocks, each summed over its columns: the same FLOPs, ``matmul_kind = "blocked"``); XLA's
  buffer assignment (arguments + outputs + temporaries) and the device's peak memory
  (``Device.memory_stats()["peak_bytes_in_use"]``, recorded when the case raised it; None
  where the backend keeps no statistics, e.g. the CPU).
* ``largest``: for ``supcon`` (float32), the largest N, doubling, whose value and gradient
  fit in device memory: ours by XLA's buffer assignment of the compiled program against the
  device's memory limit, run while a call stays short; the reference PyTorch ``SupConLoss``
  (HobbitLong/SupContrast ``losses.py``) and tufts-ml ``SINCERELoss``
  (``revised_losses.py``), loaded from their files at run time (``--supcon-dir``,
  ``--sincere-dir``), by running each N until PyTorch runs out of memory.
* ``peers``: at every N where a PyTorch loss fitted, ours timed on the same inputs (unit
  rows, the two views of an example at rows i and i + N/2), time ratio ours/theirs and the
  relative difference of the loss values.
* ``step``: the pretraining step of :mod:`contrastive_jax.train.step` (ResNet-50, ImageNet
  stem, 224 px, SimCLR-v2 head, SupCon and SINCERE, LARS, bfloat16 compute, synthetic views
  already on the device, per-device batch 128 and 256 images x 2 views): images/s and model
  FLOPs utilisation (FLOPs of XLA's cost analysis of the compiled step / step time / the
  card's stated bf16 dense peak, :data:`PEAK_BF16_FLOPS`); beside it the reference step
  (``SupConResNet('resnet50')`` + ``SupConLoss`` + ``util.set_optimizer``'s SGD, bfloat16
  autocast, channels-last; its FLOPs from ``torch.utils.flop_counter``). The reference
  ``ResNet`` has a CIFAR stem (3x3 stride-1, no max-pool), which at 224 px needs about 16x
  the FLOPs and activation memory of the ResNet-50 everyone means; its stem is swapped at
  run time for the ImageNet one (7x7 stride 2 + 3x3 max-pool; the files are not changed),
  so both steps compute the same network. Last, SupCon at batch 128 once more with every
  BatchNorm's variance in Flax's one pass (``use_fast_variance=True``) instead of the
  library's two: what the formula that divides our first-step gradient error by two to three
  costs (``experiments/parity/README.md``, "Where the float32 gradient error comes from").
* ``numerics``: value and gradient of ``supcon``, ``sincere`` and ``nt_xent`` (float32
  inputs) at JAX's default matmul precision and under ``jax.default_matmul_precision
  ("highest")``, against the same formula in float64; and the relative error of a plain
  ``z @ z.T`` at both precisions (and of bfloat16 inputs) against float64, the error the
  losses' ``precision=HIGHEST`` similarity products avoid.

The PyTorch parts run first, in a child process that exits before JAX starts (so neither
framework's allocator holds memory the other needs). Every case catches an out-of-memory
error and records it. A global time budget (``--budget`` seconds, 400 by default) is split
between the parts; a case that would start past its part's share is recorded as
``skipped (budget)``. With start-up and the last case of a part running past its share,
a full run takes about 7 minutes. The last line printed is one JSON object with every
figure.
"""

from __future__ import annotations

import argparse
import contextlib
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

REPO_ROOT = Path(__file__).resolve().parents[2]
D = 128
TEMPERATURE = 0.1
NUM_CLASSES = 100
#: One loss of each family besides SupCon/SINCERE/NT-Xent (``_nce``): ``_projnce``,
#: ``_kernel``, ``_mio``, ``_soft_target``.
LOSSES = ("supcon", "sincere", "nt_xent", "projnce", "y_aware_infonce", "mio",
          "soft_target_infonce")
NUMERICS_LOSSES = ("supcon", "sincere", "nt_xent")
PARTS = ("losses", "largest", "peers", "step", "numerics")

#: Dense (no sparsity) bfloat16 tensor-core peaks in FLOP/s, matched in this order as a
#: substring of ``device_kind``. Sources: NVIDIA H100 Tensor Core GPU datasheet (BF16
#: 1,979 / 1,671 / 1,513 TFLOPS "with sparsity" for SXM / NVL / PCIe, halved for dense);
#: NVIDIA H200 Tensor Core GPU datasheet (SXM 1,979, NVL 1,671 with sparsity); NVIDIA A100
#: datasheet (312 dense).
PEAK_BF16_FLOPS = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H200 NVL", 835e12),
    ("H200", 989e12),
    ("H100", 989e12),
    ("A100", 312e12),
)

#: Sizes of the full run and of ``--smoke``.
FULL = dict(
    loss_sizes=(8192, 65536, 262144), largest_start=65536, largest_cap=1 << 24,
    torch_start=1024, torch_cap=1 << 20, batches=(128, 256), image_size=224,
    encoder="resnet50", reference_encoder="resnet50", step_warmup=3, step_repeats=10, repeats=3,
    numerics_n=4096, budget=400.0,
)
SMOKE = dict(
    loss_sizes=(64,), largest_start=64, largest_cap=256, torch_start=32, torch_cap=128,
    batches=(2,), image_size=32, encoder="small_cnn", reference_encoder="resnet18",
    step_warmup=0, step_repeats=1, repeats=1, numerics_n=64, budget=1200.0,
)
#: Share of the budget of each part (the PyTorch child gets ``torch``).
SHARES = {"torch": 0.2, "losses": 0.25, "largest": 0.08, "peers": 0.06, "step": 0.35,
          "numerics": 0.06}
#: A call predicted to take longer than this is not run by ``largest`` (seconds).
LONGEST_CALL = 20.0


def peak_flops(device_kind: str) -> float | None:
    """The stated dense bfloat16 peak (FLOP/s) of a device kind, or None if not tabled."""
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in device_kind.lower():
            return flops
    return None


def is_oom(err: BaseException) -> bool:
    """Whether an exception is an out-of-memory error of XLA or PyTorch."""
    text = f"{type(err).__name__}: {err}".lower()
    return any(s in text for s in ("resource_exhausted", "out of memory", "outofmemory",
                                   "can't allocate memory", "memoryerror"))


def _error(err: BaseException) -> str:
    kind = "oom" if is_oom(err) else "error"
    return f"{kind}: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"


class Budget:
    """Wall-clock shares of the global budget: ``part(name)`` starts a part's clock."""

    def __init__(self, total: float, shares: dict[str, float]):
        self.start = time.monotonic()
        self.total = total
        self.shares = shares
        self.deadline = self.start + total

    def part(self, name: str) -> float:
        """The monotonic time by which ``name`` should end: its share from now, capped at
        the global deadline."""
        return min(self.deadline, time.monotonic() + self.shares[name] * self.total)

    def left(self) -> float:
        return self.deadline - time.monotonic()


def unit_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit rows float32 [n, D] and class labels int32 [n]; rows i and i + n/2 are the two
    views of example i (one label), the layout of the reference ``SupConLoss``."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, D), dtype=np.float32)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    half = rng.integers(0, NUM_CLASSES, n // 2).astype(np.int32)
    return z, np.concatenate([half, half])


def row(cells: list[Any]) -> str:
    def fmt(c):
        if isinstance(c, float):
            return f"{c:.3g}"
        return "-" if c is None else str(c)
    return "| " + " | ".join(fmt(c) for c in cells) + " |"


def emit(line: str) -> None:
    print(line, flush=True)


# --------------------------------------------------------------------------- PyTorch child


def torch_child(args, sizes: dict) -> dict:
    """The PyTorch parts (largest batch and per-N times of both reference losses; the
    reference step), in this process."""
    from experiments.parity import reference

    torch = reference.require_torch()
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cudnn.benchmark = True  # as main_supcon.py
    resnet_big, supcon_losses = reference.load_supcon(args.supcon_dir)
    util = reference.load_module(Path(args.supcon_dir) / "util.py", "_bench_ref_util")
    sincere_losses = reference.load_sincere(args.sincere_dir)
    budget = Budget(args.budget, {"losses": 0.45, "step": 0.55})
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
    }
    if {"largest", "peers"} & set(args.parts):
        out["losses"] = _torch_losses(torch, dev, supcon_losses, sincere_losses, sizes,
                                      budget.part("losses"))
    if "step" in args.parts:
        out["step"] = _torch_steps(torch, dev, resnet_big, supcon_losses, util, sizes,
                                   budget.part("step"))
    return out


def _torch_sync(torch, dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _torch_peak(torch, dev) -> int | None:
    return int(torch.cuda.max_memory_allocated()) if dev.type == "cuda" else None


def _torch_losses(torch, dev, supcon_losses, sincere_losses, sizes, deadline) -> dict:
    """For SupConLoss and SINCERELoss: value + gradient time and peak memory at N =
    torch_start, doubling, until out of memory, the size cap or the deadline."""
    supcon = supcon_losses.SupConLoss(temperature=TEMPERATURE, base_temperature=TEMPERATURE)
    sincere = sincere_losses.SINCERELoss(temperature=TEMPERATURE)

    def call(name, z, labels):
        n = z.shape[0]
        if name == "supcon":
            features = torch.stack([z[: n // 2], z[n // 2:]], dim=1)  # [N/2, 2, D]
            loss = supcon(features, labels[: n // 2])
        else:
            loss = sincere(z, labels)
        (grad,) = torch.autograd.grad(loss, z)
        return loss, grad

    results = {}
    for name in ("supcon", "sincere"):
        rows, stopped = [], "cap"
        n = sizes["torch_start"]
        emit(f"\n# reference PyTorch {name}, value + gradient (float32, {dev.type})")
        emit("| N | s | peak device bytes | loss value |\n|---|---|---|---|")
        while n <= sizes["torch_cap"]:
            if time.monotonic() > deadline:
                stopped = "budget"
                break
            z_np, labels_np = unit_rows(n)
            try:
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                z = torch.from_numpy(z_np).to(dev).requires_grad_(True)
                labels = torch.from_numpy(labels_np.astype(np.int64)).to(dev)
                loss, grad = call(name, z, labels)  # warm-up
                _torch_sync(torch, dev)
                times = []
                for _ in range(sizes["repeats"]):
                    start = time.perf_counter()
                    loss, grad = call(name, z, labels)
                    _torch_sync(torch, dev)
                    times.append(time.perf_counter() - start)
                    if times[-1] > 2.0:
                        break
                record = {"n": n, "seconds": float(np.median(times)),
                          "peak_bytes": _torch_peak(torch, dev), "value": float(loss)}
                del loss, grad, z
            except (RuntimeError, MemoryError) as err:
                if not is_oom(err):
                    raise
                rows.append({"n": n, "status": _error(err)})
                emit(row([n, "out of memory", None, None]))
                stopped = "oom"
                break
            rows.append(record)
            emit(row([n, record["seconds"], record["peak_bytes"], record["value"]]))
            n *= 2
        fitted = [r["n"] for r in rows if "seconds" in r]
        results[name] = {"rows": rows, "largest_n": max(fitted) if fitted else None,
                         "stopped": stopped}
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return results


def _torch_steps(torch, dev, resnet_big, supcon_losses, util, sizes, deadline) -> list[dict]:
    """The reference pretraining step at each per-device batch: images/s, FLOPs, MFU."""
    emit(f"\n# reference PyTorch step: SupConResNet('{sizes['reference_encoder']}') with the "
         f"ImageNet stem, SupConLoss, SGD, bf16 autocast, channels-last, "
         f"{sizes['image_size']} px ({dev.type})")
    emit("| batch (images) | step s | images/s | FLOPs/step | MFU | peak device bytes |\n"
         "|---|---|---|---|---|---|")
    rows = []
    for batch in sizes["batches"]:
        if time.monotonic() > deadline:
            rows.append({"batch": batch, "status": "skipped (budget)"})
            emit(row([batch, "skipped (budget)"]))
            continue
        try:
            record = _torch_step(torch, dev, resnet_big, supcon_losses, util, sizes, batch)
        except (RuntimeError, MemoryError) as err:
            if not is_oom(err):
                raise
            record = {"batch": batch, "status": _error(err)}
        finally:
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        rows.append(record)
        emit(row([batch, record.get("step_s", record.get("status")), record.get("images_per_s"),
                  record.get("flops_per_step"), record.get("mfu"), record.get("peak_bytes")]))
    return rows


def _torch_step(torch, dev, resnet_big, supcon_losses, util, sizes, batch: int) -> dict:
    """One configuration of the reference step, timed over ``step_repeats`` steps."""
    from torch.utils.flop_counter import FlopCounterMode

    nn = torch.nn
    torch.manual_seed(0)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = resnet_big.SupConResNet(name=sizes["reference_encoder"], head="mlp", feat_dim=128)
    encoder = model.encoder
    encoder.conv1 = nn.Conv2d(3, encoder.conv1.out_channels, 7, 2, 3, bias=False)
    # relu(maxpool(bn(x))) == maxpool(relu(bn(x))): the ImageNet stem's max-pool.
    encoder.bn1 = nn.Sequential(encoder.bn1, nn.MaxPool2d(3, 2, 1))
    model = model.to(dev, memory_format=torch.channels_last)
    criterion = supcon_losses.SupConLoss(temperature=TEMPERATURE, base_temperature=TEMPERATURE)
    optimizer = util.set_optimizer(
        types.SimpleNamespace(learning_rate=0.5, momentum=0.9, weight_decay=1e-4), model)
    size = sizes["image_size"]
    images = torch.randn(2 * batch, 3, size, size, device=dev).contiguous(
        memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=dev)

    # bf16 autocast on the GPU; float32 on the CPU (--smoke), where PyTorch's bf16
    # convolution backward took 13 s for 4 rows of 32 px.
    autocast = torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                              enabled=dev.type == "cuda")

    def step():
        # main_supcon.py's train(): both views in one forward, [B, 2, 128] to the loss.
        with autocast:
            features = model(images)
            f1, f2 = torch.split(features, [batch, batch], dim=0)
            loss = criterion(torch.cat([f1.unsqueeze(1), f2.unsqueeze(1)], dim=1), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    with FlopCounterMode(display=False) as counter:
        step()
    flops = float(counter.get_total_flops())
    for _ in range(sizes["step_warmup"]):
        step()
    _torch_sync(torch, dev)
    start = time.perf_counter()
    for _ in range(sizes["step_repeats"]):
        loss = step()
    _torch_sync(torch, dev)
    seconds = (time.perf_counter() - start) / sizes["step_repeats"]
    peak = peak_flops(torch.cuda.get_device_name()) if dev.type == "cuda" else None
    return {"batch": batch, "step_s": seconds, "images_per_s": batch / seconds,
            "flops_per_step": flops, "mfu": None if peak is None else flops / seconds / peak,
            "peak_bytes": _torch_peak(torch, dev), "loss": float(loss),
            "autocast": "bfloat16" if dev.type == "cuda" else None}


def run_torch_child(args, seconds: float) -> dict:
    """:func:`torch_child` in a fresh process (its table lines echoed as they come)."""
    command = [sys.executable, "-m", "experiments.bench.accelerator", "--torch-child",
               "--budget", f"{seconds:.0f}", "--parts", ",".join(args.parts),
               "--supcon-dir", str(args.supcon_dir), "--sincere-dir", str(args.sincere_dir)]
    if args.smoke:
        command.append("--smoke")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: no deadlock on a full pipe
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=err, text=True)
        result = None
        try:
            for line in proc.stdout:
                if line.startswith("{"):
                    result = json.loads(line)
                else:
                    print(line, end="", flush=True)
            proc.wait(timeout=seconds + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
        err.seek(0)
        stderr = err.read()
    if proc.returncode != 0 or result is None:
        return {"status": f"failed (exit {proc.returncode}): {stderr[-500:]}"}
    return result


# --------------------------------------------------------------------------- JAX: losses


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


def loss_value_and_grad(name: str) -> Callable:
    """``value_and_grad`` (w.r.t. the first argument) of the loss at its defaults."""
    import jax

    from contrastive_jax import losses

    fn = losses.get(name)
    kwargs = {} if name == "soft_target_infonce" else {"temperature": TEMPERATURE}
    return jax.value_and_grad(lambda x, y: fn(x, y, **kwargs))


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


def _memory_stats() -> dict | None:
    import jax

    try:
        return jax.devices()[0].memory_stats() or None
    except Exception:  # noqa: BLE001 - backends without statistics
        return None


def _peak() -> int | None:
    stats = _memory_stats()
    return None if stats is None else int(stats.get("peak_bytes_in_use", 0))


def compiled_bytes(compiled) -> int | None:
    """Arguments + outputs + temporaries of a compiled program (XLA's buffer assignment)."""
    try:
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes)
    except Exception:  # noqa: BLE001 - not every backend reports it
        return None


def time_compiled(compiled, args, repeats: int, deadline: float) -> dict:
    """Warm-up call, then up to ``repeats`` timed calls (fewer past ``deadline`` or when a call
    takes over 2 s): median seconds, and the device peak if this case raised it."""
    import jax

    before = _peak()
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
        if times[-1] > 2.0 or time.monotonic() > deadline:
            break
    after = _peak()
    raised = after if after is not None and before is not None and after > before else None
    return {"seconds": float(np.median(times)), "device_peak_bytes": raised}


def matmul_fn(n: int, itemsize: int, plan_bytes: int, precision) -> tuple[Callable, str]:
    """One ``z @ z.T`` at ``precision``: dense when its [n, n] output fits in a quarter of
    ``plan_bytes``, else in row blocks each summed over its columns (same FLOPs)."""
    import jax
    import jax.numpy as jnp

    if n * n * itemsize <= plan_bytes // 4:
        return jax.jit(lambda z: jnp.matmul(z, z.T, precision=precision)), "dense"
    rows = max(1, (plan_bytes // 16) // (n * itemsize))
    rows = 1 << (rows.bit_length() - 1)  # a power of two, dividing n (a power of two)
    rows = min(rows, n)

    def blocked(z):
        blocks = z.reshape(n // rows, rows, z.shape[1])
        return jax.lax.map(lambda b: jnp.matmul(b, z.T, precision=precision).sum(1), blocks)

    return jax.jit(blocked), "blocked"


def part_losses(sizes: dict, names: list[str], deadline: float) -> list[dict]:
    import jax
    import jax.numpy as jnp

    _, plan = _device_memory()
    emit("\n# losses: value + gradient (block_size=None), D = 128; ratio = time / time(z @ z.T)")
    emit("| N | dtype | case | compile s | s | / z@z.T | / z@z.T HIGHEST | XLA bytes | "
         "device peak bytes |\n|---|---|---|---|---|---|---|---|---|")
    records = []
    for n in sizes["loss_sizes"]:
        for dtype_name, dtype in (("float32", jnp.float32), ("bfloat16", jnp.bfloat16)):
            reference = {}
            precisions = [("default", None)]
            if dtype_name == "float32":
                precisions.append(("highest", jax.lax.Precision.HIGHEST))
            for label, precision in precisions:
                record = {"part": "matmul", "n": n, "dtype": dtype_name, "precision": label}
                try:
                    if time.monotonic() > deadline:
                        raise TimeoutError("skipped (budget)")
                    fn, kind = matmul_fn(n, jnp.dtype(dtype).itemsize, plan, precision)
                    z = jax.random.normal(jax.random.PRNGKey(0), (n, D), jnp.float32).astype(dtype)
                    start = time.perf_counter()
                    compiled = fn.lower(z).compile()
                    record.update(kind=kind, compile_s=time.perf_counter() - start,
                                  xla_bytes=compiled_bytes(compiled),
                                  **time_compiled(compiled, (z,), sizes["repeats"], deadline))
                    reference[label] = record["seconds"]
                    del z, compiled
                except TimeoutError as err:
                    record["status"] = str(err)
                except Exception as err:  # noqa: BLE001 - recorded, the run goes on
                    record["status"] = _error(err)
                records.append(record)
                emit(row([n, dtype_name, f"z @ z.T ({label}, {record.get('kind', '-')})",
                          record.get("compile_s"), record.get("seconds", record.get("status")),
                          None, None, record.get("xla_bytes"), record.get("device_peak_bytes")]))
            for name in names:
                record = {"part": "loss", "loss": name, "n": n, "dtype": dtype_name}
                try:
                    if time.monotonic() > deadline:
                        raise TimeoutError("skipped (budget)")
                    args = loss_inputs(name, n, dtype)
                    start = time.perf_counter()
                    compiled = jax.jit(loss_value_and_grad(name)).lower(*args).compile()
                    record.update(compile_s=time.perf_counter() - start,
                                  xla_bytes=compiled_bytes(compiled),
                                  **time_compiled(compiled, args, sizes["repeats"], deadline))
                    for label in ("default", "highest"):
                        if label in reference:
                            record[f"ratio_{label}"] = record["seconds"] / reference[label]
                    del args, compiled
                except TimeoutError as err:
                    record["status"] = str(err)
                except Exception as err:  # noqa: BLE001 - recorded, the run goes on
                    record["status"] = _error(err)
                records.append(record)
                emit(row([n, dtype_name, name, record.get("compile_s"),
                          record.get("seconds", record.get("status")),
                          record.get("ratio_default"), record.get("ratio_highest"),
                          record.get("xla_bytes"), record.get("device_peak_bytes")]))
    return records


def time_ours(name: str, n: int, repeats: int, deadline: float,
              inputs: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Value + gradient of our loss ``name`` (float32) on :func:`unit_rows` (or ``inputs``):
    compile and call times, XLA bytes, the value."""
    import jax
    import jax.numpy as jnp

    z, labels = unit_rows(n) if inputs is None else inputs
    args = (jnp.asarray(z), jnp.asarray(labels))
    start = time.perf_counter()
    compiled = jax.jit(loss_value_and_grad(name)).lower(*args).compile()
    record = {"n": n, "compile_s": time.perf_counter() - start,
              "xla_bytes": compiled_bytes(compiled)}
    record.update(time_compiled(compiled, args, repeats, deadline))
    record["value"] = float(compiled(*args)[0])
    return record


def part_largest(sizes: dict, torch_result: dict | None, deadline: float) -> dict:
    """Ours: doubling N while XLA's buffer assignment fits the device, run while a call is
    predicted under LONGEST_CALL seconds; beside the PyTorch losses' largest N."""
    import jax
    import jax.numpy as jnp

    limit, plan = _device_memory()
    emit(f"\n# largest supcon batch (float32, D = 128); memory limit "
         f"{limit if limit is not None else f'none reported (planning with {plan} host bytes)'}")
    emit("| N | XLA bytes | fits | s (one call) |\n|---|---|---|---|")
    rows, stopped, last_s = [], "cap", None
    n = sizes["largest_start"]
    while n <= sizes["largest_cap"]:
        if time.monotonic() > deadline:
            stopped = "budget"
            break
        record: dict[str, Any] = {"n": n}
        try:
            spec = (jax.ShapeDtypeStruct((n, D), jnp.float32),
                    jax.ShapeDtypeStruct((n,), jnp.int32))
            compiled = jax.jit(loss_value_and_grad("supcon")).lower(*spec).compile()
            record["xla_bytes"] = need = compiled_bytes(compiled)
            record["fits"] = need is not None and need < plan
            if not record["fits"]:
                stopped = "memory"
                rows.append(record)
                emit(row([n, need, False, None]))
                break
            predicted = None if last_s is None else 4.5 * last_s
            if predicted is None or (predicted < LONGEST_CALL
                                     and time.monotonic() + predicted < deadline):
                z, labels = unit_rows(n)
                args = (jnp.asarray(z), jnp.asarray(labels))
                start = time.perf_counter()
                jax.block_until_ready(compiled(*args))
                record["seconds"] = last_s = time.perf_counter() - start
                del args
            else:
                record["seconds"] = None
                record["not_run"] = f"predicted {predicted:.0f} s per call"
        except Exception as err:  # noqa: BLE001 - an OOM ends the doubling
            record["status"] = _error(err)
            record["fits"] = False
            stopped = "oom" if is_oom(err) else "error"
            rows.append(record)
            emit(row([n, record.get("xla_bytes"), record["status"], None]))
            break
        rows.append(record)
        emit(row([n, record["xla_bytes"], True, record["seconds"]]))
        n *= 2
    fitted = [r["n"] for r in rows if r.get("fits")]
    result = {"ours": {"rows": rows, "largest_n": max(fitted) if fitted else None,
                       "largest_n_run": max((r["n"] for r in rows if r.get("seconds")),
                                            default=None),
                       "stopped": stopped, "memory_limit_bytes": limit}}
    for name in ("supcon", "sincere"):
        theirs = (torch_result or {}).get("losses", {}).get(name)
        result[f"reference_{name}"] = (
            {k: theirs[k] for k in ("largest_n", "stopped")} if theirs else None)
    emit("| who | largest N | stopped by |\n|---|---|---|")
    for who, r in result.items():
        emit(row([who, None if r is None else r["largest_n"], None if r is None else r["stopped"]]))
    return result


def part_peers(sizes: dict, torch_result: dict | None, deadline: float) -> list[dict]:
    """Ours on the reference's inputs at every N where a PyTorch loss fitted."""
    emit("\n# peers: ours / reference PyTorch, value + gradient, same inputs (float32)")
    emit("| loss | N | ours s | theirs s | ours / theirs | value rel. diff |\n"
         "|---|---|---|---|---|---|")
    records = []
    for name in ("supcon", "sincere"):
        theirs = (torch_result or {}).get("losses", {}).get(name, {}).get("rows", [])
        for ref in theirs:
            if "seconds" not in ref:
                continue
            n = ref["n"]
            record = {"loss": name, "n": n, "theirs_s": ref["seconds"]}
            try:
                if time.monotonic() > deadline:
                    raise TimeoutError("skipped (budget)")
                ours = time_ours(name, n, sizes["repeats"], deadline)
                record.update(ours_s=ours["seconds"], ratio=ours["seconds"] / ref["seconds"],
                              value_rel_diff=abs(ours["value"] - ref["value"]) / abs(ref["value"]))
            except TimeoutError as err:
                record["status"] = str(err)
            except Exception as err:  # noqa: BLE001 - recorded, the run goes on
                record["status"] = _error(err)
            records.append(record)
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
        warmup_steps=None, warmup_init=0.0, final_lr_factor=0.0, epochs=None,
        total_steps=None, grad_clip_norm=None, decay_norm_and_bias=False,
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


def step_configs(batches: tuple[int, ...]) -> list[tuple[str, int, str]]:
    """(loss, per-device batch, variant) in the order they run: SupCon (the loss of the
    reference step) at every batch first, then SINCERE from the largest batch down, then
    SupCon at the smallest batch with one-pass BatchNorm variance (``bn_one_pass``)."""
    return ([("supcon", b, "") for b in batches]
            + [("sincere", b, "") for b in sorted(batches)[::-1]]
            + [("supcon", min(batches), "bn_one_pass")])


def part_step(sizes: dict, torch_result: dict | None, deadline: float) -> list[dict]:
    """Each configuration traced, lowered, compiled and timed in turn, its row printed as soon
    as it is timed: on an H200 the five configurations compiled at once in threads had not
    finished after about 200 s, and the run was cut off with no row at all."""
    import jax

    kind = jax.devices()[0].device_kind
    peak = peak_flops(kind)
    stem = " (ImageNet stem)" if sizes["encoder"].startswith("resnet") else ""
    emit(f"\n# pretraining step: {sizes['encoder']}{stem}, SimCLR-v2 head, LARS, "
         f"bf16 compute, {sizes['image_size']} px, 2 views; {jax.device_count()} x {kind}, "
         f"peak {peak}")
    emit("| loss | batch / device | lower s | compile s | step s | images/s | "
         "FLOPs/step (XLA) | MFU | PyTorch images/s | ours / PyTorch | device peak bytes |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|")
    theirs = {r["batch"]: r for r in (torch_result or {}).get("step", []) if "images_per_s" in r}
    records = {key: {"loss": key[0], "batch_per_device": key[1], "variant": key[2]}
               for key in step_configs(sizes["batches"])}
    for key, record in records.items():
        try:
            if time.monotonic() > deadline and any("step_s" in r for r in records.values()):
                raise TimeoutError("skipped (budget)")  # the first configuration runs anyway
            start = time.perf_counter()
            step_fn, state, data, global_batch = build_step(
                sizes["encoder"], key[1], sizes["image_size"], key[0],
                bn_one_pass=key[2] == "bn_one_pass")
            lowered = step_fn.lower(state, data)
            record.update(global_batch=global_batch, lower_s=time.perf_counter() - start)
            emit(f"# {' '.join(filter(None, key[::2]))} {key[1]}: lowered in "
                 f"{record['lower_s']:.1f} s, compiling")
            start = time.perf_counter()
            compiled = lowered.compile()
            record["compile_s"] = time.perf_counter() - start
            record.update(_time_step(compiled, state, data, global_batch, sizes, peak))
            ref = theirs.get(key[1]) if key[0] == "supcon" and not key[2] else None
            if ref is not None:
                record["reference_images_per_s"] = ref["images_per_s"]
                record["ours_over_reference"] = record["images_per_s"] / ref["images_per_s"]
            del compiled, lowered, state, data
        except TimeoutError as err:
            record["status"] = str(err)
        except Exception as err:  # noqa: BLE001 - recorded, the run goes on
            record["status"] = _error(err)
        emit(row([" ".join(filter(None, key[::2])), key[1], record.get("lower_s"),
                  record.get("compile_s"), record.get("step_s", record.get("status")),
                  record.get("images_per_s"), record.get("flops_per_step"), record.get("mfu"),
                  record.get("reference_images_per_s"), record.get("ours_over_reference"),
                  record.get("device_peak_bytes")]))
    return list(records.values())


def _time_step(compiled, state, data, global_batch: int, sizes: dict, peak: float | None) -> dict:
    """Images/s, XLA's FLOPs per step and MFU of a compiled step (warm-up, then the mean
    of ``step_repeats`` steps)."""
    import jax

    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    flops = float(cost.get("flops", 0.0)) if cost else None
    before = _peak()
    for _ in range(sizes["step_warmup"]):
        state, logged = compiled(state, data)
    jax.block_until_ready(state)
    start = time.perf_counter()
    for _ in range(sizes["step_repeats"]):
        state, logged = compiled(state, data)
    jax.block_until_ready(logged)
    seconds = (time.perf_counter() - start) / sizes["step_repeats"]
    after = _peak()
    return {
        "step_s": seconds, "images_per_s": global_batch / seconds, "flops_per_step": flops,
        "mfu": None if peak is None or not flops else
        flops / seconds / (peak * jax.device_count()),
        "device_peak_bytes": after if after and before is not None and after > before else None,
        "loss_value": float(logged["loss"]), "finite": float(logged["finite"]),
    }


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


def part_numerics(sizes: dict, deadline: float) -> dict:
    """Relative errors (L2 over the whole array) of value and gradient against float64."""
    import jax
    import jax.numpy as jnp

    n = sizes["numerics_n"]
    z_np, _ = unit_rows(n)
    z_np = z_np * 3.0  # the losses normalise; not unit on input
    rng = np.random.default_rng(1)
    labels = {"supcon": rng.integers(0, NUM_CLASSES, n).astype(np.int32),
              "nt_xent": (np.arange(n) // 2).astype(np.int32)}
    labels["sincere"] = labels["supcon"]
    emit(f"\n# numerics vs float64, N = {n}, D = {D} (relative L2 error)")
    emit("| quantity | default precision | HIGHEST |\n|---|---|---|")
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
    for label, precision in (("default", None), ("highest", "highest")):
        with jax.default_matmul_precision(precision) if precision else contextlib.nullcontext():
            gram = np.asarray(jax.jit(lambda u: u @ u.T)(u32))
            result[f"gram_float32_{label}"] = _rel(gram, gram64)
            for name in NUMERICS_LOSSES:
                if time.monotonic() > deadline:
                    result[f"{name}_{label}"] = "skipped (budget)"
                    continue
                value, grad = jax.jit(loss_value_and_grad(name))(
                    jnp.asarray(z_np), jnp.asarray(labels[name]))
                result[f"{name}_value_{label}"] = _rel(value, exact[name][0])
                result[f"{name}_grad_{label}"] = _rel(grad, exact[name][1])
    result["gram_bfloat16_inputs"] = _rel(
        np.asarray(jax.jit(lambda u: (u @ u.T).astype(jnp.float32))(u32.astype(jnp.bfloat16))),
        gram64)
    for key in ["gram_float32", *(f"{n_}_{q}" for n_ in NUMERICS_LOSSES for q in ("value", "grad"))]:
        emit(row([key, result.get(f"{key}_default"), result.get(f"{key}_highest")]))
    emit(row(["gram, bfloat16 inputs", result["gram_bfloat16_inputs"], None]))
    return result


# --------------------------------------------------------------------------- main


def block_imports(names: list[str]) -> None:
    """Makes ``import name`` fail for each name, as on an accelerator image without them."""
    for name in names:
        sys.modules[name] = None  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="every part at tiny sizes (CPU)")
    parser.add_argument("--supcon-dir", help="HobbitLong/SupContrast checkout (PyTorch parts)")
    parser.add_argument("--sincere-dir", help="tufts-ml/SupContrast checkout (PyTorch parts)")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts")
    parser.add_argument("--losses", default=",".join(LOSSES),
                        help="comma-separated losses of the losses part (default: all seven)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for all parts (default 400; --smoke 1200: nothing skipped)")
    parser.add_argument("--block-imports", default="",
                        help="comma-separated modules made unimportable first, e.g. "
                             "tensorflow,ml_collections (an accelerator image without them)")
    parser.add_argument("--json-out", default=None, help="also write the JSON object here")
    parser.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {unknown}; choose from {PARTS}")
    args.losses = [n for n in args.losses.split(",") if n]
    unknown = sorted(set(args.losses) - set(LOSSES))
    if unknown:
        parser.error(f"--losses: unknown {unknown}; choose from {LOSSES}")
    block_imports([m for m in args.block_imports.split(",") if m])
    sizes = SMOKE if args.smoke else FULL
    if args.budget is None:
        args.budget = sizes["budget"]
    if args.torch_child:
        print(json.dumps(torch_child(args, sizes)), flush=True)
        return {}

    budget = Budget(args.budget, SHARES)
    result: dict[str, Any] = {"smoke": args.smoke, "parts": args.parts, "budget_s": args.budget}
    torch_parts = {"largest", "peers", "step"} & set(args.parts)
    torch_result = None
    if torch_parts and args.supcon_dir and args.sincere_dir:
        torch_result = run_torch_child(args, SHARES["torch"] * args.budget)
    elif torch_parts:
        torch_result = {"status": "not run: give --supcon-dir and --sincere-dir"}
    result["reference"] = torch_result

    import jax  # after the PyTorch child: JAX claims its device memory when it starts

    device = jax.devices()[0]
    result["device"] = {"platform": device.platform, "kind": device.device_kind,
                        "count": jax.device_count(), "jax": jax.__version__,
                        "memory_limit_bytes": _device_memory()[0],
                        "peak_bf16_flops": peak_flops(device.device_kind)}
    emit(f"# {jax.device_count()} x {device.device_kind} ({device.platform}), jax "
         f"{jax.__version__}; reference: {None if torch_result is None else torch_result.get('device')}")
    parts = {
        "losses": lambda: part_losses(sizes, args.losses, budget.part("losses")),
        "largest": lambda: part_largest(sizes, torch_result, budget.part("largest")),
        "peers": lambda: part_peers(sizes, torch_result, budget.part("peers")),
        "step": lambda: part_step(sizes, torch_result, budget.part("step")),
        "numerics": lambda: part_numerics(sizes, budget.part("numerics")),
    }
    for name in PARTS:
        if name in args.parts:
            start = time.monotonic()
            try:
                result[name] = parts[name]()
            except Exception as err:  # noqa: BLE001 - one part failing keeps the others
                result[name] = {"status": _error(err)}
                emit(f"part {name} failed: {_error(err)}")
            result[f"{name}_s"] = time.monotonic() - start
    result["elapsed_s"] = time.monotonic() - budget.start
    result["tensorflow_imported"] = sys.modules.get("tensorflow") is not None
    text = json.dumps(result, default=float)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    print(text, flush=True)
    return result


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Let JAX grow into (almost) the whole card for the largest-batch part; the PyTorch child
    # has exited before JAX starts.
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    main()
