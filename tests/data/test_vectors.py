"""Vector sources: checks, the pipeline's batches (pure in (seed, step), split over processes),
evaluation batches with padding, config options, and a short training run on the library."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.data import vectors
from contrastive_jax.errors import ConfigError
from tests.data.helpers import digits_config


def _vectors(n=40, d=5, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 4
    return (rng.normal(size=(n, d)) + labels[:, None]).astype(np.float32), labels


def _config(**overrides):
    return digits_config(**{"dataset": "vec", "augmentation": "none", "global_batch_size": 8,
                            **overrides})


@pytest.fixture
def registered():
    x, y = _vectors()
    meta = np.stack([y * 0.5, -y], axis=1).astype(np.float32)
    source = data.array_source(
        "vec", {"train": (x, y, meta), "test": (x[:13], y[:13], meta[:13])},
        metadata_names=("a", "b"),
    )
    data.register_source("vec", lambda config: source)
    yield source, x, y, meta
    data.unregister_source("vec")


def test_array_source_of_rank2_features_is_a_vector_source():
    x, y = _vectors()
    source = data.array_source("vec", {"train": (x, y), "test": (x[:5], y[:5])})
    assert isinstance(source, vectors.VectorSource) and source.feature_dim == 5
    assert source.num_classes == 4 and source.split("test").num_examples == 5
    np.testing.assert_array_equal(source.split("train").features, x)
    assert source.split("train").features.dtype == np.float32
    with pytest.raises(ValueError, match="'train' split"):
        vectors.vector_source("vec", {"test": (x, y)})
    with pytest.raises(ValueError, match="different widths"):
        vectors.vector_source("vec", {"train": (x, y), "test": (x[:, :3], y)})
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        vectors.vector_source("vec", {"train": (x, y)}, num_classes=3)
    with pytest.raises(ValueError, match="features.*finite"):
        vectors.vector_source("vec", {"train": (np.full((2, 2), np.nan), np.zeros(2, int))})
    with pytest.raises(ValueError, match="labels"):
        vectors.vector_source("vec", {"train": (x, y.astype(float))})
    with pytest.raises(ValueError, match="stats"):
        data.array_source("vec", {"train": (x, y)}, stats=((0.5,), (0.2,)))


def test_pretrain_batches_are_the_vectors_in_a_seeded_epoch_order(registered):
    source, x, y, meta = registered
    config = _config(num_views=2)
    it = data.make_pretrain_iterator(config, seed=3)
    assert isinstance(it, vectors.VectorPretrainIterator) and it.steps_per_epoch == 5
    batches = [next(it) for _ in range(6)]
    b = batches[0]
    assert b["views"].shape == (8, 2, 5) and b["views"].dtype == np.float32
    np.testing.assert_array_equal(b["views"][:, 0], x[b["index"]])
    np.testing.assert_array_equal(b["views"][:, 1], x[b["index"]])
    np.testing.assert_array_equal(b["label"], y[b["index"]])
    np.testing.assert_array_equal(b["metadata"], meta[b["index"]])
    # One epoch visits every example once; the next epoch has another order.
    epoch0 = np.concatenate([bb["index"] for bb in batches[:5]])
    assert sorted(epoch0) == list(range(40))
    assert not np.array_equal(batches[5]["index"], batches[0]["index"])
    # A pure function of (seed, step): resuming at step 4 gives the same batches.
    resumed = data.make_pretrain_iterator(config, seed=3, start_step=4)
    for want in batches[4:]:
        np.testing.assert_array_equal(next(resumed)["index"], want["index"])
    other_seed = next(data.make_pretrain_iterator(config, seed=4))
    assert not np.array_equal(other_seed["index"], b["index"])


def test_processes_read_their_share_of_the_global_batch(registered):
    config = _config()
    whole = next(data.make_pretrain_iterator(config, seed=0, process_index=0, process_count=1))
    parts = [
        next(data.make_pretrain_iterator(config, seed=0, process_index=i, process_count=2))
        for i in range(2)
    ]
    assert parts[0]["views"].shape == (4, 2, 5)
    np.testing.assert_array_equal(np.concatenate([p["index"] for p in parts]), whole["index"])
    with pytest.raises(ConfigError, match="divisible by the 2 processes"):
        data.make_pretrain_iterator(_config(global_batch_size=7), seed=0, process_count=2)
    with pytest.raises(ConfigError, match="exceeds the 40 training examples of 'vec'"):
        data.make_pretrain_iterator(_config(global_batch_size=48), seed=0)


def test_eval_batches_cover_the_split_in_order_with_padding(registered):
    source, x, y, meta = registered
    it = data.make_eval_iterator(_config(), "test", 8)
    assert isinstance(it, vectors.VectorEvalIterator) and len(it) == 2
    batches = list(it)
    valid = np.concatenate([b["valid"] for b in batches])
    assert valid.sum() == 13 and not valid[13:].any()
    np.testing.assert_array_equal(
        np.concatenate([b["image"] for b in batches])[valid], x[:13]
    )
    np.testing.assert_array_equal(np.concatenate([b["index"] for b in batches])[~valid], -1)
    assert np.all(batches[1]["image"][~batches[1]["valid"]] == 0)
    np.testing.assert_array_equal(np.concatenate([b["label"] for b in batches])[valid], y[:13])


def test_config_options_apply_to_vectors(registered):
    source, x, y, meta = registered
    config = _config(train_subset=20, metadata="label_onehot", label_noise=1.0, data_seed=1)
    loaded = data.load_source(config)
    train = loaded.split("train")
    assert isinstance(loaded, vectors.VectorSource) and train.num_examples == 20
    np.testing.assert_array_equal(train.features, x[train.ids])
    np.testing.assert_array_equal(train.metadata, np.eye(4, dtype=np.float32)[y[train.ids]])
    noisy = next(data.make_pretrain_iterator(config, seed=0))
    assert (noisy["label"] != y[noisy["index"]]).any()  # p = 1: labels redrawn
    with pytest.raises(ConfigError, match="augmentation='simclr_cifar'.*vectors"):
        data.make_pretrain_iterator(_config(augmentation="simclr_cifar"), seed=0)


@pytest.mark.slow
def test_the_library_trainer_fits_an_mlp_on_registered_vectors(registered, tmp_path):
    from contrastive_jax.eval.embed import embed_split
    from contrastive_jax.train.config import default_config
    from contrastive_jax.train.loop import train
    from contrastive_jax.train.pretrained import load_pretrained

    config = default_config()
    config.data = _config(num_views=1)
    config.model.encoder.name = "mlp"
    config.model.encoder.in_features = 5
    config.model.encoder.widths = (16, 3)
    config.model.head.name = "identity"
    config.loss.name = "supcon"
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-2
    config.optimizer.lr_scaling = "none"
    config.optimizer.warmup_steps = 0
    config.train.total_steps = 20
    config.train.log_every = 5
    config.train.checkpoint_every = 10
    summary = train(config, str(tmp_path))
    assert summary["final_step"] == 20 and np.isfinite(summary["final_loss"])
    run = load_pretrained(str(tmp_path))
    test = embed_split(run.network, run.config.data, "test")
    assert test.features.shape == (13, 3)
    np.testing.assert_array_equal(test.labels, registered[2][:13])
