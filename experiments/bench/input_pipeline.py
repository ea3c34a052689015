"""Input-pipeline throughput next to the train step's consumption rate (issue 3).

    XLA_FLAGS= python experiments/bench/input_pipeline.py                   # CIFAR-10 folder
    XLA_FLAGS= python experiments/bench/input_pipeline.py --dataset digits --batches 50

Measured in one process, one after the other on the same cores:

* ``pipeline``: two-view augmented images per second of
  ``contrastive_jax.data.make_pretrain_iterator`` (JPEG decoding from the image
  folder, SimCLR CIFAR augmentation, normalisation, batching), after a warm-up
  batch, over ``--batches`` batches of ``--batch`` images;
* ``train step``: images per second the jitted pretraining step consumes
  (default config: CIFAR-stem ResNet-18 + SimCLR-v2 head, SINCERE, LARS, on the
  same batches, already on the device), median over ``--steps`` steps.

``pipeline / train step`` > 1 means the pipeline is not the bottleneck. Both
share this machine's cores in a real run, so the ratio measured here, each
stage alone, is an upper bound on the headroom.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

from contrastive_jax import data
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import loop, objective
from contrastive_jax.train.config import default_config
from contrastive_jax.train.step import make_train_step


def pipeline_rate(config, batches: int) -> tuple[float, list[dict]]:
    """Two-view images/s of the pretraining iterator, and the batches it produced."""
    iterator = data.make_pretrain_iterator(config.data, seed=0, start_step=0)
    produced = [next(iterator)]  # warm-up: builds the tf.data graph, fills the prefetch buffer
    start = time.perf_counter()
    produced += [next(iterator) for _ in range(batches)]
    seconds = time.perf_counter() - start
    return batches * config.data.global_batch_size / seconds, produced


def train_step_rate(config, batches: list[dict], steps: int, num_classes: int) -> float:
    """Images/s of the jitted train step (median step time over ``steps`` steps)."""
    mesh = make_mesh()
    batch_size = config.data.global_batch_size
    graphdef, rest, tx, schedule, state = loop.init_state(
        config, num_classes, steps_per_epoch=100, global_batch_size=batch_size, total_steps=10**4
    )
    state = jax.device_put(state, replicated(mesh))
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule, mesh)
    fields = ("views", "label", "index")
    device_batches = [
        data.make_global_batch({k: b[k] for k in fields}, mesh) for b in batches[: steps + 1]
    ]
    state, logged = step(state, device_batches[0])  # compile
    jax.block_until_ready(logged)
    times = []
    for batch in device_batches[1:]:
        start = time.perf_counter()
        state, logged = step(state, batch)
        jax.block_until_ready(logged)
        times.append(time.perf_counter() - start)
    return batch_size / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="cifar10", help="data.dataset (default cifar10)")
    parser.add_argument("--batch", type=int, default=256, help="global batch (images)")
    parser.add_argument("--batches", type=int, default=20, help="pipeline batches timed")
    parser.add_argument("--steps", type=int, default=3, help="train steps timed")
    parser.add_argument("--width", type=float, default=1.0, help="ResNet-18 width multiplier")
    args = parser.parse_args()

    config = default_config()
    config.dataset = args.dataset
    config.batch_size = args.batch
    config.model.encoder.width = args.width
    source = data.load_source(config.data)
    images_per_s, batches = pipeline_rate(config, max(args.batches, args.steps))
    step_images_per_s = train_step_rate(config, batches, args.steps, source.num_classes)
    views = batches[0]["views"]
    print(f"dataset {source.name}, batch {args.batch}, views {views.shape[1:]} "
          f"{views.dtype}, {jax.device_count()} device(s)")
    print(f"pipeline:   {images_per_s:9.1f} two-view images/s")
    print(f"train step: {step_images_per_s:9.1f} images/s (ResNet-18 width {args.width})")
    print(f"ratio pipeline / train step: {images_per_s / step_images_per_s:.1f}")


if __name__ == "__main__":
    main()
