"""Memory and time of the train step with and without gradient caching (micro-batches).

    XLA_FLAGS= python experiments/bench/grad_cache.py
    XLA_FLAGS= python experiments/bench/grad_cache.py --models resnet18 --batches 32,128 \
        --micro 8 --repeats 2 --modes plain,unrolled

For each encoder (``resnet18``: the CIFAR-stem ResNet-18; ``vit_ti``: ViT-Ti/4 at the
image side ``--image_size``, both with the SimCLR-v2 head, SINCERE, LARS, one device),
each global batch of ``--batches`` (examples of 2 views) and each mode of ``--modes``
(``plain``: ``config.train.micro_batch_size = 0``; ``unrolled`` and ``scan``: ``--micro``
examples per micro-batch with that ``config.train.micro_batch_loop``),
the jitted train step of ``contrastive_jax.train.step`` is lowered and compiled once and
reports:

* ``temp MiB``: ``compiled.memory_analysis().temp_size_in_bytes``, the scratch memory XLA
  allocates for the step beyond its arguments and outputs (activations, gradients,
  workspace): the part of the peak that grows with the batch. On CPU this is the
  compiler's buffer assignment, not a measured resident size;
* ``args MiB``: the arguments (state and batch), the same for both modes;
* ``s/step`` and ``ms/image``: the median of ``--repeats`` timed steps after one untimed
  step (an image is one view).

For each micro-batched mode, each model's last lines print the plain-to-micro-batched
temp-memory ratio at the largest batch, the micro-batched step's temp-memory growth as the
batch grows from the first to the last of ``--batches``, and the micro-batched-to-plain
time per image at each batch.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

MODELS = {"resnet18": {"name": "resnet18"}, "vit_ti": {"name": "vit_ti4"}}
MIB = 2**20


def measure(model: str, batch: int, mode: str, micro: int, image_size: int,
            repeats: int) -> dict:
    """Compiles and times one step; returns its memory analysis and time."""
    import jax

    from contrastive_jax import data
    from contrastive_jax.parallel import make_mesh, replicated
    from contrastive_jax.train import objective
    from contrastive_jax.train.config import default_config
    from contrastive_jax.train.spec import parse
    from contrastive_jax.train.step import init_state, make_train_step

    config = default_config()
    config.model.encoder.update(MODELS[model])
    if model == "vit_ti":
        config.model.encoder.image_size = image_size
    mesh = make_mesh(1)
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=10 if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=100, global_batch_size=batch, total_steps=1000)
    state = jax.device_put(state, replicated(mesh))
    rng = np.random.default_rng(0)
    arrays = data.make_global_batch({
        "views": rng.normal(size=(batch, 2, image_size, image_size, 3)).astype(np.float32),
        "label": rng.integers(0, 10, batch).astype(np.int32),
        "index": np.arange(batch, dtype=np.int32),
    }, mesh)
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule,
                           mesh, micro_batch_size=0 if mode == "plain" else micro,
                           micro_batch_loop="unrolled" if mode == "plain" else mode)
    started = time.perf_counter()
    compiled = step.lower(state, arrays).compile()
    compile_s = time.perf_counter() - started
    analysis = compiled.memory_analysis()
    seconds = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        state, logged = compiled(state, arrays)
        logged["loss"].block_until_ready()
        seconds.append(time.perf_counter() - started)
    step_s = statistics.median(seconds[1:])
    return {
        "model": model, "batch": batch, "mode": mode, "micro": micro, "temp_mib": analysis.temp_size_in_bytes / MIB,
        "args_mib": analysis.argument_size_in_bytes / MIB, "compile_s": compile_s,
        "step_s": step_s, "ms_per_image": 1e3 * step_s / (2 * batch),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,vit_ti")
    parser.add_argument("--batches", default="32,128", help="global batches (examples)")
    parser.add_argument("--micro", type=int, default=8, help="examples per micro-batch")
    parser.add_argument("--image_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--modes", default="plain,unrolled,scan",
                        help="plain and micro-batch loop forms (unrolled, scan); plain first")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    modes = args.modes.split(",")
    if modes[0] != "plain" or not set(modes) <= {"plain", "unrolled", "scan"}:
        raise ValueError(f"`--modes` must start with plain and name unrolled/scan, got {modes}")
    print("| model | batch | mode | temp MiB | args MiB | compile s | s/step | ms/image |")
    print("|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        rows = {}
        for batch in batches:
            for mode in modes:
                r = measure(model, batch, mode, args.micro, args.image_size, args.repeats)
                rows[batch, mode] = r
                print(f"| {model} | {batch} | {mode}"
                      f"{'' if mode == 'plain' else f' (m={args.micro})'} | {r['temp_mib']:.0f} | "
                      f"{r['args_mib']:.0f} | {r['compile_s']:.1f} | {r['step_s']:.2f} | "
                      f"{r['ms_per_image']:.1f} |", flush=True)
        first, last = batches[0], batches[-1]
        for mode in modes[1:]:
            time_ratios = ", ".join(
                f"B={b}: {rows[b, mode]['ms_per_image'] / rows[b, 'plain']['ms_per_image']:.2f}x"
                for b in batches
            )
            print(f"{model} {mode}: plain/{mode} temp memory at B={last}: "
                  f"{rows[last, 'plain']['temp_mib'] / rows[last, mode]['temp_mib']:.1f}x; "
                  f"{mode} temp memory B={first} -> B={last}: "
                  f"{rows[first, mode]['temp_mib']:.0f} -> {rows[last, mode]['temp_mib']:.0f} MiB"
                  f" ({rows[last, mode]['temp_mib'] / rows[first, mode]['temp_mib']:.2f}x;"
                  f" plain {rows[last, 'plain']['temp_mib'] / rows[first, 'plain']['temp_mib']:.2f}x);"
                  f" {mode}/plain time per image: {time_ratios}", flush=True)

if __name__ == "__main__":
    main()
