"""Decoded images at their real depth, brought to the 8 bits per channel the pipeline trains on.

Pillow opens an image in a *mode* that says its depth; ``Image.convert("RGB")`` is faithful
for the 8-bit modes but clips the others (a 16-bit grayscale PNG, mode ``I;16``, becomes
almost all white). :func:`to_rgb8` converts each mode by one rule:

==========================================  ===============================================
mode                                        rule
==========================================  ===============================================
``RGB``                                     kept
``1``, ``L``, ``P``, ``LA``, ``PA``,        Pillow's ``convert("RGB")`` (8 bits already; an
``RGBA``, ``RGBX``, ``CMYK``, ``YCbCr``     alpha channel is dropped, not composited)
``I;16``, ``I;16L``, ``I;16B``, ``I;16N``   16-bit: ``round(v * 255 / 65535)``, i.e.
                                            ``round(v / 257)``, on every pixel (gray)
``I`` (32-bit integers)                     values in 0..65535 (how Pillow opens many
                                            16-bit files) as 16-bit; others refused
``F`` (32-bit floats)                       values in [0, 1]: ``round(v * 255)``; others
                                            (or NaN, inf) refused
any other mode                              refused
==========================================  ===============================================

The 16-bit rule maps the full range of the bit depth, 0..65535, onto 0..255, the same for
every image: a pixel keeps its meaning across a dataset (in a CT or MR series the same
value is the same tissue in every slice), where a min-max stretch per image would make the
intensity of a pixel depend on the other pixels of its image and amplify the noise of a
nearly flat one. An image that uses a small part of the range stays dark, as it is. A 16-bit
*colour* PNG is opened by Pillow as ``RGB`` with the high byte of each channel (``v // 256``).
A refused image raises :class:`~contrastive_jax.errors.CorruptImageError` naming the file
and its mode.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from contrastive_jax.errors import CorruptImageError

#: 8-bit modes that ``convert("RGB")`` reads faithfully.
EIGHT_BIT = frozenset({"1", "L", "P", "LA", "PA", "RGBA", "RGBX", "CMYK", "YCbCr"})
#: 16-bit grayscale modes.
SIXTEEN_BIT = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})


def scale_16bit(values: np.ndarray) -> np.ndarray:
    """uint8 of 16-bit values (0..65535, any integer dtype): ``round(v / 257)``, halves up.

    Examples:
      >>> scale_16bit(np.array([0, 128, 129, 257, 65535]))
      array([  0,   0,   1,   1, 255], dtype=uint8)
    """
    v = values.astype(np.int64)
    return ((2 * v + 257) // 514).astype(np.uint8)


def to_rgb8(image: Image.Image, name: str) -> Image.Image:
    """``image`` as an 8-bit ``RGB`` image by the rule of its mode (module docstring).

    Raises:
      CorruptImageError: a mode (or values of ``I``, ``F``) with no faithful 8-bit reading;
        the message names ``name`` and the mode.
    """
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in EIGHT_BIT:
        return image.convert("RGB")
    if mode in SIXTEEN_BIT or mode == "I":
        values = np.asarray(image)
        if mode == "I" and values.size and (values.min() < 0 or values.max() > 65535):
            raise CorruptImageError(
                f"cannot read image {name}: mode I (32-bit integers) with values "
                f"{values.min()}..{values.max()}, outside the 16-bit range 0..65535 that it "
                "is read as; convert it to 8 or 16 bits")
        return _gray(scale_16bit(values))
    if mode == "F":
        values = np.asarray(image, dtype=np.float64)
        if values.size and not (np.isfinite(values).all() and values.min() >= 0
                                and values.max() <= 1):
            raise CorruptImageError(
                f"cannot read image {name}: mode F (32-bit floats) with values "
                f"{np.nanmin(values):.6g}..{np.nanmax(values):.6g}, not the [0, 1] intensities "
                "that floats are read as (or not finite); convert it to 8 or 16 bits")
        return _gray(np.rint(values * 255).astype(np.uint8))
    raise CorruptImageError(
        f"cannot read image {name}: Pillow mode {mode!r} has no faithful 8-bit RGB reading "
        "here (docs/cli.md, Data); convert it to RGB, 8-bit or 16-bit grayscale")


def _gray(values: np.ndarray) -> Image.Image:
    """An ``RGB`` image of uint8 gray values [H, W] (the value in every channel)."""
    return Image.fromarray(np.repeat(values[..., None], 3, axis=-1), mode="RGB")
