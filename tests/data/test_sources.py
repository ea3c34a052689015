"""Sources: image folders (synthetic and real CIFAR-10), TFDS, subsets, label noise, Split."""

from __future__ import annotations

import importlib.resources
import os
import sys

import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.data import sources
from tests.data.helpers import SHARED_CIFAR10, digits_config


def test_class_balanced_subset_and_label_noise():
    labels = np.repeat(np.arange(4), 25)
    rows = data.class_balanced_subset(labels, 42, seed=0)
    assert len(rows) == 42 and len(np.unique(rows)) == 42 and (np.diff(rows) > 0).all()
    assert sorted(np.bincount(labels[rows]).tolist()) == [10, 10, 11, 11]
    np.testing.assert_array_equal(rows, data.class_balanced_subset(labels, 42, seed=0))
    assert not np.array_equal(rows, data.class_balanced_subset(labels, 42, seed=1))
    with pytest.raises(ValueError, match="train_subset"):
        data.class_balanced_subset(labels, 101, seed=0)

    many = np.arange(20000) % 10
    noisy = data.symmetric_label_noise(many, 10, 0.3, seed=0)
    assert np.mean(noisy != many) == pytest.approx(0.3 * 9 / 10, abs=0.015)
    assert np.bincount(noisy, minlength=10).min() > 1800
    np.testing.assert_array_equal(noisy, data.symmetric_label_noise(many, 10, 0.3, seed=0))
    np.testing.assert_array_equal(data.symmetric_label_noise(many, 10, 0.0, seed=0), many)


def test_train_subset_in_source():
    source = data.load_source(digits_config(train_subset=100))
    train = source.split("train")
    assert train.num_examples == 100 and np.bincount(train.labels).tolist() == [10] * 10
    assert len(np.unique(train.ids)) == 100 and train.ids.max() < 1437
    assert source.split("test").num_examples == 360


def test_image_folder_source(image_folder):
    source = data.load_source(digits_config(dataset="image_folder", data_dir=image_folder))
    assert source.class_names == ("cat", "dog") and source.num_classes == 2
    assert source.image_shape == (12, 10, 3)
    train = source.split("train")
    assert train.num_examples == 12 and train.images is None
    assert np.bincount(train.labels).tolist() == [6, 6]
    assert all(
        os.path.basename(os.path.dirname(p)) == source.class_names[k]
        for p, k in zip(train.paths, train.labels, strict=True)
    )
    # Fewer than STATS_SAMPLE images: the statistics are exact.
    decoded = np.stack([sources.decode_image_file(p) for p in train.paths])
    mean, std = data.base.channel_stats(decoded)
    np.testing.assert_allclose(source.mean, mean, rtol=1e-6)
    np.testing.assert_allclose(source.std, std, rtol=1e-6)
    assert source.split("test").num_examples == 4


def test_folder_prefix_reads_the_same_image_folder(image_folder):
    plain = data.load_source(digits_config(dataset="image_folder", data_dir=image_folder))
    prefixed = data.load_source(digits_config(dataset=f"folder:{image_folder}"))
    for split in ("train", "test"):
        np.testing.assert_array_equal(prefixed.split(split).paths, plain.split(split).paths)
        np.testing.assert_array_equal(prefixed.split(split).labels, plain.split(split).labels)
    with pytest.raises(ValueError, match="names no folder"):
        data.load_source(digits_config(dataset="folder:"))


def test_mean_std_override(image_folder):
    config = digits_config(dataset="image_folder", data_dir=image_folder)
    config.mean, config.std = (0.1, 0.2, 0.3), (0.5, 0.5, 0.5)
    assert data.load_source(config).mean == (0.1, 0.2, 0.3)
    config.std = None
    with pytest.raises(ValueError, match="both"):
        data.load_source(config)


