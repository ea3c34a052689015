"""The host's share of a view: decode once, then per view crop, resize and flip (uint8).

The default input path (:mod:`.host_pipeline`) does here only what needs the whole
encoded image; the appearance stages run on the accelerator (:mod:`.device_augment`).
One example's ``V`` views come from one decode (Pillow, libjpeg-turbo):

* ``crop_scale`` set: torchvision's ``RandomResizedCrop`` window (:func:`crop_window`: up
  to 10 draws of area ``U(scale)`` and log-uniform aspect ratio, else the central crop),
  resampled to ``S x S`` by Pillow's bilinear filter (antialiased when it shrinks, as
  torchvision on PIL images), then a horizontal flip with probability ``flip_prob``;
  (``crop_sampler="tf_bounding_box"``: the window of TensorFlow's
  ``sample_distorted_bounding_box``, :func:`tf_crop_window`; ``crop_interpolation``: Pillow's
  bilinear or bicubic filter);
* ``crop_scale`` None: the image resized to ``S x S`` (if it is not already), zero-padded
  by ``round(pad_fraction * S)`` per side and cropped back at a uniform offset, then the
  flip;
* then, if ``policy`` is set, AutoAugment or RandAugment on the uint8 view
  (:mod:`.image_policies`).

:func:`eval_view` is the evaluation transform (resize and centre-crop, no randomness).

Each view draws from ``numpy.random.default_rng([seed, step, id, view])``: a pure function
of (seed, step, example id, view), like the device's draws.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np
from PIL import Image

from contrastive_jax.data import image_policies
from contrastive_jax.data.augment_config import AugmentConfig
from contrastive_jax.data.image_depth import to_rgb8
from contrastive_jax.errors import CorruptImageError

__all__ = ["crop_window", "decode", "eval_view", "resize_bicubic_tf1", "resize_bilinear_tf1",
           "tf_crop_window", "view_rngs", "views_of"]

_FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}


def view_rngs(seed: int, step: int, index: int, num_views: int) -> list[np.random.Generator]:
    """The generators of the ``num_views`` views of example ``index`` at ``step``."""
    return [np.random.default_rng([seed, step, index, v]) for v in range(num_views)]


def decode(data: bytes, name: str) -> Image.Image:
    """Encoded JPEG / PNG / ... bytes -> an 8-bit RGB image, read at its real depth (16-bit
    and float images scaled, :func:`.image_depth.to_rgb8`); :class:`CorruptImageError`
    names ``name``."""
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise CorruptImageError(f"cannot decode image {name}: {e}") from e
    return to_rgb8(image, name)


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


#: ``min_object_covered`` and ``max_attempts`` of both TF sources' crops (SimCLR
#: ``data_util.crop_and_resize``, SupCon ``preprocessing._distorted_crop_window``).
TF_MIN_OBJECT_COVERED = 0.1
TF_CROP_ATTEMPTS = 100


def tf_crop_window(
    height: int,
    width: int,
    rng: np.random.Generator,
    *,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    fallback: str = "whole",
    attempts: int = TF_CROP_ATTEMPTS,
) -> tuple[int, int, int, int]:
    """``tf.image.sample_distorted_bounding_box``'s window ``(top, left, crop_height,
    crop_width)`` with the whole image as the box and ``min_object_covered = 0.1``.

    TensorFlow's kernel (``sample_distorted_bounding_box_op.cc``, ``GenerateRandomCrop``),
    per attempt: an aspect ratio ``a`` (width / height) uniform in ``ratio``; heights from
    ``rint(sqrt(scale[0] H W / a))`` to ``rint(sqrt(scale[1] H W / a))`` (capped so that
    ``rint(h a) <= W`` and ``h <= H``), one drawn uniformly; ``w = rint(h a)``, nudged by one
    row when rounding leaves the area outside ``scale``; rejected if it does not fit or
    covers less than ``min_object_covered`` of the image; the offset uniform in
    ``[0, H - h)`` x ``[0, W - w)`` (0 when the side is full). After ``attempts`` failures
    the whole image, or with ``fallback="center_square"`` the central ``min(H, W)`` square
    (which SupCon's code also takes when the window drawn is the whole image).
    """
    total = float(height * width)
    min_area = np.float32(scale[0] * total)
    max_area = np.float32(scale[1] * total)
    window = None
    for _ in range(attempts):
        aspect = np.float32(ratio[0] + (ratio[1] - ratio[0]) * rng.random())
        h = int(np.rint(np.sqrt(min_area / aspect)))
        max_h = int(np.rint(np.sqrt(max_area / aspect)))
        if np.rint(max_h * aspect) > width:
            max_h = int(math.floor((width + 0.5 - 1e-7) / aspect))
            if np.rint(max_h * aspect) > width:
                max_h -= 1
        max_h = min(max_h, height)
        h = min(h, max_h)
        if h < max_h:
            h += int(rng.integers(0, max_h - h + 1))
        w = int(np.rint(h * aspect))
        if w * h < min_area:
            h += 1
            w = int(np.rint(h * aspect))
        if w * h > max_area:
            h -= 1
            w = int(np.rint(h * aspect))
        area = w * h
        if (area < min_area or area > max_area or w > width or h > height or w <= 0 or h <= 0
                or area < TF_MIN_OBJECT_COVERED * total):
            continue
        top = int(rng.integers(0, height - h)) if h < height else 0
        left = int(rng.integers(0, width - w)) if w < width else 0
        window = (top, left, h, w)
        break
    if fallback == "center_square" and (window is None or window[2:] == (height, width)):
        side = min(height, width)
        return (height - side + 1) // 2, (width - side + 1) // 2, side, side
    return window if window is not None else (0, 0, height, width)


def _resized(image: Image.Image, size: int) -> np.ndarray:
    if image.size != (size, size):
        image = image.resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(image)


def _view(image: Image.Image, rng: np.random.Generator, cfg: AugmentConfig, size: int) -> np.ndarray:
    if cfg.crop_scale is not None:
        if cfg.crop_sampler == "tf_bounding_box":
            top, left, ch, cw = tf_crop_window(
                image.height, image.width, rng, scale=cfg.crop_scale, ratio=cfg.crop_ratio,
                fallback=cfg.crop_fallback)
        else:
            top, left, ch, cw = crop_window(
                image.height, image.width, rng, scale=cfg.crop_scale, ratio=cfg.crop_ratio)
        view = image.resize(
            (size, size), _FILTERS[cfg.crop_interpolation], box=(left, top, left + cw, top + ch)
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
    cropped, resized, flipped and, if ``cfg.policy`` is set, augmented with ``rngs[v]``."""
    if isinstance(image, np.ndarray):
        if cfg.crop_scale is None and image.shape[:2] == (size, size):
            return _with_policy(_array_shifts(image, rngs, cfg, size), rngs, cfg)
        image = Image.fromarray(image)
    out = np.empty((len(rngs), size, size, 3), np.uint8)
    for v, rng in enumerate(rngs):
        out[v] = _view(image, rng, cfg, size)
    return _with_policy(out, rngs, cfg)


def _with_policy(
    views: np.ndarray, rngs: Sequence[np.random.Generator], cfg: AugmentConfig
) -> np.ndarray:
    """AutoAugment or RandAugment of each view with its generator (after its geometry)."""
    if cfg.policy == "none":
        return views
    out = np.empty_like(views)
    for v, rng in enumerate(rngs):
        view = np.ascontiguousarray(views[v])
        if cfg.policy == "autoaugment":
            out[v] = image_policies.autoaugment(view, rng)
        else:
            out[v] = image_policies.randaugment(
                view, rng, num_layers=cfg.randaugment_layers,
                magnitude=cfg.randaugment_magnitude)
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


def eval_view(
    image: Image.Image | np.ndarray, *, size: int, crop_fraction: float,
    mode: str = "resize_crop",
) -> np.ndarray:
    """The evaluation transform of one image (``config.data.eval_transform``).

    ``"resize_crop"`` resizes the shorter side to ``round(size / crop_fraction)`` (Pillow's
    antialiased bilinear filter on float32 channels, no rounding to uint8) and centre-crops
    ``size x size`` (torchvision's ``Resize`` + ``CenterCrop``). ``"crop_resize"`` is SimCLR
    v1's ``center_crop`` (``data_util.py``): a centred square of ``rint(crop_fraction *
    min(h, w))`` pixels at offset ``(h - side + 1) // 2``, resized to ``size x size`` by
    TF1's ``resize_bicubic`` (:func:`resize_bicubic_tf1`, the source's call) and clipped to
    [0, 1]. ``"tf_resize_crop"`` is the SupCon TF code's evaluation path
    (google-research/google-research@0c1bbe5 ``supcon/preprocessing.py``, ``_crop_to_square``
    with ``eval_crop_method=RESIZE_THEN_CROP`` and ``crop_padding=32``: the shorter side to
    224 + 32 = 256 at ``crop_fraction = 224 / 256``): the shorter side to
    ``T = round(size / crop_fraction)``, the other to ``int(float32(T / min(h, w)) * side)``
    (``_resize_to_min_dim``'s truncating cast), resized by ``tf.compat.v1.image.resize``'s
    bilinear (:func:`resize_bilinear_tf1`: legacy pixel centres, no antialiasing), cast back
    to uint8 by truncation (``_resize_image``), then the centred ``size x size`` window at
    offset ``(H - size + 1) // 2`` (``_center_crop_window``).

    Args:
      image: an RGB image, or uint8 [h, w, 3].
      size: output side.
      crop_fraction: fraction of the (resized) shorter side kept by the centre crop (1.0
        keeps it all; ImageNet's usual 224/256 = 0.875).
      mode: ``"resize_crop"``, ``"crop_resize"`` or ``"tf_resize_crop"``.

    Returns:
      float32 [size, size, 3] in [0, 1] (``"tf_resize_crop"``: multiples of 1/255). An image
      that already is ``size x size`` with ``crop_fraction == 1`` is only scaled to [0, 1].
    """
    pixels = np.asarray(image, np.float32) / 255.0
    h, w = pixels.shape[:2]
    if crop_fraction == 1.0 and (h, w) == (size, size):
        return pixels
    if mode == "tf_resize_crop":
        return _tf_resize_crop(np.asarray(image), size, crop_fraction)
    if mode == "crop_resize":
        side = int(np.rint(np.float32(crop_fraction) * np.float32(min(h, w))))
        top, left = (h - side + 1) // 2, (w - side + 1) // 2
        crop = pixels[top : top + side, left : left + side]
        return np.clip(resize_bicubic_tf1(crop, size, size), 0.0, 1.0)
    scale = round(size / crop_fraction) / min(h, w)
    new_h, new_w = max(round(h * scale), size), max(round(w * scale), size)
    resized = np.stack(
        [np.asarray(Image.fromarray(np.ascontiguousarray(pixels[..., c]), mode="F").resize(
            (new_w, new_h), Image.Resampling.BILINEAR)) for c in range(pixels.shape[2])],
        axis=-1,
    )
    top, left = (new_h - size) // 2, (new_w - size) // 2
    return np.ascontiguousarray(resized[top : top + size, left : left + size])


def _tf_resize_crop(image: np.ndarray, size: int, crop_fraction: float) -> np.ndarray:
    """``"tf_resize_crop"`` of :func:`eval_view` on uint8 [h, w, 3] -> float32 [size, size, 3]."""
    h, w = image.shape[:2]
    shape = np.array([h, w], np.float32)
    scale = np.float32(round(size / crop_fraction)) / np.min(shape)
    # tf.cast(float32 -> int32) truncates; never below size (a float32 product just under
    # the target at crop_fraction = 1).
    new_h, new_w = (max(int(n), size) for n in scale * shape)
    resized = resize_bilinear_tf1(image.astype(np.float32), new_h, new_w)
    quantised = np.clip(resized, 0, 255).astype(np.uint8)  # tf.cast to uint8: truncation
    top, left = (new_h - size + 1) // 2, (new_w - size + 1) // 2
    return quantised[top : top + size, left : left + size].astype(np.float32) / np.float32(255)


def _tf1_bilinear_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, upper, lerp) of TF1 ``resize_bilinear`` along one axis (legacy sampling:
    ``resize_bilinear_op.cc``, ``LegacyScaler``: source position ``float32(i) *
    float32(in / out)``, taps ``floor`` and ``ceil`` clamped to the edge)."""
    scale = np.float32(in_size / out_size)
    position = np.arange(out_size, dtype=np.float32) * scale
    floor = np.floor(position)
    lower = np.clip(floor.astype(np.int64), 0, in_size - 1)
    upper = np.minimum(np.ceil(position).astype(np.int64), in_size - 1)
    return lower, upper, (position - floor).astype(np.float32)


def resize_bilinear_tf1(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``tf.compat.v1.image.resize(image, [height, width])`` (bilinear, ``align_corners`` and
    ``half_pixel_centers`` False, no antialiasing): float32 [h, w, C] -> [height, width, C],
    with the kernel's float32 arithmetic ``top + (bottom - top) * y_lerp`` of the rows'
    ``left + (right - left) * x_lerp``."""
    image = image.astype(np.float32)
    y0, y1, ly = _tf1_bilinear_taps(image.shape[0], height)
    x0, x1, lx = _tf1_bilinear_taps(image.shape[1], width)
    lx = lx[None, :, None]
    top_left, top_right = image[y0][:, x0], image[y0][:, x1]
    bottom_left, bottom_right = image[y1][:, x0], image[y1][:, x1]
    top = top_left + (top_right - top_left) * lx
    bottom = bottom_left + (bottom_right - bottom_left) * lx
    return (top + (bottom - top) * ly[:, None, None]).astype(np.float32)


