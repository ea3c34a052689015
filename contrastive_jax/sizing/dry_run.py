"""Dry run: compile a config's real training step without data; report memory and FLOPs.

``contrastive-jax-pretrain --config CONFIG --dry_run --devices N`` (or ``--target
tpu-v4-32``) builds the model, optimiser and jitted step of :mod:`contrastive_jax.train.loop` for the config's
global batch on an ``N``-device mesh, lowers it with ``jax.ShapeDtypeStruct`` inputs that
carry the trainer's shardings (state replicated, batch split over ``data``), compiles it, and
reports:

* memory per device (``compiled.memory_analysis()``): arguments (the state and this device's
  share of the batch), outputs, temporaries, and their total ``arguments + outputs - aliased +
  temporaries`` (the donated state's outputs reuse the arguments' buffers);
* FLOPs (:func:`contrastive_jax.train.flops.count_jaxpr`, the analytic count of products and
  convolutions in the traced step, every micro-batch of gradient caching and its re-forward
  included): per step, per device (the step's over ``N``) and per image (per example of the
  global batch, all its views); ``flops_while_loops`` is the number of ``while`` bodies
  counted once (0: the count is exact);
* given a peak rate (``peak_tflops`` per device, a TPU target's own by default) and an assumed
  utilisation (``mfu``), the projected step time ``flops_per_device / (peak x mfu)`` and
  images per second ``global_batch / step time``.

Targets:

* ``"cpu"``: ``N`` CPU devices of this process. XLA:CPU's memory figures overstate an
  accelerator's (``simclr_imagenet`` with 256
  views per device reported 31.9 GiB of temporaries on 32 CPU devices, the TPU compiler 18.2
  GiB on a v4-64 slice). The FLOPs, read from the traced program, are the same for every
  target.
  The command line sets ``jax_num_cpu_devices`` to ``N`` before JAX creates its
  CPU backend (the same as ``XLA_FLAGS=--xla_force_host_platform_device_count=N``), so no
  environment variable is needed.
* a TPU slice (:data:`TPU_TARGETS`, e.g. ``"tpu-v4-32"``): compiled ahead of time on this
  machine by the TPU compiler of ``libtpu`` (``pip install 'contrastive_jax[tpu]'``; no TPU is
  needed) for the slice's topology (``jax.experimental.topologies.get_topology_desc``). The
  result compares the per-device total with the device's HBM (:data:`~contrastive_jax.train.device_peaks.TPU_CHIPS`) and says whether
  the step fits.

``device_memory_bytes`` gives a memory budget per device of one's own (simulated CPU devices
have no limit; a TPU target's HBM is the default budget), and ``--fit``
(:mod:`contrastive_jax.sizing.micro_batch_search`) searches the gradient-caching micro-batch size that makes a
config's global batch fit it.

The step is built by :func:`contrastive_jax.train.build.build`, as the trainer's is (gradient
caching included). Nothing is read: the dataset's class count (for the online probe) and the
image side come from the config or :data:`~contrastive_jax.data.KNOWN_DATASETS`; the
learning-rate schedule is built for a nominal epoch of 1,000 steps (the schedule's values do not change the program's memory or FLOPs).

Example (8 simulated CPU devices)::

    result = dry_run(config, num_devices=8)
    print(format_report(result))
"""

from __future__ import annotations

import os
import time
from typing import Any

import jax
import ml_collections
import numpy as np
from jax.sharding import AxisType, Mesh

from contrastive_jax.data import batching
from contrastive_jax.data.config import KNOWN_DATASETS
from contrastive_jax.errors import ConfigError
from contrastive_jax.parallel import DATA_AXIS
from contrastive_jax.train import flops
from contrastive_jax.train.build import DataFacts, Run, abstract_args, build
from contrastive_jax.train.device_peaks import TPU_CHIPS, GiB
from contrastive_jax.train.spec import RunSpec, parse

#: Steps of the nominal epoch the dry run sizes the learning-rate schedule for.
NOMINAL_EPOCH_STEPS = 1000

# Slice name suffix -> topology (chips per axis). v4/v5p names count TensorCores (2 per chip),
# v5e/v6e names count chips.
_CUBE = {8: "2x2x1", 16: "2x2x2", 32: "2x2x4", 64: "2x4x4", 128: "4x4x4", 256: "4x4x8",
         512: "4x8x8", 1024: "8x8x8"}
