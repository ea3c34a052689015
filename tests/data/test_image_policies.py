"""AutoAugment / RandAugment ops against their source's definitions, and the policy tables.

The source: the TensorFlow Model Garden's ``official/vision/image_classification/augment.py``
(lines as in the ``tf-models-official`` 2.4.0 wheel), which SupCon's TF code imports
(``google-research/google-research``, ``supcon/preprocessing.py``: ``augment.AutoAugment()``,
``augment.RandAugment(magnitude=...)``). Ops that the module writes as "Equivalent of PIL X"
are compared with PIL: exactly where the integer arithmetic agrees, within 1 where the module
truncates and PIL rounds.
"""

import numpy as np
import pytest
from PIL import Image, ImageEnhance, ImageOps

from contrastive_jax.data import image_policies as P


@pytest.fixture
def image():
    return np.random.default_rng(0).integers(0, 256, (33, 47, 3), dtype=np.uint8)


def _diff(ours, pil):
    return np.abs(ours.astype(int) - np.asarray(pil).astype(int)).max()


def test_autoaugment_v0_table_is_the_sources():
    # augment.py:847-873 (AutoAugment.policy_v0), copied from the source file.
    source = [
        [("Equalize", 0.8, 1), ("ShearY", 0.8, 4)],
        [("Color", 0.4, 9), ("Equalize", 0.6, 3)],
        [("Color", 0.4, 1), ("Rotate", 0.6, 8)],
        [("Solarize", 0.8, 3), ("Equalize", 0.4, 7)],
        [("Solarize", 0.4, 2), ("Solarize", 0.6, 2)],
        [("Color", 0.2, 0), ("Equalize", 0.8, 8)],
        [("Equalize", 0.4, 8), ("SolarizeAdd", 0.8, 3)],
        [("ShearX", 0.2, 9), ("Rotate", 0.6, 8)],
        [("Color", 0.6, 1), ("Equalize", 1.0, 2)],
        [("Invert", 0.4, 9), ("Rotate", 0.6, 0)],
        [("Equalize", 1.0, 9), ("ShearY", 0.6, 3)],
        [("Color", 0.4, 7), ("Equalize", 0.6, 0)],
        [("Posterize", 0.4, 6), ("AutoContrast", 0.4, 7)],
        [("Solarize", 0.6, 8), ("Color", 0.6, 9)],
        [("Solarize", 0.2, 4), ("Rotate", 0.8, 9)],
        [("Rotate", 1.0, 7), ("TranslateY", 0.8, 9)],
        [("ShearX", 0.0, 0), ("Solarize", 0.8, 4)],
        [("ShearY", 0.8, 0), ("Color", 0.6, 4)],
        [("Color", 1.0, 0), ("Rotate", 0.6, 2)],
        [("Equalize", 0.8, 4), ("Equalize", 0.0, 8)],
        [("Equalize", 1.0, 4), ("AutoContrast", 0.6, 2)],
        [("ShearY", 0.4, 7), ("SolarizeAdd", 0.6, 7)],
        [("Posterize", 0.8, 2), ("Solarize", 0.6, 10)],
        [("Solarize", 0.6, 8), ("Equalize", 0.6, 1)],
        [("Color", 0.8, 6), ("Rotate", 0.4, 5)],
    ]
    assert [list(sub) for sub in P.AUTOAUGMENT_V0] == source
    # AutoAugment.__init__ defaults (augment.py:739-742): v0, cutout 100, translate 250.
    assert (P.AUTOAUGMENT_CUTOUT, P.AUTOAUGMENT_TRANSLATE) == (100.0, 250.0)


def test_randaugment_ops_and_constants_are_the_sources():
    # RandAugment.available_ops (augment.py:935-938) and __init__ defaults (lines 913-916).
    assert P.RANDAUGMENT_OPS == (
        "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color",
        "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY",
        "Cutout", "SolarizeAdd")
    assert (P.RANDAUGMENT_CUTOUT, P.RANDAUGMENT_TRANSLATE) == (40.0, 100.0)
    assert set(P.RANDAUGMENT_OPS) == set(P.OPS)


class _Fixed:
    """A generator whose ``random()`` is fixed: 0.7 keeps a level's sign, 0.2 negates it."""

    def __init__(self, u):
        self.u = u

    def random(self):
        return self.u


