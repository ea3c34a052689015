"""The dry run compiles the real step without data and reports XLA's memory and its FLOPs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contrastive_jax import configs
from contrastive_jax.errors import ConfigError
from contrastive_jax.sizing import dry_run as dr

ROOT = Path(__file__).resolve().parents[2]


def tiny(batch: int = 16):
    """The quickstart recipe with a two-conv encoder at 8 px: a compile of a few seconds."""
    config = configs.get("quickstart")
    config.model.encoder.name = "small_cnn"
    config.model.encoder.channels = (4, 8)
    config.model.head.hidden_features = 8
    config.model.head.out_features = 4
    config.data.image_size = 8
    config.data.global_batch_size = batch
    return config


@pytest.mark.slow
def test_memory_and_flops_scale_with_the_batch():
    small = dr.dry_run(tiny(16), num_devices=8, peak_tflops=2.0, mfu=0.5)
    large = dr.dry_run(tiny(64), num_devices=8)
    assert small["devices"] == 8 and small["global_batch"] == 16
    assert small["rows_per_device"] == 16 * 2 // 8
    for r in (small, large):
        assert r["per_device_bytes"] == (r["argument_bytes"] + r["output_bytes"]
                                         - r["alias_bytes"] + r["temp_bytes"])
        assert r["flops_per_step"] == pytest.approx(8 * r["flops_per_device"])
        assert r["flops_per_image"] == pytest.approx(r["flops_per_step"] / r["global_batch"])
    # The encoder's convolutions are linear in the rows: 4x the batch, ~4x the FLOPs per device
    # (the loss's N^2 part and the optimiser are small here).
    assert 3.5 < large["flops_per_device"] / small["flops_per_device"] < 4.5
    assert large["temp_bytes"] > small["temp_bytes"]
    # The state (parameters + optimiser) is the same; the batch share grows.
    assert large["argument_bytes"] > small["argument_bytes"]
    assert small["step_seconds"] == pytest.approx(small["flops_per_device"] / (2e12 * 0.5))
    assert small["images_per_s"] == pytest.approx(16 / small["step_seconds"])
    assert "step_seconds" not in large and "fits" not in large
    text = dr.format_report(small)
    assert "temporaries" in text and "TFLOP per step" in text and "images/s" in text


@pytest.mark.slow
def test_gradient_caching_reports_the_micro_batched_step():
    """The dry run compiles the trainer's step, micro-batches included: at 256 views per
    device the activations dominate, and caching them in micro-batches of 16 examples (32
    views) needs fewer temporaries than the plain step."""
    config = tiny(128)
    config.data.image_size = 16
    config.model.encoder.channels = (16, 32)
    plain = dr.dry_run(config, num_devices=1)
    config.train.micro_batch_size = 16
    cached = dr.dry_run(config, num_devices=1)
    assert (plain["micro_batches"], cached["micro_batches"]) == (0, 8)
    # Every micro-batch counts, and the re-forward: a forward is about a third of the plain
    # step (tests/train/test_flops.py checks plain + one forward on a ResNet).
    assert 1.2 < cached["flops_per_image"] / plain["flops_per_image"] < 1.4
    assert cached["flops_while_loops"] == plain["flops_while_loops"] == 0
    assert cached["temp_bytes"] < plain["temp_bytes"]
    assert cached["per_device_bytes"] < plain["per_device_bytes"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_devices=3), "divisible by the 3 devices"),
        (dict(num_devices=99), "num_devices=99"),
        (dict(target="tpu-v9-8"), "target='tpu-v9-8'"),
        (dict(mfu=0.0), "mfu"),
        (dict(peak_tflops=-1.0), "peak_tflops"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dr.dry_run(tiny(16), **kwargs)


def test_an_unknown_dataset_needs_its_image_size():
    config = tiny(16)
    config.data.dataset = "my_tfds_set"
    config.data.image_size = None
    with pytest.raises(ConfigError, match="image_size"):
        dr.dry_run(config, num_devices=8)


@pytest.mark.slow
def test_the_dry_run_does_not_import_the_fit_search():
    """fit imports dry_run, never the other way round."""
    code = ("import sys, contrastive_jax.sizing.dry_run; "
            "assert 'contrastive_jax.sizing.micro_batch_search' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ,
                   "PYTHONPATH": str(ROOT)}, timeout=120)


def test_tpu_target_table():
    assert dr.TPU_TARGETS["tpu-v4-32"] == ("v4", "v4:2x2x4")  # 32 TensorCores = 16 chips
    assert dr.TPU_TARGETS["tpu-v5e-16"] == ("v5e", "v5e:4x4")
    assert dr.TPU_TARGETS["tpu-v5p-32"] == ("v5p", "v5p:2x2x4")
    assert dr.TPU_TARGETS["tpu-v6e-16"] == ("v6e", "v6e:4x4")
    assert dr.TPU_TARGETS["tpu-v3-128"] == ("v3", "v3:8x8")  # SimCLR's 128 TPU v3 cores


@pytest.mark.slow
def test_command_line_sets_the_simulated_device_count(tmp_path):
    """``--devices 4`` without XLA_FLAGS: the command sets the CPU device count itself."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "contrastive_jax.pretrain", "--config",
         configs.path("quickstart"), "--dry_run", "--devices", "4",
         "--config.model.encoder.name=small_cnn", "--config.data.image_size=8",
         "--config.model.head.hidden_features=8", "--config.data.global_batch_size=16"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["devices"] == 4 and result["device_kind"] == "cpu"
    assert "memory per device" in out.stdout


needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="needs libtpu (the 'tpu' extra)")


@needs_libtpu
def test_tpu_topology_compiles_ahead_of_time():
    result = dr.dry_run(tiny(32), target="tpu-v5e-4")
    assert result["devices"] == 4 and "TPU" in result["device_kind"]
    assert result["fits"] and result["hbm_bytes"] == 16 * dr.GiB
    assert result["headroom_bytes"] == result["hbm_bytes"] - result["per_device_bytes"]
    assert result["peak_tflops"] == 197.0 and result["step_seconds"] > 0


@needs_libtpu
def test_a_batch_the_slice_does_not_divide_is_refused_before_compiling():
    """tpu-v4-32 is 16 chips, 16 JAX devices (megacore): a batch of 100 is a ConfigError."""
    with pytest.raises(ConfigError, match=r"divisible by the 16 devices of target 'tpu-v4-32'"):
        dr.dry_run(tiny(100), target="tpu-v4-32")


@pytest.mark.slow
@needs_libtpu
@pytest.mark.parametrize("name", configs.NAMES)
def test_every_recipe_compiles_and_fits_on_tpu_v4_32(name):
    """Each packaged recipe's step, compiled by the TPU compiler for a v4-32 slice, fits the
    chips' 32 GiB of HBM (docs/large-batches.md has the figures; a ResNet-50 at 224 px took
    10-33 minutes on two loaded CPU cores, at 32 px 2-4 minutes)."""
    config = configs.get(name)
    if config.model.trainable == "head" or config.model.init_head_layers:
        config.model.init_from = "unread"  # an evaluation recipe: the dry run reads no checkpoint
    result = dr.dry_run(config, target="tpu-v4-32")
    assert result["devices"] == 16 and result["device_kind"] == "TPU v4"
    assert 0 < result["per_device_bytes"] and result["flops_per_device"] > 0
    assert result["fits"], (
        f"{name} needs {result['per_device_bytes'] / dr.GiB:.2f} GiB per v4 chip: "
        "`--dry_run --fit --target tpu-v4-32` gives the micro_batch_size that fits")
