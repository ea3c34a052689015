"""Export a pretrained encoder (and its projection head) as a safetensors file other programs read.

    python -m contrastive_jax.export --workdir runs/simclr_cifar10 --format torchvision \\
        --output resnet18.safetensors
    python -m contrastive_jax.export --workdir runs/simclr_cifar10 --step 3900 --format flax \\
        --output encoder.safetensors --with_head

``--workdir`` is a pretraining work directory, read with its newest readable checkpoint or
the one of ``--step``. ``--format``:

* ``flax``: every parameter and batch-norm statistic under its Flax path
  (``encoder.blocks.0.conv1.kernel``), the encoder's config in the file's metadata:
  ``contrastive_jax.models.load_encoder(FILE)`` returns the encoder from the file alone.
  Any encoder.
* ``torchvision``: a ResNet-18/34/50 as ``torchvision.models.resnetNN().state_dict()`` (OIHW
  kernels; BN ``weight``, ``bias``, ``running_mean``, ``running_var``,
  ``num_batches_tracked``), which loads with ``strict=True`` once ``net.fc =
  torch.nn.Identity()``. The CIFAR stem is the PyTorch ports': also ``net.conv1 =
  torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)`` and ``net.maxpool = torch.nn.Identity()``; TF's
  "SAME" max-pool (``pool_padding="same"``, the packaged ImageNet recipes') ``net.maxpool =
  torch.nn.Sequential(torch.nn.ZeroPad2d((0, 1, 0, 1)), torch.nn.MaxPool2d(3, 2))``, exact for
  an input side of 4k or 4k - 1 (224, 32). The file's metadata ``torchvision`` has the lines.
  Refused (exit 2): other encoders and a width other than 1, which torchvision's classes do
  not compute.

* ``timm``: a ViT with ``pool="cls"`` as the ``state_dict`` of timm's ``VisionTransformer``
  with ``num_classes=0`` (``vit_ti16``, ``vit_s16``, ``vit_b16``: ``timm.create_model(
  "vit_tiny_patch16_224", num_classes=0)``, ``vit_small_...``, ``vit_base_...``; the metadata
  ``timm`` has the line). ``pool="mean"`` is refused (timm normalises after the pooling).

``--with_head`` adds the projection head: under ``head.`` with its Flax paths (``flax``) or as
the ``state_dict`` of a ``torch.nn.Sequential`` (``torchvision``: keys ``head.0.weight``, ...;
the metadata ``head_layout`` gives the Sequential, e.g. ``Sequential(Linear(512, 512,
bias=False), BatchNorm1d(512), ReLU(), Linear(512, 128, bias=False))``).

The network expects what it was trained on: images normalised by the training data's
channel mean and std, NHWC here, NCHW in PyTorch. docs/using-elsewhere.md has the PyTorch
lines that load the file.

Exit codes (:class:`~contrastive_jax.errors.ExitCode`, docs/cli.md): 0 written; 2 a bad
flag, a missing work directory or checkpoint, or an encoder the format does not express; 1
with a traceback for anything else, which is a bug. Also installed as the console script
``contrastive-jax-export``.
"""

from __future__ import annotations

from contrastive_jax._cli import parse_flags, quiet_startup, report_error, run_tool

quiet_startup()  # before JAX loads

from contrastive_jax._extras import require

require("contrastive_jax.export", ("ml_collections", "flax", "safetensors"))

from typing import Any

from absl import app, flags, logging

from contrastive_jax.errors import ConfigError, ExitCode
from contrastive_jax.models import weights
from contrastive_jax.train.checkpoint import CHECKPOINT_DIR
from contrastive_jax.train.paths import as_path
from contrastive_jax.train.pretrained import load_pretrained
from contrastive_jax.train.spec import parse

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "The pretraining work directory to export from.", required=True)
_STEP = flags.DEFINE_integer(
    "step", None, "The checkpoint's step (default: the newest readable checkpoint).")
_FORMAT = flags.DEFINE_enum(
    "format", None, ["flax", "torchvision", "timm"],
    "flax: Flax paths and the config in the metadata (any encoder); torchvision: "
    "torchvision's ResNet state_dict (ResNet-18/34/50 of width 1; CIFAR stem: conv1 = "
    "Conv2d(3, 64, 3, 1, 1, bias=False), maxpool = Identity(); pool_padding='same': maxpool = "
    "Sequential(ZeroPad2d((0, 1, 0, 1)), MaxPool2d(3, 2))); timm: timm's "
    "VisionTransformer state_dict (a ViT with pool='cls', num_classes=0).", required=True)
_OUTPUT = flags.DEFINE_string(
    "output", None, "The safetensors file to write (local or gs://).", required=True)
_WITH_HEAD = flags.DEFINE_bool(
    "with_head", False, "Also export the projection head (torchvision: a "
    "torch.nn.Sequential's state_dict under head.).")

__all__ = ["export", "main", "parse_flags"]


def export(workdir: str, output: str, *, format: str, step: int | None = None,
           with_head: bool = False) -> dict[str, str]:
    """Writes the encoder (and, ``with_head``, the head) of the pretraining run in
    ``workdir`` (checkpoint ``step``, default the newest readable) to ``output`` in
    ``format`` (``"flax"``, ``"torchvision"`` or ``"timm"``); returns the file's metadata.

    Raises:
      FileNotFoundError: no such work directory or checkpoint.
      ConfigError: an encoder or head the format does not express.
    """
    if format not in weights.FORMATS:  # before the checkpoint is read
        raise ConfigError(f"--format must be one of {weights.FORMATS}, got {format!r}")
    source = workdir if step is None else str(as_path(workdir) / CHECKPOINT_DIR / str(step))
    run = load_pretrained(source)
    model = parse(run.config).model
    network: Any = run.network  # a ContrastiveModel
    tensors, metadata = weights.export_weights(
        network.encoder, model.encoder, format=format,
        head=network.head if with_head else None, head_config=model.head, step=run.step)
    weights.save(output, tensors, metadata)
    return metadata


def main(argv: list[str]) -> int:
    logging.set_verbosity(logging.WARNING)  # Orbax reports every restore at INFO
    if len(argv) > 1:
        report_error(f"unexpected arguments {argv[1:]} (--help lists the flags)")
        return ExitCode.USAGE

    def body() -> int:
        metadata = export(_WORKDIR.value, _OUTPUT.value, format=_FORMAT.value,
                          step=_STEP.value, with_head=_WITH_HEAD.value)
        print(f"wrote {_OUTPUT.value} ({_FORMAT.value}, step {metadata['step']})")
        if _FORMAT.value != "flax":
            print(f"loads into: {metadata[_FORMAT.value]}")
            if "head_layout" in metadata:
                print(f"the head (keys head.*) into: {metadata['head_layout']}")
        return ExitCode.OK

    return run_tool(body, workdir=_OUTPUT.value)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
