"""Images decode at their real depth: each Pillow mode against its rule computed in NumPy
(:mod:`contrastive_jax.data.image_depth`), through the encoded bytes the pipeline reads."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from contrastive_jax.data import sources
from contrastive_jax.data.host_views import decode
from contrastive_jax.data.image_depth import scale_16bit, to_rgb8
from contrastive_jax.errors import CorruptImageError

RNG = np.random.default_rng(0)
GRAY16 = RNG.integers(0, 65536, (12, 10), dtype=np.uint16)


def _encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def _rgb_of_gray(gray: np.ndarray) -> np.ndarray:
    return np.repeat(gray[..., None], 3, axis=-1)


def test_sixteen_bit_values_map_their_full_range_onto_eight_bits_with_rounding():
    v = np.arange(65536)
    np.testing.assert_array_equal(scale_16bit(v), np.floor(v * 255 / 65535 + 0.5))


@pytest.mark.parametrize(("mode", "fmt"), [("I;16", "PNG"), ("I;16B", "TIFF"),
                                           ("I;16L", "TIFF"), ("I", "TIFF")])
def test_a_16_bit_gray_image_is_scaled_not_clipped(mode, fmt):
    if mode == "I":
        image = Image.fromarray(GRAY16.astype(np.int32))  # mode I
    else:
        order = ">u2" if mode == "I;16B" else "<u2"
        image = Image.frombytes(mode, GRAY16.shape[::-1], GRAY16.astype(order).tobytes())
    data = _encoded(image, fmt)
    assert Image.open(io.BytesIO(data)).mode in (mode, "I;16")  # what the file holds
    decoded = np.asarray(decode(data, "gray16"))
    expected = np.floor(GRAY16.astype(np.float64) * 255 / 65535 + 0.5).astype(np.uint8)
    np.testing.assert_array_equal(decoded, _rgb_of_gray(expected))
    assert (decoded == 255).mean() < 0.01  # convert("RGB") made 99 % of it white


def test_a_float_image_in_0_1_is_scaled_and_others_are_refused_naming_file_and_mode():
    values = RNG.random((6, 5)).astype(np.float32)
    decoded = np.asarray(decode(_encoded(Image.fromarray(values), "TIFF"), "f.tif"))
    np.testing.assert_array_equal(decoded, _rgb_of_gray(np.rint(values.astype(np.float64) * 255)))
    for bad in (values * 4, np.where(values > 0.5, np.nan, values).astype(np.float32)):
        with pytest.raises(CorruptImageError, match=r"f\.tif: mode F"):
            decode(_encoded(Image.fromarray(bad), "TIFF"), "f.tif")


def test_32_bit_integers_outside_the_16_bit_range_are_refused():
    image = Image.fromarray(GRAY16.astype(np.int32) + 70_000)
    with pytest.raises(CorruptImageError, match=r"i32\.tif: mode I .*outside the 16-bit range"):
        decode(_encoded(image, "TIFF"), "i32.tif")


@pytest.mark.parametrize("mode", ["L", "LA", "RGBA", "P", "1", "CMYK"])
def test_an_8_bit_mode_reads_as_pillow_converts_it(mode):
    rgb = RNG.integers(0, 256, (8, 9, 3), dtype=np.uint8)
    image = Image.fromarray(rgb).convert(mode)
    fmt = "TIFF" if mode == "CMYK" else "PNG"
    encoded = Image.open(io.BytesIO(_encoded(image, fmt)))
    decoded = np.asarray(decode(_encoded(image, fmt), "x"))
    expected = {"L": lambda: _rgb_of_gray(np.asarray(image)),
                "LA": lambda: _rgb_of_gray(np.asarray(image)[..., 0]),
                "RGBA": lambda: np.asarray(image)[..., :3]}.get(
        mode, lambda: np.asarray(encoded.convert("RGB")))()
    np.testing.assert_array_equal(decoded, expected)
    assert decoded.dtype == np.uint8 and decoded.shape == (8, 9, 3)


def test_a_mode_without_a_faithful_reading_is_refused_naming_it():
    image = Image.new("HSV", (4, 4))
    with pytest.raises(CorruptImageError, match=r"cannot read image scan\.x: Pillow mode 'HSV'"):
        to_rgb8(image, "scan.x")


def test_a_folder_of_16_bit_pngs_trains_on_its_real_pixels(tmp_path):
    """The source's normalisation statistics are those of the scaled pixels, not of white."""
    for label in ("a", "b"):
        folder = tmp_path / "train" / label
        folder.mkdir(parents=True)
        for i in range(3):
            Image.fromarray(GRAY16 // (i + 1)).save(folder / f"{i}.png")
    source = sources.image_folder_source(str(tmp_path), name="scans")
    pixels = np.stack([scale_16bit(GRAY16 // (i + 1)) for i in range(3)] * 2) / 255.0
    np.testing.assert_allclose(source.mean, [pixels.mean()] * 3, rtol=1e-3)
    assert 0.2 < source.mean[0] < 0.5  # a white image's mean would be 1
