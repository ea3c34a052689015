"""Losses registered for the objective beyond the embedding losses (align_uniform, the label
losses on class scores) and per-term second arguments."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from contrastive_jax import losses
from contrastive_jax.errors import ConfigError
from contrastive_jax.train import objective
from contrastive_jax.train.config import default_config


def _reference(z: np.ndarray, alpha: float, t: float, lam: float) -> float:
    """Wang & Isola's align_loss + lam * mean of uniform_loss over the two views, in numpy."""
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    z1, z2 = z[0::2], z[1::2]
    align = np.mean(np.linalg.norm(z1 - z2, axis=1) ** alpha)

    def uniform(x):
        i, j = np.triu_indices(len(x), 1)
        return np.log(np.mean(np.exp(-t * np.sum((x[i] - x[j]) ** 2, axis=1))))

    return align + lam * (uniform(z1) + uniform(z2)) / 2


def _batch(n=16, d=5, seed=0):
    z = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return z, np.repeat(np.arange(n // 2), 2)


@pytest.mark.parametrize("alpha, t, lam", [(2.0, 2.0, 1.0), (1.0, 3.0, 0.5)])
@pytest.mark.slow
def test_align_uniform_matches_numpy(alpha, t, lam):
    z, ids = _batch()
    value = losses.align_uniform(jnp.asarray(z), jnp.asarray(ids), alpha=alpha, t=t,
                                uniformity_weight=lam)
    np.testing.assert_allclose(value, _reference(z, alpha, t, lam), rtol=1e-5)


@pytest.mark.slow
def test_align_uniform_under_shard_map_equals_one_device():
    z, ids = _batch(n=32)
    mesh = Mesh(np.asarray(jax.devices()[:8]), ("data",))
    sharded = jax.jit(jax.shard_map(
        lambda a, b: losses.align_uniform(a, b, axis_name="data"),
        mesh=mesh, in_specs=(P("data"), P("data")), out_specs=P(),
    ))
    np.testing.assert_allclose(
        sharded(jnp.asarray(z), jnp.asarray(ids)),
        losses.align_uniform(jnp.asarray(z), jnp.asarray(ids)), rtol=1e-5,
    )


def test_align_uniform_refuses_an_odd_batch():
    with pytest.raises(ValueError, match="N even"):
        losses.align_uniform(jnp.zeros((3, 2)), jnp.zeros(3, jnp.int32))


def _loss_config(**fields) -> ml_collections.ConfigDict:
    config = default_config().loss
    config.update(fields)
    return config


def test_align_uniform_is_a_config_term():
    (term,) = objective.parse_terms(_loss_config(name="align_uniform",
                                                 kwargs={"align_uniform": {"t": 3.0}}))
    assert term.target == "instance" and term.kwargs == {"t": 3.0}
    z, ids = _batch()
    targets = objective.Targets(instance=jnp.asarray(ids), label=jnp.zeros(16, jnp.int32),
                                metadata=None)
    total, _ = objective.evaluate([term], jnp.asarray(z), targets, axis_name=None)
    np.testing.assert_allclose(total, _reference(z, 2.0, 3.0, 1.0), rtol=1e-5)


def test_targets_override_feeds_mio_the_instance_ids():
    config = _loss_config(name="mio", targets={"mio": "instance"})
    (term,) = objective.parse_terms(config)
    assert term.target == "instance"
    z, ids = _batch()
    labels = jnp.zeros(16, jnp.int32)  # one class: supervised MIO would see other positives
    targets = objective.Targets(instance=jnp.asarray(ids), label=labels, metadata=None)
    total, _ = objective.evaluate([term], jnp.asarray(z), targets, axis_name=None)
    np.testing.assert_allclose(total, losses.mio(jnp.asarray(z), jnp.asarray(ids)), rtol=1e-6)
    assert not np.allclose(total, losses.mio(jnp.asarray(z), labels))


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"name": "mio", "targets": {"supcon": "label"}}, "not terms"),
        ({"name": "mio", "targets": {"mio": "ids"}}, "is not one of"),
        ({"name": "global_uniformity", "targets": {"global_uniformity": "label"}},
         "takes no second argument"),
    ],
)
def test_bad_targets_are_refused(fields, match):
    with pytest.raises(ConfigError, match=match):
        objective.parse_terms(_loss_config(**fields))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_label_cross_entropy_is_smoothed_softmax_cross_entropy(eps):
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, 4)).astype(np.float32)
    labels = np.array([0, 1, 2, 3, 1, 0])
    targets = np.eye(4)[labels] * (1 - eps) + eps / 4
    shifted = logits - logits.max(1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    expected = -(targets * log_p).sum(1).mean()
    value = losses.label_cross_entropy(jnp.asarray(logits), jnp.asarray(labels),
                                      label_smoothing=eps)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.label_cross_entropy(jnp.asarray(logits), jnp.asarray(labels), label_smoothing=1.5)


def test_classifier_terms_select_by_config():
    config = _loss_config(name="label_cross_entropy+label_soft_target_infonce",
                          kwargs={"label_cross_entropy": {"label_smoothing": 0.1}})
    ce, sti = objective.parse_terms(config)
    assert (ce.target, sti.target) == ("label", "label")
    logits = jnp.asarray(np.random.default_rng(4).normal(size=(8, 3)), jnp.float32)
    labels = jnp.array([0, 1, 2, 0, 1, 2, 0, 1])
    targets = objective.Targets(instance=jnp.arange(8), label=labels, metadata=None)
    total, values = objective.evaluate([ce, sti], logits, targets, axis_name=None)
    smoothed = jax.nn.one_hot(labels, 3) * 0.9 + 0.1 / 3
    np.testing.assert_allclose(values["label_cross_entropy"],
                               losses.soft_target_cross_entropy(logits, smoothed), rtol=1e-6)
    np.testing.assert_allclose(values["label_soft_target_infonce"],
                               losses.soft_target_infonce(logits, jax.nn.one_hot(labels, 3)),
                               rtol=1e-6)
    np.testing.assert_allclose(total, values["label_cross_entropy"]
                               + values["label_soft_target_infonce"], rtol=1e-6)
