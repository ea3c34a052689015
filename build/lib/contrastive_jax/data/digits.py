"""scikit-learn's bundled handwritten digits as a built-in source (no download).

``sklearn.datasets.load_digits``: 1,797 images of 8x8 pixels with 17 grey
levels (0..16), 10 classes. The split is a deterministic stratified 80/20
split (``train_test_split(stratify=labels, random_state=0)``): 1,437 training
and 360 test images (docs/reproductions.md, "Built-in digits").

Two variants, both 16x16 RGB uint8 (grey repeated on three channels so every
model and augmentation preset works unchanged):

* ``digits``: each 8x8 digit upsampled x2 by pixel repetition (nearest
  neighbour, so no grey level is invented), scaled to 0..255
  (``round(v * 255 / 16)``). It nearly saturates (raw pixels reach ~0.97
  accuracy): a fast smoke test and the default of ``default_data_config`` and of
  tests (the quickstart uses ``digits_cluttered``).
* ``digits_cluttered``: the harder variant of docs/reproductions.md. The 8x8 digit (values in
  [0, 1]) is placed at a random offset of a 16x16 canvas, combined by ``max``
  with a distractor digit of the same split at 0.5 contrast at another random
  offset, plus N(0, 0.05) noise, clipped to [0, 1.5] and stored as
  ``round(v * 255 / 1.5)``. Canvases are rendered once, with fixed seeds
  (train 0, test 1). (The pipeline sees ``v / 1.5``, so the ``digits``
  preset's noise of 0.1 is 0.15 in canvas units.)

Metadata (float32 [N, 2]) describes the labelled digit of the 8x8 original:
``ink``, the mean intensity in [0, 1], and ``slant``, the shear
``mu11 / mu02`` of its second image moments (positive when the top leans
right), the quantity classic deskewing removes.
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from contrastive_jax.data.base import Split

DIGITS_SIZE = 16
METADATA_NAMES = ("ink", "slant")
_SPLIT_SEEDS = {"train": 0, "test": 1}


def digit_metadata(digits: np.ndarray) -> np.ndarray:
    """Ink and slant of 8x8 digits.

    Args:
      digits: float [N, 8, 8] with values in [0, 1].

    Returns:
      float32 [N, 2]: mean intensity, and shear ``mu11 / mu02`` where the
      moments use rows counted upwards (so a right-leaning top is positive).
    """
    n, h, w = digits.shape
    rows = (h - 1 - np.arange(h, dtype=np.float64))[None, :, None]  # upwards
    cols = np.arange(w, dtype=np.float64)[None, None, :]
    mass = digits.sum((1, 2)) + 1e-12
    cy = (digits * rows).sum((1, 2)) / mass
    cx = (digits * cols).sum((1, 2)) / mass
    dy = rows - cy[:, None, None]
    dx = cols - cx[:, None, None]
    mu11 = (digits * dx * dy).sum((1, 2)) / mass
    mu02 = (digits * dy * dy).sum((1, 2)) / mass + 1e-12
    ink = digits.mean((1, 2))
    return np.stack([ink, mu11 / mu02], axis=1).astype(np.float32)


def _to_rgb(canvas: np.ndarray) -> np.ndarray:
    return np.repeat(canvas[..., None], 3, axis=-1)


def _clutter(digits: np.ndarray, seed: int) -> np.ndarray:
    """16x16 cluttered canvases (float [N, 16, 16] in [0, 1.5]) from 8x8 digits in [0, 1]."""
    rng = np.random.default_rng(seed)
    n = len(digits)
    offsets = rng.integers(0, DIGITS_SIZE - 8 + 1, size=(n, 2, 2))  # (digit, distractor) x (y, x)
    partner = (np.arange(n) + rng.integers(1, n, size=n)) % n  # any other digit of the split
    noise = rng.normal(0.0, 0.05, size=(n, DIGITS_SIZE, DIGITS_SIZE))
    canvas = np.zeros((n, DIGITS_SIZE, DIGITS_SIZE))
    distractor = np.zeros_like(canvas)
    for i in range(n):
        (y, x), (dy, dx) = offsets[i]
        canvas[i, y : y + 8, x : x + 8] = digits[i]
        distractor[i, dy : dy + 8, dx : dx + 8] = 0.5 * digits[partner[i]]
    return np.clip(np.maximum(canvas, distractor) + noise, 0.0, 1.5)


def digits_splits(*, cluttered: bool = False) -> dict[str, Split]:
    """The digits train/test splits (see module docstring).

    Returns:
      ``{"train": Split, "test": Split}`` with images uint8 [N, 16, 16, 3],
      labels [N] in 0..9 and metadata float32 [N, 2] (ink, slant).
    """
    data = load_digits()
    raw = data.images / 16.0  # [1797, 8, 8] in [0, 1]
    labels = data.target
    train_rows, test_rows = train_test_split(
        np.arange(len(labels)), test_size=0.2, stratify=labels, random_state=0
    )
    splits = {}
    for name, rows in (("train", np.sort(train_rows)), ("test", np.sort(test_rows))):
        digits = raw[rows]
        if cluttered:
            images = np.round(_clutter(digits, _SPLIT_SEEDS[name]) * 255 / 1.5)
        else:
            images = np.round(digits * 255).repeat(2, axis=1).repeat(2, axis=2)
        splits[name] = Split(
            labels=labels[rows],
            images=_to_rgb(images.astype(np.uint8)),
            metadata=digit_metadata(digits),
        )
    return splits
