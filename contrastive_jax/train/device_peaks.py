"""Peak dense bfloat16 matrix rate of one JAX device, by ``device.device_kind``: the
denominator of the model FLOPs utilisation (MFU) in a run's log lines and of the accelerator
benchmark (``experiments/bench/accelerator.py``); and each TPU generation's HBM and rate
(:data:`TPU_CHIPS`), which the dry run (:mod:`contrastive_jax.sizing.dry_run`) and the
micro-batch search (:mod:`contrastive_jax.sizing.micro_batch_search`) compare a step with.

TPU rates are :data:`TPU_CHIPS`' (Google Cloud's TPU system-architecture pages), per JAX
device. GPU rates are NVIDIA's dense (no sparsity) BF16 Tensor Core figures: the H100 Tensor Core GPU datasheet (1,979 / 1,671 / 1,513 TFLOPS "with
sparsity" for SXM / NVL / PCIe, halved for dense), the H200 datasheet (SXM 1,979, NVL 1,671
with sparsity) and the A100 datasheet (312 dense). A kind not listed, a CPU among them, has no
peak (None) and its log lines say ``mfu n/a``.
"""

from __future__ import annotations

import dataclasses

#: Bytes in a GiB.
GiB = 1024**3


@dataclasses.dataclass(frozen=True)
class TpuChip:
    """One TPU generation: JAX's topology prefix, HBM and peak bf16 rate per JAX device.

    ``megacore``: the generation's two TensorCores per chip form one JAX device
    (``chip_config_name="megacore"``), and slice names count TensorCores (``v4-32`` = 16 chips).
    TPU v3 has two TensorCores per chip that are two JAX devices, each with half the chip's
    HBM and rate (``v3-128`` = 64 chips = 128 devices).
    """

    prefix: str
    hbm_bytes: int
    peak_bf16_tflops: float
    megacore: bool
    source: str


#: HBM and peak bf16 matrix rate per JAX device, from Google Cloud's TPU system-architecture
#: pages (cloud.google.com/tpu/docs/v3, /v4, /v5e, /v5p, /v6e: "System architecture").
TPU_CHIPS = {
    "v3": TpuChip("v3", 16 * GiB, 61.5, False, "cloud.google.com/tpu/docs/v3: 32 GiB HBM and "
                  "123 bf16 TFLOPs per chip of two TensorCores (JAX devices)"),
    "v4": TpuChip("v4", 32 * GiB, 275.0, True, "cloud.google.com/tpu/docs/v4: 32 GiB HBM2, "
                  "275 bf16 TFLOPs per chip"),
    "v5e": TpuChip("v5e", 16 * GiB, 197.0, False, "cloud.google.com/tpu/docs/v5e: 16 GiB HBM2, "
                   "197 bf16 TFLOPs per chip"),
    "v5p": TpuChip("v5p", 95 * 10**9, 459.0, True, "cloud.google.com/tpu/docs/v5p: 95 GB HBM2e, "
                   "459 bf16 TFLOPs per chip"),
    "v6e": TpuChip("v6e", 32 * 10**9, 918.0, False, "cloud.google.com/tpu/docs/v6e: 32 GB HBM, "
                   "918 bf16 TFLOPs per chip"),
}

#: GPU peaks in FLOP/s, matched in this order as a substring of ``device_kind``.
GPU_PEAK_FLOPS = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H200 NVL", 835e12),
    ("H200", 989e12),
    ("H100", 989e12),
    ("A100", 312e12),
)

#: TPU ``device_kind`` as JAX reports it -> the generation of :data:`TPU_CHIPS`.
TPU_KINDS = {
    "TPU v3": "v3",
    "TPU v4": "v4",
    "TPU v5 lite": "v5e",
    "TPU v5e": "v5e",
    "TPU v5": "v5p",
    "TPU v5p": "v5p",
    "TPU v6 lite": "v6e",
    "TPU v6e": "v6e",
}


def peak_flops(device_kind: str) -> float | None:
    """Peak FLOP/s of one JAX device of ``device_kind``; None where not listed (CPUs).

    Examples:
      >>> peak_flops("NVIDIA H100 80GB HBM3"), peak_flops("TPU v4"), peak_flops("cpu")
      (989000000000000.0, 275000000000000.0, None)
    """
    if device_kind in TPU_KINDS:
        return TPU_CHIPS[TPU_KINDS[device_kind]].peak_bf16_tflops * 1e12
    for key, flops in GPU_PEAK_FLOPS:
        if key.lower() in device_kind.lower():
            return flops
    return None
