"""``--dry_run --fit``: the micro-batch size that fits a global batch, found by compiling."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from contrastive_jax import configs
from contrastive_jax.errors import ConfigError
from contrastive_jax.sizing import micro_batch_search as fitting
from contrastive_jax.train import optim

ROOT = Path(__file__).resolve().parents[2]


def small(batch: int = 32):
    """The quickstart recipe with a two-conv encoder at 16 px. On 8 CPU devices, at batch
    32 (4 examples per device), XLA:CPU reports about 0.71 MB per device for the plain step,
    0.39 MB with micro-batches of 2 and 0.27 MB with micro-batches of 1."""
    config = configs.get("quickstart")
    config.model.encoder.name = "small_cnn"
    config.model.encoder.channels = (16, 32)
    config.model.head.hidden_features = 8
    config.model.head.out_features = 4
    config.data.image_size = 16
    config.data.global_batch_size = batch
    return config


@pytest.mark.slow
def test_run_cli_ends_with_a_json_line(capsys):
    # The dry run without --fit. The backend runs before run_cli (so it keeps the session's 8
    # devices, of which it uses 4); in a fresh process run_cli would set the CPU device count
    # for the whole process.
    assert len(jax.devices("cpu")) == 8
    assert fitting.run_cli(small(16), num_devices=4, target="cpu", peak_tflops=None, mfu=0.4) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"devices", "global_batch", "per_device_bytes", "flops_per_step"} <= set(last)
    assert last["devices"] == 4 and last["global_batch"] == 16


@pytest.mark.slow
def test_fit_finds_a_micro_batch_smaller_than_the_per_device_batch():
    """A 0.5 MB budget: the plain step does not fit, micro-batches of 2 do (bisection over
    the divisors 1, 2 of the 4 examples per device: three compiles)."""
    result = fitting.fit(small(32), num_devices=8, device_memory_bytes=500_000)
    assert result["fits"] and result["per_device_batch"] == 4
    assert result["micro_batch_size"] == 2 and result["micro_batches"] == 2
    plain, *searched = result["tried"]
    assert plain["micro_batch_size"] is None and plain["per_device_bytes"] > 500_000
    assert not plain["fits"] and {t["micro_batch_size"] for t in searched} == {1, 2}
    assert result["per_device_bytes"] == result["step"]["per_device_bytes"] <= 500_000
    assert result["step"]["micro_batches"] == 2 and result["step"]["fits"]
    # Gradient caching keeps the global batch, hence the recipe's learning rate.
    assert result["peak_learning_rate"] == optim.peak_learning_rate(
        optim.resolve(small(32).optimizer), 32)
    text = fitting.format_report(result)
    assert "--config.train.micro_batch_size=2" in text and "learning rate" in text


@pytest.mark.slow
def test_fit_keeps_the_plain_step_when_the_full_batch_fits():
    result = fitting.fit(small(32), num_devices=8, device_memory_bytes=2**30)
    assert result["fits"] and result["micro_batch_size"] is None
    assert result["micro_batches"] == 0 and len(result["tried"]) == 1
    assert "no gradient caching" in fitting.format_report(result)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_devices=8), "--device_memory_gib"),  # CPU devices state no memory
        (dict(num_devices=8, device_memory_bytes=0), "device_memory_bytes"),
        (dict(num_devices=3, device_memory_bytes=2**30), "divisible by the 3 devices"),
    ],
)
def test_bad_requests_are_refused_before_compiling(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        fitting.fit(small(32), **kwargs)


def test_divisors():
    assert fitting.divisors(384) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 384]


@pytest.mark.slow
def test_command_line_exits_with_usage_when_nothing_fits(tmp_path):
    """200 KB: not even micro-batches of one example fit; the report and its JSON line, then
    the error and exit code 2 (ExitCode.USAGE)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "contrastive_jax.pretrain", "--config",
         configs.path("quickstart"), "--dry_run", "--fit", "--devices", "8",
         "--device_memory_gib", str(200_000 / 2**30),
         "--config.model.encoder.name=small_cnn",
         "--config.model.head.hidden_features=8", "--config.model.head.out_features=4",
         "--config.data.image_size=16", "--config.data.global_batch_size=32"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert not result["fits"] and result["micro_batch_size"] is None
    assert [t["micro_batch_size"] for t in result["tried"]] == [None, 1]
    assert "does not fit" in out.stderr and "micro-batches of 1 example" in out.stderr


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="needs libtpu (the 'tpu' extra)")
def test_a_tpu_target_budgets_its_hbm():
    result = fitting.fit(small(32), target="tpu-v4-32")
    assert result["memory_budget_bytes"] == 32 * 2**30 and result["devices"] == 16
    assert result["per_device_batch"] == 2 and result["fits"]
    assert result["micro_batch_size"] is None and result["step"]["device_kind"] == "TPU v4"
