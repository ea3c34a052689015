"""The one FLOP count (contrastive_jax.train.flops): scan bodies, shard_map devices, and the
gradient-caching step against the plain one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from contrastive_jax import configs
from contrastive_jax.parallel import DATA_AXIS
from contrastive_jax.train import flops
from contrastive_jax.train.build import DataFacts, abstract_args, build
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import build_model


def test_scan_bodies_count_length_times_and_while_bodies_are_reported():
    a = jnp.ones((8, 4))

    def scanned(a):
        return jax.lax.scan(lambda c, x: (c + x @ a.T, None), jnp.zeros((8, 8)),
                            jnp.stack([a] * 5))[0]

    one = flops.count(lambda a: a @ a.T, a).flops
    assert one == 2 * 8 * 8 * 4
    assert flops.count(scanned, a) == (5 * one, 0)
    looped = flops.count(lambda a: jax.lax.while_loop(
        lambda c: c[1] < 3, lambda c: (c[0] @ a.T @ a, c[1] + 1), (a, 0))[0], a)
    assert looped.while_loops == 1


def test_a_shard_map_body_counts_once_per_device():
    """The body sees one device's rows (local shapes): the count is the whole program's."""
    mesh = Mesh(np.asarray(jax.devices()[:4]), (DATA_AXIS,))
    a = jnp.ones((16, 4))
    sharded = jax.shard_map(lambda x: x @ x.T, mesh=mesh, in_specs=P(DATA_AXIS),
                            out_specs=P(DATA_AXIS))
    assert flops.count(sharded, a).flops == 4 * (2 * 4 * 4 * 4)


def _small_resnet(micro_batch_size: int):
    config = configs.get("quickstart")
    config.model.encoder.name = "resnet18"
    config.model.encoder.width = 0.125
    config.model.head.hidden_features = 16
    config.model.head.out_features = 8
    config.data.image_size = 16
    config.data.global_batch_size = 32
    config.train.micro_batch_size = micro_batch_size
    return config


@pytest.mark.parametrize("loop, tolerance", [("scan", 1e-4), ("unrolled", 1e-2)])
@pytest.mark.slow
def test_gradient_caching_counts_every_micro_batch_and_one_extra_forward(loop, tolerance):
    """Micro-batched step = plain step + one forward of encoder and head over the batch.

    Both steps compute one forward and one backward of every row; gradient caching adds
    the embedding pass (pass 1 of :mod:`~contrastive_jax.train.grad_cache`), a forward of
    every row without its backward. Tolerance (of the step's 1.13e9 FLOPs here): ``"scan"``
    1e-4, its re-forward skips the head's last product, whose output the gradient does not
    need (2 x 64 rows x 16 x 8 = 16,384 FLOPs); ``"unrolled"`` 1e-2, its backward
    (``jax.vjp`` of each micro-batch) also computes the images' gradient, one more stem
    convolution (2 x 64 x 16^2 x 8 x 27 = 7,077,888 FLOPs, 0.6%)."""
    mesh = Mesh(np.asarray(jax.devices()[:2]), (DATA_AXIS,))
    counts = {}
    for m in (0, 4):
        config = _small_resnet(m)
        config.train.micro_batch_loop = loop
        run = build(parse(config), mesh, DataFacts(1000 * 32, 10, 16))
        counts[m] = flops.count(run.step, *abstract_args(run))
        assert counts[m].while_loops == 0
    config = _small_resnet(0)
    network = build_model(parse(config).model, seed=config.seed).network
    graphdef, state = nnx.split(network)
    rows = jax.ShapeDtypeStruct((32 * 2, 16, 16, 3), jnp.float32)
    forward = flops.count(lambda s, x: nnx.merge(graphdef, s)(x), state, rows).flops
    assert forward > 0
    assert counts[4].flops == pytest.approx(counts[0].flops + forward, rel=tolerance)
