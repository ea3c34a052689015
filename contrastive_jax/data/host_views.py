"""The host's share of a view: decode once, then per view crop, resize and flip (uint8).

The default input path (:mod:`.host_pipeline`) does here only what needs the whole
encoded image; the appearance stages run on the accelerator (:mod:`.device_augment`).
One example's ``V`` views come from one decode (Pillow, libjpeg-turbo):

* ``crop_scale`` set: torchvision's ``RandomResizedCrop`` window (:func:`crop_window`, the
  distribution of :func:`contrastive_jax.data._image_ops.crop_window`: up to 10 draws of
  area ``U(scale)`` and log-uniform aspect ratio, else the central crop), resampled to
  ``S x S`` by Pillow's bilinear filter (antialiased when it shrinks, as torchvision on
  PIL images), then a horizontal flip with probability ``flip_prob``;
* ``crop_scale`` None: the image resized to ``S x S`` (if it is not already), zero-padded
  by ``round(pad_fraction * S)`` per side and cropped back at a uniform offset, then the
  flip.

Each view draws from ``numpy.random.default_rng([seed, step, id, view])``: a pure function
of (seed, step, example id, view), like the device's draws.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np
from PIL import Image

from contrastive_jax.data.augment_config import AugmentConfig
from contrastive_jax.errors import CorruptImageError

__all__ = ["crop_window", "decode", "view_rngs", "views_of"]


def view_rngs(seed: int, step: int, index: int, num_views: int) -> list[np.random.Generator]:
    """The generators of the ``num_views`` views of example ``index`` at ``step``."""
    return [np.random.default_rng([seed, step, index, v]) for v in range(num_views)]


def decode(data: bytes, name: str) -> Image.Image:
    """Encoded JPEG / PNG / ... bytes -> an RGB image; :class:`CorruptImageError` names ``name``."""
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise CorruptImageError(f"cannot decode image {name}: {e}") from e
    return image if image.mode == "RGB" else image.convert("RGB")


def crop_window(
    height: int,
    width: int,
    rng: np.random.Generator,
    *,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    attempts: int = 10,
) -> tuple[int, int, int, int]:
    """torchvision ``RandomResizedCrop``'s window ``(top, left, crop_height, crop_width)``.

    Up to ``attempts`` draws of an area ``U(scale)`` of the image and an aspect ratio
    (width / height) log-uniform in ``ratio``; the first crop that fits, else the central
    crop with the ratio clamped to ``ratio``.
    """
    u = rng.random((attempts, 2))
    area = height * width * (scale[0] + (scale[1] - scale[0]) * u[:, 0])
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = np.exp(log_lo + (log_hi - log_lo) * u[:, 1])
    crop_w = np.round(np.sqrt(area * aspect))
    crop_h = np.round(np.sqrt(area / aspect))
    fits = (crop_w >= 1) & (crop_w <= width) & (crop_h >= 1) & (crop_h <= height)
    pos = rng.random(2)
    if fits.any():
        first = int(np.argmax(fits))
        ch, cw = int(crop_h[first]), int(crop_w[first])
        return int(pos[0] * (height - ch + 1)), int(pos[1] * (width - cw + 1)), ch, cw
    in_ratio = width / height
    cw = round(height * ratio[1]) if in_ratio > ratio[1] else width
    ch = round(width / ratio[0]) if in_ratio < ratio[0] else height
    return (height - ch) // 2, (width - cw) // 2, ch, cw


def _resized(image: Image.Image, size: int) -> np.ndarray:
    if image.size != (size, size):
        image = image.resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(image)


def _view(image: Image.Image, rng: np.random.Generator, cfg: AugmentConfig, size: int) -> np.ndarray:
    if cfg.crop_scale is not None:
        top, left, ch, cw = crop_window(
            image.height, image.width, rng, scale=cfg.crop_scale, ratio=cfg.crop_ratio
        )
        view = image.resize(
            (size, size), Image.Resampling.BILINEAR, box=(left, top, left + cw, top + ch)
        )
        if cfg.flip_prob > 0 and rng.random() < cfg.flip_prob:
            view = view.transpose(Image.Transpose.FLIP_LEFT_RIGHT)  # contiguous, unlike [:, ::-1]
        return np.asarray(view)
    out = _resized(image, size)
    pad = round(cfg.pad_fraction * size)
    if pad > 0:
        dy, dx = rng.integers(0, 2 * pad + 1, 2)
        padded = np.pad(out, ((pad, pad), (pad, pad), (0, 0)))
        out = padded[dy : dy + size, dx : dx + size]
    if cfg.flip_prob > 0 and rng.random() < cfg.flip_prob:
        out = out[:, ::-1]
    return out


def views_of(
    image: Image.Image | np.ndarray,
    rngs: Sequence[np.random.Generator],
    cfg: AugmentConfig,
    size: int,
) -> np.ndarray:
    """uint8 [V, size, size, 3]: view ``v`` of ``image`` (RGB image, or uint8 [H, W, 3])
    cropped, resized and flipped with ``rngs[v]``."""
    if isinstance(image, np.ndarray):
        if cfg.crop_scale is None and image.shape[:2] == (size, size):
            return _array_shifts(image, rngs, cfg, size)
        image = Image.fromarray(image)
    out = np.empty((len(rngs), size, size, 3), np.uint8)
    for v, rng in enumerate(rngs):
        out[v] = _view(image, rng, cfg, size)
    return out


def _array_shifts(
    image: np.ndarray, rngs: Sequence[np.random.Generator], cfg: AugmentConfig, size: int
) -> np.ndarray:
    """The shift views of an image already ``size x size`` (no Pillow round trip)."""
    pad = round(cfg.pad_fraction * size)
    padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0))) if pad else image
    out = []
    for rng in rngs:
        dy, dx = rng.integers(0, 2 * pad + 1, 2) if pad else (0, 0)
        view = padded[dy : dy + size, dx : dx + size]
        if cfg.flip_prob > 0 and rng.random() < cfg.flip_prob:
            view = view[:, ::-1]
        out.append(view)
    return np.stack(out)
