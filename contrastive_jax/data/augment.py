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

Named recipes are in :data:`PRESET_NAMES` / :func:`augmentation_preset`. This module
holds the recipes and their composition into views; the single-image operations of the
stages (:func:`random_resized_crop`, :func:`color_jitter`, :func:`gaussian_blur`, ...)
are defined in ``contrastive_jax.data._image_ops`` and re-exported here.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

from contrastive_jax.data._image_ops import (
    Seed,
    channel_gain,
    color_jitter,
    crop_window,
    cutout,
    decode_image,
    gaussian_blur,
    grayscale,
    jpeg_resized_crop,
    random_resized_crop,
    resize_to,
    shift_crop,
    solarize,
    uniform,
    with_prob,
)
from contrastive_jax.data._tf import tf
from contrastive_jax.errors import ConfigError

__all__ = [
    "PRESET_NAMES",
    "AugmentConfig",
    "Seed",
    "augment_encoded_view",
    "augment_view",
    "augmentation_preset",
    "channel_gain",
    "color_jitter",
    "crop_window",
    "cutout",
    "decode_image",
    "eval_transform",
    "gaussian_blur",
    "grayscale",
    "jpeg_resized_crop",
    "make_views",
    "random_resized_crop",
    "resize_to",
    "shift_crop",
    "simclr_jitter",
    "solarize",
]


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
        x = with_prob(
            seeds[1],
            cfg.jitter_prob,
            lambda x=x: color_jitter(x, seeds[2], brightness=b, contrast=c, saturation=s, hue=h),
            x,
        )
    x = with_prob(seeds[3], cfg.grayscale_prob, lambda x=x: grayscale(x), x)
    blur_p = cfg.blur_prob[view % len(cfg.blur_prob)]
    radius = max(size // 20, math.ceil(2 * cfg.blur_sigma[1]))
    x = with_prob(
        seeds[4],
        blur_p,
        lambda x=x: gaussian_blur(x, uniform(seeds[5], *cfg.blur_sigma), radius),
        x,
    )
    solarize_p = cfg.solarize_prob[view % len(cfg.solarize_prob)]
    x = with_prob(seeds[6], solarize_p, lambda x=x: solarize(x, cfg.solarize_threshold), x)
    if cfg.gain is not None:
        x = x * uniform(seeds[7], *cfg.gain)
    if cfg.channel_gain is not None:
        # Its own seed from the gain's, so the other stages draw as without it.
        x = channel_gain(x, tf.random.experimental.stateless_fold_in(seeds[7], 1), cfg.channel_gain)
    side = round(cfg.cutout_fraction * size)
    x = with_prob(seeds[8], cfg.cutout_prob, lambda x=x: cutout(x, seeds[9], side), x)
    if cfg.noise_std[1] > 0:
        std = (
            uniform(seeds[10], *cfg.noise_std)
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
