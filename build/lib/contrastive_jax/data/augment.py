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
from contrastive_jax.data.augment_config import (
    PRESET_NAMES,
    AugmentConfig,
    augmentation_preset,
    simclr_jitter,
)

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


def eval_transform(
    image: tf.Tensor, *, size: int, crop_fraction: float, mode: str = "resize_crop"
) -> tf.Tensor:
    """The evaluation transform of one image (``config.data.eval_transform``).

    ``"resize_crop"`` resizes the shorter side to ``round(size / crop_fraction)``
    (antialiased bilinear) and centre-crops ``size x size`` (torchvision's
    ``Resize`` + ``CenterCrop``). ``"crop_resize"`` is SimCLR v1's ``center_crop``
    (``data_util.py``): a centred square of ``rint(crop_fraction * min(h, w))`` pixels,
    offset ``(h - side + 1) // 2``, resized to ``size x size`` by TF1's ``resize_bicubic``
    (the source's call) and clipped to [0, 1].

    Args:
      image: float32 [h, w, 3] in [0, 1].
      size: output side.
      crop_fraction: fraction of the (resized) shorter side kept by the centre
        crop (1.0 keeps it all; ImageNet's usual 224/256 = 0.875).
      mode: ``"resize_crop"`` or ``"crop_resize"``.

    Returns:
      float32 [size, size, 3]. An image that already is ``size x size`` with
      ``crop_fraction == 1`` is returned unchanged.
    """
    if crop_fraction == 1.0 and image.shape[0] == size and image.shape[1] == size:
        return image
    shape = tf.shape(image)
    h = tf.cast(shape[0], tf.float32)
    w = tf.cast(shape[1], tf.float32)
    if mode == "crop_resize":
        side = tf.cast(tf.math.rint(crop_fraction * tf.minimum(h, w)), tf.int32)
        top = (shape[0] - side + 1) // 2
        left = (shape[1] - side + 1) // 2
        crop = image[top : top + side, left : left + side]
        # TF1's resize_bicubic, as the source calls it (legacy sampling, Keys a = -0.75).
        resized = tf.compat.v1.image.resize_bicubic(crop[None], [size, size])[0]
        out = tf.clip_by_value(resized, 0.0, 1.0)
        return tf.ensure_shape(out, [size, size, 3])
    scale = round(size / crop_fraction) / tf.minimum(h, w)
    new_h = tf.maximum(tf.cast(tf.round(h * scale), tf.int32), size)
    new_w = tf.maximum(tf.cast(tf.round(w * scale), tf.int32), size)
    resized = tf.image.resize(image, tf.stack([new_h, new_w]), antialias=True)
    top = (new_h - size) // 2
    left = (new_w - size) // 2
    out = resized[top : top + size, left : left + size]
    return tf.ensure_shape(out, [size, size, 3])
