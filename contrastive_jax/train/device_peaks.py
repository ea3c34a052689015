"""Peak dense bfloat16 matrix rate of one JAX device, by ``device.device_kind``: the
denominator of the model FLOPs utilisation (MFU) in a run's log lines and of the accelerator
benchmark (``experiments/bench/accelerator.py``).

TPU rates are :data:`contrastive_jax.train.dry_run.TPU_CHIPS`' (Google Cloud's TPU
system-architecture pages), per JAX device. GPU rates are NVIDIA's dense (no sparsity) BF16
Tensor Core figures: the H100 Tensor Core GPU datasheet (1,979 / 1,671 / 1,513 TFLOPS "with
sparsity" for SXM / NVL / PCIe, halved for dense), the H200 datasheet (SXM 1,979, NVL 1,671
with sparsity) and the A100 datasheet (312 dense). A kind not listed, a CPU among them, has no
peak (None) and its log lines say ``mfu n/a``.
"""

from __future__ import annotations

from contrastive_jax.train.dry_run import TPU_CHIPS

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
