"""Encoder weights in files: safetensors under Flax names, and torchvision ResNet state dicts.

Two files carry an encoder (``python -m contrastive_jax.export`` writes both,
docs/using-elsewhere.md):

* ``flax``: every parameter and batch-norm statistic under its Flax path in the network
  (``encoder.blocks.0.conv1.kernel``, ``encoder.bn1.mean``; with the head, ``head.out.kernel``),
  float32 as trained, and the encoder's config (and the head's) as JSON in the file's
  metadata, so :func:`load_encoder` rebuilds the encoder from the file alone.
* ``torchvision``: a ResNet's ``state_dict`` in torchvision's names and layouts
  (:mod:`contrastive_jax.models.torchvision`), the head's under ``head.`` as a
  ``torch.nn.Sequential``'s; a ``.safetensors`` file, or a ``.pth`` / ``.pt`` file of
  tensors written by ``torch.save`` (reading one needs torch).
* ``timm`` (export only): a ViT's ``state_dict`` in timm's names and layouts
  (:mod:`contrastive_jax.models.timm`), the head as for ``torchvision``.

:func:`load_encoder` reads either, and so ``config.model.init_from``
(:func:`contrastive_jax.train.pretrained.initialise`). Paths are local or ``gs://``
(``etils.epath``).
"""

from __future__ import annotations

import dataclasses
import io
import json
import struct
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from etils import epath
from flax import nnx

from contrastive_jax._extras import require
from contrastive_jax.errors import ConfigError
from contrastive_jax.models import timm as timm_lib
from contrastive_jax.models import torchvision as tv
from contrastive_jax.models.factory import (
    EncoderSpec,
    HeadSpec,
    create_encoder,
    create_head,
    encoder_spec,
)

#: The metadata key of the file's format: :data:`FLAX`, :data:`TORCHVISION` or :data:`TIMM`.
FORMAT_KEY = "format"
FLAX = "contrastive_jax.flax"
TORCHVISION = "contrastive_jax.torchvision"
TIMM = "contrastive_jax.timm"
#: The suffixes of the weight files ``config.model.init_from`` accepts beside work directories.
WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt")
#: The variables a file holds: parameters and batch-norm statistics (no RNG state).
WEIGHTS = nnx.Any(nnx.Param, nnx.BatchStat)


def is_weights_file(path: str) -> bool:
    """Whether ``path`` names a weights file (by its suffix, :data:`WEIGHT_SUFFIXES`) rather
    than a pretraining work directory or checkpoint."""
    return str(path).endswith(WEIGHT_SUFFIXES)


def flat_weights(module: nnx.Module) -> dict[str, np.ndarray]:
    """``module``'s parameters and batch statistics as {Flax path joined by dots: host array}."""
    pure = nnx.state(module, WEIGHTS).to_pure_dict()
    return {".".join(map(str, path)): np.asarray(value)
            for path, value in nnx.traversals.flatten_mapping(pure).items()}


def spec_json(spec: EncoderSpec | HeadSpec) -> str:
    """A config section as the JSON of the file's metadata."""
    return json.dumps(dataclasses.asdict(spec), sort_keys=True)


def _spec_from_json(text: str, cls: type) -> Any:
    fields = json.loads(text)
    tuples = {f.name for f in dataclasses.fields(cls) if str(f.type).startswith("tuple")}
    return cls(**{k: tuple(v) if k in tuples and v is not None else v
                  for k, v in fields.items()})


def flax_tensors(encoder: nnx.Module, head: nnx.Module | None = None) -> dict[str, np.ndarray]:
    """The tensors of a ``flax`` file: ``encoder.<path>`` (and ``head.<path>``)."""
    tensors = {f"encoder.{k}": v for k, v in flat_weights(encoder).items()}
    if head is not None:
        tensors.update({f"head.{k}": v for k, v in flat_weights(head).items()})
    return tensors


#: ``python -m contrastive_jax.export --format``: the files :func:`export_weights` makes.
FORMATS = ("flax", "torchvision", "timm")


