"""experiments/bench/input_pipeline.py --paths: the synthetic ImageNet-like JPEGs, and the
two input paths measured side by side (a small smoke run; the figures are not checked)."""

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
def test_paths_mode_prints_both_rates_their_ratio_and_the_device_share(tmp_path):
    env = dict(os.environ, XLA_FLAGS="", PYTHONPATH=str(EXPERIMENTS.parent))
    out = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "bench" / "input_pipeline.py"), "--paths",
         "--workdir", str(tmp_path), "--examples", "24", "--batch", "8", "--batches", "2",
         "--profile_images", "4"],
        env=env, cwd=EXPERIMENTS.parent, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    for line in ("| tf.data (every stage on the host) |", "| grain (host: decode, crop, resize",
                 "ratio grain / tf.data:", "| decode (Pillow) |", "% of the step"):
        assert line in out.stdout, out.stdout
