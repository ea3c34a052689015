"""The CIFAR-10 proxies of SINCERE and MIO (``experiments/reproduce/cifar_proxy.py``).

The unmarked tests check the CIFAR loader and augmentation of ``_cifar_common.py`` on a few
hundred real images in seconds (skipped when the shared CIFAR-10 folder is absent); the ``slow``
one runs ``--quick`` end to end, twice, to check the outputs and that finished runs are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.experiments.scripts import REPRODUCE, load_script


@pytest.fixture(scope="module")
def cifar():
    module = load_script("_cifar_common")
    if not module.CIFAR_DIR.is_dir():
        pytest.skip(f"shared CIFAR-10 folder {module.CIFAR_DIR} not present")
    return module


@pytest.fixture(scope="module")
def small(cifar):
    """100 training and 50 test images at 32x32."""
    return cifar.cifar_data(100, 50, downsample=False)


def test_cifar_data_shapes_range_and_class_balance(small):
    assert small.x_train.shape == (100, 32, 32, 3) and small.x_test.shape == (50, 32, 32, 3)
    assert small.x_train.dtype == np.float32
    assert 0.0 <= small.x_train.min() and small.x_train.max() <= 1.0
    assert small.x_train.std() > 0.1  # real images, not a constant
    np.testing.assert_array_equal(np.bincount(small.y_train, minlength=10), [10] * 10)
    np.testing.assert_array_equal(np.bincount(small.y_test, minlength=10), [5] * 10)
    np.testing.assert_array_equal(small.meta_train.argmax(1), small.y_train)


def test_cifar_data_is_deterministic_and_downsampling_averages(cifar, small):
    x, y, names = cifar.load_split("train", 100, downsample=True)
    assert names[0] == "airplane" and len(names) == 10
    np.testing.assert_array_equal(y, small.y_train)
    assert x.shape == (100, 16, 16, 3)
    pooled = small.x_train.reshape(100, 16, 2, 16, 2, 3).mean((2, 4))
    np.testing.assert_allclose(x, pooled, atol=1e-6)


def test_missing_folder_is_named(cifar, tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere")):
        cifar.load_split("train", 10, downsample=False, root=tmp_path / "nowhere")


def test_augment_cifar_shape_range_determinism_and_variety(cifar, small):
    x = small.x_train[:16]
    key = jax.random.PRNGKey(0)
    augment = jax.jit(cifar.augment_cifar)  # as in training; also faster than op-by-op
    out = np.asarray(augment(key, x))
    assert out.shape == x.shape and out.dtype == np.float32
    assert 0.0 <= out.min() and out.max() <= 1.0
    np.testing.assert_array_equal(out, np.asarray(augment(key, x)))
    other = np.asarray(augment(jax.random.PRNGKey(1), x))
    assert np.abs(out - other).mean() > 0.02  # another key, another view
    assert np.abs(out - x).mean() > 0.02
    # The colour gain is per channel: channel ratios change, unlike with a grey-level gain.
    ratio_in = x.mean((1, 2)) / x.mean((1, 2, 3))[:, None]
    ratio_out = out.mean((1, 2)) / out.mean((1, 2, 3))[:, None]
    assert np.abs(ratio_in - ratio_out).max() > 0.02


def test_augment_cifar_also_runs_at_16x16(cifar):
    x = np.random.default_rng(0).random((4, 16, 16, 3), dtype=np.float32)
    assert jax.jit(cifar.augment_cifar)(jax.random.PRNGKey(0), x).shape == (4, 16, 16, 3)


@pytest.mark.slow
def test_cifar_proxy_quick_end_to_end_and_resume(cifar, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "experiments.reproduce.cifar_proxy", "--quick", "--out", str(tmp_path)]

    def run() -> str:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800,
                              cwd=REPRODUCE.parents[1])
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    first = run()
    runs = sorted((tmp_path / "runs").rglob("seed0.json"))
    assert len(runs) == (2 + 1) + (5 + 1)  # methods + random init, per claim
    for name in ("quick_cifar_sincere_2ep", "quick_cifar_mio_adamw_2ep"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0
        assert (tmp_path / f"{name}_table.md").read_text().startswith(f"## {name}")
        assert json.loads((tmp_path / f"{name}_summary.json").read_text())
    record = json.loads((tmp_path / "runs/quick_cifar_sincere_2ep/sincere/seed0.json").read_text())
    assert record["epochs"] == 2 and len(record["epoch_losses"]) == 2
    linear = record["probes"][-1]["linear"]
    assert 0.0 <= linear["top1"]["low"] <= linear["top1"]["high"] <= 1.0
    assert linear["top1"]["accuracy"] <= linear["top5"]["accuracy"]
    summary = json.loads((tmp_path / "quick_cifar_sincere_2ep_summary.json").read_text())
    assert {"sincere", "supcon", "supcon_minus_sincere", "paired_sincere_minus_supcon"} <= set(
        summary["b128"])
    assert "random_init" in summary
    mio = json.loads((tmp_path / "quick_cifar_mio_adamw_2ep_summary.json").read_text())
    assert set(mio) == {f"main/{m}" for m in
                        ("simclr", "mio_A", "mio_B", "mio_C", "mio_D", "random_init")}
    assert "main | mio_D" in first and "SupCon − SINCERE" in first
    second = run()
    assert second.count("done, skipped") == 9
