"""The appearance augmentations in JAX, on the accelerator, after the host's geometry.

The host (:mod:`.host_views`) decodes, crops, resizes and flips, and ships uint8 views
``[B, V, S, S, 3]``; :func:`make_device_augment` turns them into the float32 views the
training step reads, inside one jitted function:

1. colour jitter with probability ``jitter_prob``: brightness, contrast, saturation and
   hue in a random order (torchvision's ``ColorJitter``, SimCLR Appendix A; with
   ``brightness="additive"`` SimCLR v1's additive brightness);
2. grayscale with probability ``grayscale_prob``;
3. Gaussian blur with the view's probability ``blur_prob[v % len]``, sigma ``U(blur_sigma)``
   (per view, or with ``blur_sigma_group = G`` shared by G consecutive rows, SimCLR v1's),
   a ``2 r + 1`` kernel with ``r = max(S // 20, ceil(2 sigma_max))``, reflect padding;
4. solarisation with the view's probability ``solarize_prob[v % len]``;
5. gain, per-channel gain (clipped), cutout, additive luminance noise;
6. normalisation ``(x - mean) / std``.

The parameterisation and distributions are those of torchvision's and SimCLR's stages
(tests/data/test_device_augment.py checks each against its definition). Every random draw of view ``v`` of example ``id`` at step ``k`` comes from the
key ``fold_in(fold_in(fold_in(key(seed), k), id), v)``, so a view does not depend on the
batch it is in, the device count or the process count, and a resumed run draws what the
uninterrupted one drew (with ``blur_sigma_group`` the blur's sigma is its group's first
row's: then a view depends on the batch's order, still not on the device or process count).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from contrastive_jax.data.augment_config import AugmentConfig

__all__ = [
    "GRAY_WEIGHTS",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "appearance",
    "blur_sigma",
    "color_jitter",
    "gaussian_blur",
    "grayscale",
    "make_device_augment",
    "solarize",
    "view_key",
]

#: ITU-R 601 luma weights (what ``tf.image.rgb_to_grayscale`` uses).
GRAY_WEIGHTS = (0.2989, 0.5870, 0.1140)


def view_key(seed: int | jax.Array, step: jax.Array, index: jax.Array, view: int) -> jax.Array:
    """The key of view ``view`` of example ``index`` at ``step``: fold-ins of ``key(seed)``."""
    key = jax.random.key(seed)
    key = jax.random.fold_in(key, step)
    key = jax.random.fold_in(key, index)
    return jax.random.fold_in(key, view)


def _gray(x: jax.Array) -> jax.Array:
    """Luma [S, S, 1] of [S, S, 3]."""
    return jnp.tensordot(x, jnp.asarray(GRAY_WEIGHTS, x.dtype), axes=([-1], [0]))[..., None]


def grayscale(x: jax.Array) -> jax.Array:
    """Luma of [S, S, 3] repeated on 3 channels."""
    return jnp.broadcast_to(_gray(x), x.shape)


def adjust_brightness(x: jax.Array, factor: jax.Array) -> jax.Array:
    """``clip(x * factor)``: torchvision's brightness."""
    return jnp.clip(x * factor, 0.0, 1.0)


def adjust_contrast(x: jax.Array, factor: jax.Array) -> jax.Array:
    """Blend with the mean luma of the image: torchvision's contrast, clipped."""
    return jnp.clip(factor * x + (1 - factor) * jnp.mean(_gray(x)), 0.0, 1.0)


def adjust_saturation(x: jax.Array, factor: jax.Array) -> jax.Array:
    """Blend with the pixel's luma: torchvision's saturation, clipped."""
    return jnp.clip(factor * x + (1 - factor) * _gray(x), 0.0, 1.0)


def adjust_hue(x: jax.Array, delta: jax.Array) -> jax.Array:
    """Rotates the hue of [..., 3] in [0, 1] by ``delta`` (fraction of the circle), as
    ``tf.image.adjust_hue`` and ``colorsys`` (RGB -> HSV, ``h + delta mod 1``, -> RGB)."""
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    v = jnp.max(x, axis=-1)
    c = v - jnp.min(x, axis=-1)
    safe_c = jnp.where(c > 0, c, 1.0)
    h = jnp.where(
        v == r, (g - b) / safe_c, jnp.where(v == g, 2.0 + (b - r) / safe_c, 4.0 + (r - g) / safe_c)
    )
    h = jnp.where(c > 0, h / 6.0, 0.0)
    h = jnp.mod(h + delta, 1.0)
    s = jnp.where(v > 0, c / jnp.where(v > 0, v, 1.0), 0.0)
    # HSV -> RGB: channel n is v - v s max(0, min(k, 4 - k, 1)), k = (n + 6 h) mod 6.
    n = jnp.asarray([5.0, 3.0, 1.0], x.dtype)
    k = jnp.mod(n + 6.0 * h[..., None], 6.0)
    return v[..., None] - (v * s)[..., None] * jnp.clip(jnp.minimum(k, 4.0 - k), 0.0, 1.0)


