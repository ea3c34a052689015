"""The built-in digits source (scikit-learn's bundled digits)."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_jax.data import digits


def test_digits_source(digits_source):
    s = digits_source
    assert s.name == "digits" and s.num_classes == 10 and s.image_shape == (16, 16, 3)
    train, test = s.split("train"), s.split("test")
    assert (train.num_examples, test.num_examples) == (1437, 360)
    for split in (train, test):
        assert split.images.dtype == np.uint8 and split.images.shape[1:] == (16, 16, 3)
        assert split.labels.dtype == np.int64 and set(np.unique(split.labels)) == set(range(10))
        assert (
            split.metadata.shape == (split.num_examples, 2) and split.metadata.dtype == np.float32
        )
        np.testing.assert_array_equal(split.ids, np.arange(split.num_examples))
    # Grey on three channels, 17 grey levels upsampled by pixel repetition.
    assert (train.images[..., 0] == train.images[..., 2]).all()
    assert len(np.unique(train.images)) <= 17
    np.testing.assert_array_equal(train.images[:, ::2, ::2], train.images[:, 1::2, 1::2])
    # Stratified: class frequencies agree between splits within one example.
    counts_train = np.bincount(train.labels) * 0.2 / 0.8
    assert np.abs(counts_train - np.bincount(test.labels)).max() <= 1.0
    assert s.metadata_names == ("ink", "slant")
    ink = train.metadata[:, 0]
    np.testing.assert_allclose(ink, train.images[:, ::2, ::2, 0].mean((1, 2)) / 255, atol=2e-3)
    assert 0 < s.std[0] < 1 and s.mean[0] == pytest.approx(train.images.mean() / 255)


def test_digit_slant_sign():
    """A stroke whose top leans right has positive slant, its mirror negative."""
    stroke = np.zeros((1, 8, 8))
    for r in range(8):
        stroke[0, r, 7 - r] = 1.0  # row 0 (top) at the right
    slant = digits.digit_metadata(stroke)[0, 1]
    assert slant > 0.5
    assert digits.digit_metadata(stroke[:, :, ::-1])[0, 1] == pytest.approx(-slant)


def test_digits_cluttered_is_deterministic():
    a = digits.digits_splits(cluttered=True)
    b = digits.digits_splits(cluttered=True)
    np.testing.assert_array_equal(a["train"].images, b["train"].images)
    plain = digits.digits_splits()
    np.testing.assert_array_equal(a["test"].labels, plain["test"].labels)
    assert a["train"].images.shape == (1437, 16, 16, 3)
    assert not np.array_equal(a["train"].images, plain["train"].images)
