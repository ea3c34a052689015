"""Fit a recipe's global batch into the devices' memory: the micro-batch size that makes it fit.

``contrastive-jax-pretrain --config CONFIG --dry_run --fit --devices N --device_memory_gib G``
(or ``--target tpu-v4-32``, whose HBM is the budget) keeps the config's global batch ``B``
(SupCon's and SimCLR's 4,096, whatever ``config.data.global_batch_size`` says), splits it over
the ``N`` devices (``b = B / N`` examples per device) and finds the gradient-caching
micro-batch size ``m`` (``config.train.micro_batch_size``, :mod:`contrastive_jax.train.grad_cache`) that fits:

1. the plain step (no gradient caching) is compiled first; if its per-device total
   (:func:`contrastive_jax.sizing.dry_run.dry_run`, XLA's memory analysis) is within the
   budget, the answer is ``micro_batch_size=None``;
2. otherwise the proper divisors of ``b`` are searched by bisection for the largest ``m``
   that fits (the micro-batched step's memory grows with ``m``: one micro-batch's
   activations plus the projections of all ``b`` examples), ``1 + ceil(log2(d + 1))``
   compiles for ``d`` divisors;
3. if not even the smallest divisor fits, the result says ``fits: False`` (the command line
   prints :func:`does_not_fit_message` and exits with
   :attr:`~contrastive_jax.errors.ExitCode.USAGE`).

A compile that the TPU compiler refuses for lack of memory (``RESOURCE_EXHAUSTED``) counts
as not fitting.

The learning rate: gradient caching computes the gradient of the whole global batch, so the
batch, and with it the peak learning rate of the recipe's scaling rule
(:func:`contrastive_jax.train.optim.peak_learning_rate`: ``linear``, base x B / 256;
``sqrt``, base x sqrt(B), SimCLR's rule for LARS at small batches, Appendix B.1; ``none``)
is the recipe's, unchanged. Lowering the global batch instead
(``--config.data.global_batch_size``) changes it by the same rule, and the report gives the
rule's value at the batch it fitted.

The memory budget is ``device_memory_bytes`` when given (simulated CPU devices have no
limit of their own), else a TPU target's HBM (:data:`~contrastive_jax.train.device_peaks.TPU_CHIPS`),
else the devices' own ``bytes_limit`` (``Device.memory_stats()``, a GPU's).

    result = fit(config, num_devices=8, device_memory_bytes=2 * 2**30)
    print(format_report(result))
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import jax
import ml_collections

from contrastive_jax.errors import ConfigError, ExitCode
from contrastive_jax.sizing.dry_run import TPU_TARGETS, check_divisible, dry_run, target_devices
from contrastive_jax.sizing.dry_run import format_report as dry_run_report
from contrastive_jax.train import optim
from contrastive_jax.train.device_peaks import TPU_CHIPS
from contrastive_jax.train.spec import parse


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order.

    Examples:
      >>> divisors(12)
      [1, 2, 3, 4, 6, 12]
    """
    return [d for d in range(1, n + 1) if n % d == 0]


def memory_budget(target: str, devices: list, device_memory_bytes: int | None) -> int:
    """Bytes one device may use: the given figure, a TPU target's HBM, or the device's limit.

    Raises:
      ConfigError: no figure is given and the devices state none (CPU devices).
    """
    if device_memory_bytes is not None:
        if device_memory_bytes <= 0:
            raise ConfigError(
                f"device_memory_bytes (--device_memory_gib) must be positive, got "
                f"{device_memory_bytes}")
        return int(device_memory_bytes)
    if target in TPU_TARGETS:
        return TPU_CHIPS[TPU_TARGETS[target][0]].hbm_bytes
    stats = devices[0].memory_stats() if hasattr(devices[0], "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    raise ConfigError(
        f"the {devices[0].device_kind} devices of target {target!r} state no memory limit; "
        "give one with --device_memory_gib (device_memory_bytes)")


