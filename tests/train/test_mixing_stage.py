"""The MixUp/CutMix stage of the train step (``config.loss.mixing``), under 8 simulated devices.

* off (``mixing.num_classes`` None, ``mixing`` None or empty): the same compiled step, bit for bit;
* on: each device's rows are mixed by ``contrastive_jax.train.mixing.mix_batch`` with the key
  ``fold_in(fold_in(fold_in(rng, step), MIXING_STREAM), device)`` and the label terms see the
  soft targets it returns (checked against a host-side reference of loss and update);
* deterministic per step, and a run resumed from a checkpoint ends bit-identical to an
  uninterrupted one;
* bad mixing configs are refused with a message naming the field.

The model is the small CNN + linear classifier (no BatchNorm, no dropout), so the reference
forward pass on the host is the step's own.
"""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx

from contrastive_jax import data, losses
from contrastive_jax.errors import ConfigError
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import loop, mixing, objective
from contrastive_jax.train.config import default_config
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import MIXING_STREAM, init_state, make_train_step
from tests.train import runs

DEVICES = 8


def classifier_config(loss: str = "label_cross_entropy", mix: dict | None = None):
    """Digits, small CNN + linear classifier, one view, batch 64 (8 rows per device)."""
    config = default_config()
    config.data.global_batch_size = 64
    config.data.num_views = 1
    config.model.encoder.name = "small_cnn"
    config.model.encoder.channels = (8,)
    config.model.encoder.strides = (2,)
    config.model.head.name = "classifier"
    config.model.head.num_classes = 10
    config.loss.name = loss
    if mix is not None:
        config.loss.mixing = ml_collections.ConfigDict(mix)
    config.optimizer.name = "adamw"
    config.optimizer.base_learning_rate = 1e-2
    config.optimizer.lr_scaling = "none"
    config.optimizer.warmup_epochs = 0
    config.train.total_steps = 4
    config.train.log_every = 1
    config.train.checkpoint_every = 2
    config.train.keep_checkpoints = 4
    return config


@pytest.fixture(scope="module")
def batch():
    config = classifier_config()
    return runs.first_batch(config.data)


def _steps(config, batch, starts=(0,)):
    """Runs the step once from the initial state moved to each step number of ``starts``."""
    mesh = make_mesh(DEVICES)
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=10 if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=10, global_batch_size=64, total_steps=10)
    initial = jax.device_get(state)
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule, mesh)
    out = []
    for start in starts:
        s = jax.device_put(initial._replace(step=np.int32(start)), replicated(mesh))
        new, logged = step(s, data.make_global_batch(batch, mesh))
        out.append((jax.device_get(new), jax.device_get(logged)))
    return (graphdef, rest, tx, initial), out


def _leaves_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("off", [None, {}])
def test_mixing_off_is_the_plain_step_bit_for_bit(batch, off):
    config = classifier_config()
    assert config.loss.mixing.num_classes is None  # the default: off
    _, [(plain, plain_log)] = _steps(config, batch)
    other = classifier_config()
    other.loss.mixing = off if off is None else ml_collections.ConfigDict(off)
    assert objective.batch_mixing(objective.parse_terms(other.loss)) is None
    _, [(state, logged)] = _steps(other, batch)
    _leaves_equal(state, plain)
    assert logged.keys() == plain_log.keys()
    for k in logged:
        np.testing.assert_array_equal(logged[k], plain_log[k])


def _reference(graphdef, rest, initial, tx, batch, loss_fn, mix: objective.Mixing, step: int):
    """Host-side mix per device shard, forward, loss and one optimiser update."""
    views = np.asarray(batch["views"])[:, 0]
    labels = np.asarray(batch["label"]).astype(np.int32)
    step_key = jax.random.fold_in(jax.random.wrap_key_data(initial.rng), step)
    base = jax.random.fold_in(step_key, MIXING_STREAM)
    per = len(labels) // DEVICES
    images, targets, lams = [], [], []
    for d in range(DEVICES):
        rows = slice(d * per, (d + 1) * per)
        key = jax.random.fold_in(base, d)
        x, t = mixing.mix_batch(
            jnp.asarray(views[rows]), jnp.asarray(labels[rows]), key,
            num_classes=mix.num_classes, mixup_alpha=mix.mixup_alpha,
            cutmix_alpha=mix.cutmix_alpha, mixup_prob=mix.mixup_prob,
            switch_prob=mix.switch_prob, label_smoothing=mix.label_smoothing)
        lams.append(float(mixing.sample_mix(key, *views.shape[1:3], mixup_alpha=mix.mixup_alpha,
                                            cutmix_alpha=mix.cutmix_alpha,
                                            mixup_prob=mix.mixup_prob,
                                            switch_prob=mix.switch_prob).lam))
        images.append(x)
        targets.append(t)
    images, targets = jnp.concatenate(images), jnp.concatenate(targets)

    def loss(params):
        model = nnx.merge(graphdef, params, initial.batch_stats, rest, copy=True)
        _, logits = model.network(images)
        return loss_fn(logits, targets)

    value, grads = jax.value_and_grad(loss)(initial.params)
    updates, _ = tx.update(grads, initial.opt_state, initial.params)
    return float(value), optax.apply_updates(initial.params, updates), np.array(lams), targets


