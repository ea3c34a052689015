"""CIFAR-10 arrays and an RGB augmentation for the CPU-scale CIFAR proxies (``cifar_proxy.py``).

The data are the shared image folder ``<ROOT>/../shared/data/cifar10/{train,test}/<class>/<file>``
(read with :func:`contrastive_jax.data.sources.image_folder_source`). A run uses deterministic
class-balanced subsets of both splits (:func:`contrastive_jax.data.sources.class_balanced_subset`,
fixed data seed, so every training seed sees the same images), decoded once into memory as float32
in [0, 1], optionally 2x2 average-pooled from 32x32 to 16x16.

:func:`augment_cifar` is the two-view augmentation, applied per image on the fly inside the jitted
training step (in order):

1. random crop: zero-pad by H // 8 pixels on each side (4 at 32x32, 2 at 16x16) and crop back to
   H x W at a uniformly random offset (the translation crop of the digits proxy, in place of
   SimCLR's random resized crop);
2. horizontal flip with probability 1/2;
3. contrast: ``x <- m + c (x - m)``, m the image's mean over pixels and channels, c ~ U(0.6, 1.4);
4. brightness: ``x <- b x``, b ~ U(0.6, 1.4) (the digits proxy's gain);
5. colour: each channel multiplied by its own g_c ~ U(0.8, 1.2);
6. clip to [0, 1].

Steps 3-5 are a cheap stand-in for torchvision's ColorJitter(0.4, 0.4, 0.4): per-image contrast and
brightness and a per-channel gain that shifts the hue and saturation; there is no grayscale step.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _legacy_cu as cu  # noqa: E402

from contrastive_jax.data.base import Source  # noqa: E402
from contrastive_jax.data.sources import (  # noqa: E402
    class_balanced_subset,
    decode_image_file,
    image_folder_source,
)

ROOT = Path(__file__).resolve().parents[2]
CIFAR_DIR = ROOT.parent / "shared" / "data" / "cifar10"
NUM_CLASSES = 10
#: Seed of the class-balanced subsets (fixed: the training seeds share the data).
DATA_SEED = 0


@functools.cache
def _source(root: Path) -> Source:
    """The image folder at ``root`` (listed once per process), with a clear error if absent."""
    if not root.is_dir():
        raise FileNotFoundError(
            f"CIFAR-10 image folder not found at {root} (expected <root>/{{train,test}}/<class>/"
            "<image>); the CIFAR proxies need the shared data next to the repository"
        )
    return image_folder_source(str(root), name="cifar10")


def load_split(
    split: str, size: int, downsample: bool, root: Path = CIFAR_DIR
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """A deterministic class-balanced subset of one CIFAR-10 split, decoded into memory.

    Args:
      split: ``"train"`` or ``"test"``.
      size: number of images (``size // 10`` per class, the remainder spread by the subset seed).
      downsample: 2x2 average pooling, 32x32 -> 16x16.
      root: the image folder.

    Returns:
      ``(x, y, class_names)``: x float32 [size, H, W, 3] in [0, 1] (H = W = 16 or 32), y int64
      [size] in [0, 10) in the folder's file order, and the 10 class names (label order).
    """
    source = _source(root)
    data = source.split(split)
    rows = class_balanced_subset(data.labels, size, DATA_SEED)
    x = np.stack([decode_image_file(p) for p in data.paths[rows]]).astype(np.float32) / 255.0
    if downsample:
        n, h, w, c = x.shape
        x = x.reshape(n, h // 2, 2, w // 2, 2, c).mean((2, 4))
    return x, data.labels[rows].astype(np.int64), source.class_names


def cifar_data(num_train: int, num_test: int, downsample: bool, root: Path = CIFAR_DIR) -> cu.Data:
    """Train/test subsets as :class:`conditional_uniformity.Data` (images [N, H, W, 3]).

    ``meta_train`` is the one-hot class label, float32 [num_train, 10] (unused by the losses of
    ``cifar_proxy.py``, which take the labels directly).
    """
    x_train, y_train, _ = load_split("train", num_train, downsample, root)
    x_test, y_test, _ = load_split("test", num_test, downsample, root)
    onehot = np.eye(NUM_CLASSES, dtype=np.float32)[y_train]
    return cu.Data(x_train, y_train, onehot, x_test, y_test)


def augment_cifar(key: jax.Array, x: jax.Array) -> jax.Array:
    """RGB augmentation of the module docstring: float [N, H, W, 3] in [0, 1] -> same shape.

    Every random draw is per image (and per channel for the colour gain).
    """
    n = x.shape[0]
    k_crop, k_flip, k_con, k_bri, k_col = jax.random.split(key, 5)
    x = cu._random_crop(k_crop, x, x.shape[1] // 8)
    flip = jax.random.bernoulli(k_flip, 0.5, (n, 1, 1, 1))
    x = jnp.where(flip, x[:, :, ::-1], x)
    mean = x.mean((1, 2, 3), keepdims=True)
    contrast = jax.random.uniform(k_con, (n, 1, 1, 1), minval=0.6, maxval=1.4)
    x = mean + contrast * (x - mean)
    x = x * jax.random.uniform(k_bri, (n, 1, 1, 1), minval=0.6, maxval=1.4)
    x = x * jax.random.uniform(k_col, (n, 1, 1, x.shape[-1]), minval=0.8, maxval=1.2)
    return jnp.clip(x, 0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """A CIFAR proxy script's budget and output directories, full and ``--quick``."""

    epochs: int
    default_out: Path
    quick_out: Path
    quick_epochs: int = 2
    num_train: int = 5000
    num_test: int = 2000
    quick_train: int = 256
    quick_test: int = 200


def add_run_options(parser: argparse.ArgumentParser, options: RunOptions,
                    quick_note: str = "") -> None:
    """The options every CIFAR proxy script shares: ``--seeds``, ``--epochs``, ``--quick``,
    ``--aggregate_only`` and ``--out`` (``quick_note`` extends ``--quick``'s help)."""
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=options.epochs)
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {options.quick_epochs} epochs, seed 0, "
                             f"{options.quick_train}/{options.quick_test} images{quick_note}")
    parser.add_argument("--aggregate_only", action="store_true",
                        help="train nothing; summarise the finished runs")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results directory (default {options.default_out}; --quick: "
                             f"{options.quick_out})")


def resolve_run_options(args: argparse.Namespace, options: RunOptions) -> tuple[int, int]:
    """Check ``--epochs``, apply ``--quick`` (its epochs, seed 0) and the default ``--out``
    (created); returns the (training, test) subset sizes."""
    if args.epochs < 1:
        raise ValueError(f"--epochs must be >= 1, got {args.epochs}")
    sizes = options.num_train, options.num_test
    if args.quick:
        args.epochs, args.seeds = options.quick_epochs, [0]
        sizes = options.quick_train, options.quick_test
    if args.out is None:
        args.out = options.quick_out if args.quick else options.default_out
    args.out.mkdir(parents=True, exist_ok=True)
    return sizes