def color_jitter(
    x: jax.Array,
    key: jax.Array,
    strengths: tuple[float, float, float, float],
    *,
    additive_brightness: bool = False,
) -> jax.Array:
    """torchvision ``ColorJitter`` of [S, S, 3]: the active ops in a random order.

    Factors ``U(max(0, 1 - s), 1 + s)`` for brightness, contrast and saturation, a hue
    shift ``U(-h, h)``; ``strengths`` is ``(b, c, s, h)``. ``additive_brightness``: the
    brightness is SimCLR v1's ``tf.image.random_brightness`` instead, ``clip(x + U(-b, b))``.
    """
    brightness, contrast, saturation, hue = strengths
    k_factor, k_order = jax.random.split(key)
    u = jax.random.uniform(k_factor, (4,))

    def factor(i: int, s: float) -> jax.Array:
        lo = max(0.0, 1.0 - s)
        return lo + (1.0 + s - lo) * u[i]

    ops: list[Callable[[jax.Array], jax.Array]] = []
    if brightness > 0 and additive_brightness:
        ops.append(lambda y: jnp.clip(y + brightness * (2 * u[0] - 1), 0.0, 1.0))
    elif brightness > 0:
        ops.append(lambda y: adjust_brightness(y, factor(0, brightness)))
    if contrast > 0:
        ops.append(lambda y: adjust_contrast(y, factor(1, contrast)))
    if saturation > 0:
        ops.append(lambda y: adjust_saturation(y, factor(2, saturation)))
    if hue > 0:
        ops.append(lambda y: adjust_hue(y, -hue + 2 * hue * u[3]))
    if not ops:
        return x
    order = jax.random.permutation(k_order, len(ops))
    for i in range(len(ops)):
        # Every op, then the drawn one: what a switch is under vmap, on any mesh.
        x = jnp.select([order[i] == j for j in range(len(ops))], [op(x) for op in ops])
    return x