@pytest.mark.parametrize("term", ["label_cross_entropy", "label_soft_target_infonce"])
@pytest.mark.slow
def test_mixing_on_feeds_the_targets_of_mixing_py(batch, term):
    mix_fields = {"num_classes": 10}
    config = classifier_config(term, mix_fields)
    mix = objective.batch_mixing(objective.parse_terms(config.loss))
    assert mix == objective.Mixing(10, 0.1, 0.8, 1.0, 1.0, 0.5)  # the paper's recipe
    (graphdef, rest, tx, initial), [(state, logged)] = _steps(config, batch, starts=(3,))
    loss_fn = {"label_cross_entropy": losses.soft_target_cross_entropy,
               "label_soft_target_infonce": losses.soft_target_infonce}[term]
    value, params, lams, targets = _reference(graphdef, rest, initial, tx, batch, loss_fn, mix, 3)
    assert np.all(lams < 1.0)  # every device mixed its shard
    assert len(set(lams.round(6))) > 1  # ... each with its own draw
    np.testing.assert_allclose(np.asarray(targets).sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(logged["loss"], value, rtol=1e-5)
    # The un-mixed loss is far from it: the test would see a skipped stage.
    plain_config = classifier_config(term)
    plain_config.loss.kwargs = ml_collections.ConfigDict({term: {"label_smoothing": 0.1}})
    _, [(_, plain_log)] = _steps(plain_config, batch, starts=(3,))
    assert abs(float(plain_log["loss"]) - value) > 1e-3
    for x0, x, y in zip(jax.tree.leaves(initial.params), jax.tree.leaves(state.params),
                        jax.tree.leaves(params), strict=True):
        dx, dy = np.asarray(x) - x0, np.asarray(y) - x0
        np.testing.assert_allclose(dx, dy, rtol=0, atol=0.01 * np.abs(dy).max() + 1e-7)


def test_mixing_is_a_function_of_the_step(batch):
    config = classifier_config("label_cross_entropy", {"num_classes": 10})
    _, out = _steps(config, batch, starts=(5, 5, 6))
    (a, log_a), (b, log_b), (_, log_c) = out
    _leaves_equal(a, b)
    np.testing.assert_array_equal(log_a["loss"], log_b["loss"])
    assert log_a["loss"] != log_c["loss"]  # another step, another mix of the same batch


def test_no_mixing_limit_equals_plain_labels(batch):
    """mixup_prob 0 and no smoothing: the targets are the one-hot labels, the images unchanged."""
    config = classifier_config("label_cross_entropy",
                               {"num_classes": 10, "mixup_prob": 0.0, "label_smoothing": 0.0})
    _, [(state, logged)] = _steps(config, batch)
    _, [(plain, plain_log)] = _steps(classifier_config(), batch)
    np.testing.assert_allclose(logged["loss"], plain_log["loss"], rtol=1e-6)
    for x, y in zip(jax.tree.leaves(state.params), jax.tree.leaves(plain.params), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_resumed_mixing_run_is_exact(tmp_path):
    config = classifier_config("label_soft_target_infonce", {"num_classes": 10})
    full = str(tmp_path / "full")
    loop.train(config, full)
    assert runs.checkpoint_steps(full) == [2, 4]
    resumed = str(tmp_path / "resumed")
    shutil.copytree(full, resumed)
    shutil.rmtree(f"{resumed}/checkpoints/4")
    summary = loop.train(config, resumed)
    assert summary["start_step"] == 2 and summary["final_step"] == 4
    runs.assert_same_state(runs.read_state(resumed, 4), runs.read_state(full, 4))


@pytest.mark.parametrize(
    "loss, mix, match",
    [
        ("supcon", {"num_classes": 10}, "do not take soft targets"),
        ("label_cross_entropy", {"num_classes": 1}, "num_classes"),
        ("label_cross_entropy", {"num_classes": 10, "mixup_alph": 0.8},
         "did you mean config.loss.mixing.mixup_alpha"),
        ("label_cross_entropy", {"num_classes": 10, "switch_prob": 1.5}, "switch_prob"),
        ("label_cross_entropy", {"num_classes": 10, "cutmix_alpha": -1.0}, "cutmix_alpha"),
    ],
)
def test_bad_mixing_configs_are_refused(loss, mix, match):
    with pytest.raises(ConfigError, match=match):
        objective.parse_terms(classifier_config(loss, mix).loss)


def test_mixing_refuses_a_second_smoothing_and_a_head_of_other_width(batch):
    config = classifier_config("label_cross_entropy", {"num_classes": 10})
    config.loss.kwargs = ml_collections.ConfigDict({"label_cross_entropy": {"label_smoothing": 0.1}})
    with pytest.raises(ConfigError, match="mixing.label_smoothing"):
        objective.parse_terms(config.loss)
    wrong = classifier_config("label_cross_entropy", {"num_classes": 10})
    wrong.model.head.num_classes = 7
    with pytest.raises(ConfigError, match="head outputs 7"):
        _steps(wrong, batch)
