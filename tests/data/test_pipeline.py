"""Pretraining and evaluation iterators: format, determinism, resume, process sharding, errors."""

from __future__ import annotations

import itertools
import os

import jax
import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.data._resolve import resolve_augmentation
from contrastive_jax.data.host_pipeline import epoch_order
from tests.data.helpers import SHARED_CIFAR10, digits_config, write_image_folder


def _take(iterator, n: int) -> list[dict[str, np.ndarray]]:
    return list(itertools.islice(iterator, n))


def _assert_batches_equal(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


@pytest.fixture(scope="module")
def first_batches(digits_source):
    """Steps 0..4 of an uninterrupted digits run (seed 0, global batch 16)."""
    iterator = data.make_pretrain_iterator(digits_config(), seed=0, source=digits_source)
    return _take(iterator, 5)


@pytest.mark.slow
def test_pretrain_batch_format(first_batches, digits_source):
    batch = first_batches[0]
    assert set(batch) == {"views", "label", "index", "metadata", "step"}
    assert batch["views"].shape == (16, 2, 16, 16, 3) and batch["views"].dtype == np.uint8
    assert batch["label"].shape == (16,) and batch["label"].dtype == np.int32
    assert batch["index"].shape == (16,) and batch["index"].dtype == np.int64
    assert batch["metadata"].shape == (16, 2) and batch["metadata"].dtype == np.float32
    assert (batch["step"] == 0).all()
    train = digits_source.split("train")
    np.testing.assert_array_equal(batch["label"], train.labels[batch["index"]])
    np.testing.assert_array_equal(batch["metadata"], train.metadata[batch["index"]])
    # Finished on the device: normalised with the dataset statistics, roughly zero mean and
    # unit scale.
    iterator = data.make_pretrain_iterator(digits_config(), seed=0, source=digits_source)
    views = np.concatenate([
        np.asarray(iterator.on_device({k: b[k] for k in ("views", "index", "step")})["views"])
        for b in first_batches])
    assert views.dtype == np.float32 and np.isfinite(views).all()
    assert abs(views.mean()) < 0.3 and 0.6 < views.std() < 1.6


def test_views_differ(first_batches):
    views = first_batches[0]["views"].astype(np.float32) / 255
    diff = np.abs(views[:, 0] - views[:, 1]).mean(axis=(1, 2, 3))
    assert (diff > 0.02).all()


def test_indices_cover_an_epoch_without_repeats(digits_source):
    config = digits_config(global_batch_size=128)
    iterator = data.make_pretrain_iterator(config, seed=1, source=digits_source)
    assert iterator.steps_per_epoch == 1437 // 128
    epoch = _take(iterator, iterator.steps_per_epoch)
    index = np.concatenate([b["index"] for b in epoch])
    assert len(np.unique(index)) == len(index) == 128 * 11
    assert iterator.step == 11
    np.testing.assert_array_equal(iterator.rows(3), epoch[3]["index"])  # ids == rows for digits
    order = epoch_order(1437, 1, 0)
    np.testing.assert_array_equal(np.sort(order), np.arange(1437))
    np.testing.assert_array_equal(order[: 128 * 11], index)


def test_same_seed_same_batches_other_seed_differs(first_batches, digits_source):
    again = _take(data.make_pretrain_iterator(digits_config(), seed=0, source=digits_source), 2)
    _assert_batches_equal(first_batches[:2], again)
    other = next(data.make_pretrain_iterator(digits_config(), seed=1, source=digits_source))
    assert not np.array_equal(other["index"], first_batches[0]["index"])


def test_start_at_step_matches_uninterrupted_run(first_batches, digits_source):
    resumed = data.make_pretrain_iterator(
        digits_config(), seed=0, start_step=3, source=digits_source
    )
    assert resumed.step == 3
    _assert_batches_equal(first_batches[3:5], _take(resumed, 2))


@pytest.mark.slow
def test_resume_across_epoch_boundary(digits_source):
    config = digits_config(global_batch_size=256)  # 5 steps per epoch
    full = _take(data.make_pretrain_iterator(config, seed=2, source=digits_source), 7)
    resumed = _take(
        data.make_pretrain_iterator(config, seed=2, start_step=4, source=digits_source), 3
    )
    _assert_batches_equal(full[4:7], resumed)
    # A new epoch draws a new permutation.
    assert not np.array_equal(full[0]["index"], full[5]["index"])


def test_two_processes_partition_the_global_batch(first_batches, digits_source):
    config = digits_config()
    shards = [
        _take(
            data.make_pretrain_iterator(
                config, seed=0, process_index=p, process_count=2, source=digits_source
            ),
            2,
        )
        for p in range(2)
    ]
    for step in range(2):
        a, b = shards[0][step], shards[1][step]
        assert a["views"].shape[0] == b["views"].shape[0] == 8
        assert not set(a["index"]) & set(b["index"])
        for key in a:
            np.testing.assert_array_equal(
                np.concatenate([a[key], b[key]]), first_batches[step][key], err_msg=key
            )


def test_make_global_batch_on_8_devices(first_batches):
    devices = jax.devices()
    if len(devices) < 8:
        pytest.skip("needs 8 (simulated) devices")
    mesh = jax.sharding.Mesh(np.array(devices[:8]), ("data",))
    batch = first_batches[0]
    arrays = data.make_global_batch(batch, mesh)
    for key, value in batch.items():
        array = arrays[key]
        assert array.shape == value.shape
        assert len(array.sharding.device_set) == 8
        assert array.sharding.spec[0] == "data"
        assert {s.data.shape[0] for s in array.addressable_shards} == {2}
        np.testing.assert_array_equal(np.asarray(array), value)


def test_label_noise_only_in_pretraining(digits_source):
    config = digits_config(label_noise=0.5, global_batch_size=128)
    batch = next(data.make_pretrain_iterator(config, seed=0, source=digits_source))
    clean = digits_source.split("train").labels[batch["index"]]
    assert 0.25 < np.mean(batch["label"] != clean) < 0.65
    evaluation = next(iter(data.make_eval_iterator(config, "train", 64, source=digits_source)))
    np.testing.assert_array_equal(evaluation["label"], digits_source.split("train").labels[:64])


def test_train_subset_pipeline():
    config = digits_config(train_subset=50, global_batch_size=20)
    iterator = data.make_pretrain_iterator(config, seed=0)
    assert iterator.steps_per_epoch == 2
    index = np.concatenate([b["index"] for b in _take(iterator, 2)])
    assert set(index) <= set(iterator.source.split("train").ids)


def test_eval_iterator_covers_split_once(digits_source):
    evaluation = data.make_eval_iterator(digits_config(), "test", 128, source=digits_source)
    batches = list(evaluation)
    assert len(batches) == len(evaluation) == 3
    valid = np.concatenate([b["valid"] for b in batches])
    index = np.concatenate([b["index"] for b in batches])
    assert valid.sum() == 360 and not valid[360:].any()
    np.testing.assert_array_equal(index[valid], np.arange(360))
    assert (index[~valid] == -1).all()
    last = batches[-1]
    assert last["image"].shape == (128, 16, 16, 3) and last["image"].dtype == np.float32
    assert (last["image"][~last["valid"]] == 0).all()
    test = digits_source.split("test")
    expected = (test.images[:128] / 255.0 - np.array(digits_source.mean)) / np.array(
        digits_source.std
    )
    np.testing.assert_allclose(batches[0]["image"], expected, atol=1e-5)
    np.testing.assert_array_equal(batches[0]["label"], test.labels[:128])
    assert "metadata" in batches[0]
    _assert_batches_equal(batches, list(evaluation))  # re-iterable, identical


def test_eval_iterator_process_shards(digits_source):
    whole = list(data.make_eval_iterator(digits_config(), "test", 128, source=digits_source))
    parts = [
        list(
            data.make_eval_iterator(
                digits_config(), "test", 128, process_index=p, process_count=2, source=digits_source
            )
        )
        for p in range(2)
    ]
    for b, batch in enumerate(whole):
        for key in batch:
            np.testing.assert_array_equal(
                np.concatenate([parts[0][b][key], parts[1][b][key]]), batch[key], err_msg=key
            )


def test_auto_augmentation(digits_source, image_folder):
    auto = resolve_augmentation
    assert auto(digits_config(), digits_source, 16) == data.augmentation_preset("digits", 16)
    cluttered = data.load_source(digits_config(dataset="digits_cluttered"))
    assert auto(digits_config(), cluttered, 16) == data.augmentation_preset("digits_cluttered", 16)
    folder = data.load_source(digits_config(dataset="image_folder", data_dir=image_folder))
    assert auto(digits_config(), folder, 32) == data.augmentation_preset("simclr_cifar", 32)
    assert auto(digits_config(), folder, 96) == data.augmentation_preset("simclr_imagenet", 96)
    assert auto(digits_config(augmentation="mio"), folder, 96) == data.augmentation_preset(
        "mio", 96
    )


def test_batch_size_errors(digits_source):
    with pytest.raises(ValueError, match="exceeds"):
        data.make_pretrain_iterator(
            digits_config(global_batch_size=2048), seed=0, source=digits_source
        )
    with pytest.raises(ValueError, match="divisible by the 2 processes"):
        data.make_pretrain_iterator(
            digits_config(global_batch_size=15),
            seed=0,
            process_count=2,
            process_index=0,
            source=digits_source,
        )


def test_image_folder_pipeline(image_folder):
    config = digits_config(
        dataset="image_folder",
        data_dir=image_folder,
        global_batch_size=4,
        image_size=8,
        num_views=3,
    )
    source = data.load_source(config)
    iterator = data.make_pretrain_iterator(config, seed=0, source=source)
    assert iterator.augmentation == data.augmentation_preset("simclr_cifar", 8)
    batch = next(iterator)
    assert batch["views"].shape == (4, 3, 8, 8, 3) and "metadata" not in batch
    evaluation = list(data.make_eval_iterator(config, "test", 3, source=source))
    assert [b["valid"].sum() for b in evaluation] == [3, 1]
    assert evaluation[0]["image"].shape == (3, 8, 8, 3)


@pytest.mark.slow
def test_phantoms_pipeline_carries_metadata():
    config = digits_config(dataset="phantoms", global_batch_size=8)
    iterator = data.make_pretrain_iterator(config, seed=0)
    assert iterator.augmentation == data.augmentation_preset("phantoms", 32)
    batch = next(iterator)
    assert batch["views"].shape == (8, 2, 32, 32, 3) and batch["metadata"].shape == (8, 2)
    train = iterator.source.split("train")
    np.testing.assert_array_equal(batch["metadata"], train.metadata[batch["index"]])
    assert iterator.source.metadata_names == ("age", "sex")


@pytest.mark.slow
def test_real_cifar10_pipeline():
    """Two-view batches from the shared CIFAR-10 folder (reads 8 real images)."""
    if not os.path.isdir(SHARED_CIFAR10):
        pytest.skip("shared CIFAR-10 folder not present")
    config = digits_config(dataset="cifar10", data_dir=SHARED_CIFAR10, global_batch_size=8)
    batch = next(data.make_pretrain_iterator(config, seed=0))
    assert batch["views"].shape == (8, 2, 32, 32, 3)
    assert batch["views"].dtype == np.uint8 and batch["views"].std() > 30


def _truncate(path: str) -> None:
    with open(path, "rb") as f:
        payload = f.read()
    with open(path, "wb") as f:
        f.write(payload[: len(payload) // 2])


def test_corrupt_jpeg_names_the_file(tmp_path):
    """A truncated JPEG fails the batch that holds it, naming the file (never a silent skip)."""
    root = write_image_folder(str(tmp_path / "late"), per_class=(8, 1))
    _truncate(os.path.join(root, "train", "dog", "03.jpg"))  # not among the 8 files probed
    config = digits_config(
        dataset="image_folder", data_dir=root, global_batch_size=16, image_size=8
    )
    config.mean, config.std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)  # no statistics pass
    source = data.load_source(config)
    with pytest.raises(data.CorruptImageError, match=os.path.join("dog", "03.jpg")):
        next(data.make_pretrain_iterator(config, seed=0, source=source))
    evaluation = iter(data.make_eval_iterator(config, "train", 4, source=source))
    assert len(_take(evaluation, 2)) == 2  # cat images only
    with pytest.raises(data.CorruptImageError, match=os.path.join("dog", "03.jpg")):
        _take(evaluation, 2)

    early = write_image_folder(str(tmp_path / "early"), per_class=(2, 1))
    _truncate(os.path.join(early, "train", "cat", "01.jpg"))
    config.data_dir = early
    with pytest.raises(data.CorruptImageError, match=os.path.join("cat", "01.jpg")):
        data.load_source(config)
