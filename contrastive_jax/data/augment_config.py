"""The augmentation recipes: :class:`AugmentConfig` and the named presets (no TensorFlow).

The input pipeline reads these: :mod:`.host_views` for the geometry on the host,
:mod:`.device_augment` for the appearance on the accelerator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from contrastive_jax.errors import ConfigError

__all__ = ["PRESET_NAMES", "AugmentConfig", "augmentation_preset", "simclr_jitter"]


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
      blur_sigma_group: None: every view draws its own sigma. G (a positive int): one
        sigma for each view of G consecutive rows of the global batch, the one the
        group's first row draws (the blur's probability stays per image): SimCLR v1's
        ``batch_random_blur`` (google-research/simclr@be133b3 ``data_util.py``, called
        in ``model.py`` on each view of a per-core batch: one ``tf.random.uniform([],
        0.1, 2.0)`` for the core's images of that view), G = 4096 / 128 = 32 at the
        paper's batch on its 128 TPU v3 cores (Sec. 2.2). The rows' order is the
        batch's, so a view then depends on the batch it is in.
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
      crop_sampler: how the crop window is drawn when ``crop_scale`` is set:
        ``"torchvision"`` (``RandomResizedCrop``: up to 10 draws, area uniform, aspect
        ratio log-uniform, else a central crop) or ``"tf_bounding_box"``
        (``tf.image.sample_distorted_bounding_box`` with the whole image as the box and
        ``min_object_covered=0.1``, as SimCLR's and SupCon's TF code call it: up to 100
        draws of an aspect ratio uniform in ``crop_ratio`` and an integer height uniform
        over those whose area lies in ``crop_scale``, kept if it covers at least 10 % of
        the image; see :func:`.host_views.tf_crop_window`).
      crop_fallback: ``"tf_bounding_box"`` only: the window when no draw succeeds,
        ``"whole"`` (the image: the TF op's, SimCLR's) or ``"center_square"`` (the central
        square of side ``min(H, W)``, also taken for a drawn window equal to the whole
        image: SupCon's ``_distorted_crop_window``).
      crop_interpolation: resampling of the crop to ``S x S``: ``"bilinear"`` or
        ``"bicubic"`` (Pillow's, antialiased when it shrinks).
      policy: ``"none"``, ``"autoaugment"`` (AutoAugment's ImageNet policy v0) or
        ``"randaugment"``: integer-image ops (:mod:`.image_policies`) on the host after
        the crop and the flip, before the appearance stages; the default input path only.
      randaugment_layers, randaugment_magnitude: RandAugment's N and M (the source's
        defaults 2 and 10).
      brightness: the colour jitter's brightness, ``"multiplicative"`` (torchvision's,
        SimCLR v2's: ``x * U(max(0, 1 - b), 1 + b)``) or ``"additive"`` (SimCLR v1's
        ``tf.image.random_brightness``: ``x + U(-b, b)``); clipped to [0, 1] either way.
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
    blur_sigma_group: int | None = None
    solarize_prob: tuple[float, ...] = (0.0,)
    solarize_threshold: float = 0.5
    gain: tuple[float, float] | None = None
    channel_gain: tuple[float, float] | None = None
    cutout_prob: float = 0.0
    cutout_fraction: float = 0.25
    noise_std: tuple[float, float] = (0.0, 0.0)
    crop_sampler: str = "torchvision"
    crop_fallback: str = "whole"
    crop_interpolation: str = "bilinear"
    policy: str = "none"
    randaugment_layers: int = 2
    randaugment_magnitude: float = 10.0
    brightness: str = "multiplicative"

    def __post_init__(self) -> None:
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"AugmentConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        group = self.blur_sigma_group
        if group is not None and (isinstance(group, bool) or not isinstance(group, int)
                                  or group < 1):
            raise ConfigError(
                f"AugmentConfig.blur_sigma_group must be None or a positive int, got {group!r}")
        if self.randaugment_layers < 0 or not 0 <= self.randaugment_magnitude <= 10:
            raise ConfigError(
                "AugmentConfig.randaugment_layers must be >= 0 and randaugment_magnitude in "
                f"[0, 10], got {self.randaugment_layers!r}, {self.randaugment_magnitude!r}")

    @property
    def host_only(self) -> tuple[str, ...]:
        """The fields set to what only the default (grain) input path implements."""
        defaults = {"crop_sampler": "torchvision", "crop_interpolation": "bilinear",
                    "policy": "none", "brightness": "multiplicative", "blur_sigma_group": None}
        return tuple(name for name, value in defaults.items() if getattr(self, name) != value)


#: The allowed values of the string fields of :class:`AugmentConfig`.
_CHOICES = {
    "crop_sampler": ("torchvision", "tf_bounding_box"),
    "crop_fallback": ("whole", "center_square"),
    "crop_interpolation": ("bilinear", "bicubic"),
    "policy": ("none", "autoaugment", "randaugment"),
    "brightness": ("multiplicative", "additive"),
}


#: SimCLR v1's per-core batch: 4096 over the paper's 128 TPU v3 cores (Sec. 2.2), the images
#: of one view that share a blur sigma (``batch_random_blur``).
SIMCLR_V1_CORE_BATCH = 4096 // 128


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
    # SimCLR v1's code (google-research/simclr@be133b3, data_util.py): the
    # simclr_imagenet preset with its crop (distorted_bounding_box_crop, area 0.08-1,
    # aspect 3/4-4/3, 100 attempts, then the whole image; bicubic resize, lines 222-295),
    # its additive brightness (tf.image.random_brightness, line 125) and its blur's sigma
    # drawn once per per-core batch of 32 and view (batch_random_blur).
    "simclr_v1_imagenet": lambda size: AugmentConfig(
        crop_scale=(0.08, 1.0), jitter=simclr_jitter(1.0), grayscale_prob=0.2, blur_prob=(0.5,),
        crop_sampler="tf_bounding_box", crop_interpolation="bicubic", brightness="additive",
        blur_sigma_group=SIMCLR_V1_CORE_BATCH,
    ),
    # SupCon's ImageNet pipeline (google-research/google-research supcon/preprocessing.py,
    # --augmentation_type=AUTOAUGMENT): _distorted_crop_window (area 0.08-1, aspect
    # 0.75-1.33, 100 attempts, else the central square) with a bilinear resize, a flip,
    # AutoAugment v0; no colour jitter, grayscale or blur (the model's deferred blur is
    # for SIMCLR-type augmentations only).
    "supcon_autoaugment": lambda size: AugmentConfig(
        crop_scale=(0.08, 1.0), crop_ratio=(0.75, 1.33), crop_sampler="tf_bounding_box",
        crop_fallback="center_square", policy="autoaugment",
    ),
    # SupCon's --augmentation_type=RANDAUGMENT: the same crop and flip, then RandAugment
    # with the Model Garden's defaults N = 2, M = 10 (what its STACKED_RANDAUGMENT runs, as
    # in scripts/cross_entropy_imagenet_resnet200.sh; plain RANDAUGMENT passes
    # --augmentation_magnitude as M, which no script sets): data.randaugment_* override them.
    "supcon_randaugment": lambda size: AugmentConfig(
        crop_scale=(0.08, 1.0), crop_ratio=(0.75, 1.33), crop_sampler="tf_bounding_box",
        crop_fallback="center_square", policy="randaugment",
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
    # SimCLR's and the SupCon TF code's linear evaluation and fine-tuning on ImageNet: the
    # Inception crop (0.08, 1) + flip alone (google-research/simclr data.py, color_distort
    # only in pretraining).
    "imagenet_linear": lambda size: AugmentConfig(crop_scale=(0.08, 1.0)),
    # SimCLR v1's linear evaluation and fine-tuning (google-research/simclr@be133b3
    # data_util.py, preprocess_for_train with color_distort=False): the pretraining crop of
    # simclr_v1_imagenet (distorted_bounding_box_crop, bicubic resize) + flip alone.
    "simclr_v1_linear": lambda size: AugmentConfig(
        crop_scale=(0.08, 1.0), crop_sampler="tf_bounding_box", crop_interpolation="bicubic"),
    # No augmentation: every view is the (resized) image.
    "none": lambda size: AugmentConfig(crop_scale=None, flip_prob=0.0),
}

PRESET_NAMES: tuple[str, ...] = tuple(_PRESETS)


def augmentation_preset(name: str, image_size: int) -> AugmentConfig:
    """Returns the named recipe for output images of side ``image_size``.

    Names: ``simclr_cifar``, ``supcon_cifar``, ``simclr_imagenet``,
    ``simclr_v1_imagenet`` (SimCLR v1 code's crop and additive brightness),
    ``supcon_autoaugment`` and ``supcon_randaugment`` (SupCon's TF code),
    ``byol_imagenet``, ``mio`` (MIO Table 3; blur and solarisation only above
    32 px), ``digits``, ``digits_cluttered``, ``phantoms``, ``cifar_proxy``, the
    linear-probe recipes
    ``supcon_linear``, ``mio_linear``, ``imagenet_linear`` and ``simclr_v1_linear`` (use them
    with ``num_views = 1``) and
    ``none``.
    """
    if name not in _PRESETS:
        raise ConfigError(f"unknown augmentation preset {name!r}; choose one of {PRESET_NAMES}")
    return _PRESETS[name](image_size)
