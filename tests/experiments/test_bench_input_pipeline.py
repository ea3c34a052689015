"""experiments/bench/input_pipeline.py: the synthetic ImageNet-like JPEGs, the host's cost
with the device's share (--host), and the default mode's pipeline / train step ratio (small
smoke runs; the figures are not checked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.experiments.scripts import EXPERIMENTS, load_script

bench = load_script("input_pipeline", EXPERIMENTS / "bench")


def test_synthetic_jpegs_have_imagenet_sizes(tmp_path):
    folder = bench.write_imagenet_like(str(tmp_path), 40)
    height, width, kb = bench.folder_summary(folder)
    assert 300 < height < 400 and 350 < width < 450
    assert 80 < kb < 140  # ImageNet's mean is about 110 KB


@pytest.mark.slow
def test_host_mode_prints_the_rate_the_profile_and_the_device_share(tmp_path):
    env = dict(os.environ, XLA_FLAGS="", PYTHONPATH=str(EXPERIMENTS.parent))
    out = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "bench" / "input_pipeline.py"), "--host",
         "--workdir", str(tmp_path), "--examples", "24", "--batch", "8", "--batches", "2",
         "--profile_images", "4"],
        env=env, cwd=EXPERIMENTS.parent, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    for line in ("| host (decode, crop, resize, flip) |", "| simclr_imagenet |",
                 "| decode (Pillow) |", "% of the step"):
        assert line in out.stdout, out.stdout


@pytest.mark.slow
def test_default_mode_prints_the_pipeline_and_train_step_rates(tmp_path):
    env = dict(os.environ, XLA_FLAGS="", PYTHONPATH=str(EXPERIMENTS.parent))
    out = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "bench" / "input_pipeline.py"), "--dataset", "digits",
         "--batch", "16", "--batches", "2", "--steps", "1", "--width", "0.125"],
        env=env, cwd=EXPERIMENTS.parent, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ratio pipeline / train step:" in out.stdout, out.stdout