_PLANE = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16",
          256: "16x16"}

_V3 = {8: "2x2", 32: "4x4", 64: "4x8", 128: "8x8", 256: "8x16", 512: "16x16"}

#: ``--target`` names of TPU slices -> (chip generation, JAX topology name).
TPU_TARGETS = {
    **{f"tpu-v3-{n}": ("v3", f"v3:{t}") for n, t in _V3.items()},
    **{f"tpu-{g}-{n}": (g, f"{g}:{t}") for g in ("v4", "v5p") for n, t in _CUBE.items()},
    **{f"tpu-{g}-{n}": (g, f"{g}:{t}") for g in ("v5e", "v6e") for n, t in _PLANE.items()},
}

def target_devices(target: str, num_devices: int | None = None) -> list:
    """The devices to compile for: the first ``num_devices`` CPU devices, or a TPU slice's.

    Raises:
      ValueError: an unknown ``target``, too few CPU devices, a ``num_devices`` that is not the
        slice's device count, or ``libtpu`` missing (the message says how to install it).
    """
    if target == "cpu":
        devices = jax.devices("cpu")
        if num_devices is None:
            return devices
        if num_devices < 1 or num_devices > len(devices):
            raise ValueError(
                f"num_devices={num_devices}, but this process has {len(devices)} CPU devices "
                "(the command line sets jax_num_cpu_devices; in Python set it, or XLA_FLAGS="
                "--xla_force_host_platform_device_count, before JAX starts)"
            )
        return devices[:num_devices]
    if target not in TPU_TARGETS:
        raise ValueError(
            f"target={target!r} is not 'cpu' or a TPU slice: {', '.join(sorted(TPU_TARGETS))}"
        )
    generation, topology = TPU_TARGETS[target]
    from jax.experimental import topologies

    # libtpu takes a machine-wide lock file (/tmp/libtpu_lockfile) when it loads, so a second
    # dry run, or one beside a training process, would fail; compiling for a topology opens
    # no TPU, so the lock is not needed.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

    kwargs = {"chip_config_name": "megacore"} if TPU_CHIPS[generation].megacore else {}
    try:
        devices = topologies.get_topology_desc(
            platform="tpu", topology_name=topology, **kwargs
        ).devices
    except Exception as err:  # noqa: BLE001 - libtpu absent or too old: say what to install
        raise ValueError(
            f"cannot describe the TPU topology {topology!r} of target {target!r} ({err}); "
            "the TPU compiler comes with libtpu: pip install 'contrastive_jax[tpu]'"
        ) from err
    if num_devices is not None and num_devices != len(devices):
        raise ValueError(
            f"num_devices={num_devices}, but target {target!r} has {len(devices)} devices"
        )
    return list(devices)


def check_divisible(global_batch: int, target: str, devices: list) -> int:
    """The examples per device of ``global_batch`` on ``devices``; a ConfigError naming the
    field when they do not divide it (for a TPU slice, saying how many JAX devices it has)."""
    n = len(devices)
    slice_note = ""
    if target in TPU_TARGETS and TPU_CHIPS[TPU_TARGETS[target][0]].megacore:
        slice_note = (f" ({target}'s name counts TensorCores; its {n} chips are {n} JAX "
                      "devices)")
    return batching.rows_per_part(global_batch, n, "config.data.global_batch_size",
                                  f"devices of target {target!r}{slice_note}")


def _dataset_facts(spec: RunSpec, global_batch: int) -> DataFacts:
    """The data's facts from the config or :data:`~contrastive_jax.data.KNOWN_DATASETS`,
    with a nominal epoch of 1,000 steps."""
    name, side = spec.data.dataset, spec.data.known_image_size
    if side is None:
        raise ConfigError(
            f"the dry run cannot tell the image side of config.data.dataset={name!r}; set "
            "--config.data.image_size"
        )
    classes = KNOWN_DATASETS.get(name, (None, None))[0]
    if classes is None:
        if spec.train.online_probe:
            raise ConfigError(
                f"the dry run does not know the class count of {name!r} for the online probe; "
                "pass --config.train.online_probe=False (the probe is a small linear layer)"
            )
        classes = 1
    if any(t.target == "metadata" for t in spec.terms):
        raise ConfigError("the dry run does not model per-example metadata (y-Aware losses, "
                          "config.loss.name)")
    return DataFacts(NOMINAL_EPOCH_STEPS * global_batch, classes, side)


