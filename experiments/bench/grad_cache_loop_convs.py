"""Why the micro-batched ResNet step is slow on the CPU: convolutions inside a loop.

    XLA_FLAGS= python experiments/bench/grad_cache_loop_convs.py [--ways plain,unrolled+chain]

The gradient of ``sum(tanh(projections))`` of a CIFAR-stem ResNet-18 (width 0.5, linear
head, train mode) on 32 images of 32 px, one device, four ways: ``plain`` (one forward
pass); ``scan`` (4 micro-batches in a ``lax.scan``, activations kept); ``scan+remat`` (the
same under ``jax.checkpoint``, what :func:`contrastive_jax.train.grad_cache.embed` does);
``unrolled+remat`` (the 4 micro-batches as 4 calls under ``jax.checkpoint``, no loop);
``unrolled+chain`` (``contrastive_jax.train.grad_cache.embed`` with ``loop="unrolled"``:
4 calls chained by data dependencies so that XLA runs them one at a time, what the trainer
does by default).
Prints each one's compiled temp memory and the median of 3 timed calls after one untimed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from flax import nnx

from contrastive_jax import models
from contrastive_jax.train import grad_cache

MICRO = 4
WAYS = ("plain", "scan", "scan+remat", "unrolled+remat", "unrolled+chain")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ways", default=",".join(WAYS), help=f"some of {WAYS}")
    ways = parser.parse_args().ways.split(",")
    if not set(ways) <= set(WAYS):
        raise ValueError(f"`--ways` must name some of {WAYS}, got {ways}")
    config = models.default_encoder_config()
    config.width = 0.5
    encoder = models.create_encoder(config, rngs=nnx.Rngs(0))
    net = models.ContrastiveModel(
        encoder, models.LinearHead(encoder.num_features, 16, rngs=nnx.Rngs(1))
    )
    net.train()
    graphdef, params, rest = nnx.split(net, nnx.Param, ...)
    x = jax.random.normal(jax.random.key(0), (32, 32, 32, 3))

    def forward(params, rest, x):
        return nnx.merge(graphdef, params, rest, copy=True)(x)[1]

    remat = jax.checkpoint(forward, prevent_cse=False)

    def loss(params, rest, x, way):
        xs = x.reshape(MICRO, -1, *x.shape[1:])
        if way == "plain":
            z = forward(params, rest, x)
        elif way == "unrolled+chain":
            network = nnx.merge(graphdef, params, rest, copy=True)
            _, z = grad_cache.embed(network, x, num_micro_batches=MICRO, key=jax.random.key(0))
        elif way == "unrolled+remat":
            z = jnp.stack([remat(params, rest, xs[i]) for i in range(MICRO)])
        else:
            body = forward if way == "scan" else remat
            _, z = jax.lax.scan(lambda c, xi: (c, body(params, rest, xi)), None, xs)
        return jnp.sum(jnp.tanh(z))

    print("| way | temp MiB | s/call |")
    print("|---|---|---|")
    for way in ways:
        step = jax.jit(jax.grad(lambda p, r, x, way=way: loss(p, r, x, way)))
        compiled = step.lower(params, rest, x).compile()
        seconds = []
        for _ in range(4):
            started = time.perf_counter()
            jax.block_until_ready(compiled(params, rest, x))
            seconds.append(time.perf_counter() - started)
        temp = compiled.memory_analysis().temp_size_in_bytes / 2**20
        print(f"| {way} | {temp:.0f} | {statistics.median(seconds[1:]):.2f} |", flush=True)


if __name__ == "__main__":
    main()