def export_weights(encoder: nnx.Module, spec: EncoderSpec, *, format: str,
                   head: nnx.Module | None = None, head_config: HeadSpec | None = None,
                   step: int = 0) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(tensors, metadata) of a weights file of ``encoder`` (config ``spec``) and, if given,
    ``head`` (config ``head_config``), in ``format`` (one of :data:`FORMATS`; module
    docstring). ``step``: the checkpoint's, in the metadata and torchvision's
    ``num_batches_tracked``.

    Raises:
      ConfigError: an unknown format, or an encoder or head torchvision's layout does not
        express (:func:`contrastive_jax.models.torchvision.check_resnet`).
    """
    if format not in FORMATS:
        raise ConfigError(f"format must be one of {FORMATS}, got {format!r}")
    metadata = {"encoder": spec_json(spec), "step": str(step)}
    if head is not None:
        if head_config is None:
            raise ValueError("head_config is required with head")
        metadata["head"] = spec_json(head_config)
    if format == "flax":
        return flax_tensors(encoder, head), {FORMAT_KEY: FLAX, **metadata}
    if format == "timm":
        tensors = timm_lib.to_timm(flat_weights(encoder), spec)
        metadata[FORMAT_KEY] = TIMM
        metadata["timm"] = timm_lib.timm_recipe(spec)
    else:
        tensors = tv.to_torchvision(flat_weights(encoder), spec, num_batches_tracked=step)
        metadata[FORMAT_KEY] = TORCHVISION
        metadata["torchvision"] = tv.torchvision_recipe(spec)
    if head is not None and head_config is not None:
        arrays = flat_weights(head)
        head_tensors = tv.head_to_torch(arrays, head_config, num_batches_tracked=step)
        tensors.update({f"head.{k}": v for k, v in head_tensors.items()})
        metadata["head_layout"] = "torch.nn." + tv.torch_head_layout(arrays, head_config)
    return tensors, metadata


def save(path: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> None:
    """Writes ``tensors`` and ``metadata`` as a safetensors file at ``path`` (local or
    ``gs://``), its folder created."""
    require("contrastive_jax.models.weights", ("safetensors",))
    from safetensors.numpy import save as serialise

    target = epath.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(serialise(dict(tensors), metadata=dict(metadata)))


def read(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(tensors, metadata) of a ``.safetensors`` file, or of a ``.pth`` / ``.pt`` file of
    tensors (a ``state_dict`` saved with ``torch.save``; metadata empty).

    Raises:
      FileNotFoundError: no file at ``path``.
      ConfigError: a suffix that is neither, a file that does not parse, or a ``.pth`` file
        that is not a flat dict of tensors.
      ModuleNotFoundError: a ``.pth`` file and no torch installed.
    """
    source = epath.Path(path)
    if not str(path).endswith(WEIGHT_SUFFIXES):
        raise ConfigError(f"{path}: a weights file ends with one of {WEIGHT_SUFFIXES}")
    if not source.is_file():
        raise FileNotFoundError(f"no weights file {path}")
    data = source.read_bytes()
    if str(path).endswith(".safetensors"):
        require("contrastive_jax.models.weights", ("safetensors",))
        from safetensors.numpy import load as deserialise

        try:
            tensors = deserialise(data)
        except Exception as err:  # noqa: BLE001 - safetensors raises its own error types
            raise ConfigError(f"{path} is not a safetensors file: {err}") from err
        return tensors, _metadata(data)
    return _read_torch(path, data), {}


def _metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file's header (an 8-byte little-endian length,
    then that many bytes of JSON: the format's specification)."""
    (length,) = struct.unpack("<Q", data[:8])
    return dict(json.loads(data[8:8 + length]).get("__metadata__") or {})


def _read_torch(path: str, data: bytes) -> dict[str, np.ndarray]:
    try:
        import torch
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"reading {path} (a PyTorch .pth/.pt file) needs torch, which is not installed: "
            "pip install torch (or convert it to .safetensors with safetensors.torch.save_file "
            "where torch is)", name="torch") from err
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch's unpickler raises many types
        raise ConfigError(f"{path} does not load with torch.load(weights_only=True): {err}") from err
    if not isinstance(state, Mapping) or not all(
            isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"{path} is not a state_dict (a flat dict of tensors); save "
                          "model.state_dict() itself")
    return {k: v.detach().float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in state.items()}


def assemble(create: Callable[[], nnx.Module], arrays: Mapping[str, np.ndarray],
             source: str) -> nnx.Module:
    """The module ``create()`` builds, with the parameters and batch statistics ``arrays``
    (Flax path joined by dots -> array), in evaluation mode; nothing is initialised at
    random but what the file has not: a ViT's dropout RNG state.

    Raises:
      ConfigError: naming a missing or unexpected tensor, or one whose shape is not the
        module's (``source`` names the file).
    """
    abstract = nnx.eval_shape(create)
    graphdef, weights, rest = nnx.split(abstract, WEIGHTS, ...)  # type: ignore[misc]
    expected = expected_shapes(weights)
    check_tensors(arrays, expected, source)
    if jax.tree.leaves(rest):  # RNG streams: drawn by a compiled create() that returns them only
        rest = jax.jit(lambda: nnx.split(create(), WEIGHTS, ...)[2])()  # type: ignore[misc]
    pure = nnx.traversals.unflatten_mapping(
        {tuple(int(p) if p.isdigit() else p for p in name.split(".")): np.asarray(value)
         for name, value in arrays.items()})
    nnx.replace_by_pure_dict(weights, pure)
    module = nnx.merge(graphdef, weights, rest)
    module.eval()
    return module


def expected_shapes(weights: nnx.State) -> dict[str, tuple[int, ...]]:
    """{name: shape} of a (possibly abstract) state's leaves."""
    flat = nnx.traversals.flatten_mapping(weights.to_pure_dict())
    return {".".join(map(str, path)): tuple(value.shape) for path, value in flat.items()}


def check_tensors(arrays: Mapping[str, np.ndarray], expected: Mapping[str, tuple[int, ...]],
                  source: str) -> None:
    """Raises ConfigError naming the first missing, unexpected or misshapen tensor."""
    missing = sorted(set(expected) - set(arrays))
    if missing:
        raise ConfigError(f"{source} has no tensor {missing[0]!r} ({len(missing)} missing)")
    unexpected = sorted(set(arrays) - set(expected))
    if unexpected:
        raise ConfigError(f"{source} has an unexpected tensor {unexpected[0]!r} "
                          f"({len(unexpected)} unexpected)")
    for name, shape in expected.items():
        if tuple(np.shape(arrays[name])) != shape:
            raise ConfigError(f"{source}: tensor {name!r} has shape "
                              f"{list(np.shape(arrays[name]))}, the encoder's is {list(shape)}")


def _checked_spec(saved: EncoderSpec, given: Any, source: str) -> EncoderSpec:
    """``saved`` (the file's encoder config); ConfigError naming the first field in which
    ``given`` (None: any) differs from it."""
    if given is None:
        return saved
    wanted = encoder_spec(given)
    ours, theirs = dataclasses.asdict(wanted), dataclasses.asdict(saved)
    differences = sorted(k for k in ours if ours[k] != theirs[k])
    if differences:
        name = differences[0]
        raise ConfigError(f"config.model.encoder.{name}={ours[name]!r}, but {source} holds an "
                          f"encoder with {name}={theirs[name]!r}: the encoder must be the "
                          "one saved")
    return wanted


def load_network(path: str, encoder: Any = None) -> tuple[nnx.Module, nnx.Module | None]:
    """(encoder, head or None) of a weights file, both in evaluation mode; see
    :func:`load_encoder`. The head is the ``flax`` file's, when it was exported with one."""
    tensors, metadata = read(path)
    kind = metadata.get(FORMAT_KEY)
    if kind == FLAX:
        stray = sorted(k for k in tensors if not k.startswith(("encoder.", "head.")))
        if stray:
            raise ConfigError(f"{path} has a tensor {stray[0]!r} outside encoder. and head.")
        spec = _checked_spec(_spec_from_json(metadata["encoder"], EncoderSpec), encoder, path)
        model: Any = assemble(lambda: create_encoder(spec, rngs=nnx.Rngs(0)),
                         _under(tensors, "encoder."), path)
        head = None
        if "head" in metadata:
            hspec = _spec_from_json(metadata["head"], HeadSpec)
            width = model.num_features
            head = assemble(lambda: create_head(hspec, width, rngs=nnx.Rngs(0)),
                            _under(tensors, "head."), path)
        return model, head
    if kind == TIMM:
        raise ConfigError(f"{path} is a timm export, which load_encoder does not read: export "
                          "the run with --format flax")
    saved = _spec_from_json(metadata["encoder"], EncoderSpec) if kind == TORCHVISION else None
    if saved is not None and encoder is None:
        spec = saved
    elif encoder is None:
        raise ConfigError(
            f"{path} holds no contrastive_jax encoder config (a torchvision state_dict?): pass "
            "the encoder it is, e.g. load_encoder(path, encoder={'name': 'resnet50', "
            "'stem': 'imagenet'}) or config.model.encoder")
    else:
        spec = encoder_spec(encoder)
    if saved is not None and saved.pool_padding != spec.pool_padding and spec.stem == "imagenet":
        raise ConfigError(f"config.model.encoder.pool_padding={spec.pool_padding!r}, but {path} "
                          f"was trained with {saved.pool_padding!r}")
    # Our own export keeps its pooling; torchvision's own weights need torchvision's.
    tv.check_resnet(spec, reading=saved is None)
    create = lambda: create_encoder(spec, rngs=nnx.Rngs(0))  # noqa: E731
    expected = expected_shapes(nnx.state(nnx.eval_shape(create), WEIGHTS))
    encoder_tensors = {k: v for k, v in tensors.items() if not k.startswith("head.")}
    arrays = tv.from_torchvision(encoder_tensors, spec, expected, source=path)
    return assemble(create, arrays, path), None


def load_encoder(path: str, encoder: Any = None) -> nnx.Module:
    """The encoder in a weights file, in evaluation mode: ``load_encoder(path)(x)`` maps
    images x [B, H, W, C] (NHWC, normalised as in training) to features [B, F] float32.

    Args:
      path: a ``flax`` export (its config in the file: nothing else is needed), a
        ``torchvision`` export of this package, or a torchvision ResNet ``state_dict``
        (``.safetensors``, or ``.pth`` / ``.pt`` with torch installed; ``fc`` and
        ``num_batches_tracked`` are not read).
      encoder: the encoder config (a mapping of ``config.model.encoder`` fields or an
        :class:`~contrastive_jax.models.EncoderSpec`): required for a torchvision
        ``state_dict`` from elsewhere (e.g. ``{"name": "resnet50", "stem": "imagenet"}``);
        for a file with a config, checked against it.

    Raises:
      ConfigError: a tensor missing, unexpected or of another shape (the message names its
        key), an encoder config other than the file's, or an encoder torchvision's layout
        does not express.
      FileNotFoundError: no file at ``path``.
      ModuleNotFoundError: a ``.pth`` file and no torch installed.
    """
    return load_network(path, encoder)[0]


def _under(tensors: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