def dry_run(
    config: ml_collections.ConfigDict,
    *,
    num_devices: int | None = None,
    target: str = "cpu",
    peak_tflops: float | None = None,
    mfu: float = 0.4,
    device_memory_bytes: int | None = None,
) -> dict[str, Any]:
    """Compiles the training step of ``config`` for ``target`` and reports memory and FLOPs.

    The step is the trainer's own (:func:`contrastive_jax.train.build.build`), gradient
    caching (``config.train.micro_batch_size``) included.

    Args:
      config: a pretraining config (:func:`contrastive_jax.train.config.default_config`).
      num_devices: devices of the data mesh; None: every CPU device, or the TPU slice's.
      target: ``"cpu"`` or a name of :data:`TPU_TARGETS`.
      peak_tflops: peak rate of one device in TFLOP/s for the projection; None: the TPU
        chip's bf16 peak (:data:`~contrastive_jax.train.device_peaks.TPU_CHIPS`), or no projection on CPU.
      mfu: assumed model FLOPs utilisation in (0, 1].
      device_memory_bytes: the memory budget per device the verdict compares with; None: a
        TPU target's HBM, or no verdict on CPU.

    Returns:
      A JSON-ready dict: ``target``, ``device_kind``, ``devices``, ``global_batch``,
      ``num_views``, ``image_size``, ``rows_per_device`` (views per device),
      ``micro_batches`` (per device; 0: no gradient caching), the memory per
      device in bytes (``argument_bytes``, ``output_bytes``, ``alias_bytes``, ``temp_bytes``,
      ``generated_code_bytes``, ``per_device_bytes``), ``flops_per_device``,
      ``flops_per_step``, ``flops_per_image``, ``flops_while_loops``, ``lower_seconds``, ``compile_seconds``; with
      a peak rate ``peak_tflops``, ``mfu``, ``step_seconds`` and ``images_per_s``; for a TPU
      target ``hbm_bytes``; with a budget (``device_memory_bytes`` or the HBM)
      ``memory_budget_bytes``, ``fits`` and ``headroom_bytes`` (the budget minus the total).

    Raises:
      ValueError: a bad argument (naming it), or a config the step cannot be built for
        (:class:`~contrastive_jax.errors.ConfigError`).
      RuntimeError: the backend gives no memory analysis of the compiled step.
    """
    if not 0.0 < mfu <= 1.0:
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    if peak_tflops is not None and peak_tflops <= 0:
        raise ValueError(f"peak_tflops must be positive, got {peak_tflops}")
    if device_memory_bytes is not None and device_memory_bytes <= 0:
        raise ValueError(f"device_memory_bytes must be positive, got {device_memory_bytes}")
    devices = target_devices(target, num_devices)
    spec = parse(config)
    check_divisible(spec.data.global_batch_size, target, devices)
    facts = _dataset_facts(spec, spec.data.global_batch_size)
    mesh = Mesh(np.asarray(devices), (DATA_AXIS,), axis_types=(AxisType.Auto,))
    # Built on this host's CPU (the model's parameters and the optimiser state are real
    # arrays here); only their shapes and dtypes reach the compiled program's signature.
    with jax.default_device(jax.devices("cpu")[0]):
        run = build(spec, mesh, facts)
    started = time.perf_counter()
    traced = run.step.trace(*abstract_args(run))
    lowered = traced.lower()
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    result = _analysis(compiled, flops.count_jaxpr(traced.jaxpr), target, devices, run)
    result.update(lower_seconds=round(lowered_at - started, 1),
                  compile_seconds=round(compiled_at - lowered_at, 1))
    result.update(_projection(result, target, peak_tflops, mfu, device_memory_bytes))
    return result


