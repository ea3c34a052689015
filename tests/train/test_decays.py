"""The learning-rate decays and the RMSProp of the evaluation protocols against their
sources' definitions (optim.py: ``decay="step"``, ``"exponential"``, ``name="rmsprop"``)."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax.errors import ConfigError
from contrastive_jax.train import optim


def _supcontrast_lr(epoch: int, lr: float, decay_epochs=(60, 75, 90), rate: float = 0.2) -> float:
    """HobbitLong/SupContrast util.py adjust_learning_rate (no --cosine), 1-based ``epoch``:
    ``lr * rate ** sum(epoch > decay_epochs)``."""
    return lr * rate ** int(np.sum(epoch > np.asarray(decay_epochs)))


def test_step_decay_is_supcontrasts_at_60_75_90():
    steps_per_epoch = 3
    schedule = optim.make_schedule(
        {"name": "sgd", "base_learning_rate": 5.0, "lr_scaling": "none", "warmup_epochs": 0,
         "decay": "step", "decay_epochs": (60, 75, 90), "decay_rate": 0.2},
        steps_per_epoch=steps_per_epoch, global_batch_size=512, total_steps=100 * 3)
    for step in range(100 * steps_per_epoch):
        epoch = step // steps_per_epoch + 1  # the reference sets the rate once per 1-based epoch
        assert float(schedule(step)) == pytest.approx(_supcontrast_lr(epoch, 5.0), rel=1e-6)
    assert [float(schedule(e * steps_per_epoch)) for e in (59, 60, 75, 90)] == pytest.approx(
        [5.0, 1.0, 0.2, 0.04], rel=1e-6)


def _tf_staircase(step: int, lr: float, warmup_steps: int, decay_steps: float,
                  rate: float) -> float:
    """google-research supcon/utils.py build_learning_rate_schedule with EXPONENTIAL decay:
    a linear warm-up to ``lr`` over ``warmup_steps`` (maybe_add_warmup_to_lr), then
    tf.train.exponential_decay(lr, step - warmup_steps, decay_steps, rate, staircase=True)."""
    if step < warmup_steps:
        return lr * step / warmup_steps
    return lr * rate ** math.floor((step - warmup_steps) / decay_steps)


def test_exponential_decay_is_supcons_staircase_097_every_half_epoch():
    steps_per_epoch, batch = 7, 6144  # an odd epoch: half an epoch is 3.5 steps
    config = {"name": "rmsprop", "base_learning_rate": 0.05, "lr_scaling": "linear",
              "warmup_epochs": 2.0, "decay": "exponential", "decay_rate": 0.97,
              "decay_every_epochs": 0.5}
    schedule = optim.make_schedule(config, steps_per_epoch=steps_per_epoch,
                                   global_batch_size=batch, total_steps=20 * steps_per_epoch)
    peak = 0.05 * batch / 256
    for step in range(20 * steps_per_epoch):
        expected = _tf_staircase(step, peak, 2 * steps_per_epoch, 0.5 * steps_per_epoch, 0.97)
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5), step
    # after the warm-up: 0.97 ** k from step 14 + 3.5 k on
    assert float(schedule(14)) == pytest.approx(peak, rel=1e-6)
    assert float(schedule(17)) == pytest.approx(peak, rel=1e-6)
    assert float(schedule(18)) == pytest.approx(peak * 0.97, rel=1e-6)
    assert float(schedule(21)) == pytest.approx(peak * 0.97 ** 2, rel=1e-6)


def test_tf1_rmsprop_with_momentum():
    """TF1 RMSPropOptimizer (supcon/utils.py build_optimizer): ms starts at 1,
    ms = rho ms + (1 - rho) g^2, mom = mu mom + lr g / sqrt(ms + eps), w -= mom."""
    rho, mu, eps, lr = 0.9, 0.9, 1e-3, 0.01
    tx, _ = optim.make_optimizer(
        {"name": "rmsprop", "base_learning_rate": lr, "lr_scaling": "none", "warmup_epochs": 0,
         "decay": "step", "decay_epochs": (1000,), "weight_decay": 0.0, "momentum": mu,
         "rmsprop_decay": rho, "rmsprop_epsilon": eps},
        {"w": jnp.zeros(3)}, steps_per_epoch=1, global_batch_size=256, total_steps=10)
    w = np.array([0.5, -1.0, 2.0])
    params = {"w": jnp.asarray(w, jnp.float32)}
    state = tx.init(params)
    ms, mom = np.ones(3), np.zeros(3)
    for step in range(4):
        g = np.array([0.3, -2.0, 0.01]) * (step + 1)
        updates, state = tx.update({"w": jnp.asarray(g, jnp.float32)}, state, params)
        params = {"w": params["w"] + updates["w"]}
        ms = rho * ms + (1 - rho) * g ** 2
        mom = mu * mom + lr * g / np.sqrt(ms + eps)
        w = w - mom
        np.testing.assert_allclose(np.asarray(params["w"]), w, rtol=1e-5)


@pytest.mark.parametrize("fields, message", [
    ({"decay": "linear"}, "optimizer.decay='linear'"),
    ({"decay": "step"}, "needs optimizer.decay_epochs"),
    ({"decay": "step", "decay_epochs": (75, 60)}, "increasing positive epochs"),
    ({"decay_rate": 0.0}, "decay_rate must be in"),
    ({"decay_every_epochs": 0.0}, "decay_every_epochs must be > 0"),
    ({"rmsprop_epsilon": 0.0}, "rmsprop_epsilon > 0"),
])
def test_bad_decay_settings_are_refused(fields, message):
    with pytest.raises(ConfigError, match=message):
        optim.resolve(fields)
