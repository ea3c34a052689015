"""AutoAugment and RandAugment on the host: uint8 numpy ops, as the SupCon code ran them.

SupCon's TF code (``google-research/google-research``, ``supcon/preprocessing.py``,
``_augment_image``) takes both from the TensorFlow Model Garden:
``official/vision/image_classification/augment.py`` (cited below by line, as in the
``tf-models-official`` 2.4.0 wheel): ``AugmentationType.AUTOAUGMENT`` is
``augment.AutoAugment().distort`` (the ImageNet policy ``v0``, ``cutout_const=100``,
``translate_const=250``) and ``AugmentationType.RANDAUGMENT`` is
``augment.RandAugment(magnitude=m).distort`` (``num_layers=2``, ``cutout_const=40``,
``translate_const=100``). Each op here is that module's definition on an ``[H, W, 3]``
uint8 array, with its arithmetic (float32, truncating casts), including where it departs
from PIL, whose names it borrows:

* ``Contrast`` blends with a constant grey of ``min(H W / 256, 255)``: the module's
  ``contrast`` (lines 343-357) sums the luma histogram (the pixel count) where PIL takes its
  mean. AutoAugment's ``v0`` has no ``Contrast``; RandAugment draws it.
* ``Posterize`` to 0 bits (``v0``'s ``('Posterize', 0.8, 2)``) shifts by 8, which TensorFlow's
  bitwise shifts clamp to 7: it keeps the top bit, where PIL gives black.
* The geometric ops (``Rotate``, ``ShearX/Y``, ``TranslateX/Y``) map each output pixel
  through the module's projective matrix to the nearest input pixel (rounding half away
  from zero, as TensorFlow's ``ImageProjectiveTransform``); outputs whose source falls
  outside the image are grey 128 (the module's ``wrap`` / ``unwrap``, lines 527-570).

Every random draw (which sub-policy, whether an op applies, the sign of a level, the
cutout's centre) comes from the ``numpy.random.Generator`` passed in: on the default input
path that is the view's generator of :func:`.host_views.view_rngs`, a pure function of
(seed, step, example id, view).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = [
    "AUTOAUGMENT_V0",
    "MAX_LEVEL",
    "OPS",
    "RANDAUGMENT_OPS",
    "autoaugment",
    "level_to_arg",
    "randaugment",
]

#: The largest magnitude level (``_MAX_LEVEL``, augment.py:35).
MAX_LEVEL = 10.0
#: Grey of the pixels the geometric ops and cutout leave empty (``replace_value``).
REPLACE = 128
#: ``tf.image.rgb_to_grayscale``'s weights.
_LUMA = np.asarray([0.2989, 0.5870, 0.1140], np.float32)

#: AutoAugment's ImageNet policy ``v0`` (augment.py:847-873): 25 sub-policies of two
#: ``(op, probability, level)``; one sub-policy is drawn per image.
AUTOAUGMENT_V0: tuple[tuple[tuple[str, float, int], ...], ...] = (
    (("Equalize", 0.8, 1), ("ShearY", 0.8, 4)),
    (("Color", 0.4, 9), ("Equalize", 0.6, 3)),
    (("Color", 0.4, 1), ("Rotate", 0.6, 8)),
    (("Solarize", 0.8, 3), ("Equalize", 0.4, 7)),
    (("Solarize", 0.4, 2), ("Solarize", 0.6, 2)),
    (("Color", 0.2, 0), ("Equalize", 0.8, 8)),
    (("Equalize", 0.4, 8), ("SolarizeAdd", 0.8, 3)),
    (("ShearX", 0.2, 9), ("Rotate", 0.6, 8)),
    (("Color", 0.6, 1), ("Equalize", 1.0, 2)),
    (("Invert", 0.4, 9), ("Rotate", 0.6, 0)),
    (("Equalize", 1.0, 9), ("ShearY", 0.6, 3)),
    (("Color", 0.4, 7), ("Equalize", 0.6, 0)),
    (("Posterize", 0.4, 6), ("AutoContrast", 0.4, 7)),
    (("Solarize", 0.6, 8), ("Color", 0.6, 9)),
    (("Solarize", 0.2, 4), ("Rotate", 0.8, 9)),
    (("Rotate", 1.0, 7), ("TranslateY", 0.8, 9)),
    (("ShearX", 0.0, 0), ("Solarize", 0.8, 4)),
    (("ShearY", 0.8, 0), ("Color", 0.6, 4)),
    (("Color", 1.0, 0), ("Rotate", 0.6, 2)),
    (("Equalize", 0.8, 4), ("Equalize", 0.0, 8)),
    (("Equalize", 1.0, 4), ("AutoContrast", 0.6, 2)),
    (("ShearY", 0.4, 7), ("SolarizeAdd", 0.6, 7)),
    (("Posterize", 0.8, 2), ("Solarize", 0.6, 10)),
    (("Solarize", 0.6, 8), ("Equalize", 0.6, 1)),
    (("Color", 0.8, 6), ("Rotate", 0.4, 5)),
)
#: AutoAugment's constants (``AutoAugment.__init__`` defaults, augment.py:739-742).
AUTOAUGMENT_CUTOUT, AUTOAUGMENT_TRANSLATE = 100.0, 250.0

#: RandAugment's ops (``available_ops``, augment.py:935-938); a layer draws one of them or,
#: with the same probability, none (``maxval=len(available_ops) + 1``, line 961).
RANDAUGMENT_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color",
    "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY",
    "Cutout", "SolarizeAdd",
)
#: RandAugment's constants (``RandAugment.__init__`` defaults, augment.py:913-916).
RANDAUGMENT_CUTOUT, RANDAUGMENT_TRANSLATE = 40.0, 100.0


def _blend(image1: np.ndarray, image2: np.ndarray, factor: float) -> np.ndarray:
    """``blend`` (augment.py:225-265): ``image1 + factor (image2 - image1)``, truncated;
    clipped to [0, 255] when it extrapolates."""
    if factor == 0.0:
        return image1
    if factor == 1.0:
        return image2
    a = image1.astype(np.float32)
    out = a + np.float32(factor) * (image2.astype(np.float32) - a)
    if not 0.0 < factor < 1.0:
        out = np.clip(out, 0.0, 255.0)
    return out.astype(np.uint8)


def _gray(image: np.ndarray) -> np.ndarray:
    """``tf.image.rgb_to_grayscale`` of uint8 [H, W, 3]: uint8 [H, W, 1] (x / 255 in float32,
    the luma, then ``convert_image_dtype``'s truncating ``x * 255.5``)."""
    x = image.astype(np.float32) * np.float32(1.0 / 255.0)
    return (np.tensordot(x, _LUMA, axes=([-1], [0])) * np.float32(255.5)).astype(np.uint8)[..., None]


def autocontrast(image: np.ndarray) -> np.ndarray:
    """Each channel stretched from [min, max] to [0, 255] (``autocontrast``, lines 412-448)."""
    out = image.copy()
    for c in range(3):
        channel = image[..., c]
        lo, hi = np.float32(channel.min()), np.float32(channel.max())
        if hi > lo:
            scale = np.float32(255.0) / (hi - lo)
            scaled = channel.astype(np.float32) * scale + (-lo * scale)
            out[..., c] = np.clip(scaled, 0.0, 255.0).astype(np.uint8)
    return out


def equalize(image: np.ndarray) -> np.ndarray:
    """PIL's histogram equalisation per channel (``equalize``, lines 480-518)."""
    out = image.copy()
    for c in range(3):
        channel = image[..., c]
        histo = np.bincount(channel.ravel(), minlength=256).astype(np.int64)
        nonzero = histo[histo != 0]
        step = (nonzero.sum() - nonzero[-1]) // 255
        if step == 0:
            continue
        lut = (np.cumsum(histo) + step // 2) // step
        lut = np.clip(np.concatenate([[0], lut[:-1]]), 0, 255).astype(np.uint8)
        out[..., c] = lut[channel]
    return out


def invert(image: np.ndarray) -> np.ndarray:
    """``255 - x``."""
    return 255 - image


def posterize(image: np.ndarray, bits: int) -> np.ndarray:
    """Keeps the top ``bits`` bits: ``(x >> s) << s``, ``s = 8 - bits`` clamped to 7 as
    TensorFlow's bitwise shifts clamp it (lines 366-369)."""
    shift = min(8 - bits, 7)
    return (image >> shift) << shift


def solarize(image: np.ndarray, threshold: int) -> np.ndarray:
    """Inverts the pixels ``>= threshold`` (lines 318-322)."""
    return np.where(image < threshold, image, 255 - image)


def solarize_add(image: np.ndarray, addition: int, threshold: int = 128) -> np.ndarray:
    """Adds ``addition`` (clipped) to the pixels ``< threshold`` (lines 325-334)."""
    added = np.clip(image.astype(np.int64) + addition, 0, 255).astype(np.uint8)
    return np.where(image < threshold, added, image)


def color(image: np.ndarray, factor: float) -> np.ndarray:
    """Blend of the image's grey (3 channels) and the image (lines 337-340)."""
    return _blend(np.broadcast_to(_gray(image), image.shape), image, factor)


def contrast(image: np.ndarray, factor: float) -> np.ndarray:
    """Blend with a constant grey ``min(H W / 256, 255)`` (lines 343-357: the sum of the
    256-bin luma histogram, i.e. the pixel count, divided by 256; not PIL's mean luma)."""
    height, width = image.shape[:2]
    grey = np.uint8(min(np.float32(height * width) / np.float32(256.0), 255.0))
    return _blend(np.full_like(image, grey), image, factor)


def brightness(image: np.ndarray, factor: float) -> np.ndarray:
    """Blend of black and the image (lines 360-363)."""
    return _blend(np.zeros_like(image), image, factor)


def sharpness(image: np.ndarray, factor: float) -> np.ndarray:
    """Blend of PIL's SMOOTH filter (3x3, centre 5, the rest 1, over 13; the border rows and
    columns kept) and the image (lines 451-477)."""
    x = image.astype(np.float32)
    height, width = image.shape[:2]
    acc = np.zeros((height - 2, width - 2, 3), np.float32)
    for dy in range(3):
        for dx in range(3):
            weight = np.float32(5.0 if (dy, dx) == (1, 1) else 1.0) / np.float32(13.0)
            acc += weight * x[dy : dy + height - 2, dx : dx + width - 2]
    smooth = image.copy()
    smooth[1:-1, 1:-1] = np.clip(acc, 0.0, 255.0).astype(np.uint8)
    return _blend(smooth, image, factor)


def _round_half_away(v: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _transform(image: np.ndarray, matrix: tuple[float, ...]) -> np.ndarray:
    """Output pixel (x, y) reads input (a0 x + a1 y + a2, b0 x + b1 y + b2), nearest; grey
    :data:`REPLACE` where that falls outside (``transform`` + ``wrap`` / ``unwrap``)."""
    a0, a1, a2, b0, b1, b2 = (np.float32(m) for m in matrix)
    height, width = image.shape[:2]
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    xi = _round_half_away(a0 * x + a1 * y + a2)
    yi = _round_half_away(b0 * x + b1 * y + b2)
    inside = (xi >= 0) & (xi <= width - 1) & (yi >= 0) & (yi <= height - 1)
    xi = np.where(inside, xi, 0).astype(np.intp)
    yi = np.where(inside, yi, 0).astype(np.intp)
    return np.where(inside[..., None], image[yi, xi], np.uint8(REPLACE))


def rotate(image: np.ndarray, degrees: float) -> np.ndarray:
    """Rotation about the centre, counter-clockwise for ``degrees > 0`` on screen
    (``wrapped_rotate``, ``_convert_angles_to_transform``, lines 124-222)."""
    height, width = image.shape[:2]
    r = np.float32(degrees * (math.pi / 180.0))
    cos, sin = np.cos(r), np.sin(r)
    x_offset = ((width - 1) - (cos * (width - 1) - sin * (height - 1))) / 2.0
    y_offset = ((height - 1) - (sin * (width - 1) + cos * (height - 1))) / 2.0
    return _transform(image, (cos, -sin, x_offset, sin, cos, y_offset))


def translate_x(image: np.ndarray, pixels: float) -> np.ndarray:
    """Output x reads input ``x + pixels`` (``translate_x``, lines 378-381)."""
    return _transform(image, (1.0, 0.0, pixels, 0.0, 1.0, 0.0))


def translate_y(image: np.ndarray, pixels: float) -> np.ndarray:
    """Output y reads input ``y + pixels`` (``translate_y``, lines 384-387)."""
    return _transform(image, (1.0, 0.0, 0.0, 0.0, 1.0, pixels))


def shear_x(image: np.ndarray, level: float) -> np.ndarray:
    """Output (x, y) reads input ``(x + level y, y)`` (``shear_x``, lines 390-398)."""
    return _transform(image, (1.0, level, 0.0, 0.0, 1.0, 0.0))


def shear_y(image: np.ndarray, level: float) -> np.ndarray:
    """Output (x, y) reads input ``(x, level x + y)`` (``shear_y``, lines 401-409)."""
    return _transform(image, (1.0, 0.0, 0.0, level, 1.0, 0.0))


def cutout(image: np.ndarray, pad_size: int, rng: np.random.Generator) -> np.ndarray:
    """A ``2 pad_size`` square of grey :data:`REPLACE` at a uniform integer centre, clipped to
    the image (``cutout``, lines 268-315)."""
    height, width = image.shape[:2]
    cy, cx = int(rng.integers(0, height)), int(rng.integers(0, width))
    out = image.copy()
    out[max(0, cy - pad_size) : min(height, cy + pad_size),
        max(0, cx - pad_size) : min(width, cx + pad_size)] = REPLACE
    return out


#: Op name -> ``f(image, *args, rng)``.
OPS: dict[str, Callable[..., np.ndarray]] = {
    "AutoContrast": lambda im, rng: autocontrast(im),
    "Equalize": lambda im, rng: equalize(im),
    "Invert": lambda im, rng: invert(im),
    "Rotate": lambda im, degrees, rng: rotate(im, degrees),
    "Posterize": lambda im, bits, rng: posterize(im, bits),
    "Solarize": lambda im, threshold, rng: solarize(im, threshold),
    "SolarizeAdd": lambda im, addition, rng: solarize_add(im, addition),
    "Color": lambda im, factor, rng: color(im, factor),
    "Contrast": lambda im, factor, rng: contrast(im, factor),
    "Brightness": lambda im, factor, rng: brightness(im, factor),
    "Sharpness": lambda im, factor, rng: sharpness(im, factor),
    "ShearX": lambda im, level, rng: shear_x(im, level),
    "ShearY": lambda im, level, rng: shear_y(im, level),
    "TranslateX": lambda im, pixels, rng: translate_x(im, pixels),
    "TranslateY": lambda im, pixels, rng: translate_y(im, pixels),
    "Cutout": cutout,
}


def level_to_arg(
    name: str, level: float, rng: np.random.Generator, *, cutout_const: float,
    translate_const: float,
) -> tuple[float, ...]:
    """The arguments of op ``name`` at magnitude ``level`` (``level_to_arg``, lines 573-700).

    Rotate ``30 l / 10`` degrees, ShearX/Y ``0.3 l / 10`` and TranslateX/Y
    ``translate_const l / 10`` pixels, each negated with probability 1/2; Color, Contrast,
    Brightness, Sharpness a factor ``1.8 l / 10 + 0.1``; Posterize ``int(4 l / 10)`` bits,
    Solarize a threshold ``int(256 l / 10)``, SolarizeAdd ``int(110 l / 10)``, Cutout a
    half-side ``int(cutout_const l / 10)``; the other ops take none.
    """
    def negated(value: float) -> float:
        # _randomly_negate_tensor: kept iff floor(U + 0.5) is 1.
        return value if rng.random() >= 0.5 else -value

    def mult(multiplier: float) -> int:
        return int((level / MAX_LEVEL) * multiplier)

    if name in ("AutoContrast", "Equalize", "Invert"):
        return ()
    if name == "Rotate":
        return (negated((level / MAX_LEVEL) * 30.0),)
    if name in ("ShearX", "ShearY"):
        return (negated((level / MAX_LEVEL) * 0.3),)
    if name in ("TranslateX", "TranslateY"):
        return (negated((level / MAX_LEVEL) * float(translate_const)),)
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return ((level / MAX_LEVEL) * 1.8 + 0.1,)
    multipliers = {"Posterize": 4.0, "Solarize": 256.0, "SolarizeAdd": 110.0,
                   "Cutout": cutout_const}
    if name in multipliers:
        return (mult(multipliers[name]),)
    raise ValueError(f"unknown op {name!r}; choose one of {tuple(OPS)}")


def autoaugment(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``AutoAugment('v0').distort`` of uint8 [H, W, 3]: one of the 25 sub-policies drawn
    uniformly, each of its two ops applied with its probability."""
    sub_policy = AUTOAUGMENT_V0[int(rng.integers(len(AUTOAUGMENT_V0)))]
    for name, prob, level in sub_policy:
        if rng.random() < prob:
            args = level_to_arg(name, level, rng, cutout_const=AUTOAUGMENT_CUTOUT,
                                translate_const=AUTOAUGMENT_TRANSLATE)
            image = OPS[name](image, *args, rng)
    return image


def randaugment(
    image: np.ndarray, rng: np.random.Generator, *, num_layers: int, magnitude: float
) -> np.ndarray:
    """``RandAugment(num_layers, magnitude).distort`` of uint8 [H, W, 3]: ``num_layers``
    times, one of the 16 ops or the identity drawn uniformly (1/17 each) and applied at
    ``magnitude`` (the probability the module draws per op is not used: lines 963-973)."""
    for _ in range(num_layers):
        op = int(rng.integers(len(RANDAUGMENT_OPS) + 1))
        if op < len(RANDAUGMENT_OPS):
            name = RANDAUGMENT_OPS[op]
            args = level_to_arg(name, magnitude, rng, cutout_const=RANDAUGMENT_CUTOUT,
                                translate_const=RANDAUGMENT_TRANSLATE)
            image = OPS[name](image, *args, rng)
    return image
