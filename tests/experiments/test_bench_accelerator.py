"""experiments/bench/accelerator.py: --smoke runs every part at tiny sizes on the CPU and
reports a figure for each; the peak table; the script without TensorFlow and ml_collections.

The fast smoke run times two losses in the losses part (each loss compiles for a few
seconds); the slow test runs all seven."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.experiments.scripts import EXPERIMENTS, load_script

REPO = EXPERIMENTS.parent
PEERS = REPO.parent / "shared" / "peers"
SUPCON_DIR = PEERS / "HobbitLong-SupContrast"
SINCERE_DIR = PEERS / "tufts-ml-SupContrast"


@pytest.fixture(scope="module")
def bench():
    return load_script("accelerator", EXPERIMENTS / "bench")


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, XLA_FLAGS="", TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "experiments.bench.accelerator", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def _run_python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


#: The accelerator image has neither; the smoke run blocks them when the library allows.
BLOCKED = "tensorflow,ml_collections"


@pytest.fixture(scope="module")
def library_without_tensorflow() -> str | None:
    """None when the library modules the step part calls import with TensorFlow and
    ml_collections blocked, else the import error."""
    probe = _run_python("import sys; sys.modules['tensorflow'] = None; "
                        "sys.modules['ml_collections'] = None; "
                        "import contrastive_jax.train.step, contrastive_jax.train.optim, "
                        "contrastive_jax.train.objective, contrastive_jax.models")
    return None if probe.returncode == 0 else probe.stderr.strip().splitlines()[-1]


#: Losses of the fast smoke run's losses part.
FAST_LOSSES = ("supcon", "soft_target_infonce")


def _smoke(library_without_tensorflow, *args: str):
    """The JSON object and output of a ``--smoke`` run of every part (with the reference
    files; TensorFlow and ml_collections blocked where the library allows)."""
    pytest.importorskip("torch")
    if not (SUPCON_DIR / "losses.py").is_file() or not (SINCERE_DIR / "revised_losses.py").is_file():
        pytest.skip(f"reference PyTorch files not found under {PEERS}")
    block = [] if library_without_tensorflow else ["--block-imports", BLOCKED]
    proc = _run("--smoke", "--supcon-dir", str(SUPCON_DIR), "--sincere-dir", str(SINCERE_DIR),
                *block, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    return json.loads(lines[-1]), proc.stdout


@pytest.fixture(scope="module")
def smoke(library_without_tensorflow):
    return _smoke(library_without_tensorflow, "--losses", ",".join(FAST_LOSSES))


def test_peak_table(bench):
    assert bench.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert bench.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert bench.peak_flops("NVIDIA H200") == 989e12
    assert bench.peak_flops("NVIDIA H200 NVL") == 835e12
    assert bench.peak_flops("cpu") is None


def test_oom_is_recognised(bench):
    assert bench.is_oom(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"))
    assert bench.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not bench.is_oom(ValueError("shapes differ"))


def _check_losses(result: dict, names: tuple[str, ...]) -> None:
    assert result["device"]["platform"] == "cpu" and result["device"]["peak_bf16_flops"] is None
    losses = [r for r in result["losses"] if r["part"] == "loss"]
    assert {(r["loss"], r["dtype"]) for r in losses} == {
        (name, dtype) for name in names for dtype in ("float32", "bfloat16")}
    for r in losses:
        assert "status" not in r, r
        assert r["seconds"] > 0 and r["ratio_default"] > 0 and r["xla_bytes"] > 0
        assert r["device_peak_bytes"] is None  # the CPU keeps no memory statistics
        assert ("ratio_highest" in r) == (r["dtype"] == "float32")


def test_smoke_losses_have_times_and_ratios(smoke):
    result, out = smoke
    _check_losses(result, FAST_LOSSES)
    assert "| 64 | bfloat16 | soft_target_infonce |" in out


@pytest.mark.slow
def test_smoke_every_loss(bench, library_without_tensorflow):
    result, _ = _smoke(library_without_tensorflow, "--parts", "losses")
    _check_losses(result, bench.LOSSES)


def test_smoke_largest_batch_and_peers(smoke):
    result, _ = smoke
    largest = result["largest"]
    assert largest["ours"]["largest_n"] == 256 and largest["ours"]["stopped"] == "cap"
    assert largest["reference_supcon"] == {"largest_n": 128, "stopped": "cap"}
    assert largest["reference_sincere"] == {"largest_n": 128, "stopped": "cap"}
    peers = result["peers"]
    assert {(r["loss"], r["n"]) for r in peers} == {
        (loss, n) for loss in ("supcon", "sincere") for n in (32, 64, 128)}
    for r in peers:
        assert r["ratio"] > 0
        # Same inputs, same loss: the reference's value to float32 round-off.
        assert r["value_rel_diff"] < 1e-5, r


def test_smoke_steps(smoke):
    result, _ = smoke
    ours = result["step"]
    assert [(r["loss"], r["batch_per_device"], r["variant"]) for r in ours] == [
        ("supcon", 2, ""), ("sincere", 2, ""), ("supcon", 2, "bn_one_pass")]
    for r in ours:
        assert "status" not in r, r
        assert r["images_per_s"] > 0 and r["flops_per_step"] > 0 and r["mfu"] is None
        assert r["finite"] == 1.0
        if r["loss"] == "supcon" and not r["variant"]:  # the reference step's loss
            assert r["reference_images_per_s"] > 0 and r["ours_over_reference"] > 0
        else:
            assert "reference_images_per_s" not in r
    (theirs,) = result["reference"]["step"]
    assert theirs["flops_per_step"] > 0 and theirs["images_per_s"] > 0


def test_smoke_numerics_against_float64(smoke):
    numerics = smoke[0]["numerics"]
    for name in ("supcon", "sincere", "nt_xent"):
        for precision in ("default", "highest"):
            assert numerics[f"{name}_value_{precision}"] < 1e-5
            assert numerics[f"{name}_grad_{precision}"] < 1e-4
    assert numerics["gram_float32_highest"] < 1e-6
    assert 1e-4 < numerics["gram_bfloat16_inputs"] < 1e-2  # bfloat16's 8 bits of mantissa


def test_runs_without_tensorflow_and_ml_collections(smoke, library_without_tensorflow):
    """The smoke run above had both blocked: every part, the step's library calls included,
    ran without them."""
    if library_without_tensorflow:
        pytest.skip("contrastive_jax.train.step does not import without TensorFlow/ml_collections "
                    f"in this checkout: {library_without_tensorflow}")
    result, _ = smoke
    assert not result["tensorflow_imported"]
    for part in ("losses", "largest", "peers", "step", "numerics"):
        assert "status" not in result[part], result[part]


def test_reference_parts_need_the_reference_files(tmp_path: Path):
    pytest.importorskip("torch")  # without PyTorch the reference parts fail for that reason
    proc = _run("--smoke", "--parts", "peers", "--supcon-dir", str(tmp_path),
                "--sincere-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["reference"]["status"].startswith("failed")
    assert "not found" in result["reference"]["status"]
    assert result["peers"] == []


def test_blocked_product_has_the_dense_row_sums(bench):
    """Where [N, N] does not fit, the reference product runs in row blocks, each summed over
    its columns: the same products as z @ z.T."""
    import jax.numpy as jnp
    import numpy as np

    z = jnp.asarray(np.random.default_rng(0).standard_normal((256, 8)), jnp.float32)
    dense, kind = bench.matmul_fn(256, 4, 1 << 30, None)
    assert kind == "dense"
    blocked, kind = bench.matmul_fn(256, 4, 32 * 256 * 4 * 16, None)  # 32-row blocks
    assert kind == "blocked"
    np.testing.assert_allclose(np.asarray(blocked(z)).reshape(-1),
                               np.asarray(dense(z)).sum(1), rtol=1e-5, atol=1e-4)


def test_smoke_without_pytorch_or_reference_files():
    """The JAX parts alone, as on a machine without PyTorch (CI's): the losses against their
    product, our step and the numerics run with TensorFlow and ml_collections blocked, and
    the reference parts say they did not run."""
    proc = _run("--smoke", "--parts", "losses,step,numerics", "--losses", "supcon",
                "--block-imports", BLOCKED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["reference"]["status"].startswith("not run")
    assert not result["tensorflow_imported"]
    _check_losses(result, ("supcon",))
    for r in result["step"]:
        assert "status" not in r, r
        assert r["images_per_s"] > 0 and r["flops_per_step"] > 0
        assert "reference_images_per_s" not in r
    assert result["numerics"]["supcon_grad_highest"] < 1e-4
