"""The options the papers' code needs, against the code's definitions: the loss scale
``loss.base_temperature`` (HobbitLong/SupContrast ``losses.py``: x tau / 0.07; the SupCon TF
code's ``scale_by_temperature``: x tau) and ``optimizer.decay_biases`` (the SupCon TF code's
``use_bias_weight_decay=True``: only batch norm is excluded from weight decay)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from contrastive_jax.errors import ConfigError
from contrastive_jax.train import objective, optim


def _hobbitlong_supcon(features: np.ndarray, labels: np.ndarray, temperature: float,
                       base_temperature: float) -> float:
    """SupConLoss.forward of HobbitLong/SupContrast (contrast_mode 'all'), written out in
    numpy: features [bsz, views, d] L2-normalised, labels [bsz]."""
    bsz, views, _ = features.shape
    contrast = np.concatenate([features[:, v] for v in range(views)], axis=0)  # view-major
    rows = np.tile(labels, views)
    logits = contrast @ contrast.T / temperature
    logits = logits - logits.max(axis=1, keepdims=True)
    not_self = 1.0 - np.eye(bsz * views)
    positives = (rows[:, None] == rows[None, :]) * not_self
    log_prob = logits - np.log((np.exp(logits) * not_self).sum(1, keepdims=True))
    mean_log_prob_pos = (positives * log_prob).sum(1) / positives.sum(1)
    return float(np.mean(-(temperature / base_temperature) * mean_log_prob_pos))


@pytest.mark.parametrize("temperature, base", [(0.1, 0.07), (0.5, 0.07), (0.1, 1.0)])
def test_base_temperature_is_the_reference_codes_loss_scale(temperature, base):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(8, 2, 16))
    features /= np.linalg.norm(features, axis=-1, keepdims=True)
    labels = np.array([0, 1, 2, 0, 1, 2, 3, 3])
    terms = objective.parse_terms({"name": "supcon", "temperature": temperature,
                                   "base_temperature": base})
    # the step's layout: the views of an example on consecutive rows
    z = jnp.asarray(features.reshape(16, 16), jnp.float32)
    targets = objective.Targets(instance=jnp.repeat(jnp.arange(8), 2),
                                label=jnp.asarray(np.repeat(labels, 2)), metadata=None)
    total, values = objective.evaluate(terms, z, targets, axis_name=None)
    expected = _hobbitlong_supcon(features, labels, temperature, base)
    assert float(total) == pytest.approx(expected, rel=1e-5)
    assert float(values["supcon"]) == pytest.approx(expected, rel=1e-5)


def test_base_temperature_follows_a_temperature_warmup():
    terms = objective.parse_terms({"name": "supcon", "temperature": 0.1, "base_temperature": 1.0,
                                   "warmup_temperature": 0.4, "temperature_warmup_steps": 10})
    unscaled = objective.parse_terms({"name": "supcon", "temperature": 0.1,
                                      "warmup_temperature": 0.4, "temperature_warmup_steps": 10})
    z = jax.random.normal(jax.random.key(0), (8, 4))
    targets = objective.Targets(instance=jnp.arange(8), label=jnp.arange(8) % 2, metadata=None)
    for step in (0, 5, 10):
        scaled, _ = objective.evaluate(terms, z, targets, axis_name=None, step=jnp.int32(step))
        plain, _ = objective.evaluate(unscaled, z, targets, axis_name=None, step=jnp.int32(step))
        temperature = float(terms[0].temperature_at(step))
        assert float(scaled) == pytest.approx(temperature * float(plain), rel=1e-5)


@pytest.mark.parametrize("fields, match", [
    ({"name": "supcon", "base_temperature": 0.0}, "base_temperature must be > 0"),
    ({"name": "supcon", "base_temperature": "0.07"}, "base_temperature must be > 0"),
    ({"name": "align_uniform", "base_temperature": 0.07}, "takes none"),
])
def test_bad_base_temperatures_are_refused(fields, match):
    with pytest.raises(ConfigError, match=match):
        objective.parse_terms(fields)


class _Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(3, 4, (3, 3), use_bias=False, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)
        self.linear = nnx.Linear(4, 2, rngs=rngs)  # kernel and bias
        self.norm = nnx.LayerNorm(2, rngs=rngs)


def _params() -> nnx.State:
    return nnx.state(_Net(nnx.Rngs(0)), nnx.Param)


def test_norm_mask_excludes_normalisation_parameters_only():
    flat = {".".join(map(str, k)): v for k, v in nnx.to_flat_state(optim.norm_mask(_params()))}
    assert flat == {"bn.bias": False, "bn.scale": False, "conv.kernel": True,
                    "linear.bias": True, "linear.kernel": True, "norm.bias": False,
                    "norm.scale": False}


@pytest.mark.parametrize("name", ["sgd", "lars"])
def test_decay_biases_decays_the_bias_and_leaves_batch_norm(name):
    """One step on a zero gradient: only weight decay moves the parameters. With
    decay_biases the Linear bias decays as its kernel does; the batch-norm and layer-norm
    parameters stay, as in the SupCon TF code's LARS (it excludes 'batch_normalization')."""
    params = jax.tree.map(lambda p: jnp.full_like(p, 0.5), _params())
    config = {"name": name, "base_learning_rate": 0.1, "lr_scaling": "none",
              "weight_decay": 0.01, "warmup_epochs": 0.0, "decay_biases": True}
    tx, _ = optim.make_optimizer(config, params, steps_per_epoch=1, global_batch_size=8,
                                 total_steps=10)
    grads = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(grads, tx.init(params), params)
    new = {".".join(map(str, k)): np.asarray(v)
           for k, v in nnx.to_flat_state(optax.apply_updates(params, updates))}
    for key in ("bn.bias", "bn.scale", "norm.bias", "norm.scale"):
        np.testing.assert_array_equal(new[key], 0.5)
    for key in ("linear.bias", "linear.kernel", "conv.kernel"):
        assert np.all(new[key] < 0.5), key
    default, _ = optim.make_optimizer({**config, "decay_biases": False}, params,
                                      steps_per_epoch=1, global_batch_size=8, total_steps=10)
    updates, _ = default.update(grads, default.init(params), params)
    assert not np.any(np.asarray(updates["linear"]["bias"].value))  # excluded by default
