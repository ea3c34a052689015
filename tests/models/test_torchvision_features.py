"""torchvision computes our features from an export, and ours torchvision's from its weights
(``make test-all``; needs torch and torchvision, the ``pytorch`` extra, else skipped).

A ResNet-18 (CIFAR stem) and a ResNet-50 (ImageNet stem) of width 1 pretrain three steps on the
built-in digits through the trainer (``loop.train``), so their batch-norm statistics are no
longer the initial ones; ``python -m contrastive_jax.export`` writes them in torchvision's
layout, ``torchvision.models.resnetNN()`` loads the file with ``strict=True`` and, in
evaluation mode, gives the features of ``load_pretrained``'s network on the same images to a
relative error (Frobenius norm of the difference over that of torch's features) of at most
1e-4. The measured errors are printed (``-s``; docs/using-elsewhere.md has them).
"""

from __future__ import annotations

import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from contrastive_jax import models
from contrastive_jax.models import weights
from contrastive_jax.train import loop
from contrastive_jax.train.pretrained import load_pretrained
from tests.models.test_weights import _trained_looking
from tests.train.cli_config import tiny_config
from tests.train.runs import ROOT, cli_env
from tests.train.transfer_config import transfer_config

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = pytest.mark.slow

TOLERANCE = 1e-4


def _encoder(name: str, stem: str) -> dict:
    return {"name": name, "stem": stem, "width": 1.0}


def _pretrain_config(name: str, stem: str):
    config = tiny_config(total_steps=3, checkpoint_every=3)
    config.data.global_batch_size = 16
    config.model.encoder.update(_encoder(name, stem))
    config.train.compilation_cache_dir = ""
    return config


@pytest.fixture(scope="module", params=[("resnet18", "cifar"), ("resnet50", "imagenet")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def pretrained(request, tmp_path_factory) -> tuple[str, str, str]:
    """(name, stem, work directory) of a three-step pretraining."""
    name, stem = request.param
    workdir = str(tmp_path_factory.mktemp(name) / "pretrain")
    loop.train(_pretrain_config(name, stem), workdir)
    return name, stem, workdir


def _export(workdir: str, output: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "contrastive_jax.export", "--workdir", workdir,
         "--output", output, *flags],
        cwd=ROOT, env=cli_env(1), capture_output=True, text=True, timeout=600)


def _torchvision_net(name: str, stem: str):
    net = getattr(torchvision.models, name)()
    net.fc = torch.nn.Identity()
    if stem == "cifar":  # the PyTorch ports' CIFAR stem
        net.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        net.maxpool = torch.nn.Identity()
    return net


def _relative_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.linalg.norm(ours - theirs) / np.linalg.norm(theirs))


def _images(side: int, seed: int = 0) -> np.ndarray:
    """Normalised-looking NHWC float32 images [4, side, side, 3]."""
    return np.random.default_rng(seed).normal(size=(4, side, side, 3)).astype(np.float32)


def _torch_features(net, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))).numpy()


def test_torchvision_gives_our_features_from_the_export(pretrained, tmp_path):
    name, stem, workdir = pretrained
    output = str(tmp_path / f"{name}.safetensors")
    done = _export(workdir, output, "--format=torchvision", "--with_head")
    assert done.returncode == 0, done.stderr
    assert "loads into: net = torchvision.models." in done.stdout
    state = safetensors_torch.load_file(output)
    encoder_state = {k: v for k, v in state.items() if not k.startswith("head.")}
    # Three steps of BN momentum 0.9 moved the statistics off their initial 0 and 1.
    assert float(encoder_state["bn1.running_mean"].abs().max()) > 1e-3
    assert float((encoder_state["layer4.1.bn2.running_var"] - 1).abs().max()) > 1e-3
    assert int(encoder_state["bn1.num_batches_tracked"]) == 3
    net = _torchvision_net(name, stem)
    net.load_state_dict(encoder_state, strict=True)
    net.eval()
    network = load_pretrained(workdir).network
    for side in (32, 33):  # an odd side: the padding of every strided layer
        x = _images(side)
        ours, theirs = np.asarray(network.encoder(x)), _torch_features(net, x)
        error = _relative_error(ours, theirs)
        print(f"{name} {stem} stem, {side}x{side}: feature relative error {error:.2e}")
        assert ours.shape == theirs.shape and error <= TOLERANCE
    width = ours.shape[1]
    head = torch.nn.Sequential(torch.nn.Linear(width, 32, bias=False), torch.nn.BatchNorm1d(32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 16, bias=False))
    head.load_state_dict({k.removeprefix("head."): v for k, v in state.items()
                          if k.startswith("head.")}, strict=True)
    head.eval()
    with torch.no_grad():
        projections = head(torch.from_numpy(theirs)).numpy()
    error = _relative_error(np.asarray(network.head(network.encoder(x))), projections)
    print(f"{name} head: projection relative error {error:.2e}")
    assert error <= TOLERANCE


def test_tfs_same_pool_is_the_recipes_one_line_in_torchvision(tmp_path):
    """``pool_padding="same"`` (the packaged ImageNet recipes'): the metadata's lines, with
    ``SAME_POOL``, give our features on sides of 4k and 4k - 1."""
    spec = models.encoder_spec({**_encoder("resnet18", "imagenet"), "pool_padding": "same"})
    encoder = _trained_looking(models.create_encoder(spec, rngs=nnx.Rngs(0)), 7)
    tensors, metadata = weights.export_weights(encoder, spec, format="torchvision")
    path = str(tmp_path / "same.safetensors")
    weights.save(path, tensors, metadata)
    scope = {"torch": torch, "torchvision": torchvision}
    exec(metadata["torchvision"].replace("; ", "\n"), scope)  # the lines users are given
    net = scope["net"]
    net.load_state_dict(safetensors_torch.load_file(path), strict=True)
    net.eval()
    for side in (32, 31, 64):
        x = _images(side)
        error = _relative_error(np.asarray(encoder(x)), _torch_features(net, x))
        print(f"resnet18 imagenet stem, pool_padding='same', {side}x{side}: feature relative "
              f"error {error:.2e}")
        assert error <= TOLERANCE


