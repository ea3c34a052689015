"""Gradient caching (``config.train.micro_batch_size``): the micro-batched step is the plain step."""

from __future__ import annotations

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from contrastive_jax import data
from contrastive_jax.errors import ConfigError
from contrastive_jax.models import MLP, ContrastiveModel, LinearHead
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import grad_cache, loop, objective
from contrastive_jax.train.checkpoint import CHECKPOINT_DIR
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import init_state, make_train_step
from tests.pairwise import only_in_make_test
from tests.train import cli_config, runs
from tests.train.tiny import tiny_config


def _vit_config(loss: str):
    """ViT-Ti/4 on 16 px digits (no batch statistics, no dropout), a linear head, SGD."""
    config = tiny_config(name=loss)
    config.model.encoder.name = "vit_ti4"
    config.model.encoder.image_size = 16
    config.model.head.name = "linear"
    config.optimizer.name = "sgd"
    config.optimizer.base_learning_rate = 0.5
    config.optimizer.warmup_epochs = 0
    return config


def _steps(config, micro_batch_size, batch_np, num_steps=1, form="unrolled"):
    mesh = make_mesh(8)
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=10 if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=22, global_batch_size=64, total_steps=6)
    state = jax.device_put(state, replicated(mesh))
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule,
                           mesh, micro_batch_size=micro_batch_size, micro_batch_loop=form)
    losses = []
    for _ in range(num_steps):
        state, logged = step(state, data.make_global_batch(batch_np, mesh))
        losses.append(float(logged["loss"]))
    return jax.device_get(state), jax.device_get(logged), losses


def _batch(config):
    return runs.first_batch(config.data)


