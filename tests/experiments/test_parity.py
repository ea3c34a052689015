"""Parity with the reference PyTorch SupCon/SINCERE code (``experiments/parity``).

Skipped without PyTorch (``pip install -e '.[parity]'``) or without the reference checkouts
(HobbitLong/SupContrast and tufts-ml/SupContrast, passed explicitly as
``../shared/peers/<name>`` beside the repository). The converter tests take seconds; the step
parity is ``slow`` (``make test-all``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from experiments.parity import model as parity_model  # noqa: E402
from experiments.parity import reference  # noqa: E402

PEERS = Path(__file__).resolve().parents[2].parent / "shared" / "peers"
SUPCON_DIR = PEERS / "HobbitLong-SupContrast"
SINCERE_DIR = PEERS / "tufts-ml-SupContrast"

if not (SUPCON_DIR / "losses.py").is_file():
    pytest.skip(
        f"reference checkout not found at {SUPCON_DIR}", allow_module_level=True
    )


@pytest.fixture(scope="module")
def reference_model():
    resnet_big, _ = reference.load_supcon(SUPCON_DIR)
    torch.manual_seed(0)
    ref = resnet_big.SupConResNet(name="resnet18", head="mlp", feat_dim=128)
    with torch.no_grad():
        for m in ref.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                m.bias.copy_(0.1 * torch.randn_like(m.bias))
                m.running_mean.copy_(0.1 * torch.randn_like(m.running_mean))
                m.running_var.copy_(0.5 + torch.rand_like(m.running_var))
    return ref


def test_converter_copies_every_tensor_in_our_layout(reference_model):
    ours = parity_model.build_parity_model(seed=1)
    state = reference_model.state_dict()
    parity_model.load_torch_state_dict(ours, state)
    entries = parity_model.parameter_map(ours)
    # Every state-dict entry but the BN step counters is mapped, each onto a distinct variable.
    assert {k for k, _, _ in entries} == {k for k in state if not k.endswith("num_batches_tracked")}
    assert len({path for _, path, _ in entries}) == len(entries)
    for key, path, kind in entries:
        ours_value = np.asarray(parity_model.get_path(ours, path)[...])
        np.testing.assert_array_equal(
            parity_model.to_torch_layout(ours_value, kind), state[key].numpy(), err_msg=key
        )
    # Spot-check the layouts explicitly: conv [O, I, kh, kw] -> [kh, kw, I, O], linear transposed.
    w = state["encoder.layer2.0.shortcut.0.weight"].numpy()
    np.testing.assert_array_equal(
        np.asarray(ours.encoder.blocks[2].shortcut.conv.kernel[...]), w.transpose(2, 3, 1, 0)
    )
    np.testing.assert_array_equal(
        np.asarray(ours.head.fc1.kernel[...]), state["head.0.weight"].numpy().T
    )
    np.testing.assert_array_equal(
        np.asarray(ours.encoder.bn1.var[...]), state["encoder.bn1.running_var"].numpy()
    )


def test_converted_model_computes_the_reference_forward(reference_model):
    import jax.numpy as jnp

    ours = parity_model.build_parity_model(seed=1)
    parity_model.load_torch_state_dict(ours, reference_model.state_dict())
    ours.eval()
    ref = reference_model.eval()
    x = np.random.default_rng(0).standard_normal((4, 16, 16, 3)).astype(np.float32)
    with torch.no_grad():
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        features_ref = ref.encoder(xt).numpy()
        z_ref = ref(xt).numpy()
    features, projections = ours(jnp.asarray(x))
    z = np.asarray(projections) / np.linalg.norm(np.asarray(projections), axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(features), features_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(z, z_ref, rtol=1e-4, atol=1e-5)


def test_converter_rejects_mismatched_state_dicts(reference_model):
    ours = parity_model.build_parity_model(seed=1)
    state = dict(reference_model.state_dict())
    missing = {k: v for k, v in state.items() if k != "head.2.bias"}
    with pytest.raises(ValueError, match="missing keys.*head.2.bias"):
        parity_model.load_torch_state_dict(ours, missing)
    extra = dict(state, **{"head.4.weight": state["head.2.weight"]})
    with pytest.raises(ValueError, match="unexpected keys.*head.4.weight"):
        parity_model.load_torch_state_dict(ours, extra)
    wrong = dict(state, **{"head.2.weight": torch.zeros(64, 512)})
    with pytest.raises(ValueError, match="head.2.weight"):
        parity_model.load_torch_state_dict(ours, wrong)


def test_converter_accepts_data_parallel_prefix(reference_model):
    ours = parity_model.build_parity_model(seed=1)
    state = {
        k.replace("encoder.", "encoder.module.", 1): v
        for k, v in reference_model.state_dict().items()
    }
    parity_model.load_torch_state_dict(ours, state)
    np.testing.assert_array_equal(
        np.asarray(ours.encoder.conv1.kernel[...]),
        state["encoder.module.conv1.weight"].numpy().transpose(2, 3, 1, 0),
    )


@pytest.mark.slow
def test_step_parity_small_batch():
    from experiments.parity import step

    summary = step.run(batch_size=8, image_size=16, num_classes=4, steps=2, seed=0,
                       supcon_dir=SUPCON_DIR, sincere_dir=SINCERE_DIR)
    for mode in ("train", "eval"):
        # Step 1 (the momentum buffer in use) is checked for the optimiser only: its forward pass
        # already starts from parameters that differ by step 0's round-off.
        assert summary["modes"][mode]["steps"][1]["optimizer_update"] < 1e-4, mode
        record = summary["modes"][mode]["steps"][0]
        # Forward and losses: float32 round-off.
        assert record["features"] < 1e-4, mode
        assert record["projections"] < 1e-4, mode
        assert record["supcon_loss"] < 1e-5, mode
        assert record["sincere_loss"] < 1e-5, mode
        for name in ("supcon", "sincere"):
            # Gradients: within a small multiple of the reference's own float32 error (measured
            # against the reference in float64), over all parameters and per tensor.
            ours = record[f"{name}_gradients_ours_vs_ref64_global"]
            theirs = record[f"{name}_gradients_ref32_vs_ref64_global"]
            assert ours < max(20 * theirs, 1e-4), (mode, name, ours, theirs)
            assert record[f"{name}_gradients"] < 0.5, (mode, name)
        # Parameters after the step carry the gradients' round-off (times the learning rate).
        assert record["updated_parameters"] < 1e-2, mode
        # Our optimiser fed the reference's gradients reproduces the reference's update: same
        # weight-decay mask (every parameter), momentum and learning rate. A decay mask that
        # spared BN parameters would differ by lr * wd * p, about 1e-2 of their update; float32
        # round-off of ``(p + u) - p`` for updates u much smaller than p is about 1e-5.
        assert record["optimizer_update"] < 1e-4, (mode, record["optimizer_update_worst"])
    train = summary["modes"]["train"]["steps"][0]
    assert train["running_mean"] < 1e-4
    # Running variances differ only by PyTorch's unbiased (n / (n - 1)) batch variance.
    assert train["running_var_unbiased_corrected"] < 1e-4


def test_step_harness_builds_its_model_and_optimiser_without_ml_collections():
    """The GPU image has no ml_collections or TensorFlow: the harness's model and optimiser
    come from plain dicts there (an H200 run of the step harness stopped at that import)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['ml_collections'] = None; sys.modules['tensorflow'] = None\n"
        "from experiments.parity import model, step\n"
        "from contrastive_jax.train import optim\n"
        "net = model.build_parity_model('resnet18', 16)\n"
        "config = step._sgd_config(0.05, 0.9, 1e-4, steps=2)\n"
        "from flax import nnx\n"
        "params = nnx.state(net, nnx.Param)\n"
        "optim.make_optimizer(config, params, steps_per_epoch=1, global_batch_size=8)\n"
        "assert net.encoder.conv1.kernel.shape == (3, 3, 3, 64), net.encoder.conv1.kernel.shape\n"
    )
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
