"""experiments/bench/accelerator.py and gpu_session.py: --smoke runs every part at tiny sizes
on the CPU, appending one JSON line per row as it is measured; the budget goes to the
selected parts only; one FLOP count (ours, analytic) agrees with PyTorch's counter on the
same work; the largest batch is executed, each N in a fresh process, with a measured peak;
the script runs without TensorFlow and ml_collections.

The fast smoke run times two losses in the losses part (each loss compiles for a few
seconds); the slow tests run all seven and the whole GPU session at tiny sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.experiments.scripts import EXPERIMENTS, load_script

REPO = EXPERIMENTS.parent
#: ``../shared/peers`` beside the checkout (CI's layout); BENCH_PEERS_DIR overrides it.
PEERS = Path(os.environ.get("BENCH_PEERS_DIR", REPO.parent / "shared" / "peers"))
SUPCON_DIR = PEERS / "HobbitLong-SupContrast"
SINCERE_DIR = PEERS / "tufts-ml-SupContrast"


@pytest.fixture(scope="module")
def bench():
    return load_script("accelerator", EXPERIMENTS / "bench")


def _env() -> dict:
    return dict(os.environ, XLA_FLAGS="", TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu",
                PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get(
                    "PYTHONPATH")])]))


def _run(*args: str, module: str = "accelerator", timeout: float = 900
         ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"experiments.bench.{module}", *args],
                          cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)


def _rows(path: Path, part: str | None = None, **match) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if (part is None or r["part"] == part)
            and all(r.get(k) == v for k, v in match.items())]


#: The accelerator image has neither; the smoke run blocks them when the library allows.
BLOCKED = "tensorflow,ml_collections"


@pytest.fixture(scope="module")
def library_without_tensorflow() -> str | None:
    """None when the library modules the step part calls import with TensorFlow and
    ml_collections blocked, else the import error."""
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['tensorflow'] = None; "
         "sys.modules['ml_collections'] = None; import contrastive_jax.train.step, "
         "contrastive_jax.train.optim, contrastive_jax.train.objective, contrastive_jax.models"],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300, check=False)
    return None if probe.returncode == 0 else probe.stderr.strip().splitlines()[-1]


def _need_reference() -> None:
    pytest.importorskip("torch")
    if not (SUPCON_DIR / "losses.py").is_file() or not (SINCERE_DIR / "revised_losses.py").is_file():
        pytest.skip(f"reference PyTorch files not found under {PEERS}")


#: Losses of the fast smoke run's losses part.
FAST_LOSSES = ("supcon", "soft_target_infonce")


def _smoke(library_without_tensorflow, tmp: Path, *args: str):
    """The JSON object, output and rows file of a ``--smoke`` run of every part (with the
    reference files; TensorFlow and ml_collections blocked where the library allows)."""
    _need_reference()
    block = [] if library_without_tensorflow else ["--block-imports", BLOCKED]
    out = tmp / "rows.jsonl"
    proc = _run("--smoke", "--supcon-dir", str(SUPCON_DIR), "--sincere-dir", str(SINCERE_DIR),
                "--json-out", str(out), *block, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout, out


@pytest.fixture(scope="module")
def smoke(library_without_tensorflow, tmp_path_factory):
    return _smoke(library_without_tensorflow, tmp_path_factory.mktemp("smoke"),
                  "--losses", ",".join(FAST_LOSSES), "--precisions", "float32,bf16",
                  "--block-sizes", "auto,16")


def test_peak_table(bench):
    assert bench.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert bench.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert bench.peak_flops("NVIDIA H200") == 989e12
    assert bench.peak_flops("NVIDIA H200 NVL") == 835e12
    assert bench.peak_flops("cpu") is None


def test_oom_is_recognised():
    from experiments.bench._accelerator_rows import is_oom

    assert is_oom(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"))
    assert is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_oom(ValueError("shapes differ"))


def test_budget_goes_to_the_selected_parts(bench):
    """``--parts step --budget 480`` gives the step (with its PyTorch half) the whole 480 s,
    and time a part leaves unused goes to the later parts."""
    alone = bench.Budget(480, bench.budget_shares(["step"], reference=False))
    assert alone.part("step") - time.monotonic() == pytest.approx(480, abs=1)
    both = bench.Budget(480, bench.budget_shares(["step"], reference=True))
    assert set(both.pending) == {"step", "reference_step"}
    torch_s = both.part("reference_step") - time.monotonic()
    assert torch_s == pytest.approx(480 * 0.11 / 0.46, abs=1)
    assert both.part("step") - time.monotonic() == pytest.approx(480, abs=1)  # none used
    shares = bench.budget_shares(["losses", "numerics"], reference=True)
    assert set(shares) == {"losses", "numerics"}
    with pytest.raises(ValueError, match="shares"):
        bench.Budget(10, {})


def test_rows_are_json_lines(bench, tmp_path):
    rows = bench.Rows(str(tmp_path / "r.jsonl"))
    rows("losses", {"n": 1})
    rows("step", {"x": 2.0})
    assert bench.read_rows(tmp_path / "r.jsonl") == [{"part": "losses", "n": 1},
                                                     {"part": "step", "x": 2.0}]
    assert bench.Rows(None)("losses", {"n": 1}) == {"n": 1}  # no file: nothing written


def test_option_parsing(bench):
    assert bench.parse_step_configs("supcon:128,sincere:256,supcon:128:bn_one_pass") == [
        ("supcon", 128, ""), ("sincere", 256, ""), ("supcon", 128, "bn_one_pass")]
    assert bench.parse_block_sizes("auto,64") == [None, 64]
    for bad in ("supcon", "nt_xent:128", "supcon:0", "supcon:128:fast"):
        with pytest.raises(ValueError, match="--step-configs"):
            bench.parse_step_configs(bad)
    with pytest.raises(ValueError, match="--block-sizes"):
        bench.parse_block_sizes("auto,0")
    args = bench.parse_args(["--smoke", "--step-configs", "sincere:4", "--precisions",
                             "bf16,float32", "--loss-sizes", "128,64"])
    assert args.step_configs == [("sincere", 4, "")] and args.loss_sizes == [128, 64]
    assert args.precisions == ["bf16", "float32"] and args.block_sizes == [None]
    assert bench.parse_args(["--smoke"]).step_configs == [
        ("supcon", 2, ""), ("sincere", 2, ""), ("supcon", 2, "bn_one_pass")]


def test_flop_count_agrees_with_pytorch_on_the_same_work():
    """Our analytic count and ``torch.utils.flop_counter`` on the same network, forward and
    backward (strided convolution, convolution, linear layer): the same FLOPs."""
    torch = pytest.importorskip("torch")
    import jax
    import jax.numpy as jnp
    from torch.utils.flop_counter import FlopCounterMode

    from contrastive_jax.train import flops as flop_count
    batch, size, channels = 4, 16, 3

    def net(params, x):  # NHWC
        numbers = ("NHWC", "HWIO", "NHWC")
        y = jax.lax.conv_general_dilated(x, params["w1"], (2, 2), ((1, 1), (1, 1)),
                                         dimension_numbers=numbers)
        y = jax.lax.conv_general_dilated(jax.nn.relu(y), params["w2"], (1, 1),
                                         ((1, 1), (1, 1)), dimension_numbers=numbers)
        return jnp.sum((y.mean((1, 2)) @ params["w3"] + params["b3"]) ** 2)

    params = {"w1": jnp.ones((3, 3, channels, 8)), "w2": jnp.ones((3, 3, 8, 16)),
              "w3": jnp.ones((16, 10)), "b3": jnp.zeros(10)}
    x = jnp.ones((batch, size, size, channels))
    ours_forward = flop_count.count(net, params, x)
    ours = flop_count.count(jax.grad(net), params, x)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(channels, 8, 3, 2, 1, bias=False), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, 1, 1, bias=False), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(16, 10))
    images = torch.ones(batch, channels, size, size)
    with FlopCounterMode(display=False) as forward:
        model(images)
    with FlopCounterMode(display=False) as both:
        (model(images) ** 2).sum().backward()
    assert ours_forward.flops == forward.get_total_flops() > 0
    assert ours.flops == both.get_total_flops() > ours_forward.flops
    assert ours.while_loops == 0


def test_our_resnet_and_the_reference_resnet_have_the_same_flop_count():
    """The step's premise: our ResNet (ImageNet stem) and the reference ``ResNet`` with its
    stem swapped as the step part swaps it are the same network, by the two counters."""
    _need_reference()
    import jax.numpy as jnp
    import torch
    from flax import nnx
    from torch.utils.flop_counter import FlopCounterMode

    from contrastive_jax import models
    from contrastive_jax.train import flops as flop_count
    from experiments.parity import reference
    ours = models.create_encoder({"name": "resnet18", "stem": "imagenet"}, rngs=nnx.Rngs(0))
    ours.eval()
    graphdef, state = nnx.split(ours)
    counted = flop_count.count(lambda s, x: nnx.merge(graphdef, s)(x), state,
                               jnp.ones((2, 64, 64, 3)))
    resnet_big, _ = reference.load_supcon(SUPCON_DIR)
    reference_side = load_script("accelerator_torch", EXPERIMENTS / "bench")
    theirs = reference_side.reference_model(torch, resnet_big, "resnet18").encoder
    theirs.eval()
    with FlopCounterMode(display=False) as counter:
        theirs(torch.ones(2, 3, 64, 64))
    assert counted.flops == counter.get_total_flops() > 0


def _check_losses(out: Path, names: tuple[str, ...], precisions=("float32",)) -> None:
    (device,) = _rows(out, "device")
    assert device["platform"] == "cpu" and device["peak_bf16_flops"] is None
    losses = _rows(out, "losses", case="loss")
    expected = {(name, dtype, p) for name in names for dtype in ("float32", "bfloat16")
                for p in precisions if p == "float32" or name in ("supcon", "sincere", "nt_xent")}
    assert {(r["loss"], r["dtype"], r["precision"]) for r in losses} == expected
    for r in losses:
        assert "status" not in r, r
        assert r["seconds"] > 0 and r["ratio_default"] > 0 and r["ratio_highest"] > 0
        assert r["floor_multiple"] > 0 and r["xla_estimate_bytes"] > 0
        assert r["process_peak_bytes"] is None  # the CPU keeps no memory statistics


@pytest.mark.slow
def test_smoke_rows_are_written_as_json_lines(smoke):
    result, stdout, out = smoke
    rows = _rows(out)
    assert rows[0]["part"] == "run" and rows[-1]["part"] == "summary"
    # Every table row printed was written as a line when it was measured.
    assert {"run", "reference_step", "largest", "largest_summary", "device", "losses",
            "block_rule", "peers", "step", "numerics", "summary"} == {r["part"] for r in rows}
    assert result["elapsed_s"] > 0


def test_smoke_losses_have_times_ratios_and_a_block_rule(smoke):
    _, stdout, out = smoke
    _check_losses(out, FAST_LOSSES, ("float32", "bf16"))
    assert {r["block_size"] for r in _rows(out, "losses", case="loss", loss="supcon")} == {
        "auto", 16}
    assert "| 64 | bfloat16 | soft_target_infonce | float32 |" in stdout
    (rule,) = _rows(out, "block_rule")
    assert rule["platform"] == "cpu" and "measured: cpu" in rule["provenance"]
    assert "paste into contrastive_jax/losses/blockwise.py BLOCK_RULES" in stdout


def test_smoke_largest_batch_is_executed_in_fresh_processes(smoke):
    result, _, out = smoke
    largest = result["largest"]
    assert largest["ours"]["largest_n_executed"] == 128 and largest["ours"]["stopped"] == "cap"
    for name in ("reference_supcon", "reference_sincere"):
        assert largest[name]["largest_n_executed"] == 64 and largest[name]["stopped"] == "cap"
    runs = _rows(out, "largest")
    assert {(r["who"], r["n"]) for r in runs} == {
        ("ours", 64), ("ours", 128), ("reference_supcon", 32), ("reference_supcon", 64),
        ("reference_sincere", 32), ("reference_sincere", 64)}
    for r in runs:
        assert r["seconds"] > 0 and r["peak_bytes"] > 0, r
        assert r["peak_source"] == "host ru_maxrss (CPU)"  # measured, not XLA's estimate
    assert all(r["xla_estimate_bytes"] > 0 for r in runs if r["who"] == "ours")


def test_smoke_peers(smoke):
    peers = smoke[0]["peers"]
    assert {(r["loss"], r["n"]) for r in peers} == {
        (loss, n) for loss in ("supcon", "sincere") for n in (32, 64)}
    for r in peers:
        assert r["ratio"] > 0
        # Same inputs, same loss: the reference's value to float32 round-off.
        assert r["value_rel_diff"] < 1e-5, r


def test_smoke_steps(smoke):
    _, _, out = smoke
    ours = _rows(out, "step")
    assert [(r["loss"], r["batch_per_device"], r["variant"]) for r in ours] == [
        ("supcon", 2, ""), ("sincere", 2, ""), ("supcon", 2, "bn_one_pass")]
    for r in ours:
        assert "status" not in r, r
        assert r["images_per_s"] > 0 and r["flops_per_step"] > 0 and r["mfu"] is None
        assert r["flops_source"] == "analytic (our jaxpr)" and r["flops_while_loops"] == 0
        assert r["finite"] == 1.0
        if r["loss"] == "supcon" and not r["variant"]:  # the reference step's loss
            assert r["reference_images_per_s"] > 0 and r["ours_over_reference"] > 0
            assert r["reference_flop_counter_over_ours"] > 0
            # The smoke run's networks differ (small CNN, ResNet-18): no shared FLOP count.
            assert "reference_mfu" not in r
        else:
            assert "reference_images_per_s" not in r
    (theirs,) = _rows(out, "reference_step")
    assert theirs["flop_counter_flops"] > 0 and theirs["images_per_s"] > 0


def test_smoke_numerics_against_float64(smoke):
    numerics = smoke[0]["numerics"]
    for name in ("supcon", "sincere", "nt_xent"):
        assert numerics[f"{name}_value_float32"] < 1e-5
        assert numerics[f"{name}_grad_float32"] < 1e-4
        assert 1e-4 < numerics[f"{name}_grad_bf16"] < 5e-2  # bfloat16 products
    assert numerics["gram_float32"] < 1e-6
    assert 1e-4 < numerics["gram_bf16"] < 1e-2  # bfloat16's 8 bits of mantissa


def test_runs_without_tensorflow_and_ml_collections(smoke, library_without_tensorflow):
    """The smoke run above had both blocked: every part, the step's library calls included,
    ran without them."""
    if library_without_tensorflow:
        pytest.skip("contrastive_jax.train.step does not import without TensorFlow/ml_collections "
                    f"in this checkout: {library_without_tensorflow}")
    result, _, _ = smoke
    assert not result["tensorflow_imported"]
    for part in ("losses", "peers", "step", "numerics"):
        assert "status" not in result[part], result[part]


@pytest.mark.slow
def test_rows_survive_a_killed_run(tmp_path):
    """Stopped by a kill mid-run (as ``timeout`` stops it), the run leaves every row it had
    measured: the losses part's first rows are in the file before the part ends."""
    out = tmp_path / "rows.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.bench.accelerator", "--smoke", "--parts", "losses",
         "--losses", "supcon,sincere,nt_xent", "--json-out", str(out)],
        cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and _rows(out, "losses", case="loss"):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        proc.kill()
        proc.wait()
    losses = _rows(out, "losses", case="loss")
    assert losses and all(r["seconds"] > 0 for r in losses)
    assert not _rows(out, "summary")