#: Entries of TF's bicubic coefficient table (``resize_bicubic_op.cc``'s ``kTableSize``).
_TF_BICUBIC_TABLE = 1024


def _tf1_bicubic_weights(in_size: int, out_size: int) -> np.ndarray:
    """[out_size, in_size]: TF1 ``resize_bicubic``'s interpolation matrix along one axis.

    TensorFlow's kernel (``resize_bicubic_op.cc``, legacy sampling): source position
    ``x = float32(i) * float32(in / out)``, its fraction rounded to 1/1024 and looked up in
    a table of Keys' kernel with a = -0.75, taps at ``floor(x) - 1 .. floor(x) + 2`` clamped
    to the edge, weights not renormalised.
    """
    a = -0.75
    x = np.arange(_TF_BICUBIC_TABLE + 1, dtype=np.float32) / _TF_BICUBIC_TABLE
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    x1 = x + 1
    far = ((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a
    scale = np.float32(in_size / out_size)
    position = np.arange(out_size, dtype=np.float32) * scale
    base = np.floor(position).astype(np.int64)
    offset = np.rint((position - base) * _TF_BICUBIC_TABLE).astype(np.int64)
    taps = (far[offset], near[offset], near[_TF_BICUBIC_TABLE - offset],
            far[_TF_BICUBIC_TABLE - offset])
    weights = np.zeros((out_size, in_size), np.float32)
    for k, tap in enumerate(taps):
        np.add.at(weights, (np.arange(out_size), np.clip(base + k - 1, 0, in_size - 1)), tap)
    return weights


def resize_bicubic_tf1(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``tf.compat.v1.image.resize_bicubic(image[None], [height, width])[0]``: float32
    [h, w, C] -> [height, width, C] (align_corners False, legacy pixel centres)."""
    rows = _tf1_bicubic_weights(image.shape[0], height)
    cols = _tf1_bicubic_weights(image.shape[1], width)
    return np.einsum("yh,hwc,xw->yxc", rows, image.astype(np.float32), cols).astype(np.float32)
