"""Share of the pretraining step spent outside the encoder, and its compile time.

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
metrics and update. At full width that difference of two long, noisy times is
below the measurement's resolution, so the parts are also timed directly, each
jitted on its own (``loss``: value and gradient of the loss w.r.t. the
projections with its gather, plus the metrics, under ``shard_map``; ``update``:
gradient norm, optimiser update and finite check), and ``outside: direct =
(loss + update) / step``; ``--parts_only`` times just those. Compile time is
``lower`` + ``compile`` of the train step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def measure(num_devices: int, batch: int, repeats: int, width: float,
            parts_only: bool = False) -> dict:
    """Times step, encoder and the parts outside the encoder on ``num_devices`` devices.

    Returns a dict of seconds (``parts_only``: the outside parts alone, no step)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from contrastive_jax.parallel import DATA_AXIS, make_mesh
    from contrastive_jax.train import objective
    from contrastive_jax.train.config import default_config
    from contrastive_jax.train.spec import parse
    from contrastive_jax.train.step import init_state, make_train_step

    config = default_config()
    config.model.encoder.width = width
    mesh = make_mesh(num_devices)
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=10 if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=50000 // batch, global_batch_size=batch,
        total_steps=1000 * (50000 // batch))
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
    parts = _outside_parts(config, mesh, tx, state, batch, num_devices, rng, repeats)
    if parts_only:
        return {"devices": num_devices, "batch": batch, "width": width, **parts}

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
        **parts,
        "outside_direct_share": (parts["loss_s"] + parts["update_s"]) / step_s,
        "lower_s": lower_s,
        "compile_s": compile_s,
    }


def _outside_parts(config, mesh, tx, state, batch, num_devices, rng, repeats) -> dict:
    """Seconds of the step's parts outside the encoder, each jitted and timed on its own:

    * ``loss_s``: value and gradient (w.r.t. the projections) of the configured loss with
      its cross-device gather, plus the alignment/uniformity metrics, under ``shard_map``;
    * ``update_s``: gradient norm, optimiser update, ``apply_updates`` and the finite check
      on a parameter-shaped gradient.
    """
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from contrastive_jax import metrics
    from contrastive_jax.parallel import DATA_AXIS
    from contrastive_jax.train import objective

    terms = objective.parse_terms(config.loss)
    rows = 2 * batch
    projections = jax.device_put(
        jnp.asarray(rng.normal(size=(rows, 128)), jnp.float32), NamedSharding(mesh, P(DATA_AXIS))
    )
    ids = jax.device_put(jnp.repeat(jnp.arange(batch, dtype=jnp.int32), 2),
                         NamedSharding(mesh, P(DATA_AXIS)))
    labels = jax.device_put(jnp.repeat(jnp.asarray(rng.integers(0, 10, batch), jnp.int32), 2),
                            NamedSharding(mesh, P(DATA_AXIS)))

    def per_device(z, instance, label):
        def total(z):
            targets = objective.Targets(instance=instance, label=label, metadata=None)
            value, _ = objective.evaluate(terms, z, targets, axis_name=DATA_AXIS)
            return value

        value, grad = jax.value_and_grad(total)(z)
        alignment = jax.lax.pmean(metrics.alignment_from_labels(z, instance), DATA_AXIS)
        uniformity = jax.lax.pmean(metrics.uniformity(z), DATA_AXIS)
        return value, grad, alignment + uniformity

    loss_fn = jax.jit(jax.shard_map(
        per_device, mesh=mesh, in_specs=(P(DATA_AXIS),) * 3,
        out_specs=(P(), P(DATA_AXIS), P()),
    ))

    @jax.jit
    def update_fn(params, opt_state, grads):
        norm = optax.global_norm(grads)
        updates, opt_state = tx.update(grads, opt_state, params)
        new = optax.apply_updates(params, updates)
        finite = jnp.isfinite(norm)
        return jax.tree.map(lambda a, b: jnp.where(finite, a, b), (new, opt_state),
                            (params, opt_state))

    grads = jax.tree.map(lambda p: 1e-3 * jnp.ones_like(p), state.params)
    calls = {"loss_s": lambda: loss_fn(projections, ids, labels),
             "update_s": lambda: update_fn(state.params, state.opt_state, grads)}
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(repeats + 1):  # first round: compile and warm up, untimed
        for name, call in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(call())
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t[1:])) for name, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,8", help="comma-separated device counts")
    parser.add_argument("--batch", type=int, default=256, help="global batch of images")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=float, default=1.0, help="ResNet width multiplier")
    parser.add_argument("--parts_only", action="store_true",
                        help="time only the parts outside the encoder (seconds), not the step")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.devices.split(",")]
    if args.child:
        print(json.dumps(measure(counts[0], args.batch, args.repeats, args.width,
                                 args.parts_only)))
        return
    print(f"# ResNet-18 (CIFAR stem, width {args.width}), batch {args.batch} x 2 views, "
          f"SINCERE, LARS; median of {args.repeats}")
    if args.parts_only:
        print("| devices | loss + gather + metrics s | optimiser update s |")
        print("|---|---|---|")
    else:
        print("| devices | step s | encoder fwd+bwd s | outside: step - encoder | "
              "loss + gather + metrics s | update s | outside: direct | lower s | compile s |")
        print("|---|---|---|---|---|---|---|---|---|")
    for count in counts:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu",
                   XLA_FLAGS=f"--xla_force_host_platform_device_count={count}")
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--devices", str(count), "--batch",
             str(args.batch), "--repeats", str(args.repeats), "--width", str(args.width),
             *(["--parts_only"] if args.parts_only else [])],
            capture_output=True, text=True, env=env, check=False,
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            print(f"| {count} | failed (exit {proc.returncode}): {proc.stderr[-300:]} |")
            continue
        r = json.loads(lines[-1])
        if args.parts_only:
            print(f"| {count} | {r['loss_s']:.4f} | {r['update_s']:.4f} |", flush=True)
            continue
        print(f"| {count} | {r['step_s']:.2f} | {r['encoder_s']:.2f} | "
              f"{100 * r['outside_share']:.1f} % | {r['loss_s']:.4f} | {r['update_s']:.4f} | "
              f"{100 * r['outside_direct_share']:.2f} % | {r['lower_s']:.1f} | "
              f"{r['compile_s']:.1f} |", flush=True)

if __name__ == "__main__":
    main()
