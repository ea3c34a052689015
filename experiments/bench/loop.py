"""The training loop against the bare step: how much of the devices' time the loop keeps.

    XLA_FLAGS= python experiments/bench/loop.py --devices 1 --steps 300     # quickstart config
    XLA_FLAGS= python experiments/bench/loop.py --devices 1 --steps 300 --device_cores 1
    XLA_FLAGS= python experiments/bench/loop.py --devices 8 --width 0.25 --batch 256
    XLA_FLAGS= python experiments/bench/loop.py --devices 1 --cold_warm     # compilation cache
    XLA_FLAGS= python experiments/bench/loop.py --devices 1 --checkpoint_cost --rounds 4

In one process (a child started with ``--xla_force_host_platform_device_count``
set to ``--devices``) and with the same config, in interleaved rounds:

* ``loop``: the real ``contrastive_jax.train.loop.train()`` for ``--steps``
  steps in a fresh work directory: the data pipeline with its augmentations,
  device prefetch, logging every ``log_every`` steps, checkpoints at the
  config's cadence (every 100 steps for the quickstart: with ``--steps 300``
  the saves and verifications at steps 100 and 200 are inside the timed span)
  and at the end. Its images/s is over the steps after the first, up to the
  last step's results: it leaves out the first step (tracing and compilation)
  and the end-of-run save (waiting for the last checkpoint and verifying it),
  both paid once per run; ``final_save_seconds`` reports the latter, and
  ``ratio_with_final_save`` the ratio with it counted.
* ``step``: the jitted train step alone, called ``--steps`` times on one
  global batch of the same pipeline already on the devices, blocking at the
  end only.
* ``loop_cached_input``: ``train()`` again, with the pipeline replaced by one
  precomputed host batch yielded every step (still put on the devices every
  step). On a CPU "device" the input pipeline's threads take cores from the
  step itself, which an accelerator's host would not; this variant shows the
  loop's own cost (syncs at log steps, prefetch, logging, checkpoints) apart
  from that.

``ratio = loop_images_per_s / step_images_per_s`` (medians over the rounds),
and ``cached_input_ratio`` likewise. On a machine shared with other jobs the
wall-clock rates move with the load between the runs, so each run also records
the process's CPU time per step after the first (``time.process_time``, all
threads: the step's own XLA threads, the pipeline's, Python's):
``cpu_ratio = step CPU s / loop CPU s`` per step is the share of the loop's CPU
work that is the step itself, which the load does not move much.
The loop also reports its host time per step outside the step call (input
drawn and put on the devices, bookkeeping; log and checkpoint steps left out),
the input's share of it, and the time spent inside the step call (dispatch).

``--device_cores N`` emulates an accelerator on the CPU: the CPU client's threads,
which run the compiled steps, are started on the first ``N`` cores this process
may use, and everything the host does (the Python loop, the input pipeline's
threads, logging, the checkpoints' writes and verifications) on the others. The
step and the loop then run on the same cores in every variant, and the ratio
shows whether the loop makes the device wait, apart from the host work taking
the device's cores, which an accelerator's host does not do. Without it (0, the
default) the step and the host share every core.

``--checkpoint_cost`` instead times the parts of a checkpoint of the config's
initial state (the checksum's first call and a later one, then per save the save
call, and the asynchronous write with the previous checkpoint's verification).

``--cold_warm`` instead runs ``python -m contrastive_jax.pretrain`` twice with
a fresh compilation cache directory and prints the first step's time, tracing
and compilation (or cache loading) of each run.

The last line printed is a JSON object with ``loop_images_per_s``,
``step_images_per_s`` and ``ratio`` (or the cold and warm timings).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CONFIG = os.path.join(ROOT, "experiments", "configs", "quickstart.py")


def load_config(path: str, steps: int, width: float | None, batch: int | None,
                cache_dir: str):
    spec = importlib.util.spec_from_file_location("bench_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    config.train.total_steps = steps
    if width is not None:
        config.model.encoder.width = width
    if batch is not None:
        config.data.global_batch_size = batch
    config.train.compilation_cache_dir = cache_dir
    return config


class _CpuClock:
    """Process CPU seconds from the loop's throughput clock start (after the first step) to the end."""

    def __init__(self) -> None:
        from contrastive_jax.train.metrics_log import MetricLogger

        self._cls = MetricLogger
        self._original = MetricLogger.start_clock
        self.started = None

    def __enter__(self):
        clock = self

        def start_clock(logger, step):
            clock.started = time.process_time()
            return clock._original(logger, step)

        self._cls.start_clock = start_clock
        return self

    def __exit__(self, *exc) -> None:
        self._cls.start_clock = self._original
        self.seconds = time.process_time() - self.started


