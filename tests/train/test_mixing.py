"""Label smoothing, MixUp and CutMix in batch mode (docs/reproductions.md, soft-target InfoNCE)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from contrastive_jax.train import mixing

K = 5


def _batch(b=8, h=12, w=10, seed=0):
    rng = np.random.default_rng(seed)
    images = jnp.asarray(rng.random((b, h, w, 3)), jnp.float32)
    labels = jnp.asarray(rng.permutation(b) % K, jnp.int32)
    return images, labels


def test_smooth_labels_closed_form():
    t = mixing.smooth_labels(jnp.array([0, 3]), K, 0.1)
    np.testing.assert_allclose(t[0], [1 - 0.1 * (K - 1) / K] + [0.1 / K] * (K - 1), rtol=1e-6)
    np.testing.assert_allclose(t.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(
        mixing.smooth_labels(jnp.array([2]), K, 0.0), jax.nn.one_hot([2], K)
    )
    np.testing.assert_allclose(mixing.smooth_labels(jnp.array([2]), K, 1.0), 1 / K, rtol=1e-6)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.slow
def test_targets_rows_sum_to_one_and_mirror(seed):
    images, labels = _batch()
    key = jax.random.key(seed)
    sample = mixing.sample_mix(key, 12, 10)
    mixed, targets = mixing.apply_mix(images, labels, sample, num_classes=K)
    assert mixed.shape == images.shape and targets.shape == (8, K)
    np.testing.assert_allclose(targets.sum(1), 1.0, rtol=1e-6)
    assert 0.0 <= float(sample.lam) <= 1.0
    # Mirror: t_{B-1-i}(lam) = t_i(1 - lam).
    flipped = mixing.apply_mix(images, labels, sample._replace(lam=1 - sample.lam), num_classes=K)[
        1
    ]
    np.testing.assert_allclose(targets[::-1], flipped, atol=1e-6)


def test_cutmix_box_area_matches_lambda():
    images, labels = _batch()
    seen = 0
    for seed in range(40):
        sample = mixing.sample_mix(jax.random.key(seed), 12, 10, switch_prob=1.0)
        assert bool(sample.use_cutmix)
        area = float(sample.box.sum()) / (12 * 10)
        assert float(sample.lam) == pytest.approx(1 - area, abs=1e-6)
        mixed, targets = mixing.apply_mix(images, labels, sample, num_classes=K)
        box = np.asarray(sample.box)[None, :, :, None]
        np.testing.assert_array_equal(np.where(box, images[::-1], images), mixed)
        # The box is a clipped rectangle.
        rows, cols = np.nonzero(np.asarray(sample.box))
        if len(rows):
            seen += 1
            assert len(rows) == (np.ptp(rows) + 1) * (np.ptp(cols) + 1)
    assert seen > 30


def test_mixup_pixels_and_targets_share_lambda():
    images, labels = _batch()
    labels = jnp.arange(8) % K
    lams = []
    for seed in range(30):
        sample = mixing.sample_mix(jax.random.key(seed), 12, 10, switch_prob=0.0)
        assert not bool(sample.use_cutmix) and not sample.box.any()
        lam = float(sample.lam)
        lams.append(lam)
        mixed, targets = mixing.apply_mix(
            images, labels, sample, num_classes=K, label_smoothing=0.0
        )
        np.testing.assert_allclose(mixed, lam * images + (1 - lam) * images[::-1], atol=1e-6)
        # Sample 0 (label 0) is mixed with sample 7 (label 2): lam on class 0.
        assert float(targets[0, 0]) == pytest.approx(lam, abs=1e-6)
    assert 0.0 < min(lams) < 0.25 and 0.75 < max(lams) < 1.0  # Beta(0.8, 0.8) spread


def test_no_mixing_gives_smoothed_one_hot():
    images, labels = _batch()
    mixed, targets = mixing.mix_batch(
        images, labels, jax.random.key(0), num_classes=K, mixup_prob=0.0
    )
    np.testing.assert_array_equal(mixed, images)
    np.testing.assert_allclose(targets, mixing.smooth_labels(labels, K, 0.1), rtol=1e-6)
    off = mixing.mix_batch(
        images, labels, jax.random.key(0), num_classes=K, mixup_alpha=0.0, cutmix_alpha=0.0
    )
    np.testing.assert_array_equal(off[0], images)


def test_switch_frequency_and_single_method():
    uses = [bool(mixing.sample_mix(jax.random.key(s), 8, 8).use_cutmix) for s in range(200)]
    assert 0.35 < np.mean(uses) < 0.65
    assert all(
        bool(mixing.sample_mix(jax.random.key(s), 8, 8, mixup_alpha=0.0).use_cutmix)
        for s in range(5)
    )
    assert not any(
        bool(mixing.sample_mix(jax.random.key(s), 8, 8, cutmix_alpha=0.0).use_cutmix)
        for s in range(5)
    )


@pytest.mark.slow
def test_deterministic_and_jittable():
    images, labels = _batch()
    fn = jax.jit(mixing.mix_batch, static_argnames="num_classes")
    a = fn(images, labels, jax.random.key(3), num_classes=K)
    b = mixing.mix_batch(images, labels, jax.random.key(3), num_classes=K)  # op by op
    c = fn(images, labels, jax.random.key(4), num_classes=K)
    np.testing.assert_allclose(a[0], b[0], atol=1e-6)
    np.testing.assert_allclose(a[1], b[1], atol=1e-6)
    assert not np.allclose(a[1], c[1])


@pytest.mark.slow
def test_per_device_shards_under_shard_map():
    devices = jax.devices()
    if len(devices) < 8:
        pytest.skip("needs 8 (simulated) devices")
    mesh = jax.sharding.Mesh(np.array(devices[:8]), ("data",))
    images, labels = _batch(b=32)
    key = jax.random.key(11)

    def local(x, y):
        return mixing.mix_batch(x, y, key, num_classes=K, axis_name="data")

    sharded = jax.jit(
        jax.shard_map(
            local, mesh=mesh, in_specs=(P("data"), P("data")), out_specs=(P("data"), P("data"))
        )
    )
    mixed, targets = sharded(images, labels)
    for d in range(8):
        rows = slice(4 * d, 4 * d + 4)
        ref = mixing.mix_batch(
            images[rows], labels[rows], jax.random.fold_in(key, d), num_classes=K
        )
        np.testing.assert_allclose(mixed[rows], ref[0], atol=1e-6)
        np.testing.assert_allclose(targets[rows], ref[1], atol=1e-6)


def test_input_checks():
    images, labels = _batch(b=6)
    with pytest.raises(ValueError, match="even"):
        mixing.mix_batch(images[:5], labels[:5], jax.random.key(0), num_classes=K)
    with pytest.raises(ValueError, match="labels"):
        mixing.mix_batch(images, labels[:4], jax.random.key(0), num_classes=K)
    with pytest.raises(ValueError, match=r"\[B, H, W, C\]"):
        mixing.mix_batch(images[..., 0], labels, jax.random.key(0), num_classes=K)
    with pytest.raises(ValueError, match="floating"):
        mixing.mix_batch(images.astype(jnp.int32), labels, jax.random.key(0), num_classes=K)
