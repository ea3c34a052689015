"""View augmentations (SimCLR family) and evaluation transforms, in TensorFlow.

Every function here acts on **one example**: a float32 image ``[h, w, 3]`` with
values in ``[0, 1]`` (``h`` and ``w`` may be dynamic), and draws its randomness
only from TensorFlow *stateless* random ops seeded by an integer ``[2]`` seed.
An augmented view is therefore a pure function of (image, seed), which is what
makes the input pipeline reproducible from any step (see ``pipeline.py``).

Order of the stages of :func:`augment_view` (each stage is skipped when its
parameters switch it off):

1. geometry: random resized crop (torchvision semantics) to ``size x size``, or a
   shift (zero-pad and crop back) for the small-image presets; horizontal flip;
2. colour jitter (brightness, contrast, saturation, hue in random order), with
   probability ``jitter_prob``;
3. grayscale with probability ``grayscale_prob``;
4. Gaussian blur with a per-view probability;
5. solarisation with a per-view probability;
6. multiplicative gain, per-channel gain, cutout, additive Gaussian noise.

Named recipes are in :data:`PRESET_NAMES` / :func:`augmentation_preset`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

from contrastive_jax.data._tf import tf
from contrastive_jax.errors import ConfigError

Seed = tf.Tensor  # int32/int64 [2]


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    """One augmentation recipe.

    Attributes:
      crop_scale: area range (fraction of the image) of the random resized
        crop; ``None`` replaces the resized crop by a shift (``pad_fraction``).
      crop_ratio: aspect-ratio range (width / height) of the crop, sampled
        log-uniformly as in torchvision's ``RandomResizedCrop``.
      pad_fraction: shift augmentation when ``crop_scale`` is None: the image is
        resized to the output size, zero-padded by ``round(pad_fraction * size)``
        pixels on each side and cropped back at a uniformly random offset.
      flip_prob: probability of a horizontal flip.
      jitter: colour-jitter strengths (brightness, contrast, saturation, hue) as
        in torchvision's ``ColorJitter``: factors ``U(max(0, 1 - s), 1 + s)``
        for the first three, a hue shift ``U(-h, h)`` (fraction of the circle).
        SimCLR strength ``s`` is ``(0.8 s, 0.8 s, 0.8 s, 0.2 s)``.
      jitter_prob: probability of applying the colour jitter.
      grayscale_prob: probability of converting to grayscale (kept 3 channels).
      blur_prob: Gaussian-blur probability per view; view ``v`` uses
        ``blur_prob[v % len(blur_prob)]`` (BYOL's asymmetric recipe is
        ``(1.0, 0.1)``).
      blur_sigma: range of the blur's standard deviation in pixels. The kernel
        radius is ``max(size // 20, ceil(2 * blur_sigma[1]))``: SimCLR's kernel
        of 10 % of the image side, widened on small images so it does not cut
        the Gaussian short.
      solarize_prob: solarisation probability per view, cycled like
        ``blur_prob``.
      solarize_threshold: pixels ``>= threshold`` are inverted (``x -> 1 - x``).
      gain: range of a multiplicative intensity factor, or None.
      channel_gain: range of a multiplicative factor drawn for each of the three
        channels (a cheap colour shift), the result clipped to [0, 1]; or None.
      cutout_prob: probability of zeroing one square patch.
      cutout_fraction: side of the cutout patch as a fraction of the image side;
        its centre is uniform over the image and the patch is clipped to it.
      noise_std: range of the standard deviation of additive Gaussian noise,
        drawn per view; the noise is shared by the three channels (luminance
        noise). ``(0, 0)`` switches it off.
    """

    crop_scale: tuple[float, float] | None = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    pad_fraction: float = 0.0
    flip_prob: float = 0.5
    jitter: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    jitter_prob: float = 0.8
    grayscale_prob: float = 0.0
    blur_prob: tuple[float, ...] = (0.0,)
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    solarize_prob: tuple[float, ...] = (0.0,)
    solarize_threshold: float = 0.5
    gain: tuple[float, float] | None = None
    channel_gain: tuple[float, float] | None = None
    cutout_prob: float = 0.0
    cutout_fraction: float = 0.25
    noise_std: tuple[float, float] = (0.0, 0.0)


def simclr_jitter(strength: float) -> tuple[float, float, float, float]:
    """SimCLR's colour-jitter strengths for strength ``s``: (0.8s, 0.8s, 0.8s, 0.2s)."""
    return (0.8 * strength, 0.8 * strength, 0.8 * strength, 0.2 * strength)


def _mio(image_size: int) -> AugmentConfig:
    # MIO Table 3 / official MIOTransform (s = 0.5): the crop is always applied
    # with scale (0.8, 1); blur and solarisation only for images larger than 32.
    large = image_size > 32
    return AugmentConfig(
        crop_scale=(0.8, 1.0),
        jitter=simclr_jitter(0.5),
        grayscale_prob=0.2,
        blur_prob=(0.5 if large else 0.0,),
        solarize_prob=(0.2 if large else 0.0,),
    )


_PRESETS: dict[str, Callable[[int], AugmentConfig]] = {
    # SimCLR CIFAR recipe: crop (0.08, 1), flip, jitter s = 0.5 (p = 0.8),
    # grayscale 0.2, no blur.
    "simclr_cifar": lambda size: AugmentConfig(
        crop_scale=(0.08, 1.0), jitter=simclr_jitter(0.5), grayscale_prob=0.2
    ),
    # SupContrast CIFAR pipeline (Khosla et al. 2020's code, which SINCERE follows).
    "supcon_cifar": lambda size: AugmentConfig(
        crop_scale=(0.2, 1.0), jitter=(0.4, 0.4, 0.4, 0.1), grayscale_prob=0.2
    ),
    # SimCLR v1 ImageNet recipe: jitter s = 1, blur p = 0.5 on every view.
    "simclr_imagenet": lambda size: AugmentConfig(
        crop_scale=(0.08, 1.0), jitter=simclr_jitter(1.0), grayscale_prob=0.2, blur_prob=(0.5,)
    ),
    # BYOL's asymmetric recipe: blur (1.0, 0.1) and solarise (0.0, 0.2) per view.
    "byol_imagenet": lambda size: AugmentConfig(
        crop_scale=(0.08, 1.0),
        jitter=(0.4, 0.4, 0.2, 0.1),
        grayscale_prob=0.2,
        blur_prob=(1.0, 0.1),
        solarize_prob=(0.0, 0.2),
    ),
    "mio": _mio,
    # Plain digits proxy (the digit fills the 16x16 canvas at full contrast):
    # shift by up to a quarter of the side, gain U(0.6, 1.4), noise N(0, 0.1);
    # no flip, no colour.
    "digits": lambda size: AugmentConfig(
        crop_scale=None,
        pad_fraction=0.25,
        flip_prob=0.0,
        gain=(0.6, 1.4),
        noise_std=(0.1, 0.1),
    ),
    # Cluttered digits: the labelled digit covers a quarter of the canvas at
    # 2/3 contrast beside a distractor and the canvas's own noise, so the plain
    # preset stalls contrastive training in its collapsed start
    # (docs/collapse.md). Half the shift (an eighth of the side), gain
    # U(0.8, 1.2) and noise N(0, 0.05).
    "digits_cluttered": lambda size: AugmentConfig(
        crop_scale=None,
        pad_fraction=0.125,
        flip_prob=0.0,
        gain=(0.8, 1.2),
        noise_std=(0.05, 0.05),
    ),
    # Brain-phantom proxy (docs/reproductions.md; the augmentations the conditional
    # alignment/uniformity paper takes "as in [8]"): pad 2 of 32
    # and crop, cutout of a quarter side (p = 0.5), blur sigma U(0.1, 1),
    # noise sigma U(0, 0.05), flip.
    "phantoms": lambda size: AugmentConfig(
        crop_scale=None,
        pad_fraction=1 / 16,
        blur_prob=(1.0,),
        blur_sigma=(0.1, 1.0),
        cutout_prob=0.5,
        noise_std=(0.0, 0.05),
    ),
    # CPU proxies of CIFAR-10 (experiments/configs/cifar_proxy.py): pad 4 of 32
    # and crop, flip, brightness and contrast U(0.6, 1.4) (always, random
    # order), a gain U(0.8, 1.2) per channel; no grayscale, no blur.
    "cifar_proxy": lambda size: AugmentConfig(
        crop_scale=None,
        pad_fraction=0.125,
        jitter=(0.4, 0.4, 0.0, 0.0),
        jitter_prob=1.0,
        channel_gain=(0.8, 1.2),
    ),
    # Augmented linear-probe training (one view): SupContrast's crop (0.2, 1) +
    # flip, and MIO's crop (0.8, 1) alone (MIO, arXiv:2111.12664, Table 3).
    "supcon_linear": lambda size: AugmentConfig(crop_scale=(0.2, 1.0)),
    "mio_linear": lambda size: AugmentConfig(crop_scale=(0.8, 1.0), flip_prob=0.0),
    # No augmentation: every view is the (resized) image.
    "none": lambda size: AugmentConfig(crop_scale=None, flip_prob=0.0),
}

PRESET_NAMES: tuple[str, ...] = tuple(_PRESETS)


def augmentation_preset(name: str, image_size: int) -> AugmentConfig:
    """Returns the named recipe for output images of side ``image_size``.

    Names: ``simclr_cifar``, ``supcon_cifar``, ``simclr_imagenet``,
    ``byol_imagenet``, ``mio`` (MIO Table 3; blur and solarisation only above
    32 px), ``digits``, ``digits_cluttered``, ``phantoms``, ``cifar_proxy``, the
    linear-probe recipes
    ``supcon_linear`` and ``mio_linear`` (use them with ``num_views = 1``) and
    ``none``.
    """
    if name not in _PRESETS:
        raise ConfigError(f"unknown augmentation preset {name!r}; choose one of {PRESET_NAMES}")
    return _PRESETS[name](image_size)


# --------------------------------------------------------------------------- stages


def _uniform(seed: Seed, lo: float, hi: float, shape=()) -> tf.Tensor:
    return tf.random.stateless_uniform(shape, seed, minval=lo, maxval=hi)


def _with_prob(seed: Seed, prob: float, fn: Callable[[], tf.Tensor], image: tf.Tensor) -> tf.Tensor:
    """``fn()`` with probability ``prob``, else ``image`` (no random draw at p = 0 or 1)."""
    if prob <= 0.0:
        return image
    if prob >= 1.0:
        return fn()
    return tf.cond(_uniform(seed, 0.0, 1.0) < prob, fn, lambda: image)


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
    flip = _uniform(s_flip, 0.0, 1.0) < flip_prob
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
        image = tf.where(_uniform(s_flip, 0.0, 1.0) < flip_prob, image[:, ::-1], image)
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
    factors = _uniform(seed, gain[0], gain[1], [image.shape[-1]])
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


def _geometry(image: tf.Tensor, seed: Seed, cfg: AugmentConfig, size: int) -> tf.Tensor:
    """Stage 1 on a decoded image [h, w, 3]: random resized crop or shift, and flip."""
    if cfg.crop_scale is not None:
        return random_resized_crop(
            image, seed, size=size, scale=cfg.crop_scale, ratio=cfg.crop_ratio,
            flip_prob=cfg.flip_prob,
        )
    return shift_crop(
        resize_to(image, size), seed, pad=round(cfg.pad_fraction * size), flip_prob=cfg.flip_prob
    )


def _appearance(
    x: tf.Tensor, seeds: list[tf.Tensor], cfg: AugmentConfig, *, view: int, size: int
) -> tf.Tensor:
    """Stages 2-6 on the [size, size, 3] output of the geometry stage."""
    if any(s > 0 for s in cfg.jitter):
        b, c, s, h = cfg.jitter
        x = _with_prob(
            seeds[1],
            cfg.jitter_prob,
            lambda x=x: color_jitter(x, seeds[2], brightness=b, contrast=c, saturation=s, hue=h),
            x,
        )
    x = _with_prob(seeds[3], cfg.grayscale_prob, lambda x=x: grayscale(x), x)
    blur_p = cfg.blur_prob[view % len(cfg.blur_prob)]
    radius = max(size // 20, math.ceil(2 * cfg.blur_sigma[1]))
    x = _with_prob(
        seeds[4],
        blur_p,
        lambda x=x: gaussian_blur(x, _uniform(seeds[5], *cfg.blur_sigma), radius),
        x,
    )
    solarize_p = cfg.solarize_prob[view % len(cfg.solarize_prob)]
    x = _with_prob(seeds[6], solarize_p, lambda x=x: solarize(x, cfg.solarize_threshold), x)
    if cfg.gain is not None:
        x = x * _uniform(seeds[7], *cfg.gain)
    if cfg.channel_gain is not None:
        # Its own seed from the gain's, so the other stages draw as without it.
        x = channel_gain(x, tf.random.experimental.stateless_fold_in(seeds[7], 1), cfg.channel_gain)
    side = round(cfg.cutout_fraction * size)
    x = _with_prob(seeds[8], cfg.cutout_prob, lambda x=x: cutout(x, seeds[9], side), x)
    if cfg.noise_std[1] > 0:
        std = (
            _uniform(seeds[10], *cfg.noise_std)
            if cfg.noise_std[0] < cfg.noise_std[1]
            else cfg.noise_std[0]
        )
        x = x + std * tf.random.stateless_normal([size, size, 1], seeds[11])
    return tf.ensure_shape(x, [size, size, 3])


def augment_view(
    image: tf.Tensor, seed: Seed, cfg: AugmentConfig, *, view: int, size: int
) -> tf.Tensor:
    """One augmented view of ``image`` [h, w, 3] (float in [0, 1]).

    Args:
      image: float32 [h, w, 3] in [0, 1].
      seed: integer [2]; the view is a pure function of (image, seed).
      cfg: the recipe.
      view: view number (selects the per-view blur/solarise probabilities).
      size: output side.

    Returns:
      float32 [size, size, 3], not normalised (noise may leave [0, 1]).
    """
    seeds = tf.unstack(tf.random.experimental.stateless_split(seed, 12))
    return _appearance(_geometry(image, seeds[0], cfg, size), seeds, cfg, view=view, size=size)


def augment_encoded_view(
    data: tf.Tensor, seed: Seed, cfg: AugmentConfig, *, view: int, size: int
) -> tf.Tensor:
    """:func:`augment_view` of an encoded image (string scalar: JPEG, PNG, ...).

    The random resized crop is taken from the original image: a JPEG is
    decoded inside the crop window only (:func:`jpeg_resized_crop`), other
    formats are decoded whole and cropped. Same seed, same window as
    :func:`augment_view` on the decoded image.

    Returns:
      float32 [size, size, 3].
    """
    seeds = tf.unstack(tf.random.experimental.stateless_split(seed, 12))

    def decoded() -> tf.Tensor:
        image = tf.cast(decode_image(data), tf.float32) / 255.0
        return tf.ensure_shape(_geometry(image, seeds[0], cfg, size), [size, size, 3])

    if cfg.crop_scale is None:
        x = decoded()
    else:

        def jpeg() -> tf.Tensor:
            return jpeg_resized_crop(
                data, seeds[0], size=size, scale=cfg.crop_scale, ratio=cfg.crop_ratio,
                flip_prob=cfg.flip_prob,
            )

        x = tf.cond(tf.io.is_jpeg(data), jpeg, decoded)
    return _appearance(x, seeds, cfg, view=view, size=size)


def make_views(
    image: tf.Tensor,
    seed: Seed,
    cfg: AugmentConfig,
    *,
    num_views: int,
    size: int,
    encoded: bool = False,
) -> tf.Tensor:
    """``num_views`` views of one image, view ``v`` seeded by ``fold_in(seed, v)``.

    Views with the same per-view probabilities share one traced ``tf.function``
    (tracing the recipe once per distinct view instead of once per view).

    Args:
      image: float32 [h, w, 3] in [0, 1], or with ``encoded`` the encoded
        image (string scalar), augmented by :func:`augment_encoded_view`.

    Returns:
      float32 [num_views, size, size, 3].
    """
    traced: dict[tuple[float, float], Callable[[tf.Tensor, Seed], tf.Tensor]] = {}
    views = []
    for v in range(num_views):
        probs = (
            cfg.blur_prob[v % len(cfg.blur_prob)],
            cfg.solarize_prob[v % len(cfg.solarize_prob)],
        )
        if probs not in traced:
            fn = augment_encoded_view if encoded else augment_view
            traced[probs] = tf.function(functools.partial(fn, cfg=cfg, view=v, size=size))
        views.append(traced[probs](image, tf.random.experimental.stateless_fold_in(seed, v)))
    return tf.stack(views)


def eval_transform(image: tf.Tensor, *, size: int, crop_fraction: float) -> tf.Tensor:
    """Resize the shorter side to ``round(size / crop_fraction)`` and centre-crop ``size x size``.

    Args:
      image: float32 [h, w, 3] in [0, 1].
      size: output side.
      crop_fraction: fraction of the resized shorter side kept by the centre
        crop (1.0 keeps it all; ImageNet's usual 224/256 = 0.875).

    Returns:
      float32 [size, size, 3]. An image that already is ``size x size`` with
      ``crop_fraction == 1`` is returned unchanged.
    """
    if crop_fraction == 1.0 and image.shape[0] == size and image.shape[1] == size:
        return image
    shape = tf.shape(image)
    h = tf.cast(shape[0], tf.float32)
    w = tf.cast(shape[1], tf.float32)
    scale = round(size / crop_fraction) / tf.minimum(h, w)
    new_h = tf.maximum(tf.cast(tf.round(h * scale), tf.int32), size)
    new_w = tf.maximum(tf.cast(tf.round(w * scale), tf.int32), size)
    resized = tf.image.resize(image, tf.stack([new_h, new_w]), antialias=True)
    top = (new_h - size) // 2
    left = (new_w - size) // 2
    out = resized[top : top + size, left : left + size]
    return tf.ensure_shape(out, [size, size, 3])