@pytest.mark.parametrize("level", [0, 3, 7, 10])
def test_level_to_arg_is_the_sources(level):
    # augment.py:573-700: _rotate/_shear/_translate/_enhance_level_to_arg, _mult_to_arg.
    consts = {"cutout_const": 40.0, "translate_const": 100.0}
    keep, negate = _Fixed(0.7), _Fixed(0.2)

    def arg(name, rng=keep):
        return P.level_to_arg(name, level, rng, **consts)

    assert arg("Rotate") == (level / 10 * 30.0,)
    assert arg("Rotate", negate) == (-(level / 10 * 30.0),)
    assert arg("ShearX") == arg("ShearY") == (level / 10 * 0.3,)
    assert arg("TranslateY", negate) == (-(level / 10 * 100.0),)
    for name in ("Color", "Contrast", "Brightness", "Sharpness"):
        assert arg(name) == (level / 10 * 1.8 + 0.1,)
    assert arg("Posterize") == (int(level / 10 * 4),)
    assert arg("Solarize") == (int(level / 10 * 256),)
    assert arg("SolarizeAdd") == (int(level / 10 * 110),)
    assert arg("Cutout") == (int(level / 10 * 40.0),)
    for name in ("AutoContrast", "Equalize", "Invert"):
        assert arg(name) == ()


def test_exact_pil_ops(image):
    pil = Image.fromarray(image)
    assert _diff(P.equalize(image), ImageOps.equalize(pil)) == 0
    assert _diff(P.invert(image), ImageOps.invert(pil)) == 0
    for bits in (1, 2, 4, 6, 8):
        assert _diff(P.posterize(image, bits), ImageOps.posterize(pil, bits)) == 0
    for threshold in (0, 76, 128, 256):
        assert _diff(P.solarize(image, threshold), ImageOps.solarize(pil, threshold)) == 0
    for factor in (0.1, 0.46, 1.0, 1.9):
        assert _diff(P.brightness(image, factor), ImageEnhance.Brightness(pil).enhance(factor)) == 0


