"""Share of the pretraining step spent outside the encoder, and its compile time (issue 7).

    XLA_FLAGS= python experiments/bench/train_step.py              # 1 and 8 devices
    XLA_FLAGS= python experiments/bench/train_step.py --devices 8 --batch 256 --repeats 3

For the default config (CIFAR-stem ResNet-18 + SimCLR-v2 head, SINCERE, LARS),
global batch ``--batch`` images x 2 views, each device count runs in its own
process (``--xla_force_host_platform_device_count``) and times, in interleaved
rounds (median of ``--repeats``):

* ``step``: the jitted train step of ``contrastive_jax.train.step`` (encoder
  forward and backward, loss with its gather, metrics, optimiser update);
* ``encoder``: the same ``shard_map`` over the same mesh running only the
  network forward and backward (``value_and_grad`` of a fixed linear function
  of the projections), batch statistics included.

``outside = (step - encoder) / step`` is the share spent on the loss, gather,
metrics and update. Compile time is ``lower`` + ``compile`` of the train step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def measure(num_devices: int, batch: int, repeats: int, width: float) -> dict:
    """Times step and encoder on ``num_devices`` devices; returns a dict of seconds."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from contrastive_jax.parallel import DATA_AXIS, make_mesh
    from contrastive_jax.train import objective
    from contrastive_jax.train.config import default_config
    from contrastive_jax.train.loop import init_state
    from contrastive_jax.train.step import make_train_step

    config = default_config()
    config.model.encoder.width = width
    mesh = make_mesh(num_devices)
    graphdef, rest, tx, schedule, state = init_state(
        config, 10, steps_per_epoch=50000 // batch, global_batch_size=batch,
        total_steps=1000 * (50000 // batch)
    )
    replicated = NamedSharding(mesh, P())
    sharded = NamedSharding(mesh, P(DATA_AXIS))
    state = jax.device_put(state, replicated)
    rng = np.random.default_rng(0)
    data = {
        "views": rng.normal(size=(batch, 2, 32, 32, 3)).astype(np.float32),
        "label": rng.integers(0, 10, batch).astype(np.int32),
        "index": np.arange(batch, dtype=np.int32),
    }
    data = {k: jax.device_put(v, sharded) for k, v in data.items()}
    step_fn = make_train_step(
        graphdef, rest, tx, objective.parse_terms(config.loss), schedule, mesh
    )
    start = time.perf_counter()
    lowered = step_fn.lower(state, data)
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start

    direction = jax.device_put(
        jnp.asarray(rng.normal(size=(2 * batch // num_devices, 128)), jnp.float32), replicated
    )

    def per_device(params, batch_stats, views):
        model = nnx.merge(graphdef, params, batch_stats, rest)
        _, projections = model.network(views.reshape((-1,) + views.shape[2:]))
        new_stats = jax.tree.map(
            lambda s: jax.lax.pmean(s, DATA_AXIS), nnx.state(model, nnx.BatchStat)
        )
        value = jax.lax.psum(jnp.sum(projections.astype(jnp.float32) * direction), DATA_AXIS)
        return value, new_stats

    def encoder_loss(params, batch_stats, views):
        return jax.shard_map(
            per_device, mesh=mesh, in_specs=(P(), P(), P(DATA_AXIS)), out_specs=(P(), P())
        )(params, batch_stats, views)

    encoder_fn = jax.jit(jax.value_and_grad(encoder_loss, has_aux=True))

    def run_step(s):
        s, logged = compiled(s, data)
        jax.block_until_ready(logged)
        return s

    state = run_step(state)  # warm up
    jax.block_until_ready(encoder_fn(state.params, state.batch_stats, data["views"]))
    times: dict[str, list[float]] = {"step": [], "encoder": []}
    for _ in range(repeats):
        start = time.perf_counter()
        state = run_step(state)
        times["step"].append(time.perf_counter() - start)
        start = time.perf_counter()
        jax.block_until_ready(encoder_fn(state.params, state.batch_stats, data["views"]))
        times["encoder"].append(time.perf_counter() - start)
    step_s = float(np.median(times["step"]))
    encoder_s = float(np.median(times["encoder"]))
    return {
        "devices": num_devices,
        "batch": batch,
        "width": width,
        "step_s": step_s,
        "encoder_s": encoder_s,
        "outside_share": (step_s - encoder_s) / step_s,
        "lower_s": lower_s,
        "compile_s": compile_s,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,8", help="comma-separated device counts")
    parser.add_argument("--batch", type=int, default=256, help="global batch of images")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=float, default=1.0, help="ResNet width multiplier")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.devices.split(",")]
    if args.child:
        print(json.dumps(measure(counts[0], args.batch, args.repeats, args.width)))
        return
    print(f"# ResNet-18 (CIFAR stem, width {args.width}), batch {args.batch} x 2 views, "
          f"SINCERE, LARS; median of {args.repeats}")
    print("| devices | step s | encoder fwd+bwd s | outside encoder | lower s | compile s |")
    print("|---|---|---|---|---|---|")
    for count in counts:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu",
                   XLA_FLAGS=f"--xla_force_host_platform_device_count={count}")
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--devices", str(count), "--batch",
             str(args.batch), "--repeats", str(args.repeats), "--width", str(args.width)],
            capture_output=True, text=True, env=env, check=False,
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            print(f"| {count} | failed (exit {proc.returncode}): {proc.stderr[-300:]} |")
            continue
        r = json.loads(lines[-1])
        print(f"| {count} | {r['step_s']:.2f} | {r['encoder_s']:.2f} | "
              f"{100 * r['outside_share']:.1f} % | {r['lower_s']:.1f} | {r['compile_s']:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
