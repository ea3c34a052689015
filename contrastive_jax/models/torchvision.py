"""torchvision's names and layouts for this package's ResNets and MLP heads, both ways.

Pure functions on flat dicts of numpy arrays (no torch needed): a Flax name is the path of a
variable in the encoder joined by dots (``blocks.3.conv2.kernel``, ``bn1.mean``), a
torchvision name is a key of ``torchvision.models.resnetNN().state_dict()``
(``layer2.1.conv2.weight``, ``bn1.running_mean``).

=============================  ==============================================================
ours (Flax)                    torchvision
=============================  ==============================================================
``conv1.kernel`` [kh, kw, I, O]  ``conv1.weight`` [O, I, kh, kw] (every convolution: OIHW)
``bn1.scale``, ``bn1.bias``      ``bn1.weight``, ``bn1.bias``
``bn1.mean``, ``bn1.var``        ``bn1.running_mean``, ``bn1.running_var``; and
                                 ``bn1.num_batches_tracked`` (int64 scalar, written as the
                                 checkpoint's step, read as nothing)
``blocks.<j>.*``                 ``layer<s>.<i>.*``: block ``i`` of stage ``s`` (1-4),
                                 ``j`` counting the blocks of the stages before
``blocks.<j>.shortcut.conv``,    ``layer<s>.<i>.downsample.0``, ``.downsample.1``
``blocks.<j>.shortcut.bn``
=============================  ==============================================================

The two networks compute the same function (``tests/models/test_torchvision_features.py``):
convolutions padded symmetrically by ``k // 2`` (PyTorch's ``padding``), the bottleneck's
stride on its 3x3 convolution (torchvision's "v1.5"), a projection shortcut exactly where
torchvision puts its ``downsample`` (a stride or a change of width), BN epsilon 1e-5, and
the ImageNet stem's max-pool padded one pixel each side (``pool_padding="symmetric"``). The
CIFAR stem (3x3 stride-1 convolution, no max-pool) is torchvision's class with the two lines
of the PyTorch ports: ``net.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)`` and
``net.maxpool = nn.Identity()``; TF's "SAME" max-pool (``pool_padding="same"``, the packaged
ImageNet recipes') is one line, :data:`SAME_POOL` (:func:`torchvision_recipe` gives a
network's lines). torchvision's classes cannot express a width multiplier other than 1 (its
``width_per_group`` widens the bottleneck's middle only): :func:`check_resnet` refuses it.
``zero_init_residual`` and ``conv_init`` only initialise, and ``bn_momentum`` is a training
setting (PyTorch's ``momentum`` is ``1 - bn_momentum``; torchvision's default 0.1 is ours,
0.9): none of them changes the function.

Projection heads (:func:`head_to_torch`) become the ``state_dict`` of a
``torch.nn.Sequential`` (:func:`torch_head_layout` says which).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from contrastive_jax.errors import ConfigError
from contrastive_jax.models.factory import RESNET_DEPTHS, EncoderSpec, HeadSpec
from contrastive_jax.models.resnet import _DEPTHS

#: Our batch-norm variables and torchvision's names for them.
_BN_NAMES = {"scale": "weight", "bias": "bias", "mean": "running_mean", "var": "running_var"}
#: The classifier of a torchvision ResNet, which no encoder has: skipped when reading one.
CLASSIFIER_KEYS = ("fc.weight", "fc.bias")


def check_resnet(spec: EncoderSpec, *, reading: bool = False) -> None:
    """Raises ConfigError unless ``spec`` is a ResNet that torchvision's classes express: a
    ResNet-18/34/50 of width 1. ``reading`` (torchvision's weights into ``spec``): its
    ImageNet stem must also pool as torchvision's does, ``pool_padding="symmetric"``."""
    if spec.name not in RESNET_DEPTHS:
        raise ConfigError(
            f"encoder config.name={spec.name!r}: torchvision's layout is that of its ResNets "
            f"({', '.join(RESNET_DEPTHS)}); export this encoder with --format flax")
    if spec.width != 1:
        raise ConfigError(
            f"encoder config.width={spec.width!r}: torchvision's ResNet classes have every "
            "channel count at width 1 (width_per_group widens the bottleneck's middle only); "
            "export this encoder with --format flax")
    if reading and spec.stem == "imagenet" and spec.pool_padding != "symmetric":
        raise ConfigError(
            f"encoder config.pool_padding={spec.pool_padding!r}: torchvision's max-pool pads "
            "one pixel each side, TF's 'SAME' pads an even side after only, so torchvision's "
            "weights would give other features; set config.model.encoder.pool_padding="
            "'symmetric'")


#: torchvision's ``maxpool`` replaced by TF's "SAME" max-pool (``pool_padding="same"``):
#: one row and column after an even side. The padded zeros never win against the inputs,
#: which follow a ReLU, so they are TF's padding; exact when the stem's convolution leaves an
#: even side, ``ceil(side / 2)``: an input side of 4k or 4k - 1 (224, 32, ...). On another side
#: TF's "SAME" pads both sides and this Sequential does not: a grid one row and column short.
SAME_POOL = ("net.maxpool = torch.nn.Sequential(torch.nn.ZeroPad2d((0, 1, 0, 1)), "
             "torch.nn.MaxPool2d(3, 2))")


def torchvision_recipe(spec: EncoderSpec) -> str:
    """The torchvision network the export of ``spec`` loads into, as Python lines joined by
    ``"; "``: ``net = torchvision.models.resnetNN()``, ``fc`` an ``Identity``, and the CIFAR
    stem's two lines or :data:`SAME_POOL` where ``spec`` needs them."""
    check_resnet(spec)
    lines = [f"net = torchvision.models.{spec.name}()", "net.fc = torch.nn.Identity()"]
    if spec.stem == "cifar":
        lines += ["net.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)",
                  "net.maxpool = torch.nn.Identity()"]
    elif spec.pool_padding == "same":
        lines.append(SAME_POOL)
    return "; ".join(lines)


def _block_names(spec: EncoderSpec) -> list[str]:
    """torchvision's prefix of each of our blocks, in order: ``layer1.0``, ``layer1.1``, ..."""
    _, stages = _DEPTHS[RESNET_DEPTHS[spec.name]]
    return [f"layer{s + 1}.{i}" for s, n in enumerate(stages) for i in range(n)]


def torchvision_name(flax_name: str, spec: EncoderSpec) -> str:
    """torchvision's name of the variable ``flax_name`` of the ResNet ``spec``.

    >>> torchvision_name("blocks.2.shortcut.bn.mean", EncoderSpec("resnet18"))
    'layer2.0.downsample.1.running_mean'
    """
    *modules, leaf = flax_name.split(".")
    if modules[:1] == ["blocks"]:
        modules = [_block_names(spec)[int(modules[1])], *modules[2:]]
    if modules[-2:-1] == ["shortcut"]:
        modules = [*modules[:-2], "downsample", {"conv": "0", "bn": "1"}[modules[-1]]]
    if leaf == "kernel":
        return ".".join([*modules, "weight"])
    return ".".join([*modules, _BN_NAMES[leaf]])


def _to_torch_layout(value: np.ndarray) -> np.ndarray:
    """A kernel [kh, kw, I, O] as OIHW, a dense kernel [I, O] as [O, I]; others as they are."""
    if value.ndim == 4:
        return np.ascontiguousarray(value.transpose(3, 2, 0, 1))
    if value.ndim == 2:
        return np.ascontiguousarray(value.T)
    return value


def _from_torch_layout(value: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_to_torch_layout`."""
    if value.ndim == 4:
        return np.ascontiguousarray(value.transpose(2, 3, 1, 0))
    if value.ndim == 2:
        return np.ascontiguousarray(value.T)
    return value


def _bn_prefixes(names) -> list[str]:
    """The modules (torchvision names) with running statistics among ``names``."""
    return [n.removesuffix(".running_mean") for n in names if n.endswith(".running_mean")]


def to_torchvision(arrays: Mapping[str, np.ndarray], spec: EncoderSpec, *,
                   num_batches_tracked: int = 0) -> dict[str, np.ndarray]:
    """The ResNet ``spec``'s variables ``arrays`` (Flax name -> array) as torchvision's
    ``state_dict``: its names, OIHW kernels, and ``num_batches_tracked`` (int64, shape [])
    for every batch norm. Raises ConfigError where :func:`check_resnet` does."""
    check_resnet(spec)
    out = {torchvision_name(name, spec): _to_torch_layout(np.asarray(value))
           for name, value in arrays.items()}
    for prefix in _bn_prefixes(list(out)):
        out[f"{prefix}.num_batches_tracked"] = np.asarray(num_batches_tracked, np.int64)
    return out


def from_torchvision(state_dict: Mapping[str, np.ndarray], spec: EncoderSpec,
                     expected: Mapping[str, tuple[int, ...]], *, source: str) -> dict[str, np.ndarray]:
    """A torchvision ResNet ``state_dict`` as the variables (Flax name -> float32 array) of
    the ResNet ``spec``, whose variables and shapes are ``expected``.

    ``num_batches_tracked`` and the classifier (:data:`CLASSIFIER_KEYS`) are not read. The
    pooling is the caller's to check (``check_resnet(spec, reading=True)`` for torchvision's
    own weights).

    Raises:
      ConfigError: naming the key (and ``source``, the file) of a missing or unexpected
        tensor or of a shape other than ``spec``'s.
    """
    check_resnet(spec)
    names = {torchvision_name(name, spec): name for name in expected}
    given = {k for k in state_dict
             if not k.endswith(".num_batches_tracked") and k not in CLASSIFIER_KEYS}
    missing = sorted(set(names) - given)
    if missing:
        hint = _prefix_hint(given, names)
        raise ConfigError(f"{source} has no tensor {missing[0]!r} of torchvision's "
                          f"{spec.name} ({len(missing)} missing){hint}")
    unexpected = sorted(given - set(names))
    if unexpected:
        raise ConfigError(f"{source} has a tensor {unexpected[0]!r} that torchvision's "
                          f"{spec.name} has not ({len(unexpected)} unexpected)")
    out = {}
    for torch_name, flax_name in names.items():
        value = _from_torch_layout(np.asarray(state_dict[torch_name]))
        if value.shape != tuple(expected[flax_name]):
            want = _to_torch_layout(np.empty(expected[flax_name], np.uint8)).shape
            stem = (f" (config.model.encoder.stem={spec.stem!r}: is the file's the other "
                    "stem?)" if torch_name == "conv1.weight" else "")
            raise ConfigError(
                f"{source}: {torch_name!r} has shape {list(np.shape(state_dict[torch_name]))}, "
                f"{spec.name} needs {list(want)}{stem}")
        out[flax_name] = value.astype(np.float32)
    return out


def _prefix_hint(given: set[str], names: Mapping[str, str]) -> str:
    """A hint when every given key carries one prefix before torchvision's names (a wrapped
    model's ``module.`` or ``backbone.``)."""
    for name in given:
        for expected in names:
            if name.endswith("." + expected):
                prefix = name[: -len(expected)]
                return f"; its keys start with {prefix!r}: strip that prefix from every key"
    return ""


def _head_layers(arrays: Mapping[str, np.ndarray], spec: HeadSpec) -> list[tuple[str, dict]]:
    """The head's layers in order as (torch module, {torch parameter: array})."""
    if spec.name in ("linear", "classifier"):
        return [("Linear", {"weight": arrays["linear.kernel"].T, "bias": arrays["linear.bias"]})]
    if spec.name == "identity":
        return []
    if spec.name == "normalized_linear":
        raise ConfigError(
            "head config.name='normalized_linear' L2-normalises its input, which no layer of "
            "torch.nn.Sequential does; export it with --format flax")
    layers = []

    def bn(prefix: str) -> dict:
        scale = arrays[f"{prefix}.scale"]
        bias = arrays.get(f"{prefix}.bias", np.zeros_like(scale))  # no offset: beta = 0
        return {"weight": scale, "bias": bias, "running_mean": arrays[f"{prefix}.mean"],
                "running_var": arrays[f"{prefix}.var"]}

    for i in range(spec.num_hidden_layers):
        layers.append(("Linear", {"weight": arrays[f"hidden_linears.{i}.kernel"].T}))
        layers.append(("BatchNorm1d", bn(f"hidden_bns.{i}")))
        layers.append(("ReLU", {}))
    layers.append(("Linear", {"weight": arrays["out.kernel"].T}))
    if "out_bn.scale" in arrays:
        layers.append(("BatchNorm1d", bn("out_bn")))
    return layers


def head_to_torch(arrays: Mapping[str, np.ndarray], spec: HeadSpec, *,
                  num_batches_tracked: int = 0) -> dict[str, np.ndarray]:
    """The head ``spec``'s variables (Flax name -> array) as the ``state_dict`` of the
    ``torch.nn.Sequential`` of :func:`torch_head_layout` (keys ``"0.weight"``, ``"1.bias"``,
    ...); a batch norm without offset gets a zero bias. Raises ConfigError for a head no
    ``Sequential`` of torch's layers computes (``normalized_linear``)."""
    out = {}
    for index, (kind, tensors) in enumerate(_head_layers(arrays, spec)):
        for name, value in tensors.items():
            out[f"{index}.{name}"] = np.ascontiguousarray(value, np.float32)
        if kind == "BatchNorm1d":
            out[f"{index}.num_batches_tracked"] = np.asarray(num_batches_tracked, np.int64)
    return out


def torch_head_layout(arrays: Mapping[str, np.ndarray], spec: HeadSpec) -> str:
    """The ``torch.nn.Sequential`` that :func:`head_to_torch`'s ``state_dict`` loads into, as
    Python: e.g. ``Sequential(Linear(512, 512, bias=False), BatchNorm1d(512), ReLU(),
    Linear(512, 128, bias=False))``."""
    parts = []
    for kind, tensors in _head_layers(arrays, spec):
        if kind == "Linear":
            out_features, in_features = tensors["weight"].shape
            bias = "" if "bias" in tensors else ", bias=False"
            parts.append(f"Linear({in_features}, {out_features}{bias})")
        elif kind == "BatchNorm1d":
            parts.append(f"BatchNorm1d({tensors['weight'].shape[0]})")
        else:
            parts.append("ReLU()")
    return f"Sequential({', '.join(parts)})"
