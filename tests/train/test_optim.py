"""Schedules, batch-size scaling, the LARS exclusion mask and one step of every optimiser."""

from __future__ import annotations

import functools
import logging
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from contrastive_jax.train import optim

KERNELS = {"conv.kernel", "lin.kernel"}
NORM_AND_BIAS = {"conv.bias", "bn.scale", "bn.bias", "ln.scale", "ln.bias", "lin.bias"}


class _Net(nnx.Module):
    """Conv -> BatchNorm -> LayerNorm -> pool -> Linear: kernels, biases and norm parameters."""

    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(3, 4, (3, 3), rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)
        self.ln = nnx.LayerNorm(4, rngs=rngs)
        self.lin = nnx.Linear(4, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.ln(self.bn(self.conv(x)))
        return self.lin(x.mean(axis=(1, 2)))


def _random_like(tree, seed: int, scale: float = 1.0):
    """``tree`` with every leaf replaced by N(0, scale^2) values (no zero biases, no unit scales)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(scale * rng.normal(size=x.shape), x.dtype), tree)


@functools.cache
def _net_param_state() -> nnx.State:
    """The ``nnx.Param`` state of ``_Net``, built once."""
    _, params, _ = nnx.split(_Net(nnx.Rngs(0)), nnx.Param, ...)
    return params


def _net_params(seed: int = 0):
    """Random-valued ``nnx.Param`` state of ``_Net`` (an ``nnx.State``)."""
    return _random_like(_net_param_state(), seed)


def _by_name(tree) -> dict[str, np.ndarray]:
    """Leaves keyed by their dotted module path, e.g. ``"bn.scale"``."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = ".".join(str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey))
        out[name] = np.asarray(leaf, np.float64)
    return out


def _config(**overrides):
    config = optim.default_optimizer_config()
    config.update(overrides)
    return config


def _one_step(config, params, grads, **kwargs):
    """Updates of a jitted first step of ``make_optimizer(config, params)``."""
    tx, _ = optim.make_optimizer(config, params, **kwargs)
    updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    return _by_name(updates)


# --- schedule -------------------------------------------------------------------------------


def test_default_config_fields():
    config = optim.default_optimizer_config()
    assert config.name == "lars"
    assert config.lr_scaling == "linear"
    assert config.base_learning_rate == 0.3
    assert config.trust_coefficient == 1e-3
    assert config.momentum == 0.9
    assert config.weight_decay == 1e-6
    assert config.warmup_epochs == 10
    assert config.decay_norm_and_bias is False
    assert config.grad_clip_norm is None


@pytest.mark.parametrize(
    ("scaling", "base", "batch", "peak"),
    [
        ("linear", 0.3, 4096, 4.8),  # SimCLR LARS: 0.3 x 4096 / 256
        ("linear", 0.3, 512, 0.6),
        ("sqrt", 0.075, 4096, 4.8),  # SimCLR LARS: 0.075 x sqrt(4096)
        ("sqrt", 0.075, 256, 1.2),
        ("none", 0.5, 512, 0.5),
    ],
)
def test_peak_learning_rate_scaling(scaling, base, batch, peak):
    config = _config(lr_scaling=scaling, base_learning_rate=base)
    assert optim.peak_learning_rate(config, batch) == pytest.approx(peak)


def test_schedule_warmup_then_cosine():
    # peak 0.6; warm-up 2 epochs x 10 steps from 0.1; cosine to 0.1 x 0.6 at step 100.
    config = _config(warmup_epochs=2, warmup_init=0.1, final_lr_factor=0.1, schedule_epochs=10)
    schedule = optim.make_schedule(config, steps_per_epoch=10, global_batch_size=512)
    np.testing.assert_allclose(schedule(0), 0.1, rtol=1e-6)
    np.testing.assert_allclose(schedule(10), 0.1 + (0.6 - 0.1) / 2, rtol=1e-6)
    np.testing.assert_allclose(schedule(20), 0.6, rtol=1e-6)  # end of warm-up = scaled peak
    np.testing.assert_allclose(schedule(60), (0.6 + 0.06) / 2, rtol=1e-6)  # half-way down
    quarter = 0.06 + (0.6 - 0.06) * (1 + math.cos(math.pi / 4)) / 2
    np.testing.assert_allclose(schedule(40), quarter, rtol=1e-6)
    np.testing.assert_allclose(schedule(100), 0.06, rtol=1e-6)
    np.testing.assert_allclose(schedule(150), 0.06, rtol=1e-6)


def test_schedule_seed000_protocol():
    # SINCERE: 0.0005 -> 0.5 over 10 epochs, cosine back to 0.0005 at epoch 1000 (B=512, 97 it/ep).
    config = _config(
        name="sgd",
        base_learning_rate=0.5,
        lr_scaling="none",
        warmup_init=0.0005,
        final_lr_factor=0.001,
        schedule_epochs=1000,
    )
    schedule = optim.make_schedule(config, steps_per_epoch=97, global_batch_size=512)
    np.testing.assert_allclose(schedule(0), 0.0005, rtol=1e-4)
    np.testing.assert_allclose(schedule(970), 0.5, rtol=1e-6)
    np.testing.assert_allclose(schedule(97_000), 0.0005, rtol=1e-4)


def test_schedule_fractional_warmup_epochs_and_warmup_steps():
    config = _config(warmup_epochs=0.5, schedule_epochs=4, lr_scaling="none",
                     base_learning_rate=1.0)
    schedule = optim.make_schedule(config, steps_per_epoch=10, global_batch_size=256)
    np.testing.assert_allclose(schedule(4), 0.8, rtol=1e-6)  # 5 warm-up steps
    np.testing.assert_allclose(schedule(5), 1.0, rtol=1e-6)
    config.warmup_steps = 8  # replaces warmup_epochs
    schedule = optim.make_schedule(config, steps_per_epoch=10, global_batch_size=256)
    np.testing.assert_allclose(schedule(4), 0.5, rtol=1e-6)
    np.testing.assert_allclose(schedule(8), 1.0, rtol=1e-6)
    config.warmup_steps = 0  # no warm-up: starts at the peak
    schedule = optim.make_schedule(config, steps_per_epoch=10, global_batch_size=256)
    np.testing.assert_allclose(schedule(0), 1.0, rtol=1e-6)


def test_schedule_length_precedence():
    """config.schedule_steps, else config.schedule_epochs x steps_per_epoch, else the
    total_steps argument."""
    config = _config(warmup_steps=0, lr_scaling="none", base_learning_rate=1.0)
    kwargs = {"steps_per_epoch": 10, "global_batch_size": 256}

    def end(schedule, length):
        return float(schedule(length // 2)), float(schedule(length))

    np.testing.assert_allclose(
        end(optim.make_schedule(config, total_steps=60, **kwargs), 60), (0.5, 0)
    )
    config.schedule_epochs = 4
    np.testing.assert_allclose(
        end(optim.make_schedule(config, total_steps=60, **kwargs), 40), (0.5, 0)
    )
    config.schedule_steps = 20
    np.testing.assert_allclose(
        end(optim.make_schedule(config, total_steps=60, **kwargs), 20), (0.5, 0)
    )


# --- mask and optimisers ---------------------------------------------------------------------


def test_decay_mask_on_nnx_state_and_plain_pytree():
    mask = _by_name(optim.decay_mask(_net_params()))
    assert {k for k, v in mask.items() if v} == KERNELS
    assert {k for k, v in mask.items() if not v} == NORM_AND_BIAS
    plain = {"w": jnp.ones((3, 2)), "b": jnp.ones(2), "s": jnp.ones(())}
    assert optim.decay_mask(plain) == {"w": True, "b": False, "s": False}


def test_lars_matches_numpy_reference_over_two_steps():
    """Kernels: trust-ratio-scaled, decayed update; biases and norms: plain momentum SGD."""
    wd, eta, mom = 0.5, 1e-3, 0.9
    config = _config(
        weight_decay=wd, warmup_steps=4, warmup_init=0.1, schedule_steps=20, lr_scaling="none"
    )
    params = _net_params(seed=1)
    tx, schedule = optim.make_optimizer(config, params, steps_per_epoch=10, global_batch_size=256)
    update = jax.jit(tx.update)
    state = tx.init(params)
    p_ref, trace = _by_name(params), {}
    for step in range(2):
        grads = _random_like(params, seed=10 + step, scale=3.0)
        updates, state = update(grads, state, params)
        params = optax.apply_updates(params, updates)
        lr = float(schedule(step))
        got, g_ref = _by_name(updates), _by_name(grads)
        for name, w in p_ref.items():
            if name in KERNELS:
                u = g_ref[name] + wd * w
                u = u * eta * np.linalg.norm(w) / np.linalg.norm(u)
            else:
                u = g_ref[name]
            trace[name] = mom * trace.get(name, 0.0) + lr * u
            np.testing.assert_allclose(got[name], -trace[name], rtol=2e-5, atol=1e-9, err_msg=name)
            p_ref[name] = w - trace[name]
    assert lr == pytest.approx(0.1 + 0.2 * 1 / 4)


def test_lars_decay_norm_and_bias_adapts_every_parameter():
    wd, eta = 0.5, 1e-3
    config = _config(weight_decay=wd, warmup_steps=0, schedule_steps=10, decay_norm_and_bias=True)
    params, grads = _net_params(seed=2), _random_like(_net_params(), seed=3)
    got = _one_step(config, params, grads, steps_per_epoch=10, global_batch_size=256)
    for name, w in _by_name(params).items():
        u = _by_name(grads)[name] + wd * w
        expected = -0.3 * u * eta * np.linalg.norm(w) / np.linalg.norm(u)
        np.testing.assert_allclose(got[name], expected, rtol=2e-5, err_msg=name)


@pytest.mark.parametrize("decay_all", [False, True])
@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_one_step_on_nnx_params(decay_all, nesterov):
    wd, mom, lr = 0.1, 0.9, 0.3
    config = _config(
        name="sgd",
        weight_decay=wd,
        nesterov=nesterov,
        decay_norm_and_bias=decay_all,
        warmup_steps=0,
        schedule_steps=10,
    )
    params, grads = _net_params(seed=4), _random_like(_net_params(), seed=5)
    got = _one_step(config, params, grads, steps_per_epoch=10, global_batch_size=256)
    for name, w in _by_name(params).items():
        u = _by_name(grads)[name] + (wd * w if decay_all or name in KERNELS else 0.0)
        factor = 1 + mom if nesterov else 1.0  # first Nesterov step: g + m * (m * 0 + g)
        np.testing.assert_allclose(got[name], -lr * factor * u, rtol=1e-5, err_msg=name)


def test_adamw_one_step_on_nnx_params():
    wd, lr = 0.1, 0.3
    config = _config(name="adamw", weight_decay=wd, warmup_steps=0, schedule_steps=10)
    params, grads = _net_params(seed=6), _random_like(_net_params(), seed=7)
    got = _one_step(config, params, grads, steps_per_epoch=10, global_batch_size=256)
    for name, w in _by_name(params).items():
        g = _by_name(grads)[name]
        u = g / (np.abs(g) + 1e-8) + (wd * w if name in KERNELS else 0.0)  # bias-corrected step
        np.testing.assert_allclose(got[name], -lr * u, rtol=1e-5, err_msg=name)


def test_grad_clip_norm_scales_gradients_to_the_global_norm():
    config = _config(
        name="sgd", weight_decay=0.0, warmup_steps=0, schedule_steps=10, grad_clip_norm=1.0
    )
    params, grads = _net_params(seed=8), _random_like(_net_params(), seed=9, scale=5.0)
    norm = np.sqrt(sum(np.sum(g**2) for g in _by_name(grads).values()))
    assert norm > 1.0
    got = _one_step(config, params, grads, steps_per_epoch=10, global_batch_size=256)
    for name, g in _by_name(grads).items():
        np.testing.assert_allclose(got[name], -0.3 * g / norm, rtol=1e-5, err_msg=name)


@pytest.mark.slow
def test_default_lars_trains_a_real_model():
    """One jitted step of the default optimiser on _Net lowers the loss."""
    model = _Net(nnx.Rngs(0))
    model.eval()  # BatchNorm on running statistics: params are the only state that changes
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    x = jax.random.normal(jax.random.key(0), (8, 6, 6, 3))
    y = jax.random.normal(jax.random.key(1), (8, 2))
    config = _config(warmup_steps=0, schedule_steps=10)
    tx, _ = optim.make_optimizer(config, params, steps_per_epoch=10, global_batch_size=256)

    def loss_fn(p):
        return jnp.mean((nnx.merge(graphdef, p, rest)(x) - y) ** 2)

    @jax.jit
    def step(p, opt_state):
        loss, grads = jax.value_and_grad(loss_fn)(p)
        updates, opt_state = tx.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, loss

    new_params, _, loss = step(params, tx.init(params))
    assert isinstance(new_params, nnx.State)
    assert float(loss_fn(new_params)) < float(loss)
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), params, new_params)
    assert all(jax.tree.leaves(changed))


# --- errors ----------------------------------------------------------------------------------


def test_unknown_optimizer_name():
    with pytest.raises(ValueError, match=r"optimizer\.name='adagrad'.*lars, sgd, adamw, rmsprop"):
        optim.make_optimizer(
            _config(name="adagrad", schedule_epochs=1),
            {"w": jnp.ones((2, 2))},
            steps_per_epoch=10,
            global_batch_size=256,
        )


def test_unknown_lr_scaling():
    with pytest.raises(ValueError, match=r"optimizer\.lr_scaling='log'.*linear, sqrt, none"):
        optim.make_schedule(
            _config(lr_scaling="log", schedule_epochs=1), steps_per_epoch=10, global_batch_size=256
        )


@pytest.mark.parametrize(
    ("overrides", "kwargs", "match"),
    [
        ({"base_learning_rate": 0.0}, {}, "base_learning_rate must be positive"),
        ({"base_learning_rate": -0.1}, {}, "base_learning_rate must be positive"),
        ({}, {"global_batch_size": 0}, "global_batch_size must be positive"),
        ({}, {"steps_per_epoch": 0}, "steps_per_epoch must be positive"),
        ({"schedule_epochs": None}, {}, "set optimizer.schedule_steps, optimizer.schedule_epochs"),
        ({"warmup_steps": -1}, {}, "warm-up must be non-negative"),
        ({"schedule_steps": 0}, {}, "at least one step"),
        ({"epochs": 3.0}, {}, "optimizer.epochs was renamed to config.optimizer.schedule_epochs"),
        ({"grad_clip_norm": 0.0}, {}, "grad_clip_norm must be positive"),
    ],
)
def test_invalid_values(overrides, kwargs, match):
    config = _config(schedule_epochs=10)
    config.update(overrides)
    call = {"steps_per_epoch": 10, "global_batch_size": 256, **kwargs}
    with pytest.raises(ValueError, match=match):
        optim.make_optimizer(config, {"w": jnp.ones((2, 2))}, **call)


def test_empty_params():
    with pytest.raises(ValueError, match="no leaves"):
        optim.make_optimizer(_config(schedule_epochs=10), {}, steps_per_epoch=10,
                             global_batch_size=256)


def test_warmup_longer_than_a_short_run_is_clamped_with_a_warning(caplog):
    # 10 warm-up steps in a 6-step run: warm up over 5 steps, then one cosine step.
    config = _config(
        warmup_steps=10, schedule_steps=6, warmup_init=0.0, lr_scaling="none",
        base_learning_rate=1.0
    )
    with caplog.at_level(logging.WARNING, logger="contrastive_jax.train.optim"):
        schedule = optim.make_schedule(config, steps_per_epoch=10, global_batch_size=256)
    assert "clamped to 5 steps" in caplog.text
    np.testing.assert_allclose([schedule(i) for i in range(6)], [0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(schedule(6), 0.0, atol=1e-7)  # cosine end (final_lr_factor 0)