def bare_step(config, steps: int) -> tuple[float, float]:
    """Images/s and CPU s per step of the jitted step alone on one pipeline batch on the devices."""
    import jax

    from contrastive_jax import data as data_lib
    from contrastive_jax.parallel import make_mesh, replicated
    from contrastive_jax.train import inputs, objective
    from contrastive_jax.train.spec import parse
    from contrastive_jax.train.step import init_state, make_train_step, nonfinite_record

    mesh = make_mesh()
    source = data_lib.load_source(config.data)
    batch_size = int(config.data.global_batch_size)
    steps_per_epoch = source.split("train").num_examples // batch_size
    terms = objective.parse_terms(config.loss)
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=source.num_classes if spec.train.online_probe else None,
        transfer=spec.transfer,
        steps_per_epoch=steps_per_epoch, global_batch_size=batch_size,
        total_steps=steps)
    state = jax.device_put(state, replicated(mesh))
    record = jax.device_put(nonfinite_record(terms), replicated(mesh))
    iterator = data_lib.make_pretrain_iterator(config.data, seed=config.seed, start_step=0,
                                               source=source)
    local = next(iterator)
    local = {k: v for k, v in local.items() if k in (*inputs.BATCH_FIELDS, "step")}
    local["stop"] = np.zeros(len(local["label"]), np.int32)
    batch = iterator.on_device(data_lib.make_global_batch(local, mesh))
    step_fn = make_train_step(graphdef, rest, tx, terms, schedule, mesh)
    state, logged, record = step_fn(state, batch, record)  # compile, warm up
    jax.block_until_ready(logged)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps - 1):
        state, logged, record = step_fn(state, batch, record)
    jax.block_until_ready((state, logged))
    return ((steps - 1) * batch_size / (time.perf_counter() - start),
            (time.process_time() - cpu) / (steps - 1))


class _FirstBatch:
    """The pipeline's first batch every step: the host's batch drawn once, the devices'
    views finished once (still put on the devices every step)."""

    def __init__(self, iterator) -> None:
        self._iterator = iterator
        self._first = next(iterator)
        self._finished = None

    def __iter__(self):
        return self

    def __next__(self):
        return self._first

    def on_device(self, arrays):
        if self._finished is None:
            self._finished = self._iterator.on_device(arrays)
        return self._finished


def cached_input_loop(config, workdir: str) -> dict:
    """``train()`` with every batch the pipeline's first one (no augmentation work per step)."""
    from contrastive_jax import data as data_lib

    original = data_lib.make_pretrain_iterator

    def repeat_first(*args, **kwargs):
        return _FirstBatch(original(*args, **kwargs))

    data_lib.make_pretrain_iterator = repeat_first
    try:
        return timed_train(config, workdir)
    finally:
        data_lib.make_pretrain_iterator = original


def timed_train(config, workdir: str) -> dict:
    """``train()``'s summary plus ``cpu_seconds_per_step`` after the first step."""
    from contrastive_jax.train import loop

    with _CpuClock() as cpu:
        summary = loop.train(config, workdir)
    return {**summary, "cpu_seconds_per_step": cpu.seconds / (config.train.total_steps - 1)}


def steady_rate(summary: dict, config) -> float:
    """Images/s of ``train()`` from the end of the first step to the last step's results
    (periodic logs and checkpoints inside; compilation and the end-of-run save outside)."""
    span = summary["seconds"] - summary["first_step_seconds"] - summary["final_save_seconds"]
    steps = config.train.total_steps - 1
    return steps * config.data.global_batch_size / span


