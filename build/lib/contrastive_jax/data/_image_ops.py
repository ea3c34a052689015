"""The single-image TensorFlow operations the view augmentations are built from.

Crops (torchvision's ``RandomResizedCrop`` window and resampling, the same crop decoded
from a JPEG's window alone, a zero-padded shift), resizing and decoding, colour jitter,
grayscale, Gaussian blur, solarisation, per-channel gain and cutout. Each acts on one
image ``[h, w, C]`` and draws its randomness only from TensorFlow stateless random ops
seeded by an integer ``[2]`` seed. :mod:`contrastive_jax.data.augment` composes them into
the recipes and re-exports the public ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from contrastive_jax.data._tf import tf

Seed = tf.Tensor  # int32/int64 [2]


def uniform(seed: Seed, lo: float, hi: float, shape=()) -> tf.Tensor:
    """float32 ``U(lo, hi)`` of ``shape``, stateless from ``seed``."""
    return tf.random.stateless_uniform(shape, seed, minval=lo, maxval=hi)


def with_prob(seed: Seed, prob: float, fn: Callable[[], tf.Tensor], image: tf.Tensor) -> tf.Tensor:
    """``fn()`` with probability ``prob``, else ``image`` (no random draw at p = 0 or 1)."""
    if prob <= 0.0:
        return image
    if prob >= 1.0:
        return fn()
    return tf.cond(uniform(seed, 0.0, 1.0) < prob, fn, lambda: image)


def crop_window(
    height: tf.Tensor,
    width: tf.Tensor,
    seed: Seed,
    *,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    flip_prob: float,
    attempts: int = 10,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """torchvision ``RandomResizedCrop``'s window in an image of ``height x width`` (+ flip).

    Up to ``attempts`` (area, log-ratio) draws, area uniform in ``scale`` of
    the image and aspect ratio (width / height) log-uniform in ``ratio``; the
    first crop that fits is used, else the central crop with the ratio clamped
    to ``ratio``. Only the image's size is needed, so a JPEG can be decoded
    inside the window alone (:func:`augment_encoded_view`).

    Returns:
      ``(top, left, crop_height, crop_width)`` as float32 scalars holding
      integers, and ``flip`` (bool scalar).
    """
    s_draw, s_pos, s_flip = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    h = tf.cast(height, tf.float32)
    w = tf.cast(width, tf.float32)
    u = tf.random.stateless_uniform([attempts, 2], s_draw)
    area = h * w * (scale[0] + (scale[1] - scale[0]) * u[:, 0])
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = tf.exp(log_lo + (log_hi - log_lo) * u[:, 1])
    crop_w = tf.round(tf.sqrt(area * aspect))
    crop_h = tf.round(tf.sqrt(area / aspect))
    fits = (crop_w >= 1) & (crop_w <= w) & (crop_h >= 1) & (crop_h <= h)
    found = tf.reduce_any(fits)
    first = tf.argmax(tf.cast(fits, tf.int32))
    in_ratio = w / h
    fallback_w = tf.where(in_ratio > ratio[1], tf.round(h * ratio[1]), w)
    fallback_h = tf.where(in_ratio < ratio[0], tf.round(w / ratio[0]), h)
    ch = tf.where(found, crop_h[first], fallback_h)
    cw = tf.where(found, crop_w[first], fallback_w)
    pos = tf.random.stateless_uniform([2], s_pos)
    top = tf.where(found, tf.floor(pos[0] * (h - ch + 1)), tf.floor((h - ch) / 2))
    left = tf.where(found, tf.floor(pos[1] * (w - cw + 1)), tf.floor((w - cw) / 2))
    flip = uniform(s_flip, 0.0, 1.0) < flip_prob
    return top, left, ch, cw, flip


def _resize_box(image: tf.Tensor, box: tf.Tensor, flip: tf.Tensor, size: int) -> tf.Tensor:
    """Bilinear resample of ``box`` = (y1, x1, y2, x2) (normalised corners) of [h, w, C]."""
    y1, x1, y2, x2 = tf.unstack(box)
    box = tf.where(flip, tf.stack([y1, x2, y2, x1]), box)
    out = tf.image.crop_and_resize(
        tf.cast(image, tf.float32)[None], box[None], tf.zeros([1], tf.int32), [size, size]
    )
    return out[0]


def random_resized_crop(
    image: tf.Tensor,
    seed: Seed,
    *,
    size: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    flip_prob: float,
    attempts: int = 10,
) -> tf.Tensor:
    """torchvision ``RandomResizedCrop`` (+ horizontal flip) of ``image`` [h, w, C].

    The window of :func:`crop_window` is resampled bilinearly to
    ``size x size`` (pixel centres of the crop's corners map to the output's
    corners, so a full-size crop is the identity).

    Returns:
      float32 [size, size, C].
    """
    shape = tf.shape(image)
    top, left, ch, cw, flip = crop_window(
        shape[0], shape[1], seed, scale=scale, ratio=ratio, flip_prob=flip_prob, attempts=attempts
    )
    h = tf.cast(shape[0], tf.float32)
    w = tf.cast(shape[1], tf.float32)
    y1 = top / tf.maximum(h - 1, 1)
    y2 = (top + ch - 1) / tf.maximum(h - 1, 1)
    x1 = left / tf.maximum(w - 1, 1)
    x2 = (left + cw - 1) / tf.maximum(w - 1, 1)
    return _resize_box(image, tf.stack([y1, x1, y2, x2]), flip, size)


def decode_image(data: tf.Tensor) -> tf.Tensor:
    """Encoded JPEG / PNG / GIF / BMP bytes -> uint8 [h, w, 3] (grey repeated on 3 channels)."""
    image = tf.io.decode_image(data, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def jpeg_resized_crop(
    data: tf.Tensor,
    seed: Seed,
    *,
    size: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    flip_prob: float,
) -> tf.Tensor:
    """:func:`random_resized_crop` of a JPEG, decoding only the crop window.

    The window is drawn from the size in the JPEG header
    (``tf.image.extract_jpeg_shape``) and decoded with
    ``tf.image.decode_and_crop_jpeg``, as SimCLR's and the TF ResNet ImageNet
    input pipelines do; the result equals the crop of the fully decoded image
    resampled the same way.

    Returns:
      float32 [size, size, 3] in [0, 1].
    """
    shape = tf.image.extract_jpeg_shape(data)
    top, left, ch, cw, flip = crop_window(
        shape[0], shape[1], seed, scale=scale, ratio=ratio, flip_prob=flip_prob
    )
    window = tf.cast(tf.stack([top, left, ch, cw]), tf.int32)
    crop = tf.image.decode_and_crop_jpeg(data, window, channels=3)
    box = tf.constant([0.0, 0.0, 1.0, 1.0])
    return _resize_box(tf.cast(crop, tf.float32) / 255.0, box, flip, size)


def resize_to(image: tf.Tensor, size: int) -> tf.Tensor:
    """Bilinear (antialiased) resize of [h, w, C] to [size, size, C]; no-op if already that size."""
    if image.shape[0] == size and image.shape[1] == size:
        return image
    out = tf.image.resize(image, [size, size], antialias=True)
    return tf.ensure_shape(out, [size, size, image.shape[-1]])


def shift_crop(image: tf.Tensor, seed: Seed, *, pad: int, flip_prob: float) -> tf.Tensor:
    """Zero-pads [S, S, C] by ``pad`` pixels per side, crops [S, S, C] back at a random offset, flips."""
    s_crop, s_flip = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    size = image.shape[0]
    if pad > 0:
        padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
        image = tf.image.stateless_random_crop(padded, [size, size, image.shape[-1]], s_crop)
    if flip_prob > 0:
        image = tf.where(uniform(s_flip, 0.0, 1.0) < flip_prob, image[:, ::-1], image)
    return image


def grayscale(image: tf.Tensor) -> tf.Tensor:
    """ITU-R 601 luma of [h, w, 3], repeated on 3 channels."""
    return tf.tile(tf.image.rgb_to_grayscale(image), [1, 1, 3])


def color_jitter(
    image: tf.Tensor,
    seed: Seed,
    *,
    brightness: float,
    contrast: float,
    saturation: float,
    hue: float,
) -> tf.Tensor:
    """torchvision ``ColorJitter`` of [h, w, 3] in [0, 1]: the active ops in random order, clipped."""
    s_factor, s_order = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    u = tf.random.stateless_uniform([4], s_factor)
    ops: list[Callable[[tf.Tensor], tf.Tensor]] = []

    def factor(i: int, strength: float) -> tf.Tensor:
        lo = max(0.0, 1.0 - strength)
        return lo + (1.0 + strength - lo) * u[i]

    if brightness > 0:
        f_b = factor(0, brightness)
        ops.append(lambda x: tf.clip_by_value(x * f_b, 0.0, 1.0))
    if contrast > 0:
        f_c = factor(1, contrast)
        ops.append(
            lambda x: tf.clip_by_value(
                f_c * x + (1 - f_c) * tf.reduce_mean(tf.image.rgb_to_grayscale(x)), 0.0, 1.0
            )
        )
    if saturation > 0:
        f_s = factor(2, saturation)
        ops.append(
            lambda x: tf.clip_by_value(f_s * x + (1 - f_s) * tf.image.rgb_to_grayscale(x), 0.0, 1.0)
        )
    if hue > 0:
        delta = -hue + 2 * hue * u[3]
        ops.append(lambda x: tf.image.adjust_hue(x, delta))
    order = tf.argsort(tf.random.stateless_uniform([len(ops)], s_order))

    def apply_next(i: tf.Tensor, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return i + 1, tf.switch_case(order[i], [lambda op=op: op(x) for op in ops])

    # A loop rather than an unrolled chain, so each op is traced once.
    _, image = tf.while_loop(lambda i, x: i < len(ops), apply_next, (tf.constant(0), image))
    return image


def gaussian_blur(image: tf.Tensor, sigma: tf.Tensor, radius: int) -> tf.Tensor:
    """Separable Gaussian blur of [h, w, C] with reflect padding and a (2 radius + 1) kernel."""
    x = tf.range(-radius, radius + 1, dtype=tf.float32)
    kernel = tf.exp(-(x**2) / (2.0 * sigma**2))
    kernel /= tf.reduce_sum(kernel)
    channels = image.shape[-1]
    batched = tf.pad(image[None], [[0, 0], [radius, radius], [radius, radius], [0, 0]], "REFLECT")
    k_v = tf.tile(tf.reshape(kernel, [-1, 1, 1, 1]), [1, 1, channels, 1])
    k_h = tf.tile(tf.reshape(kernel, [1, -1, 1, 1]), [1, 1, channels, 1])
    out = tf.nn.depthwise_conv2d(batched, k_v, [1, 1, 1, 1], "VALID")
    out = tf.nn.depthwise_conv2d(out, k_h, [1, 1, 1, 1], "VALID")
    return out[0]


def solarize(image: tf.Tensor, threshold: float) -> tf.Tensor:
    """Inverts pixels ``>= threshold`` of an image in [0, 1]."""
    return tf.where(image >= threshold, 1.0 - image, image)


def channel_gain(image: tf.Tensor, seed: Seed, gain: tuple[float, float]) -> tf.Tensor:
    """[h, w, C] times one factor ``U(gain)`` per channel, clipped to [0, 1]."""
    factors = uniform(seed, gain[0], gain[1], [image.shape[-1]])
    return tf.clip_by_value(image * factors, 0.0, 1.0)


def cutout(image: tf.Tensor, seed: Seed, side: int) -> tf.Tensor:
    """Zeroes a ``side x side`` patch of [S, S, C] centred uniformly, clipped to the image."""
    size = image.shape[0]
    centre = tf.random.stateless_uniform([2], seed, 0, size, dtype=tf.int32)
    start = centre - side // 2
    idx = tf.range(size)
    rows = (idx >= start[0]) & (idx < start[0] + side)
    cols = (idx >= start[1]) & (idx < start[1] + side)
    inside = rows[:, None, None] & cols[None, :, None]
    return tf.where(inside, tf.zeros_like(image), image)