def _analysis(compiled: Any, count: flops.FlopCount, target: str, devices: list,
              run: Run) -> dict[str, Any]:
    """Memory per device of the compiled step and its FLOPs (``count``, the whole step's)."""
    memory = compiled.memory_analysis()
    if memory is None:
        raise RuntimeError(f"the {target} backend gives no memory analysis of the step")
    n, global_batch = len(devices), run.plan.global_batch
    result: dict[str, Any] = {
        "target": target,
        "device_kind": devices[0].device_kind,
        "devices": n,
        "global_batch": global_batch,
        "num_views": run.spec.data.num_views,
        "image_size": run.facts.image_size,
        "rows_per_device": global_batch * run.spec.data.num_views // n,
        "micro_batches": run.plan.micro_batches,
        "argument_bytes": int(memory.argument_size_in_bytes),
        "output_bytes": int(memory.output_size_in_bytes),
        "alias_bytes": int(memory.alias_size_in_bytes),
        "temp_bytes": int(memory.temp_size_in_bytes),
        "generated_code_bytes": int(memory.generated_code_size_in_bytes),
    }
    result["per_device_bytes"] = (result["argument_bytes"] + result["output_bytes"]
                                  - result["alias_bytes"] + result["temp_bytes"])
    result.update(flops_per_device=count.flops / n, flops_per_step=count.flops,
                  flops_per_image=count.flops / global_batch,
                  flops_while_loops=count.while_loops)
    return result


def _projection(result: dict[str, Any], target: str, peak_tflops: float | None,
                mfu: float, device_memory_bytes: int | None) -> dict[str, Any]:
    """The projected step time at ``peak_tflops`` x ``mfu``, and the memory verdict against
    ``device_memory_bytes`` or a TPU target's HBM."""
    extra: dict[str, Any] = {}
    chip = TPU_CHIPS[TPU_TARGETS[target][0]] if target in TPU_TARGETS else None
    if peak_tflops is None and chip is not None:
        peak_tflops = chip.peak_bf16_tflops
    if peak_tflops is not None:
        step_seconds = result["flops_per_device"] / (peak_tflops * 1e12 * mfu)
        extra.update(peak_tflops=peak_tflops, mfu=mfu, step_seconds=step_seconds,
                     images_per_s=result["global_batch"] / step_seconds if step_seconds else None)
    if chip is not None:
        extra.update(hbm_bytes=chip.hbm_bytes)
    budget = device_memory_bytes if device_memory_bytes is not None else extra.get("hbm_bytes")
    if budget is not None:
        extra.update(memory_budget_bytes=budget, fits=result["per_device_bytes"] <= budget,
                     headroom_bytes=budget - result["per_device_bytes"])
    return extra


def format_report(result: dict[str, Any]) -> str:
    """Human-readable lines of a :func:`dry_run` result (without the JSON line)."""

    def gib(key: str) -> str:
        return f"{result[key] / GiB:.2f} GiB"

    lines = [
        f"dry run: {result['devices']} x {result['device_kind']} ({result['target']}), global "
        f"batch {result['global_batch']} x {result['num_views']} views at "
        f"{result['image_size']} px = {result['rows_per_device']} views per device",
        f"compiled in {result['compile_seconds']} s (lowered in {result['lower_seconds']} s)",
        f"memory per device: arguments {gib('argument_bytes')}, outputs {gib('output_bytes')} "
        f"(aliased {gib('alias_bytes')}), temporaries {gib('temp_bytes')}, total "
        f"{gib('per_device_bytes')}",
        f"FLOPs: {result['flops_per_device'] / 1e12:.3f} TFLOP per device, "
        f"{result['flops_per_step'] / 1e12:.2f} TFLOP per step, "
        f"{result['flops_per_image'] / 1e9:.2f} GFLOP per image",
    ]
    if "step_seconds" in result:
        lines.append(
            f"projected at {result['peak_tflops']:g} TFLOP/s per device x {result['mfu']:g} "
            f"utilisation: {result['step_seconds'] * 1e3:.1f} ms per step, "
            f"{result['images_per_s']:,.0f} images/s"
        )
    if "fits" in result:
        verdict = "fits" if result["fits"] else "does NOT fit"
        budget = "HBM" if result.get("hbm_bytes") == result["memory_budget_bytes"] else "budget"
        lines.append(
            f"{budget}: {gib('per_device_bytes')} of {gib('memory_budget_bytes')} per device: "
            f"{verdict} "
            f"({'headroom' if result['fits'] else 'short by'} "
            f"{abs(result['headroom_bytes']) / GiB:.2f} GiB)"
        )
    if result["target"] == "cpu":
        lines.append(
            "note: XLA:CPU overstates an accelerator's temporaries (1.75x the TPU compiler's for a "
            "ResNet-50 step); --target tpu-... asks the TPU compiler"
        )
    return "\n".join(lines)
