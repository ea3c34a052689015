"""Synthetic "brain phantoms" with continuous metadata (docs/reproductions.md).

A procedural 32x32 axial-slice generator, pure NumPy and deterministic given a
seed: the CPU analogue of BHB-10K -> BIOBD for y-Aware experiments, where
metadata (age, sex) is continuous and the downstream label (diagnosis) acts
like accelerated ageing.

Per subject: age ``a ~ U(20, 80)``, sex ``s ~ Bernoulli(0.5)``, site
``k ~ U{0..7}``, diagnosis ``d``.

* brain: ellipse with semi-axes ``(12 + 0.8 s, 14 + 0.8 s) + N(0, 0.5)``
  (x, y), tissue intensity 0.8;
* cortical ring of thickness ``3.0 - 0.02 (a - 20) - 0.3 d + N(0, 0.2)``
  (at least 0.5), intensity 0.6;
* two ventricles, ellipses of half-height
  ``v = 2 + 0.06 (a - 20) + delta_d d + N(0, 0.4)`` (at least 0.5) and
  half-width ``v / 2``, centred ``v / 2 + 1`` pixels left and right of the
  centre, intensity 0.2;
* site effects: gain ``g_k ~ U(0.8, 1.2)``, a linear bias field of amplitude
  0.1 in a random direction, noise with std ``~ U(0.02, 0.08)`` per site;
* finally a Gaussian blur (sigma 0.7 px); stored as uint8 ``round(255 clip(x, 0, 1))``.

Splits: ``train`` is the pretraining set of healthy subjects (d = 0, label 0);
``test`` is the downstream set of 356 controls and 306 patients (label = d)
with matched age distributions, for cross-validated probes. Metadata is
float32 [N, 2]: (age in years, sex in {0, 1}).

The generator is a design that has not been calibrated here: ``delta_d`` (default 0.6 px) is
meant to be calibrated so that age and sex alone give AUC ~ 0.5 and a
supervised CNN ~ 0.85.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import gaussian_filter

from contrastive_jax.data.base import Split

PHANTOM_SIZE = 32
NUM_SITES = 8
METADATA_NAMES = ("age", "sex")


def render_phantoms(
    age: np.ndarray,
    sex: np.ndarray,
    site: np.ndarray,
    diagnosis: np.ndarray,
    *,
    site_gain: np.ndarray,
    site_bias_angle: np.ndarray,
    site_noise: np.ndarray,
    delta_d: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Renders phantoms for N subjects.

    Args:
      age, sex, site, diagnosis: [N] subject variables (site in 0..7).
      site_gain, site_bias_angle, site_noise: [8] per-site effects.
      delta_d: extra ventricle half-size of patients, in pixels.
      rng: source of the subject-level noise.

    Returns:
      float32 [N, 32, 32] intensities in [0, 1].
    """
    n = len(age)
    size = PHANTOM_SIZE
    centre = (size - 1) / 2
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    yy = (yy - centre)[None]
    xx = (xx - centre)[None]

    def col(v: np.ndarray) -> np.ndarray:
        return v[:, None, None]

    semi_x = 12 + 0.8 * sex + rng.normal(0, 0.5, n)
    semi_y = 14 + 0.8 * sex + rng.normal(0, 0.5, n)
    thickness = np.maximum(3.0 - 0.02 * (age - 20) - 0.3 * diagnosis + rng.normal(0, 0.2, n), 0.5)
    half = np.maximum(2 + 0.06 * (age - 20) + delta_d * diagnosis + rng.normal(0, 0.4, n), 0.5)

    brain = (yy / col(semi_y)) ** 2 + (xx / col(semi_x)) ** 2 <= 1
    inner = (yy / col(semi_y - thickness)) ** 2 + (xx / col(semi_x - thickness)) ** 2 <= 1
    image = np.where(brain, 0.6, 0.0)
    image = np.where(inner, 0.8, image)
    for side in (-1.0, 1.0):
        cx = side * (half / 2 + 1)
        ventricle = (yy / col(half)) ** 2 + ((xx - col(cx)) / col(half / 2)) ** 2 <= 1
        image = np.where(ventricle & inner, 0.2, image)

    angle = site_bias_angle[site]
    bias = 1 + 0.1 * (xx * col(np.cos(angle)) + yy * col(np.sin(angle))) / centre
    image = image * col(site_gain[site]) * bias
    image = image + col(site_noise[site]) * rng.normal(0, 1, image.shape)
    image = gaussian_filter(image, sigma=(0, 0.7, 0.7))
    return np.clip(image, 0.0, 1.0).astype(np.float32)


def phantom_splits(
    *,
    num_train: int = 5000,
    num_test_controls: int = 356,
    num_test_patients: int = 306,
    delta_d: float = 0.6,
    seed: int = 0,
) -> dict[str, Split]:
    """The phantom pretraining (``train``) and downstream (``test``) splits.

    Returns:
      ``{"train": Split, "test": Split}`` with images uint8 [N, 32, 32, 3]
      (grey on three channels), labels = diagnosis [N] and metadata float32
      [N, 2] = (age, sex).
    """
    site_rng = np.random.default_rng([seed, 0])
    sites = {
        "site_gain": site_rng.uniform(0.8, 1.2, NUM_SITES),
        "site_bias_angle": site_rng.uniform(0, 2 * np.pi, NUM_SITES),
        "site_noise": site_rng.uniform(0.02, 0.08, NUM_SITES),
    }
    splits = {}
    counts = {"train": (num_train, 0), "test": (num_test_controls, num_test_patients)}
    for i, (name, (controls, patients)) in enumerate(counts.items()):
        rng = np.random.default_rng([seed, i + 1])
        n = controls + patients
        diagnosis = rng.permutation(np.repeat([0, 1], [controls, patients]))
        age = rng.uniform(20, 80, n)
        sex = rng.integers(0, 2, n).astype(np.float64)
        site = rng.integers(0, NUM_SITES, n)
        image = render_phantoms(age, sex, site, diagnosis, delta_d=delta_d, rng=rng, **sites)
        pixels = np.round(image * 255).astype(np.uint8)
        splits[name] = Split(
            labels=diagnosis,
            images=np.repeat(pixels[..., None], 3, axis=-1),
            metadata=np.stack([age, sex], axis=1),
        )
    return splits