def test_real_cifar10_images(tmp_path):
    """A few real CIFAR-10 JPEGs (linked into a small folder) read as dataset 'cifar10'."""
    root = SHARED_CIFAR10
    if not os.path.isdir(root):
        pytest.skip(f"{root} not present")
    for split in ("train", "test"):
        for name in ("airplane", "cat"):
            os.makedirs(tmp_path / split / name)
            files = sorted(os.listdir(os.path.join(root, split, name)))[:3]
            for f in files:
                os.symlink(os.path.join(root, split, name, f), tmp_path / split / name / f)
    source = data.load_source(digits_config(dataset="cifar10", data_dir=str(tmp_path)))
    assert source.image_shape == (32, 32, 3) and source.class_names == ("airplane", "cat")
    assert source.mean == sources.KNOWN_STATS["cifar10"][0]
    image = sources.decode_image_file(source.split("train").paths[0])
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8 and image.std() > 10


def test_no_default_points_outside_the_package():
    """No dataset falls back to a folder outside the installed package (TFDS's default instead)."""
    assert not hasattr(data, "DEFAULT_CIFAR10_DIR")
    assert data.default_data_config().data_dir is None


def test_full_cifar10_source():
    if not os.path.isdir(SHARED_CIFAR10):
        pytest.skip("shared CIFAR-10 folder not present")
    source = data.load_source(digits_config(dataset="cifar10", data_dir=SHARED_CIFAR10))
    assert source.split("train").num_examples == 50_000
    assert source.split("test").num_examples == 10_000
    assert source.num_classes == 10 and source.image_shape == (32, 32, 3)


def test_unprepared_tfds_dataset_error(tmp_path):
    config = digits_config(dataset="cifar100", data_dir=str(tmp_path))
    with pytest.raises(data.DatasetNotPreparedError) as info:
        data.load_source(config)
    message = str(info.value)
    assert "'cifar100'" in message and "image" in message and "data_dir" in message


def test_unknown_dataset_name():
    with pytest.raises(ValueError, match="unknown dataset 'no_such_dataset_xyz'"):
        data.load_source(digits_config(dataset="no_such_dataset_xyz"))


def test_image_folder_needs_data_dir():
    with pytest.raises(ValueError, match="data_dir"):
        data.load_source(digits_config(dataset="image_folder"))


def test_prepared_tfds_dataset(tmp_path, monkeypatch):
    """A locally prepared TFDS dataset is loaded by name, into memory (grey images -> 3
    channels)."""
    import tensorflow_datasets as tfds

    # tfds' writer needs `importlib_resources`, absent from some environments;
    # the standard library's module provides what it uses.
    monkeypatch.setitem(sys.modules, "importlib_resources", importlib.resources)
    images = np.random.default_rng(0).integers(0, 256, (10, 6, 6, 1), dtype=np.uint8)
    examples = [(i, {"image": images[i], "label": i % 3}) for i in range(10)]
    features = tfds.features.FeaturesDict(
        {
            "image": tfds.features.Image(shape=(6, 6, 1)),
            "label": tfds.features.ClassLabel(num_classes=3),
        }
    )
    tfds.dataset_builders.store_as_tfds_dataset(
        name="tiny_grey",
        version="1.0.0",
        features=features,
        split_datasets={"train": examples, "test": examples[:4]},
        data_dir=str(tmp_path),
        file_format="array_record",
        disable_shuffling=True,
    )
    source = data.load_source(digits_config(dataset="tiny_grey", data_dir=str(tmp_path)))
    train = source.split("train")
    assert source.num_classes == 3 and source.image_shape == (6, 6, 3)
    np.testing.assert_array_equal(train.images, np.repeat(images, 3, axis=-1))
    np.testing.assert_array_equal(train.labels, np.arange(10) % 3)
    assert source.split("test").num_examples == 4


def test_split_validation():
    with pytest.raises(ValueError, match="exactly one"):
        data.Split(labels=np.zeros(2))
    with pytest.raises(ValueError, match="uint8"):
        data.Split(labels=np.zeros(2), images=np.zeros((2, 4, 4, 3)))
    split = data.Split(labels=np.arange(3), paths=np.array(["a", "b", "c"]))
    part = split.take(np.array([2, 0]))
    assert part.paths.tolist() == ["c", "a"] and part.ids.tolist() == [2, 0]
    with pytest.raises(ValueError, match="no split 'val'"):
        data.load_source(digits_config()).split("val")
