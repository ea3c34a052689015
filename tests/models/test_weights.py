"""Weights files (models/weights.py, models/torchvision.py), without torch: the torchvision
export's names, shapes and dtypes against torchvision's own (a list generated once with
torchvision, tests/models/torchvision_resnet_keys.json: ``python -m
tests.models.make_torchvision_keys > tests/models/torchvision_resnet_keys.json``), the flax
export read back bit for bit, and every refusal naming what it refuses.

tests/models/test_torchvision_features.py (``make test-all``, with torch and torchvision)
checks that torchvision computes our features from the export.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

from contrastive_jax import models
from contrastive_jax.errors import ConfigError
from contrastive_jax.models import timm as timm_lib
from contrastive_jax.models import torchvision as tv
from contrastive_jax.models import weights
from contrastive_jax.models.factory import encoder_spec, head_spec

KEYS = json.loads((Path(__file__).parent / "torchvision_resnet_keys.json").read_text())
#: timm's vit_tiny/small_patch16_224 (num_classes=0), written as KEYS (the command above with
#: ``timm``: ``python -m tests.models.make_torchvision_keys timm > tests/models/timm_vit_keys.json``).
TIMM_KEYS = json.loads((Path(__file__).parent / "timm_vit_keys.json").read_text())


def _abstract_weights(spec) -> dict[str, np.ndarray]:
    """Zeros shaped like the variables of the encoder ``spec`` (nothing initialised)."""
    model = nnx.eval_shape(lambda: models.create_encoder(spec, rngs=nnx.Rngs(0)))
    flat = weights.expected_shapes(nnx.state(model, weights.WEIGHTS))
    return {name: np.zeros(shape, np.float32) for name, shape in flat.items()}


@pytest.mark.parametrize("name", ["resnet18", "resnet34", "resnet50"])
@pytest.mark.parametrize("stem", ["imagenet", "cifar"])
def test_the_torchvision_export_has_torchvisions_names_shapes_and_dtypes(name, stem):
    spec = encoder_spec({"name": name, "stem": stem})
    exported = tv.to_torchvision(_abstract_weights(spec), spec, num_batches_tracked=5)
    ours = {k: [list(v.shape), str(v.dtype)] for k, v in exported.items()}
    theirs = dict(KEYS[name])
    if stem == "cifar":  # the PyTorch ports' conv1 = Conv2d(3, 64, 3, 1, 1, bias=False)
        theirs["conv1.weight"] = [[64, 3, 3, 3], "float32"]
    assert sorted(set(ours) ^ set(theirs)) == []  # no name missing, none added
    assert ours == theirs
    assert all(int(v) == 5 for k, v in exported.items() if k.endswith("num_batches_tracked"))


@pytest.mark.parametrize("name", ["vit_ti16", "vit_s16"])
def test_the_timm_export_has_timms_names_shapes_and_dtypes(name):
    spec = encoder_spec({"name": name})
    exported = timm_lib.to_timm(_abstract_weights(spec), spec)
    ours = {k: [list(v.shape), str(v.dtype)] for k, v in exported.items()}
    assert ours == TIMM_KEYS[timm_lib.TIMM_NAMES[name]]
    assert timm_lib.timm_recipe(spec) == (
        f'net = timm.create_model("{timm_lib.TIMM_NAMES[name]}", num_classes=0)')


def test_the_timm_export_stacks_query_key_and_value_as_timms_qkv():
    spec = encoder_spec({"name": "vit_ti4", "image_size": 8})
    arrays = {k: np.random.default_rng(len(k)).normal(size=v.shape).astype(np.float32)
              for k, v in _abstract_weights(spec).items()}
    qkv = timm_lib.to_timm(arrays, spec)["blocks.3.attn.qkv.weight"]  # [3D, D]: rows q, k, v
    key = arrays["blocks.3.attn.key.kernel"]  # [D, heads, head_dim]
    np.testing.assert_array_equal(qkv[192 + 64 + 5], key[:, 1, 5])  # head 1, channel 5 of k


@pytest.mark.parametrize("encoder, message", [
    ({"name": "vit_s16", "pool": "mean"}, "config.pool='mean'"),
    ({"name": "resnet50"}, "config.name='resnet50': timm's layout"),
])
def test_what_timm_cannot_compute_is_refused(encoder, message):
    with pytest.raises(ConfigError, match=message):
        timm_lib.to_timm({}, encoder_spec(encoder))


def _trained_looking(module: nnx.Module, seed: int) -> nnx.Module:
    """``module`` with every parameter and batch statistic redrawn (variances positive), in
    evaluation mode: values no initialiser gives, so a mix-up of two tensors shows."""
    rng = np.random.default_rng(seed)
    state = nnx.state(module, weights.WEIGHTS)
    pure = nnx.traversals.flatten_mapping(state.to_pure_dict())
    pure = {path: (rng.uniform(0.5, 1.5, np.shape(v)) if path[-1] == "var"
                   else rng.normal(0.0, 0.2, np.shape(v))).astype(np.float32)
            for path, v in pure.items()}
    nnx.replace_by_pure_dict(state, nnx.traversals.unflatten_mapping(pure))
    nnx.update(module, state)
    module.eval()
    return module


def _leaves(module: nnx.Module) -> list[np.ndarray]:
    return [np.asarray(a) for a in jax.tree.leaves(nnx.state(module, weights.WEIGHTS))]


def _assert_same(a: nnx.Module, b: nnx.Module) -> None:
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


SMALL_RESNET = {"name": "resnet18", "width": 0.125}
SMALL_HEAD = {"hidden_features": 32, "out_features": 16}


@pytest.fixture(scope="module")
def small():
    """A CIFAR-stem ResNet-18 of width 0.125 and a SimCLR v2 head, values redrawn."""
    spec, hspec = encoder_spec(SMALL_RESNET), head_spec(SMALL_HEAD)
    encoder = _trained_looking(models.create_encoder(spec, rngs=nnx.Rngs(0)), 1)
    head = _trained_looking(models.create_head(hspec, encoder.num_features, rngs=nnx.Rngs(1)), 2)
    return spec, hspec, encoder, head


def test_a_flax_export_reads_back_bit_for_bit_from_the_file_alone(small, tmp_path):
    spec, hspec, encoder, head = small
    tensors, metadata = weights.export_weights(encoder, spec, format="flax", head=head,
                                               head_config=hspec, step=12)
    path = str(tmp_path / "encoder.safetensors")
    weights.save(path, tensors, metadata)
    loaded, loaded_head = models.load_network(path)
    _assert_same(encoder, loaded)
    _assert_same(head, loaded_head)
    x = np.random.default_rng(0).normal(size=(3, 16, 16, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x), encoder(x))  # in evaluation mode, as exported
    np.testing.assert_array_equal(loaded_head(loaded(x)), head(encoder(x)))
    assert isinstance(models.load_encoder(path), models.ResNet)
    assert metadata["step"] == "12" and json.loads(metadata["encoder"])["width"] == 0.125


def test_a_vit_flax_export_reads_back_bit_for_bit(tmp_path):
    spec = encoder_spec({"name": "vit_ti4", "image_size": 8})
    encoder = _trained_looking(models.create_encoder(spec, rngs=nnx.Rngs(0)), 3)
    path = str(tmp_path / "vit.safetensors")
    weights.save(path, *weights.export_weights(encoder, spec, format="flax"))
    loaded = models.load_encoder(path)
    _assert_same(encoder, loaded)
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x), encoder(x))


def test_a_torchvision_export_reads_back_into_the_same_encoder(tmp_path):
    spec = encoder_spec({"name": "resnet18", "stem": "imagenet"})
    arrays = {k: np.random.default_rng(len(k)).normal(size=v.shape).astype(np.float32)
              for k, v in _abstract_weights(spec).items()}
    exported = tv.to_torchvision(arrays, spec)
    back = tv.from_torchvision(exported, spec, {k: v.shape for k, v in arrays.items()},
                               source="file")
    assert back.keys() == arrays.keys()
    for name, value in arrays.items():
        np.testing.assert_array_equal(back[name], value)


def test_a_torchvision_file_without_its_config_reads_into_the_named_encoder(tmp_path):
    spec = encoder_spec({"name": "resnet18", "stem": "imagenet"})
    encoder = _trained_looking(models.create_encoder(spec, rngs=nnx.Rngs(0)), 4)
    tensors, _ = weights.export_weights(encoder, spec, format="torchvision")
    path = str(tmp_path / "foreign.safetensors")
    weights.save(path, {**tensors, "fc.weight": np.zeros((10, 512), np.float32),
                        "fc.bias": np.zeros(10, np.float32)}, {})  # as torchvision saves
    with pytest.raises(ConfigError, match="pass the encoder it is"):
        models.load_encoder(path)
    loaded = models.load_encoder(path, encoder={"name": "resnet18", "stem": "imagenet"})
    _assert_same(encoder, loaded)
    with pytest.raises(ConfigError, match=r"'conv1.weight' has shape \[64, 3, 7, 7\], resnet18 "
                                          r"needs \[64, 3, 3, 3\].*stem='cifar'"):
        models.load_encoder(path, encoder={"name": "resnet18"})


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("layer3.1.bn2.running_var"), "no tensor 'layer3.1.bn2.running_var'"),
    (lambda t: t.update({"layer5.0.conv1.weight": np.zeros(1, np.float32)}),
     "a tensor 'layer5.0.conv1.weight' that torchvision's resnet18 has not"),
    (lambda t: t.update({"layer2.0.downsample.0.weight": np.zeros((128, 64, 3, 3), np.float32)}),
     r"'layer2.0.downsample.0.weight' has shape \[128, 64, 3, 3\], resnet18 needs "
     r"\[128, 64, 1, 1\]"),
], ids=["missing", "unexpected", "shape"])
def test_a_torchvision_state_dict_that_is_not_the_encoders_is_refused_naming_the_key(
        change, message, tmp_path):
    spec = encoder_spec({"name": "resnet18", "stem": "imagenet"})
    tensors = tv.to_torchvision(_abstract_weights(spec), spec)
    change(tensors)
    path = str(tmp_path / "bad.safetensors")
    weights.save(path, tensors, {})
    with pytest.raises(ConfigError, match=message):
        models.load_encoder(path, encoder={"name": "resnet18", "stem": "imagenet"})


def test_a_prefixed_state_dict_is_refused_with_the_prefix_named(tmp_path):
    spec = encoder_spec({"name": "resnet18", "stem": "imagenet"})
    tensors = tv.to_torchvision(_abstract_weights(spec), spec)
    path = str(tmp_path / "wrapped.safetensors")
    weights.save(path, {f"module.backbone.{k}": v for k, v in tensors.items()}, {})
    with pytest.raises(ConfigError, match="start with 'module.backbone.': strip that prefix"):
        models.load_encoder(path, encoder={"name": "resnet18", "stem": "imagenet"})


@pytest.mark.parametrize("encoder, message", [
    ({"name": "resnet18", "width": 0.5}, "config.width=0.5: torchvision's ResNet classes"),
    ({"name": "vit_ti4", "image_size": 8}, "config.name='vit_ti4'"),
])
def test_what_torchvision_cannot_compute_is_refused(encoder, message):
    spec = encoder_spec(encoder)
    with pytest.raises(ConfigError, match=message):
        tv.to_torchvision({}, spec)


@pytest.mark.parametrize("encoder, extra", [
    ({"name": "resnet50", "stem": "imagenet"}, []),
    ({"name": "resnet18", "stem": "cifar"}, ["net.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)",
                                             "net.maxpool = torch.nn.Identity()"]),
    ({"name": "resnet50", "stem": "imagenet", "pool_padding": "same"}, [tv.SAME_POOL]),
])
def test_the_recipe_names_the_lines_each_network_needs(encoder, extra):
    spec = encoder_spec(encoder)
    assert tv.torchvision_recipe(spec).split("; ") == [
        f"net = torchvision.models.{spec.name}()", "net.fc = torch.nn.Identity()", *extra]


def test_torchvisions_weights_are_refused_for_tfs_same_pool_but_our_own_export_is_not(tmp_path):
    same = {"name": "resnet18", "stem": "imagenet", "pool_padding": "same"}
    spec = encoder_spec(same)
    encoder = _trained_looking(models.create_encoder(spec, rngs=nnx.Rngs(0)), 6)
    tensors, metadata = weights.export_weights(encoder, spec, format="torchvision")
    ours, foreign = str(tmp_path / "ours.safetensors"), str(tmp_path / "foreign.safetensors")
    weights.save(ours, tensors, metadata)
    weights.save(foreign, tensors, {})
    _assert_same(encoder, models.load_encoder(ours))
    with pytest.raises(ConfigError, match="pool_padding='symmetric', but .* was trained with 'same'"):
        models.load_encoder(ours, encoder={**same, "pool_padding": "symmetric"})
    with pytest.raises(ConfigError, match="config.pool_padding='same': torchvision's max-pool"):
        models.load_encoder(foreign, encoder=same)


def test_a_head_without_a_sequential_is_refused_for_torchvision():
    hspec = head_spec({"name": "normalized_linear", "out_features": 4})
    with pytest.raises(ConfigError, match="normalized_linear"):
        tv.head_to_torch({"linear.kernel": np.zeros((8, 4), np.float32)}, hspec)


@pytest.mark.parametrize("name, layout", [
    ("simclr_v2", "Sequential(Linear(64, 32, bias=False), BatchNorm1d(32), ReLU(), "
                  "Linear(32, 16, bias=False))"),
    ("simclr_v1", "Sequential(Linear(64, 32, bias=False), BatchNorm1d(32), ReLU(), "
                  "Linear(32, 16, bias=False), BatchNorm1d(16))"),
    ("linear", "Sequential(Linear(64, 16))"),
])
def test_the_torch_head_is_a_sequential_of_torchs_layouts(name, layout):
    hspec = head_spec({**SMALL_HEAD, "name": name})
    head = models.create_head(hspec, 64, rngs=nnx.Rngs(0))
    arrays = weights.flat_weights(head)
    assert tv.torch_head_layout(arrays, hspec) == layout
    tensors = tv.head_to_torch(arrays, hspec)
    if name == "linear":
        np.testing.assert_array_equal(tensors["0.weight"], arrays["linear.kernel"].T)
        assert tensors["0.bias"].shape == (16,)
    else:
        np.testing.assert_array_equal(tensors["3.weight"], arrays["out.kernel"].T)
        np.testing.assert_array_equal(tensors["1.running_var"], arrays["hidden_bns.0.var"])
        assert "2.weight" not in tensors  # the ReLU
    if name == "simclr_v1":  # a batch norm without offset: a zero bias
        np.testing.assert_array_equal(tensors["4.bias"], np.zeros(16, np.float32))


def test_a_flax_file_of_another_encoder_config_is_refused_naming_the_field(small, tmp_path):
    spec, _, encoder, _ = small
    path = str(tmp_path / "encoder.safetensors")
    weights.save(path, *weights.export_weights(encoder, spec, format="flax"))
    with pytest.raises(ConfigError, match="config.model.encoder.width=0.25, but .* width=0.125"):
        models.load_encoder(path, encoder={**SMALL_RESNET, "width": 0.25})
    tensors, metadata = weights.read(path)
    tensors["encoder.bn1.mean"] = np.zeros(3, np.float32)
    weights.save(path, tensors, metadata)
    with pytest.raises(ConfigError, match=r"'bn1.mean' has shape \[3\], the encoder's is \[8\]"):
        models.load_encoder(path)


def test_a_pth_file_without_torch_asks_for_torch(monkeypatch, tmp_path):
    path = tmp_path / "resnet.pth"
    path.write_bytes(b"not read")
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # as where it is absent
    with pytest.raises(ModuleNotFoundError, match="needs torch, which is not installed: pip "
                                                  "install torch"):
        models.load_encoder(str(path), encoder={"name": "resnet18"})


def test_a_file_that_is_no_weights_file_is_refused(tmp_path):
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(ConfigError, match="is not a safetensors file"):
        models.load_encoder(str(tmp_path / "junk.safetensors"))
    with pytest.raises(FileNotFoundError, match="no weights file"):
        models.load_encoder(str(tmp_path / "absent.safetensors"))
    with pytest.raises(ConfigError, match="a weights file ends with"):
        models.load_encoder(str(tmp_path / "weights.npz"))