def fit(
    config: ml_collections.ConfigDict,
    *,
    num_devices: int | None = None,
    target: str = "cpu",
    device_memory_bytes: int | None = None,
) -> dict[str, Any]:
    """The per-device batch and micro-batch size that fit ``config``'s global batch.

    Args:
      config: a pretraining config; its ``train.micro_batch_size`` is ignored (searched) and
        its ``train.micro_batch_loop`` kept.
      num_devices: devices of the data mesh (as :func:`~.dry_run.dry_run`).
      target: ``"cpu"`` or a name of :data:`~.dry_run.TPU_TARGETS`.
      device_memory_bytes: the memory budget per device; None: see :func:`memory_budget`.

    Returns:
      A JSON-ready dict: ``target``, ``device_kind``, ``devices``, ``global_batch``,
      ``per_device_batch``, ``num_views``, ``memory_budget_bytes``, ``fits``,
      ``micro_batch_size`` (None: the plain step fits; an int: gradient caching with that
      many examples per micro-batch and device), ``micro_batches`` (per device; 0: none),
      ``per_device_bytes`` (of the answer), ``lr_scaling``, ``base_learning_rate``,
      ``peak_learning_rate`` (at ``global_batch``), ``tried`` (each compile in order:
      ``micro_batch_size``, ``per_device_bytes`` or None for a compile refused for memory,
      ``fits``, ``compile_seconds``) and ``step`` (the dry-run result of the answer). When
      nothing fits, not even micro-batches of one example, ``fits`` is False and
      ``micro_batch_size``, ``per_device_bytes`` and ``step`` are None.

    Raises:
      ConfigError: a global batch the devices do not divide, no memory budget, a bad config.
      ValueError: a bad ``target`` or ``num_devices`` (:func:`~.dry_run.target_devices`).
    """
    devices = target_devices(target, num_devices)
    budget = memory_budget(target, devices, device_memory_bytes)
    spec = parse(config)
    n, global_batch = len(devices), spec.data.global_batch_size
    per_device = check_divisible(global_batch, target, devices)
    tried: list[dict[str, Any]] = []
    results: dict[int | None, dict[str, Any] | None] = {}

    def fits(micro_batch_size: int | None) -> bool:
        result = _compile(config, micro_batch_size, num_devices=n, target=target,
                          budget=budget)
        results[micro_batch_size] = result
        tried.append({
            "micro_batch_size": micro_batch_size,
            "per_device_bytes": None if result is None else result["per_device_bytes"],
            "fits": result is not None and result["per_device_bytes"] <= budget,
            "compile_seconds": None if result is None else result["compile_seconds"],
        })
        return tried[-1]["fits"]

    answer: int | None = None
    found = fits(None)
    if not found:
        candidates = divisors(per_device)[:-1]  # m = b is the plain step
        lo, hi = 0, len(candidates) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if fits(candidates[mid]):
                answer, found, lo = candidates[mid], True, mid + 1
            else:
                hi = mid - 1
    optimizer = spec.optimizer
    report: dict[str, Any] = {
        "target": target,
        "device_kind": devices[0].device_kind,
        "devices": n,
        "global_batch": global_batch,
        "per_device_batch": per_device,
        "num_views": spec.data.num_views,
        "memory_budget_bytes": budget,
        "fits": found,
        "micro_batch_size": answer,
        "micro_batches": per_device // answer if answer else 0,
        "per_device_bytes": None,
        "lr_scaling": optimizer.lr_scaling,
        "base_learning_rate": float(optimizer.base_learning_rate),
        "peak_learning_rate": optim.peak_learning_rate(optimizer, global_batch),
        "tried": tried,
        "step": None,
    }
    if found:
        step = results[answer]
        assert step is not None
        report.update(per_device_bytes=step["per_device_bytes"], step=step)
    return report


def _compile(config: ml_collections.ConfigDict, micro_batch_size: int | None, *,
             num_devices: int, target: str, budget: int) -> dict[str, Any] | None:
    """The dry run of ``config`` at ``micro_batch_size`` (None: plain); None when the
    compiler refuses the program for lack of memory."""
    candidate = copy.deepcopy(config)
    candidate.train.micro_batch_size = micro_batch_size or 0
    try:
        return dry_run(candidate, num_devices=num_devices, target=target,
                       device_memory_bytes=budget)
    except jax.errors.JaxRuntimeError as err:
        if "RESOURCE_EXHAUSTED" in str(err):
            return None
        raise


def size(num_bytes: float) -> str:
    """``num_bytes`` in GiB, MiB or KiB, whichever shows it with two digits or more.

    Examples:
      >>> size(3 * 2**30), size(1.5 * 2**20), size(2048)
      ('3.00 GiB', '1.50 MiB', '2.0 KiB')
    """
    if num_bytes >= 2**30:
        return f"{num_bytes / 2**30:.2f} GiB"
    if num_bytes >= 2**20:
        return f"{num_bytes / 2**20:.2f} MiB"
    return f"{num_bytes / 2**10:.1f} KiB"