def test_pil_ops_within_rounding(image):
    pil = Image.fromarray(image)
    low = (image // 2 + 60).astype(np.uint8)  # a narrow range for autocontrast to stretch
    assert _diff(P.autocontrast(low), ImageOps.autocontrast(Image.fromarray(low))) <= 1
    for factor in (0.1, 0.46, 1.54, 1.9):
        assert _diff(P.color(image, factor), ImageEnhance.Color(pil).enhance(factor)) <= 1
        assert _diff(P.sharpness(image, factor), ImageEnhance.Sharpness(pil).enhance(factor)) <= 1
    # Nearest rotation: PIL samples at pixel centres, TF at integer coordinates.
    rotated = P.rotate(image, 30.0)
    pil_rotated = np.asarray(pil.rotate(30.0, Image.Resampling.NEAREST, fillcolor=(128,) * 3))
    assert np.mean(np.any(rotated != pil_rotated, axis=-1)) < 0.01


def test_source_only_definitions(image):
    # posterize to 0 bits: TF clamps the shift by 8 to 7 (the top bit stays), PIL gives 0.
    assert np.array_equal(P.posterize(image, 0), image & 0x80)
    # contrast (augment.py:343-357) blends with the grey H W / 256 (the histogram's sum).
    grey = np.full_like(image, int(33 * 47 / 256))
    expected = (grey + np.float32(0.3) * (image.astype(np.float32) - grey)).astype(np.uint8)
    assert np.array_equal(P.contrast(image, 0.3), expected)
    # solarize_add (lines 325-334): + addition, clipped, below 128 only.
    added = P.solarize_add(image, 50)
    low = image < 128
    assert np.array_equal(added[low], np.minimum(image[low].astype(int) + 50, 255))
    assert np.array_equal(added[~low], image[~low])


def test_geometric_ops(image):
    square = image[:33, :33]
    assert np.array_equal(P.rotate(square, 90.0), np.rot90(square))  # counter-clockwise
    assert np.array_equal(P.shear_x(image, 0.0), image)
    shifted = P.translate_x(image, 5.0)  # output x reads input x + 5
    assert np.array_equal(shifted[:, :-5], image[:, 5:])
    assert np.all(shifted[:, -5:] == 128)
    down = P.translate_y(image, -4.0)
    assert np.array_equal(down[4:], image[:-4]) and np.all(down[:4] == 128)
    sheared = P.shear_y(image, 0.1)  # output (x, y) reads (x, y + round(0.1 x))
    assert np.array_equal(sheared[:20, 10], image[1:21, 10])


@pytest.mark.slow  # imports TensorFlow, about 5 s in each worker that runs it
def test_geometric_ops_match_tensorflows_projective_transform(image):
    # The kernel the source's `transform` calls: nearest, constant fill, then the
    # wrap / unwrap grey (augment.py:167-176, 527-570).
    tf = pytest.importorskip("tensorflow")

    def tf_transform(matrix):
        wrapped = np.concatenate([image, np.ones(image.shape[:2] + (1,), np.uint8)], -1)[None]
        out = tf.raw_ops.ImageProjectiveTransformV3(
            images=wrapped, transforms=np.asarray([list(matrix) + [0.0, 0.0]], np.float32),
            output_shape=np.asarray(image.shape[:2], np.int32), fill_value=0.0,
            interpolation="NEAREST", fill_mode="CONSTANT")[0].numpy()
        return np.where(out[..., 3:] == 0, 128, out[..., :3])

    h, w = image.shape[:2]
    for degrees in (30.0, -17.0):
        r = np.float32(np.deg2rad(degrees))
        c, s = np.cos(r), np.sin(r)
        matrix = (c, -s, ((w - 1) - (c * (w - 1) - s * (h - 1))) / 2,
                  s, c, ((h - 1) - (s * (w - 1) + c * (h - 1))) / 2)
        assert np.array_equal(P.rotate(image, degrees), tf_transform(matrix))
    assert np.array_equal(P.shear_x(image, -0.27), tf_transform((1, -0.27, 0, 0, 1, 0)))
    assert np.array_equal(P.shear_y(image, 0.3), tf_transform((1, 0, 0, 0.3, 1, 0)))
    assert np.array_equal(P.translate_x(image, -12.5), tf_transform((1, 0, -12.5, 0, 1, 0)))


def test_cutout_square_is_grey_and_clipped(image):
    out = P.cutout(image, 6, np.random.default_rng(3))
    grey = np.all(out == 128, axis=-1) & np.any(image != 128, axis=-1)
    rows, cols = np.nonzero(grey)
    assert rows.max() - rows.min() + 1 <= 12 and cols.max() - cols.min() + 1 <= 12
    assert np.array_equal(out[~np.all(out == 128, axis=-1)], image[~np.all(out == 128, axis=-1)])


def test_policies_are_pure_functions_of_the_generator(image):
    for fn in (P.autoaugment,
               lambda im, rng: P.randaugment(im, rng, num_layers=2, magnitude=10.0)):
        a = [fn(image, np.random.default_rng([1, 2, k])) for k in range(20)]
        b = [fn(image, np.random.default_rng([1, 2, k])) for k in range(20)]
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        assert sum(not np.array_equal(x, image) for x in a) >= 10  # they do change images


def test_autoaugment_draws_sub_policies_uniformly(image, monkeypatch):
    drawn = []
    for name in list(P.OPS):
        monkeypatch.setitem(P.OPS, name, lambda im, *args, _n=name: (drawn.append(_n), im)[1])
    counts = {}
    for k in range(2500):
        rng = np.random.default_rng([7, k])
        index = int(np.random.default_rng([7, k]).integers(len(P.AUTOAUGMENT_V0)))
        counts[index] = counts.get(index, 0) + 1
        P.autoaugment(image, rng)
    assert len(counts) == 25 and min(counts.values()) > 60  # 100 expected each
    # Equalize is applied with the v0 probabilities: sum over sub-policies / 25.
    p_equalize = sum(p for sub in P.AUTOAUGMENT_V0 for n, p, _ in sub if n == "Equalize") / 25
    assert abs(drawn.count("Equalize") / 2500 - p_equalize) < 0.03


def test_randaugment_picks_an_op_or_none_uniformly(image, monkeypatch):
    drawn = []
    for name in P.RANDAUGMENT_OPS:
        monkeypatch.setitem(P.OPS, name, lambda im, *args, _n=name: (drawn.append(_n), im)[1])
    n = 3400
    for k in range(n):
        P.randaugment(image, np.random.default_rng([8, k]), num_layers=1, magnitude=5.0)
    # 16 ops and the identity, 1/17 each: 200 expected per op.
    counts = [drawn.count(name) for name in P.RANDAUGMENT_OPS]
    assert min(counts) > 150 and max(counts) < 250
    assert 150 < n - len(drawn) < 250
