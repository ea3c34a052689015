"""Soft targets: label smoothing, MixUp and CutMix in timm's "batch" mode (pure JAX).

The recipe soft-target InfoNCE (Hugger & Uhlmann 2024, arXiv:2404.14076, Section 4.1
and App. A.4) takes from MAE fine-tuning: label smoothing (their Eq. 2) and timm's
``Mixup`` (docs/reproductions.md, "Soft-target InfoNCE protocol"). For a local batch
of B images (B even) and one key:

1. with probability ``mixup_prob`` mixing is applied, else ``lam = 1``;
2. if applied, CutMix with probability ``switch_prob`` (``lam ~ Beta(a_C, a_C)``),
   else MixUp (``lam ~ Beta(a_M, a_M)``); one ``lam`` for the whole batch. An
   alpha of 0 switches that method off (timm);
3. the partner of sample ``i`` is ``B - 1 - i`` (the batch reversed);
4. MixUp: ``x_i <- lam x_i + (1 - lam) x_{B-1-i}``. CutMix: side ratio
   ``r = sqrt(1 - lam)``, ``cut_h = floor(H r)``, ``cut_w = floor(W r)``,
   centre ``cy ~ U{0..H-1}``, ``cx ~ U{0..W-1}``, box
   ``[cy - cut_h // 2, cy + cut_h // 2) x [cx - cut_w // 2, cx + cut_w // 2)``
   clipped to the image and pasted from the partner; then
   ``lam <- 1 - box_area / (H W)``;
5. targets ``t_i = lam smooth(k_i) + (1 - lam) smooth(k_{B-1-i})`` with
   ``smooth(k)`` the one-hot of k smoothed by ``epsilon`` (``1 - (K-1) eps / K``
   at k, ``eps / K`` elsewhere). Rows sum to 1.

Defaults are the paper's recipe (alphas and smoothing from its Sec. 4.1, the
rest timm's): ``mixup_alpha = 0.8``, ``cutmix_alpha = 1.0``, ``mixup_prob = 1.0``,
``switch_prob = 0.5``, ``label_smoothing = 0.1``. Everything is jit-able with
static shapes (the CutMix box is an ``iota`` mask). Inside ``jax.shard_map`` pass ``axis_name``:
each device then mixes its own shard with ``fold_in(key, axis_index)``, as one
DDP rank with its own RNG does.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from contrastive_jax.losses import smooth_labels

Array = jax.Array

__all__ = ["MixSample", "apply_mix", "mix_batch", "sample_mix", "smooth_labels"]


class MixSample(NamedTuple):
    """The random part of one batch-mode mix.

    Attributes:
      lam: float32 [] weight of each sample's own image and target; for CutMix
        the corrected value ``1 - box_area / (H W)``.
      use_cutmix: bool [] CutMix (True) or MixUp (False).
      box: bool [H, W] pixels pasted from the partner (all False unless CutMix).
    """

    lam: Array
    use_cutmix: Array
    box: Array


def sample_mix(
    key: Array,
    height: int,
    width: int,
    *,
    mixup_alpha: float = 0.8,
    cutmix_alpha: float = 1.0,
    mixup_prob: float = 1.0,
    switch_prob: float = 0.5,
) -> MixSample:
    """Draws ``lam``, the MixUp/CutMix switch and the CutMix box for one batch (steps 1, 2, 4)."""
    k_apply, k_switch, k_lam, k_y, k_x = jax.random.split(key, 5)
    apply = jax.random.uniform(k_apply) < mixup_prob
    if mixup_alpha > 0 and cutmix_alpha > 0:
        cutmix_chosen = jax.random.uniform(k_switch) < switch_prob
    else:
        cutmix_chosen = jnp.asarray(cutmix_alpha > 0)
    if mixup_alpha <= 0 and cutmix_alpha <= 0:
        apply = jnp.asarray(False)
    # One Beta draw with the chosen method's alpha (a disabled method is never chosen).
    alpha = jnp.where(cutmix_chosen, cutmix_alpha, mixup_alpha)
    lam_drawn = jax.random.beta(k_lam, jnp.maximum(alpha, 1e-3), jnp.maximum(alpha, 1e-3))
    use_cutmix = cutmix_chosen & apply
    ratio = jnp.sqrt(1.0 - jnp.where(use_cutmix, lam_drawn, 1.0))
    cut_h = jnp.floor(height * ratio).astype(jnp.int32)
    cut_w = jnp.floor(width * ratio).astype(jnp.int32)
    cy = jax.random.randint(k_y, (), 0, height)
    cx = jax.random.randint(k_x, (), 0, width)
    y0, y1 = jnp.clip(cy - cut_h // 2, 0, height), jnp.clip(cy + cut_h // 2, 0, height)
    x0, x1 = jnp.clip(cx - cut_w // 2, 0, width), jnp.clip(cx + cut_w // 2, 0, width)
    rows = jnp.arange(height)
    cols = jnp.arange(width)
    box = ((rows >= y0) & (rows < y1))[:, None] & ((cols >= x0) & (cols < x1))[None, :]
    lam_box = 1.0 - ((y1 - y0) * (x1 - x0)).astype(jnp.float32) / (height * width)
    lam = jnp.where(use_cutmix, lam_box, jnp.where(apply, lam_drawn, 1.0))
    return MixSample(lam=jnp.asarray(lam, jnp.float32), use_cutmix=use_cutmix, box=box)


def apply_mix(
    images: Array,
    labels: Array,
    sample: MixSample,
    *,
    num_classes: int,
    label_smoothing: float = 0.1,
) -> tuple[Array, Array]:
    """Mixes a batch with its reverse as drawn by ``sample`` (steps 3-5).

    Args:
      images: float [B, H, W, C], B even.
      labels: int [B].
      sample: from :func:`sample_mix` with the same H, W.
      num_classes: K.
      label_smoothing: epsilon of the smoothed one-hot targets.

    Returns:
      (mixed images [B, H, W, C] in the input dtype, soft targets float32 [B, K]).
    """
    _check(images, labels)
    partner = images[::-1]
    lam = sample.lam.astype(images.dtype)
    mixup = lam * images + (1 - lam) * partner
    cutmix = jnp.where(sample.box[None, :, :, None], partner, images)
    mixed = jnp.where(sample.use_cutmix, cutmix, mixup)
    smooth = smooth_labels(labels, num_classes, label_smoothing)
    targets = sample.lam * smooth + (1.0 - sample.lam) * smooth[::-1]
    return mixed, targets


def mix_batch(
    images: Array,
    labels: Array,
    key: Array,
    *,
    num_classes: int,
    mixup_alpha: float = 0.8,
    cutmix_alpha: float = 1.0,
    mixup_prob: float = 1.0,
    switch_prob: float = 0.5,
    label_smoothing: float = 0.1,
    axis_name: str | None = None,
) -> tuple[Array, Array]:
    """MixUp/CutMix with label smoothing in batch mode (see the module docstring).

    Args:
      images: float [B, H, W, C], the local batch (B even).
      labels: int [B].
      key: PRNG key; the result is a pure function of (images, labels, key).
      num_classes: K.
      mixup_alpha, cutmix_alpha: Beta parameters (0 switches a method off).
      mixup_prob: probability of mixing at all, MixUp or CutMix (timm's ``prob``);
        otherwise targets are only smoothed.
      switch_prob: probability of CutMix when both methods are on.
      label_smoothing: epsilon.
      axis_name: inside ``shard_map``/``pmap``, the mapped batch axis: the key
        is folded with the device's index so every shard mixes independently.

    Returns:
      (mixed images [B, H, W, C], soft targets float32 [B, K]; rows sum to 1).
    """
    _check(images, labels)
    if axis_name is not None:
        key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))
    sample = sample_mix(
        key,
        images.shape[1],
        images.shape[2],
        mixup_alpha=mixup_alpha,
        cutmix_alpha=cutmix_alpha,
        mixup_prob=mixup_prob,
        switch_prob=switch_prob,
    )
    return apply_mix(
        images, labels, sample, num_classes=num_classes, label_smoothing=label_smoothing
    )


def _check(images: Array, labels: Array) -> None:
    if images.ndim != 4:
        raise ValueError(f"`images` must have shape [B, H, W, C], got {images.shape}")
    if not jnp.issubdtype(images.dtype, jnp.floating):
        raise ValueError(f"`images` must be floating point, got {images.dtype}")
    if images.shape[0] % 2:
        raise ValueError(f"batch mode needs an even local batch, got B={images.shape[0]}")
    if labels.shape != images.shape[:1]:
        raise ValueError(f"`labels` must have shape [{images.shape[0]}], got {labels.shape}")