def test_the_flax_export_loads_with_load_encoder_alone(pretrained, tmp_path):
    name, stem, workdir = pretrained
    output = str(tmp_path / "encoder.safetensors")
    done = _export(workdir, output, "--format=flax", "--with_head", "--step=3")
    assert done.returncode == 0, done.stderr
    encoder, head = models.load_network(output)
    network = load_pretrained(workdir).network
    for ours, theirs in ((encoder, network.encoder), (head, network.head)):
        for kind in (nnx.Param, nnx.BatchStat):
            for a, b in zip(jax.tree.leaves(nnx.state(ours, kind)),
                            jax.tree.leaves(nnx.state(theirs, kind)), strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    x = _images(16)
    np.testing.assert_array_equal(np.asarray(encoder(x)), np.asarray(network.encoder(x)))


def test_an_encoder_torchvision_cannot_compute_is_refused_with_2(tmp_path):
    config = _pretrain_config("resnet18", "cifar")
    config.model.encoder.width = 0.125
    config.train.total_steps = config.train.checkpoint_every = 1
    workdir = str(tmp_path / "narrow")
    loop.train(config, workdir)
    output = tmp_path / "narrow.safetensors"
    done = _export(workdir, str(output), "--format=torchvision")
    assert done.returncode == 2, done.stderr
    assert "error: encoder config.width=0.125" in done.stderr and not output.exists()
    missing = _export(str(tmp_path / "absent"), str(output), "--format=flax")
    assert missing.returncode == 2 and "neither a pretraining work directory" in missing.stderr


def _random_torchvision(name: str, seed: int):
    """torchvision's ``name`` (ImageNet stem, with its 1000-class fc) at its initialisation,
    batch-norm statistics and affine parameters redrawn, in evaluation mode."""
    torch.manual_seed(seed)
    net = getattr(torchvision.models, name)()
    generator = torch.Generator().manual_seed(seed)
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            for tensor, low, high in ((module.running_mean, -0.2, 0.2),
                                      (module.running_var, 0.5, 1.5),
                                      (module.weight.data, 0.5, 1.5),
                                      (module.bias.data, -0.2, 0.2)):
                tensor.copy_(torch.rand(tensor.shape, generator=generator) * (high - low) + low)
    return net.eval()


@pytest.fixture(scope="module")
def torchvision_weights(tmp_path_factory) -> tuple[str, str, object]:
    """A torchvision ResNet-18's ``state_dict`` as .safetensors and .pth, and the network."""
    folder = tmp_path_factory.mktemp("torchvision")
    net = _random_torchvision("resnet18", 0)
    state = net.state_dict()
    safetensors_path, pth_path = str(folder / "r18.safetensors"), str(folder / "r18.pth")
    safetensors_torch.save_file({k: v.contiguous() for k, v in state.items()}, safetensors_path)
    torch.save(state, pth_path)
    return safetensors_path, pth_path, net


def test_a_torchvision_resnets_weights_give_torchs_features(torchvision_weights):
    *paths, net = torchvision_weights
    net.fc = torch.nn.Identity()
    x = _images(64, seed=1)
    theirs = _torch_features(net, x)
    for path in paths:
        encoder = models.load_encoder(path, encoder=_encoder("resnet18", "imagenet"))
        error = _relative_error(np.asarray(encoder(x)), theirs)
        print(f"torchvision resnet18 into ours ({path.rsplit('.', 1)[1]}): feature relative "
              f"error {error:.2e}")
        assert error <= TOLERANCE


@pytest.mark.parametrize("source", ["torchvision", "flax"])
def test_a_weights_file_starts_a_linear_evaluation(source, torchvision_weights, tmp_path):
    if source == "torchvision":
        path, encoder_config = torchvision_weights[0], _encoder("resnet18", "imagenet")
    else:
        config = _pretrain_config("resnet18", "cifar")
        config.model.encoder.width = 0.125
        config.train.total_steps = config.train.checkpoint_every = 1
        loop.train(config, str(tmp_path / "pretrain"))
        path = str(tmp_path / "encoder.safetensors")
        assert _export(str(tmp_path / "pretrain"), path, "--format=flax").returncode == 0
        encoder_config = {**_encoder("resnet18", "cifar"), "width": 0.125}
    config = transfer_config(total_steps=2, checkpoint_every=2)
    config.model.encoder.update(encoder_config)
    config.model.init_from = path
    config.train.compilation_cache_dir = ""
    summary = loop.train(config, str(tmp_path / "linear"))
    assert summary["final_step"] == 2 and np.isfinite(summary["final_loss"])
    frozen = load_pretrained(str(tmp_path / "linear")).network.encoder
    given = models.load_encoder(path, encoder=encoder_config)
    for kind in (nnx.Param, nnx.BatchStat):  # the file's encoder, left as it was
        for a, b in zip(jax.tree.leaves(nnx.state(frozen, kind)),
                        jax.tree.leaves(nnx.state(given, kind)), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