def measure(args) -> dict:
    import jax


    work = tempfile.mkdtemp(prefix="bench_loop_")
    config = load_config(args.config, args.steps, args.width, args.batch,
                         os.path.join(work, "jax_cache"))
    rounds: list[dict] = []
    for r in range(args.rounds):
        summary = timed_train(config, os.path.join(work, f"run{r}"))
        step_rate, step_cpu = bare_step(config, args.steps)
        cached = cached_input_loop(config, os.path.join(work, f"cached{r}"))
        rounds.append({
            "loop_cpu_seconds_per_step": summary["cpu_seconds_per_step"],
            "step_cpu_seconds_per_step": step_cpu,
            "cached_input_cpu_seconds_per_step": cached["cpu_seconds_per_step"],
            "cpu_ratio": step_cpu / summary["cpu_seconds_per_step"],
            "cached_input_cpu_ratio": step_cpu / cached["cpu_seconds_per_step"],
            "loop_images_per_s": steady_rate(summary, config),
            "step_images_per_s": step_rate,
            "loop_cached_input_images_per_s": steady_rate(cached, config),
            "ratio": steady_rate(summary, config) / step_rate,
            "ratio_with_final_save": summary["images_per_s"] / step_rate,
            "cached_input_ratio": steady_rate(cached, config) / step_rate,
            "final_save_seconds": summary["final_save_seconds"],
            "cached_input_host_seconds_per_step": cached["host_seconds_per_step"],
            "host_seconds_per_step": summary["host_seconds_per_step"],
            "input_seconds_per_step": summary["input_seconds_per_step"],
            "step_call_seconds_per_step": summary["step_call_seconds_per_step"],
            "step_seconds": config.data.global_batch_size / step_rate,
            "first_step_seconds": summary["first_step_seconds"],
        })
        print(json.dumps({"round": r, **rounds[-1]}), file=sys.stderr, flush=True)
    median = {k: float(np.median([x[k] for x in rounds])) for k in rounds[0]}
    median["ratio"] = median["loop_images_per_s"] / median["step_images_per_s"]
    median["cached_input_ratio"] = (median["loop_cached_input_images_per_s"]
                                    / median["step_images_per_s"])
    median["cpu_ratio"] = median["step_cpu_seconds_per_step"] / median["loop_cpu_seconds_per_step"]
    median["cached_input_cpu_ratio"] = (median["step_cpu_seconds_per_step"]
                                        / median["cached_input_cpu_seconds_per_step"])
    return {
        "devices": jax.device_count(),
        "device_cores": args.device_cores,
        "batch": int(config.data.global_batch_size),
        "width": float(config.model.encoder.width),
        "steps": args.steps,
        "rounds": args.rounds,
        "round_ratios": [x["ratio"] for x in rounds],
        "round_cached_input_ratios": [x["cached_input_ratio"] for x in rounds],
        **median,
    }


def cold_warm(args) -> dict:
    """Two CLI runs sharing a fresh compilation cache: the first step's time cold and warm."""
    work = tempfile.mkdtemp(prefix="bench_cache_")
    cache = os.path.join(work, "jax_cache")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={args.devices}")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    result = {"devices": args.devices}
    for name in ("cold", "warm"):
        flags = [f"--config.train.total_steps={args.steps}",
                 f"--config.train.compilation_cache_dir={cache}"]
        if args.width is not None:
            flags.append(f"--config.model.encoder.width={args.width}")
        if args.batch is not None:
            flags.append(f"--config.data.global_batch_size={args.batch}")
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "contrastive_jax.pretrain", "--config", args.config,
             "--workdir", os.path.join(work, name), *flags],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{name} run failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        summary = json.loads(proc.stdout[proc.stdout.index("{"):])
        result[name] = {k: summary[k] for k in ("first_step_seconds", "trace_seconds",
                                                "compile_seconds", "compile_cache_hits")}
        result[name]["process_seconds"] = time.perf_counter() - started
        print(json.dumps({name: result[name]}), file=sys.stderr, flush=True)
    return result