def blur_radius(cfg: AugmentConfig, size: int) -> int:
    """Kernel radius of the blur: ``max(size // 20, ceil(2 * blur_sigma[1]))``."""
    return max(size // 20, math.ceil(2 * cfg.blur_sigma[1]))


def gaussian_blur(x: jax.Array, sigma: jax.Array, radius: int) -> jax.Array:
    """Separable Gaussian blur of [S, S, C], reflect padding, a ``2 radius + 1`` kernel."""
    taps = jnp.arange(-radius, radius + 1, dtype=x.dtype)
    kernel = jnp.exp(-(taps**2) / (2.0 * sigma**2))
    kernel = kernel / jnp.sum(kernel)
    size_h, size_w = x.shape[0], x.shape[1]
    padded = jnp.pad(x, ((radius, radius), (0, 0), (0, 0)), mode="reflect")
    x = sum(kernel[t] * padded[t : t + size_h] for t in range(2 * radius + 1))
    padded = jnp.pad(x, ((0, 0), (radius, radius), (0, 0)), mode="reflect")
    return sum(kernel[t] * padded[:, t : t + size_w] for t in range(2 * radius + 1))


def solarize(x: jax.Array, threshold: float) -> jax.Array:
    """Inverts pixels ``>= threshold`` of an image in [0, 1]."""
    return jnp.where(x >= threshold, 1.0 - x, x)


def _with_prob(key: jax.Array, prob: float, fn: Callable[[], jax.Array], x: jax.Array) -> jax.Array:
    """``fn()`` with probability ``prob``, else ``x`` (no draw at p = 0 or 1)."""
    if prob <= 0.0:
        return x
    if prob >= 1.0:
        return fn()
    return jnp.where(jax.random.uniform(key) < prob, fn(), x)


def blur_sigma(key: jax.Array, cfg: AugmentConfig) -> jax.Array:
    """The blur's sigma ``U(blur_sigma)`` that the view of ``key`` draws (a scalar)."""
    return jax.random.uniform(jax.random.split(key, 12)[4], minval=cfg.blur_sigma[0],
                              maxval=cfg.blur_sigma[1])


def appearance(x: jax.Array, key: jax.Array, cfg: AugmentConfig, *, view: int,
               sigma: jax.Array | None = None) -> jax.Array:
    """Stages 1-5 of the module docstring on one view: float32 [S, S, 3] in [0, 1] -> [S, S, 3].

    ``view`` selects the view's blur and solarisation probabilities; ``key`` is the view's;
    ``sigma``: the blur's sigma, None for the view's own (:func:`blur_sigma` of ``key``).
    """
    size = x.shape[0]
    keys = jax.random.split(key, 12)
    if any(s > 0 for s in cfg.jitter):
        x = _with_prob(keys[0], cfg.jitter_prob, lambda y=x: color_jitter(
            y, keys[1], cfg.jitter, additive_brightness=cfg.brightness == "additive"), x)
    x = _with_prob(keys[2], cfg.grayscale_prob, lambda y=x: grayscale(y), x)
    blur_p = cfg.blur_prob[view % len(cfg.blur_prob)]
    sigma = blur_sigma(key, cfg) if sigma is None else sigma
    x = _with_prob(keys[3], blur_p, lambda y=x: gaussian_blur(y, sigma, blur_radius(cfg, size)), x)
    solarize_p = cfg.solarize_prob[view % len(cfg.solarize_prob)]
    x = _with_prob(keys[5], solarize_p, lambda y=x: solarize(y, cfg.solarize_threshold), x)
    if cfg.gain is not None:
        x = x * jax.random.uniform(keys[6], minval=cfg.gain[0], maxval=cfg.gain[1])
    if cfg.channel_gain is not None:
        lo, hi = cfg.channel_gain
        x = jnp.clip(x * jax.random.uniform(keys[7], (3,), minval=lo, maxval=hi), 0.0, 1.0)
    if cfg.cutout_prob > 0:
        side = round(cfg.cutout_fraction * size)
        start = jax.random.randint(keys[9], (2,), 0, size) - side // 2
        idx = jnp.arange(size)
        rows = (idx >= start[0]) & (idx < start[0] + side)
        cols = (idx >= start[1]) & (idx < start[1] + side)
        patch = rows[:, None, None] & cols[None, :, None]
        x = _with_prob(keys[8], cfg.cutout_prob, lambda y=x: jnp.where(patch, 0.0, y), x)
    if cfg.noise_std[1] > 0:
        lo, hi = cfg.noise_std
        std = jax.random.uniform(keys[10], minval=lo, maxval=hi) if lo < hi else lo
        x = x + std * jax.random.normal(keys[11], (size, size, 1), x.dtype)
    return x


def make_device_augment(
    cfg: AugmentConfig, *, seed: int, mean: Sequence[float], std: Sequence[float]
) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    """The jitted appearance stage: ``(views, index, step) -> float32 views``.

    Args:
      cfg: the recipe (its geometry fields are the host's, see :mod:`.host_views`).
      seed: the run seed.
      mean, std: per-channel normalisation statistics on the [0, 1] scale.

    Returns:
      ``augment(views uint8 [B, V, S, S, 3], index int [B], step int [B])`` -> float32
      ``[B, V, S, S, 3]``, normalised; view ``v`` of row ``b`` drawn from
      :func:`view_key` ``(seed, step[b], index[b], v)`` alone (with ``cfg.blur_sigma_group
      = G``, but for the blur's sigma: row ``G * (b // G)``'s). Sharded inputs give
      outputs sharded the same way.
    """
    mean_ = jnp.asarray(mean, jnp.float32)
    std_ = jnp.asarray(std, jnp.float32)

    def one_view(image: jax.Array, key: jax.Array, sigma: jax.Array, view: int) -> jax.Array:
        x = image.astype(jnp.float32) / 255.0
        x = appearance(x, key, cfg, view=view, sigma=sigma)
        return (x - mean_) / std_

    def view_of(views: jax.Array, index: jax.Array, step: jax.Array, view: int) -> jax.Array:
        keys = jax.vmap(lambda i, k: view_key(seed, k, i, view))(index, step)
        sigmas = jax.vmap(lambda k: blur_sigma(k, cfg))(keys)
        if cfg.blur_sigma_group is not None:
            group = cfg.blur_sigma_group
            sigmas = sigmas[(jnp.arange(views.shape[0]) // group) * group]
        return jax.vmap(lambda im, k, s: one_view(im, k, s, view))(views, keys, sigmas)

    @jax.jit
    def augment(views: jax.Array, index: jax.Array, step: jax.Array) -> jax.Array:
        if views.dtype != jnp.uint8 or views.ndim != 5 or views.shape[-1] != 3:
            raise ValueError(f"views must be uint8 [B, V, S, S, 3], got {views.dtype} {views.shape}")
        index = index.astype(jnp.uint32)
        step = step.astype(jnp.uint32)
        out = [view_of(views[:, v], index, step, v) for v in range(views.shape[1])]
        return jnp.stack(out, axis=1)

    return augment