def test_reference_parts_need_the_reference_files(tmp_path: Path):
    pytest.importorskip("torch")  # without PyTorch the reference parts fail for that reason
    out = tmp_path / "rows.jsonl"
    proc = _run("--smoke", "--parts", "step,peers", "--step-configs", "supcon:2",
                "--supcon-dir", str(tmp_path), "--sincere-dir", str(tmp_path),
                "--json-out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["reference"]["step"]["status"].startswith("failed")
    assert "not found" in result["reference"]["step"]["status"]
    assert result["largest"]["reference_supcon"]["stopped"] == "error"
    assert result["peers"] == []


def test_blocked_product_has_the_dense_row_sums(bench):
    """Where [N, N] does not fit, the reference product runs in row blocks, each summed over
    its columns: the same products as z @ z.T."""
    import jax.numpy as jnp
    import numpy as np

    z = jnp.asarray(np.random.default_rng(0).standard_normal((256, 8)), jnp.float32)
    dense, kind = bench.matmul_fn(256, 4, 1 << 30, None)
    assert kind == "dense"
    for precision in (None, "float32"):
        blocked, kind = bench.matmul_fn(256, 4, 32 * 256 * 4 * 16, precision)  # 32-row blocks
        assert kind == "blocked"
        np.testing.assert_allclose(np.asarray(blocked(z)).reshape(-1),
                                   np.asarray(dense(z)).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_smoke_without_pytorch_or_reference_files(tmp_path):
    """The JAX parts alone, as on a machine without PyTorch (CI's): the losses against their
    product, our step and the numerics run with TensorFlow and ml_collections blocked, and
    the reference parts say they did not run."""
    out = tmp_path / "rows.jsonl"
    proc = _run("--smoke", "--parts", "losses,step,numerics", "--losses", "supcon",
                "--step-configs", "supcon:2", "--block-imports", BLOCKED,
                "--json-out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["reference"]["status"].startswith("not run")
    assert not result["tensorflow_imported"]
    _check_losses(out, ("supcon",))
    (step,) = _rows(out, "step")
    assert "status" not in step, step
    assert step["images_per_s"] > 0 and step["flops_per_step"] > 0
    assert "reference_images_per_s" not in step
    assert result["numerics"]["supcon_grad_float32"] < 1e-4


def test_session_budgets_share_the_limit():
    session = load_script("gpu_session", EXPERIMENTS / "bench")
    stages = session.STAGES
    assert [s.name for s in stages] == ["loss_sweep", "numerics", "other_losses", "step",
                                        "largest"]
    assert sum(s.share for s in stages) == pytest.approx(1.0)
    first = session.stage_budget(470, stages[0], stages[1:])
    assert first == pytest.approx((470 - 5 * session.GRACE) * stages[0].share)
    # The last stage gets all that is left, less its grace.
    assert session.stage_budget(100, stages[-1], ()) == 100 - session.GRACE


@pytest.mark.slow
def test_smoke_every_loss(bench, library_without_tensorflow, tmp_path):
    _, _, out = _smoke(library_without_tensorflow, tmp_path, "--parts", "losses")
    _check_losses(out, bench.LOSSES)


@pytest.mark.slow
def test_gpu_session_end_to_end_on_the_cpu(tmp_path, library_without_tensorflow):
    """The prepared device call, at tiny sizes: the loss sweep, the numerics, the other
    losses, the step beside the reference, the largest batch; every stage's rows in one
    JSON-lines file, in that order, and the profile packed into one file."""
    _need_reference()
    block = [] if library_without_tensorflow else ["--block-imports", BLOCKED]
    proc = _run("--smoke", "--out", str(tmp_path), "--limit", "3000", "--profile",
                "--supcon-dir", str(SUPCON_DIR), "--sincere-dir", str(SINCERE_DIR), *block,
                module="gpu_session", timeout=3300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "rows.jsonl"
    ends = _rows(out, "session", event="end")
    assert [(r["stage"], r["returncode"]) for r in ends] == [
        ("loss_sweep", 0), ("numerics", 0), ("other_losses", 0), ("step", 0), ("largest", 0)]
    parts = [r["part"] for r in _rows(out) if r["part"] not in ("session", "run", "device",
                                                                  "summary")]
    order = list(dict.fromkeys(parts))
    assert order == ["losses", "block_rule", "numerics", "reference_step", "step", "largest",
                     "largest_summary", "peers"]
    assert _rows(out, "block_rule")[0]["platform"] == "cpu"
    assert {r["precision"] for r in _rows(out, "numerics")} >= {"float32", "bf16"}
    assert _rows(out, "step")[0]["reference_images_per_s"] > 0
    assert (tmp_path / "profile.tar.gz").stat().st_size > 0
