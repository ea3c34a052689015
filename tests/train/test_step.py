"""The sharded train step equals the single-device step; bad configs fail before compiling."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import loop, objective
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import init_state, make_train_step
from tests.train import runs
from tests.train.tiny import SMALL_CNN, tiny_config


def _one_step(config, num_devices: int, batch_np: dict):
    mesh = make_mesh(num_devices)
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=10 if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=22, global_batch_size=64, total_steps=6)
    initial = jax.device_get(state)
    state = jax.device_put(state, replicated(mesh))
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule, mesh)
    state, logged = step(state, data.make_global_batch(batch_np, mesh))
    return initial, jax.device_get(state), jax.device_get(logged)


def _assert_same_update(initial, a, b):
    """Leaf-wise ``a - initial`` equals ``b - initial`` up to 1 % of the largest update.

    The updates are compared, not the parameters: float32 sums in another order
    (8 partial BN statistics and gradients instead of 1) move near-cancelling
    gradients by ~1e-4 of their scale, while a wrong reduction (a missing psum, a
    local-only statistic) changes updates by their own size.
    """
    for x0, x, y in zip(jax.tree.leaves(initial), jax.tree.leaves(a), jax.tree.leaves(b),
                        strict=True):
        da, db = np.asarray(x) - x0, np.asarray(y) - x0
        np.testing.assert_allclose(da, db, rtol=0, atol=0.01 * np.abs(db).max() + 1e-7)


def _sgd_config_and_batch(**fields):
    """The tiny SINCERE config with plain SGD (lr 0.1, no warm-up) and its first batch."""
    config = tiny_config(name="sincere")
    config.update_from_flattened_dict(fields)
    config.optimizer.name = "sgd"
    config.optimizer.base_learning_rate = 0.1
    config.optimizer.warmup_epochs = 0
    return config, runs.first_batch(config.data)


@pytest.mark.slow
def test_eight_device_step_equals_one_device_step_with_global_bn():
    # Global BN: batch statistics over all devices.
    config, batch = _sgd_config_and_batch(**{"model.encoder.bn_axis_name": "data",
                                             "model.head.bn_axis_name": "data"})
    initial, one, logged_one = _one_step(config, 1, batch)
    _, eight, logged_eight = _one_step(config, 8, batch)
    np.testing.assert_allclose(logged_eight["loss"], logged_one["loss"], rtol=1e-5)
    _assert_same_update(initial.params, eight.params, one.params)
    _assert_same_update(initial.batch_stats, eight.batch_stats, one.batch_stats)


def test_a_temperature_warmup_logs_each_terms_temperature_at_the_step():
    config, batch = _sgd_config_and_batch(**{"loss.warmup_temperature": 1.0,
                                             "loss.temperature_warmup_steps": 10})
    _, _, logged = _one_step(config, 1, batch)
    assert float(logged["temperature/sincere"]) == 1.0  # step 0: the warm-up's start


@pytest.mark.parametrize(
    "override, message",
    [
        ({"loss.name": "sincere+nope"}, "'nope' is not a loss the objective can train on"),
        ({"data.global_batch_size": 60}, "divisible by the 8 devices"),
        ({"data.dataset": "no_such_dataset_xyz"}, "no_such_dataset_xyz"),
        ({"data.dataset": "folder:/nonexistent/images"}, "/nonexistent/images"),
    ],
)
def test_bad_config_fails_at_start_naming_the_problem(tmp_path, override, message):
    config = tiny_config()
    for key, value in override.items():
        target = config
        *parents, leaf = key.split(".")
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    with pytest.raises((ValueError, OSError), match=message):
        loop.train(config, str(tmp_path))
    assert not os.path.exists(tmp_path / "checkpoints")


def test_the_online_probe_does_not_train_the_encoder():
    # SimCLR's probe trains on stop-gradient features: with or without it, the encoder and
    # head take the same step. The probe reads any encoder's features the same way.
    runs = {}
    for probe in (False, True):
        config, batch = _sgd_config_and_batch(**{"train.online_probe": probe})
        config.model.encoder = dict(SMALL_CNN)
        initial, after, logged = _one_step(config, 1, batch)
        runs[probe] = (initial.params["network"], after.params["network"], logged)
    (initial, plain, _), (initial_probed, probed, logged) = runs[False], runs[True]
    assert logged["probe_loss"] > 0
    for a, b in zip(jax.tree.leaves(initial), jax.tree.leaves(initial_probed), strict=True):
        np.testing.assert_array_equal(a, b)
    _assert_same_update(initial, probed, plain)