def checkpoint_cost(args) -> dict:
    """Wall and CPU seconds of the parts of a checkpoint of the config's initial state.

    The first and a later content checksum (the first traces and compiles it), then
    ``--rounds`` saves through :class:`~contrastive_jax.train.checkpoint.Checkpointer`:
    the save call (what the step's thread waits for), then the asynchronous write
    after it together with the background verification of the previous checkpoint
    (from the second save on). CPU seconds are the process's, all threads.
    """
    import jax

    from contrastive_jax import data as data_lib
    from contrastive_jax.train.checkpoint import Checkpointer, state_checksum
    from contrastive_jax.train.spec import parse
    from contrastive_jax.train.step import init_state

    work = tempfile.mkdtemp(prefix="bench_ckpt_")
    config = load_config(args.config, args.steps, args.width, args.batch,
                         os.path.join(work, "jax_cache"))
    source = data_lib.load_source(config.data)
    batch = int(config.data.global_batch_size)
    spec = parse(config)
    *_, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=source.num_classes if spec.train.online_probe else None,
        transfer=spec.transfer,
        steps_per_epoch=10, global_batch_size=batch, total_steps=args.steps)

    def timed(fn) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - wall, time.process_time() - cpu

    leaves = jax.tree.leaves(state)
    result = {"arrays": len(leaves), "bytes": int(sum(x.nbytes for x in leaves)),
              "checksum_first": timed(lambda: state_checksum(state)),
              "checksum_later": timed(lambda: state_checksum(state)), "saves": []}
    checkpointer = Checkpointer(os.path.join(work, "run"), max_to_keep=2)
    for k in range(1, args.rounds + 1):
        call = timed(lambda k=k: checkpointer.save(k, state, {"step": k}))
        # The asynchronous write, and from the second save on the verification of the
        # previous checkpoint, which the save started beside it.
        rest = timed(checkpointer.wait)
        result["saves"].append({"call": call, "write_and_verify_previous": rest})
        print(json.dumps({"save": k, **result["saves"][-1]}), file=sys.stderr, flush=True)
    checkpointer.close()
    return result


#: Name prefix (``/proc/self/task/<tid>/comm``) of the CPU client's intra-op threads.
CLIENT_THREAD = "tf_XLAEigen"


def thread_cores(prefix: str) -> list[list[int]]:
    """The cores each thread of this process whose name starts with ``prefix`` may use.

    A thread that ends between the listing of ``/proc/self/task`` and the reading of its name
    or cores is left out (empty where there is no ``/proc``)."""
    from contrastive_jax.train.verify import thread_names

    cores = []
    for native_id, name in thread_names().items():
        if name.startswith(prefix):
            try:
                cores.append(sorted(os.sched_getaffinity(native_id)))
            except OSError:  # ProcessLookupError: the thread ended since it was listed
                continue
    return cores


def pin_device_cores(n: int) -> None:
    """Start JAX's CPU client on the first ``n`` of this process's cores, then move the
    calling thread (and so every thread it starts later) to the rest (``--device_cores``)."""
    cores = sorted(os.sched_getaffinity(0))
    if not 0 < n < len(cores):
        raise SystemExit(f"--device_cores {n}: this process may use {len(cores)} cores, so "
                         f"the devices can have 1 to {len(cores) - 1} of them and the host the rest")
    os.sched_setaffinity(0, cores[:n])
    import jax.numpy as jnp

    jnp.zeros(1).block_until_ready()  # the client's worker threads start here, on these cores
    os.sched_setaffinity(0, cores[n:])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="a config file with get_config()")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200, help="steps per loop run and step run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=float, default=None, help="override the encoder width")
    parser.add_argument("--batch", type=int, default=None, help="override the global batch")
    parser.add_argument("--cold_warm", action="store_true",
                        help="time the first step without and with the compilation cache")
    parser.add_argument("--checkpoint_cost", action="store_true",
                        help="time the parts of a checkpoint (--rounds saves) instead")
    parser.add_argument("--device_cores", type=int, default=0,
                        help="run the compiled steps on this many cores and the host's work on "
                             "the others (0: all share every core)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cold_warm:
        print(json.dumps(cold_warm(args)))
        return
    if args.child:
        if args.device_cores:
            pin_device_cores(args.device_cores)
        print(json.dumps(checkpoint_cost(args) if args.checkpoint_cost else measure(args)))
        return
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={args.devices}")
    proc = subprocess.run([sys.executable, __file__, "--child", *(argv or sys.argv[1:])],
                          env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the measurement failed (exit {proc.returncode})")
    print(lines[-1])


if __name__ == "__main__":
    main()
