"""In-memory array sources: conversion, registration, the same pipeline, metadata options."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.data import arrays
from contrastive_jax.errors import ConfigError
from tests.data.helpers import digits_config


def _blobs(n=40, size=8, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 4
    images = rng.random((n, size, size, 1)) * 0.5 + labels[:, None, None, None] / 8
    return images, labels, rng.normal(size=(n, 2)).astype(np.float32)


def test_as_images_converts_grey_and_float():
    grey = np.array([[[0.0, 1.0], [0.5, 0.25]]])
    out = arrays.as_images(grey)
    assert out.dtype == np.uint8 and out.shape == (1, 2, 2, 3)
    np.testing.assert_array_equal(out[0, :, :, 0], [[0, 255], [128, 64]])
    np.testing.assert_array_equal(out[..., 0], out[..., 2])
    rgb = np.arange(12, dtype=np.uint8).reshape(1, 2, 2, 3)
    np.testing.assert_array_equal(arrays.as_images(rgb), rgb)
    with pytest.raises(ValueError, match=r"values in \[0, 1\]"):
        arrays.as_images(grey * 2)
    with pytest.raises(ValueError, match="shape"):
        arrays.as_images(np.zeros((1, 2, 2, 2)))
    with pytest.raises(ValueError, match="dtype"):
        arrays.as_images(np.zeros((1, 2, 2, 3), np.int32))


def test_array_source_checks_and_statistics():
    images, labels, meta = _blobs()
    source = data.array_source(
        "blobs", {"train": (images, labels, meta), "test": (images[:8], labels[:8], meta[:8])},
        metadata_names=("a", "b"),
    )
    assert source.num_classes == 4 and source.class_names == ("0", "1", "2", "3")
    assert source.image_shape == (8, 8, 3) and source.metadata_names == ("a", "b")
    stored = arrays.as_images(images).astype(np.float64) / 255
    np.testing.assert_allclose(source.mean, [stored.mean()] * 3, rtol=1e-6)
    with pytest.raises(ValueError, match="'train' split"):
        data.array_source("blobs", {"test": (images, labels)})
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        data.array_source("blobs", {"train": (images, labels)}, num_classes=3)
    with pytest.raises(ValueError, match="different image shapes"):
        data.array_source("blobs", {"train": (images, labels), "test": (images[:, :4], labels)})


def test_registered_arrays_feed_the_pretraining_and_eval_pipelines():
    images, labels, meta = _blobs()
    calls = []

    def factory(config):
        calls.append(config.dataset)
        return data.array_source(
            "blobs", {"train": (images, labels, meta), "test": (images, labels, meta)},
            metadata_names=("a", "b"),
        )

    data.register_source("blobs", factory)
    try:
        config = digits_config(dataset="blobs", augmentation="none", global_batch_size=8)
        iterator = data.make_pretrain_iterator(config, seed=0)
        batch = next(iterator)
        assert batch["views"].shape == (8, 2, 8, 8, 3) and batch["metadata"].shape == (8, 2)
        source = data.load_source(config)
        # No augmentation: each view is the stored image of its example, normalised on the
        # device.
        stored = source.split("train").images[batch["index"]]
        np.testing.assert_array_equal(batch["views"][:, 0], stored)
        finished = iterator.on_device({k: batch[k] for k in ("views", "index", "step")})
        expected = (stored / np.float32(255) - np.array(source.mean)) / np.array(source.std)
        np.testing.assert_allclose(np.asarray(finished["views"])[:, 0], expected, atol=1e-5)
        np.testing.assert_array_equal(batch["label"], labels[batch["index"]])
        evaluated = list(data.make_eval_iterator(config, "test", 16))
        assert sum(int(b["valid"].sum()) for b in evaluated) == 40
        assert calls and set(calls) == {"blobs"}
    finally:
        data.unregister_source("blobs")
    assert data.registered_source("blobs") is None
    with pytest.raises(ValueError, match="built-in"):
        data.register_source("digits", factory)


def test_label_onehot_metadata_and_scale():
    source = data.load_source(digits_config(metadata="label_onehot"))
    train = source.split("train")
    np.testing.assert_array_equal(train.metadata, np.eye(10, dtype=np.float32)[train.labels])
    assert len(source.metadata_names) == 10
    plain = data.load_source(digits_config()).split("test")
    scaled = data.load_source(digits_config(metadata_scale=(2.0, -1.0))).split("test")
    np.testing.assert_allclose(scaled.metadata, plain.metadata * np.array([2.0, -1.0]), rtol=1e-6)
    with pytest.raises(ConfigError, match="metadata_scale has 3 factors"):
        data.load_source(digits_config(metadata_scale=(1.0, 1.0, 1.0)))
    with pytest.raises(ConfigError, match="config.data.metadata must be one of"):
        data.load_source(digits_config(metadata="labels"))


def test_phantom_source_kwargs():
    config = digits_config(dataset="phantoms")
    config.source_kwargs.num_train = 30
    source = data.load_source(config)
    assert source.split("train").num_examples == 30
    assert source.split("test").num_examples == 662
    config.source_kwargs.size = 4
    with pytest.raises(ConfigError, match=r"\['size'\]: the phantoms source takes"):
        data.load_source(config)
    digits = digits_config()
    digits.source_kwargs.num_train = 30
    with pytest.raises(ConfigError, match="dataset 'digits' takes none"):
        data.load_source(digits)
