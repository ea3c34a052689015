"""The input path: batches a pure function of (seed, step) and the host's crop distribution
against torchvision's."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from contrastive_jax import data
from contrastive_jax.data import host_views
from contrastive_jax.data.augment_config import AugmentConfig
from contrastive_jax.data.host_pipeline import HostPretrainIterator, epoch_order
from tests.data.helpers import digits_config, write_tfds_dataset


@pytest.fixture(scope="module")
def array_record_dir(tmp_path_factory) -> str:
    return write_tfds_dataset(str(tmp_path_factory.mktemp("ar")), "varimg", "array_record",
                              train=48, test=8, shards=2)


def _configs(image_folder: str, array_record_dir: str) -> dict[str, object]:
    return {
        "arrays": digits_config(),
        "folder": digits_config(dataset="image_folder", data_dir=image_folder, image_size=8,
                                global_batch_size=4, augmentation="simclr_imagenet"),
        "folder_autoaugment": digits_config(dataset="image_folder", data_dir=image_folder,
                                            image_size=8, global_batch_size=4,
                                            augmentation="supcon_autoaugment"),
        "array_record": digits_config(dataset="varimg", data_dir=array_record_dir,
                                      image_size=16, global_batch_size=8),
    }


def _take(iterator, n: int) -> list[dict[str, np.ndarray]]:
    return [next(iterator) for _ in range(n)]


@pytest.mark.parametrize("kind", ["arrays", "folder", "folder_autoaugment", "array_record"])
@pytest.mark.slow
def test_batches_are_a_pure_function_of_seed_and_step(image_folder, array_record_dir, kind):
    config = _configs(image_folder, array_record_dir)[kind]
    source = data.load_source(config)
    iterator = data.make_pretrain_iterator(config, seed=0, source=source)
    assert isinstance(iterator, HostPretrainIterator)
    steps = 2 * iterator.steps_per_epoch + 1  # crosses two epoch boundaries
    full = _take(iterator, steps)
    first = full[0]
    assert first["views"].dtype == np.uint8
    assert first["views"].shape == (iterator.local_batch_size, 2, iterator.image_size,
                                    iterator.image_size, 3)
    assert list(first["step"]) == [0] * iterator.local_batch_size
    resumed = data.make_pretrain_iterator(config, seed=0, source=source, start_step=steps - 2)
    for a, b in zip(full[-2:], _take(resumed, 2), strict=True):
        assert all(np.array_equal(a[k], b[k]) for k in a)
    # Two processes read the halves of the one-process global batch.
    halves = [next(data.make_pretrain_iterator(config, seed=0, source=source, start_step=steps - 1,
                                         process_index=i, process_count=2)) for i in (0, 1)]
    for k in first:
        np.testing.assert_array_equal(np.concatenate([h[k] for h in halves]), full[-1][k])
    # Each epoch visits distinct examples, and epochs differ in order.
    per_epoch = iterator.steps_per_epoch * iterator.local_batch_size
    seen = np.concatenate([b["index"] for b in full])
    assert len(set(seen[:per_epoch])) == per_epoch
    assert not np.array_equal(seen[:per_epoch], seen[per_epoch : 2 * per_epoch])
    other = next(data.make_pretrain_iterator(config, seed=1, source=source))
    assert not np.array_equal(other["views"], first["views"])


def test_epoch_order_is_a_permutation_per_seed_and_epoch():
    order = epoch_order(100, 3, 0)
    assert sorted(order) == list(range(100))
    assert not np.array_equal(order, epoch_order(100, 3, 1))
    np.testing.assert_array_equal(order, epoch_order(100, 3, 0))


def _torchvision_window(height: int, width: int, rng: random.Random) -> tuple[int, ...]:
    """torchvision's ``RandomResizedCrop.get_params`` (scale (0.08, 1), ratio (3/4, 4/3)),
    written from its definition with Python's generator."""
    log_lo, log_hi = math.log(3 / 4), math.log(4 / 3)
    for _ in range(10):
        area = height * width * rng.uniform(0.08, 1.0)
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return (0, 0, height, width)


def test_host_crop_window_draws_torchvisions_distribution():
    height, width, draws = 350, 400, 2000
    ours = np.array([
        host_views.crop_window(height, width, np.random.default_rng([5, i]),
                               scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
        for i in range(draws)
    ], float)
    rng = random.Random(9)
    theirs = np.array([_torchvision_window(height, width, rng) for _ in range(draws)], float)
    for k in range(4):  # top, left, crop height, crop width
        assert stats.ks_2samp(ours[:, k], theirs[:, k]).pvalue > 1e-3, k
    assert ((ours[:, 0] + ours[:, 2] <= height) & (ours[:, 1] + ours[:, 3] <= width)).all()


def test_shift_and_flip_of_an_array():
    image = np.arange(4 * 4 * 3, dtype=np.uint8).reshape(4, 4, 3)
    cfg = AugmentConfig(crop_scale=None, pad_fraction=0.25, flip_prob=1.0)
    views = host_views.views_of(image, host_views.view_rngs(0, 0, 0, 64), cfg, 4)
    assert views.shape == (64, 4, 4, 3) and views.dtype == np.uint8
    # Every view is the flipped image shifted by at most one pixel, zeros filling in.
    flipped = image[:, ::-1]
    for view in views:
        assert any(
            np.array_equal(view, np.pad(flipped, 1)[1 + dy : 5 + dy, 1 + dx : 5 + dx, 1:4])
            for dy in (-1, 0, 1) for dx in (-1, 0, 1)
        )


@pytest.mark.slow
def test_the_trainer_finishes_the_views_on_the_devices(digits_source):
    from contrastive_jax.parallel import make_mesh
    from contrastive_jax.train.inputs import DevicePrefetch

    config = digits_config()
    iterator = data.make_pretrain_iterator(config, seed=0, source=digits_source)
    host = next(data.make_pretrain_iterator(config, seed=0, source=digits_source))
    queue = DevicePrefetch(iterator, make_mesh(), lambda: False, depth=1, remaining=2)
    queue.fill()
    arrays = queue.take().arrays
    assert sorted(arrays) == ["index", "label", "metadata", "stop", "views"]  # no "step"
    views = np.asarray(arrays["views"])
    assert views.dtype == np.float32 and views.shape == host["views"].shape
    assert len(arrays["views"].sharding.device_set) == 8
    # Normalised views of the host's uint8 views (the digits recipe: gain and noise).
    alone = iterator.on_device({k: host[k] for k in ("views", "index", "step")})["views"]
    np.testing.assert_allclose(views, np.asarray(alone), atol=1e-5)