@pytest.mark.parametrize(
    "loss, form",
    [pytest.param("sincere", "unrolled", marks=pytest.mark.slow), ("sincere", "scan"),
     pytest.param("nt_xent+supcon", "unrolled", marks=pytest.mark.slow)],
)
@pytest.mark.slow
def test_micro_batched_step_equals_full_batch_step_without_batch_statistics(loss, form):
    config = _vit_config(loss)
    batch = _batch(config)
    plain, logged_plain, _ = _steps(config, None, batch)
    cached, logged_cached, _ = _steps(config, 2, batch, form=form)  # 4 micro-batches of 2
    for key in ("loss", "probe_loss", "grad_norm", "alignment"):
        np.testing.assert_allclose(logged_cached[key], logged_plain[key], rtol=1e-5, atol=1e-6)
    assert logged_plain["grad_norm"] > 1e-3  # the step moves the parameters
    for a, b in zip(jax.tree.leaves(cached.params), jax.tree.leaves(plain.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # five steps of a ResNet-18; the equivalence above runs in make test
def test_micro_batched_step_trains_a_batch_norm_resnet_in_bfloat16_with_lars():
    config = tiny_config(name="sincere")  # ResNet-18 (width 1/8) with BN in encoder and head
    config.model.encoder.dtype = "bfloat16"
    config.model.head.dtype = "bfloat16"
    config.optimizer.name = "lars"
    config.optimizer.base_learning_rate = 0.3
    spec = parse(config)
    *_, initial = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=10 if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=22, global_batch_size=64, total_steps=6)
    initial = jax.device_get(initial)
    state, logged, losses = _steps(config, 4, _batch(config), num_steps=5)
    assert np.isfinite(losses).all() and losses[-1] < losses[0] - 0.05, losses
    assert logged["finite"] == 1.0
    moved = [np.abs(a - b).max() for a, b in zip(
        jax.tree.leaves(state.batch_stats), jax.tree.leaves(initial.batch_stats), strict=True)]
    assert min(moved) > 0  # every running statistic was updated


@pytest.mark.parametrize("loop", only_in_make_test(grad_cache.LOOPS, ("scan",)))
@pytest.mark.slow
def test_embed_matches_the_network_and_its_gradient(loop):
    net = ContrastiveModel(MLP(3, (8, 4), rngs=nnx.Rngs(0)), LinearHead(4, 2, rngs=nnx.Rngs(1)))
    graphdef, params = nnx.split(net)
    x = jax.random.normal(jax.random.key(2), (12, 3))
    w = jax.random.normal(jax.random.key(3), (12, 2))

    def loss(params, micro):
        net = nnx.merge(graphdef, params)
        if micro:
            _, z = grad_cache.embed(net, x, num_micro_batches=micro, key=jax.random.key(0),
                                    loop=loop)
        else:
            _, z = net(x)
        return jnp.sum(jnp.tanh(z) * w) + jnp.sum(z) ** 2  # couples all rows

    want = jax.grad(loss)(params, 0)
    for micro in (1, 3, 12):
        got = jax.grad(loss)(params, micro)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _conv_net():
    """A 3-stage CNN (no batch norm) with a linear head: activations dominate its memory."""

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.convs = nnx.List([nnx.Conv(c_in, c_out, (3, 3), rngs=rngs)
                                   for c_in, c_out in ((3, 16), (16, 16), (16, 16))])
            self.head = nnx.Linear(16, 8, rngs=rngs)

        def __call__(self, x):
            for conv in self.convs:
                x = jax.nn.relu(conv(x))
            features = x.mean(axis=(1, 2))
            return features, self.head(features)

    return Net(nnx.Rngs(0))


def _temp_bytes(rows, micro, loop):
    """Compiled temp memory of the gradient of a coupling loss of ``embed`` on ``rows`` images."""
    graphdef, params = nnx.split(_conv_net())

    def loss(params, x):
        net = nnx.merge(graphdef, params)
        if micro:
            _, z = grad_cache.embed(net, x, num_micro_batches=micro, key=jax.random.key(0),
                                    loop=loop)
        else:
            _, z = net(x)
        return jnp.sum(jax.nn.logsumexp(z @ z.T, axis=1))

    x = jax.ShapeDtypeStruct((rows, 16, 16, 3), jnp.float32)
    compiled = jax.jit(jax.grad(loss)).lower(params, x).compile()
    return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("loop", grad_cache.LOOPS)
@pytest.mark.slow
def test_embed_memory_stays_flat_as_the_batch_grows(loop):
    """4x the rows in 4x the micro-batches of 8: temp memory grows < 1.3x; plain grows > 3x."""
    small, large = _temp_bytes(32, 4, loop), _temp_bytes(128, 16, loop)
    plain_small, plain_large = _temp_bytes(32, 0, loop), _temp_bytes(128, 0, loop)
    assert plain_large > 3 * plain_small
    assert large < 1.3 * small, (small, large)
    assert large < plain_large / 2.5, (large, plain_large)


def test_a_bad_micro_batch_loop_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"config\.train\.micro_batch_loop.*'while'"):
        grad_cache.embed(_conv_net(), jnp.zeros((4, 8, 8, 3)), num_micro_batches=2,
                         key=jax.random.key(0), loop="while")
    config = tiny_config()
    config.train.micro_batch_loop = "while"
    with pytest.raises(ConfigError, match=r"micro_batch_loop"):
        loop.train(config, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("size, message", [(3, "must divide"), (-2, "positive int"),
                                           (2.5, "positive int")])
def test_bad_micro_batch_size_names_the_field(size, message):
    with pytest.raises(ConfigError, match=rf"config\.train\.micro_batch_size.*{message}"):
        grad_cache.num_micro_batches(8, size)
    assert grad_cache.num_micro_batches(8, 0) == grad_cache.num_micro_batches(8, None) == 0


@pytest.mark.parametrize("micro_batch_loop", only_in_make_test(grad_cache.LOOPS, ("scan",)))
@pytest.mark.slow
def test_a_resumed_micro_batched_run_ends_bit_identical(tmp_path, micro_batch_loop):
    """BN and dropout (the tiny conv encoder), 2 micro-batches per device: exact resume."""
    config = cli_config.tiny_config(total_steps=4, checkpoint_every=2)
    config.train.micro_batch_size = 2  # 32 examples over 8 devices: 2 micro-batches of 2
    config.train.micro_batch_loop = micro_batch_loop
    reference, resumed = str(tmp_path / "reference"), str(tmp_path / "resumed")
    with runs.tiny_encoder():
        loop.train(config, reference)
        shutil.copytree(reference, resumed)
        shutil.rmtree(os.path.join(resumed, CHECKPOINT_DIR, "4"))
        assert runs.checkpoint_steps(resumed) == [2]
        assert loop.train(config, resumed)["start_step"] == 2
    runs.assert_same_state(runs.read_state(reference, 4), runs.read_state(resumed, 4))


def test_a_bad_micro_batch_size_stops_the_run_before_the_workdir_exists(tmp_path):
    config = tiny_config()
    config.train.micro_batch_size = 3  # 64 examples over 8 devices: 8 per device
    with pytest.raises(ConfigError, match=r"micro_batch_size.*must divide the 8 examples"):
        loop.train(config, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")