def does_not_fit_message(result: dict[str, Any]) -> str:
    """The error of a :func:`fit` result in which nothing fits."""
    last = result["tried"][-1]
    needs = ("the compiler refused it for lack of memory" if last["per_device_bytes"] is None
             else f"it needs {size(last['per_device_bytes'])} per device")
    smallest = last["micro_batch_size"] or result["per_device_batch"]
    return (
        f"the global batch {result['global_batch']} ({result['per_device_batch']} examples on "
        f"each of {result['devices']} devices) does not fit "
        f"{size(result['memory_budget_bytes'])} per device even with micro-batches "
        f"of {smallest} example{'s' if smallest > 1 else ''} ({needs}): "
        "use more devices, a smaller model or image side, bfloat16 "
        "(--config.model.encoder.dtype=bfloat16), or a smaller "
        "--config.data.global_batch_size (and its learning rate)"
    )


def format_report(result: dict[str, Any]) -> str:
    """Human-readable lines of a :func:`fit` result (without the JSON line)."""
    lines = [
        f"fit: global batch {result['global_batch']} on {result['devices']} x "
        f"{result['device_kind']} ({result['target']}) = {result['per_device_batch']} examples "
        f"x {result['num_views']} views per device; budget "
        f"{size(result['memory_budget_bytes'])} per device",
    ]
    for t in result["tried"]:
        name = (f"micro_batch_size {t['micro_batch_size']}" if t["micro_batch_size"]
                else "plain step (no micro-batches)")
        needs = ("refused by the compiler for lack of memory" if t["per_device_bytes"] is None
                 else f"{size(t['per_device_bytes'])}, compiled in {t['compile_seconds']} s")
        lines.append(f"  {name}: {needs}: {'fits' if t['fits'] else 'does not fit'}")
    if result["fits"] and result["micro_batch_size"] is None:
        lines.append(
            f"answer: the whole per-device batch of {result['per_device_batch']} fits "
            f"({size(result['per_device_bytes'])}); no gradient caching "
            "(--config.train.micro_batch_size=0)")
    elif result["fits"]:
        lines.append(
            f"answer: --config.train.micro_batch_size={result['micro_batch_size']} "
            f"({result['micro_batches']} micro-batches per device, "
            f"{size(result['per_device_bytes'])})")
    rule = {"linear": f"{result['base_learning_rate']:g} x B/256",
            "sqrt": f"{result['base_learning_rate']:g} x sqrt(B)",
            "none": "not scaled with B"}[result["lr_scaling"]]
    lines.append(
        f"learning rate: peak {result['peak_learning_rate']:g} at B = {result['global_batch']} "
        f"(optimizer.lr_scaling={result['lr_scaling']!r}: {rule}); gradient caching keeps the "
        "global batch, so the learning rate is the recipe's"
        + ("" if result["lr_scaling"] == "none" else
           "; a smaller --config.data.global_batch_size would scale it by the same rule"))
    return "\n".join(lines)


def run_cli(
    config: ml_collections.ConfigDict,
    *,
    num_devices: int | None,
    target: str,
    peak_tflops: float | None,
    mfu: float,
    device_memory_bytes: int | None = None,
    search: bool = False,
) -> int:
    """``contrastive-jax-pretrain --dry_run [--fit]``: the dry run's or the search's report, then one JSON line; the exit
    code.

    With ``search`` (``--fit``), the micro-batch search of :func:`fit`; when nothing
    fits, its report and JSON line, then the error on stderr and
    :attr:`~contrastive_jax.errors.ExitCode.USAGE`.

    For ``target="cpu"`` with ``num_devices``, sets ``jax_num_cpu_devices`` first: the flag
    takes effect only before JAX creates its CPU backend, which nothing has done yet when the
    command line calls this (a process whose backend already runs keeps its devices, and
    ``num_devices`` may not exceed them).
    """
    if target == "cpu" and num_devices is not None and num_devices > 0:
        try:
            jax.config.update("jax_num_cpu_devices", num_devices)
        except RuntimeError:  # the backend is already up: use its devices
            pass
    try:
        if search:
            result = fit(config, num_devices=num_devices, target=target,
                         device_memory_bytes=device_memory_bytes)
        else:
            result = dry_run(config, num_devices=num_devices, target=target,
                             peak_tflops=peak_tflops, mfu=mfu,
                             device_memory_bytes=device_memory_bytes)
    except ValueError as err:  # ConfigError included; a bad --target or --devices too
        print(f"error: {err}", file=sys.stderr)
        return ExitCode.USAGE
    print(format_report(result) if search else dry_run_report(result))
    print(json.dumps(result))
    if search and not result["fits"]:
        print(f"error: {does_not_fit_message(result)}", file=sys.stderr)
        return ExitCode.USAGE
    return 0
