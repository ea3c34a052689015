"""Class-balanced subsets of an image folder's splits, decoded into memory (the CIFAR proxies'
source): ``config.train_subset``, ``config.source_kwargs.test_subset``, ``config.in_memory``."""

from __future__ import annotations

import os

import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.data import sources
from tests.data.helpers import SHARED_CIFAR10, digits_config, write_image_folder


def _folder_config(folder: str, **overrides):
    return digits_config(dataset="image_folder", data_dir=folder, **overrides)


@pytest.fixture(scope="module")
def wide_folder(tmp_path_factory) -> str:
    """Two classes, 6 training and 4 test images each."""
    return write_image_folder(str(tmp_path_factory.mktemp("wide")), per_class=(6, 4))


def test_test_subset_is_class_balanced_deterministic_and_keeps_ids(wide_folder):
    full = data.load_source(_folder_config(wide_folder))
    config = _folder_config(wide_folder, source_kwargs={"test_subset": 4})
    subset = data.load_source(config)
    test = subset.split("test")
    assert test.num_examples == 4 and subset.split("train").num_examples == 12
    np.testing.assert_array_equal(np.bincount(test.labels), [2, 2])
    rows = data.class_balanced_subset(full.split("test").labels, 4, seed=0)
    np.testing.assert_array_equal(test.ids, rows)
    np.testing.assert_array_equal(test.paths, full.split("test").paths[rows])
    np.testing.assert_array_equal(data.load_source(config).split("test").ids, test.ids)
    other = data.load_source(_folder_config(wide_folder, source_kwargs={"test_subset": 4},
                                            data_seed=3))
    assert not np.array_equal(other.split("test").ids, test.ids)  # the data seed picks it


def test_in_memory_decodes_the_subsets_once(wide_folder):
    config = _folder_config(
        wide_folder, train_subset=4, source_kwargs={"test_subset": 2}, in_memory=True
    )
    decoded = data.load_source(config)
    files = data.load_source(_folder_config(wide_folder, train_subset=4,
                                            source_kwargs={"test_subset": 2}))
    for name in ("train", "test"):
        split, listed = decoded.split(name), files.split(name)
        assert split.paths is None and split.images.dtype == np.uint8
        assert split.images.shape == (listed.num_examples, 12, 10, 3)
        np.testing.assert_array_equal(split.ids, listed.ids)
        np.testing.assert_array_equal(split.labels, listed.labels)
        for image, path in zip(split.images, listed.paths, strict=True):
            np.testing.assert_array_equal(image, sources.decode_image_file(path))
    assert decoded.mean == files.mean and decoded.image_shape == files.image_shape


def test_pipeline_reads_decoded_and_file_splits_alike(wide_folder):
    """Evaluation batches of the decoded subset equal those read from the files."""
    base = dict(train_subset=4, source_kwargs={"test_subset": 2}, image_size=10)
    batches = []
    for in_memory in (None, True):
        config = _folder_config(wide_folder, in_memory=in_memory, **base)
        batches.append([b for b in data.make_eval_iterator(config, "test", 2)])
    (files,), (memory,) = batches
    assert set(files) == set(memory)
    for key in files:
        np.testing.assert_array_equal(files[key], memory[key])


def test_folder_kwargs_errors_name_the_option(wide_folder, tmp_path):
    with pytest.raises(ValueError, match=r"\['num_train'\]: an image folder takes test_subset"):
        data.load_source(_folder_config(wide_folder, source_kwargs={"num_train": 3}))
    with pytest.raises(ValueError, match="test_subset must be a positive int"):
        data.load_source(_folder_config(wide_folder, source_kwargs={"test_subset": 0}))
    with pytest.raises(ValueError, match=r"source_kwargs.test_subset must be in \[1, 8\], got 9"):
        data.load_source(_folder_config(wide_folder, source_kwargs={"test_subset": 9}))
    with pytest.raises(ValueError, match="takes none"):
        data.load_source(digits_config(source_kwargs={"test_subset": 2}))
    only_train = tmp_path / "only_train"
    write_image_folder(str(only_train))
    for f in (only_train / "test").rglob("*"):
        if f.is_file():
            f.unlink()
    for d in sorted((only_train / "test").rglob("*"), reverse=True):
        d.rmdir()
    (only_train / "test").rmdir()
    with pytest.raises(ValueError, match="has no 'test' split"):
        data.load_source(_folder_config(str(only_train), source_kwargs={"test_subset": 2}))


def test_in_memory_refuses_images_of_different_sizes(tmp_path):
    folder, other = tmp_path / "folder", tmp_path / "other"
    write_image_folder(str(folder), shape=(12, 10, 3))
    write_image_folder(str(other), shape=(8, 8, 3))
    os.replace(other / "test" / "cat" / "00.png", folder / "test" / "cat" / "00.png")
    config = digits_config(dataset=f"folder:{folder}", in_memory=True)
    with pytest.raises(ValueError, match=r"split 'test' of image folder .* shapes \[\(8, 8, 3\), "):
        data.load_source(config)


def test_shared_cifar10_subsets():
    """The CIFAR proxies' source: 100 / 50 class-balanced real images decoded at 32x32."""
    if not os.path.isdir(SHARED_CIFAR10):
        pytest.skip(f"{SHARED_CIFAR10} not present")
    config = digits_config(dataset="cifar10", data_dir=SHARED_CIFAR10, train_subset=100,
                           source_kwargs={"test_subset": 50}, in_memory=True)
    source = data.load_source(config)
    assert source.class_names[0] == "airplane" and source.num_classes == 10
    assert source.mean == sources.KNOWN_STATS["cifar10"][0]
    train, test = source.split("train"), source.split("test")
    assert train.images.shape == (100, 32, 32, 3) and test.images.shape == (50, 32, 32, 3)
    np.testing.assert_array_equal(np.bincount(train.labels, minlength=10), [10] * 10)
    np.testing.assert_array_equal(np.bincount(test.labels, minlength=10), [5] * 10)
    assert train.images.std() > 25  # real images, not a constant
    assert len(set(train.ids.tolist())) == 100 and train.ids.max() >= 45_000
