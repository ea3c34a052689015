"""The pretraining loop: build, resume, step, log, checkpoint, stop cleanly.

``train(config, workdir)`` resumes from the newest readable checkpoint in
``workdir`` without being asked, saves every ``config.train.checkpoint_every``
steps (asynchronously) and at the end, and on SIGTERM saves the current step and
raises :class:`Preempted`.

The host runs ahead of the devices. Between log and checkpoint steps it reads
nothing back from them: the non-finite guard stays on the devices (a
:class:`~contrastive_jax.train.step.NonFinite` record the step updates, read at
the next log or checkpoint step), the next ``config.train.prefetch`` batches
are put on the devices while the current step runs, and the SIGTERM flag
travels with each batch. With one process the flag is the host's own, so no
read is needed; with several, each step returns the flag's maximum over all
processes and the host reads it one step late, after dispatching the next
step, so every process stops after the same step while the devices stay busy.
Only log and checkpoint steps (and the first step of a run, timed to leave
compilation out of the throughput) wait for the devices.

The step is compiled once per run, through JAX's persistent compilation cache
(``config.train.compilation_cache_dir``), so a restarted run loads the
executable instead of compiling it. ``config.train.profile_steps`` writes a
``jax.profiler`` trace of a range of steps next to the TensorBoard events.

A resumed run is the run it would have been: the input pipeline yields the
batches of a pure function of (seed, step) from the restored step on, dropout
keys derive from (seed, step, device) (:mod:`.step`), and the checkpoint holds
parameters, batch statistics and optimiser state. Before any array is read, the
checkpoint's model config and state structure are compared with the current
config (:class:`ConfigMismatch`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from contrastive_jax import data as data_lib
from contrastive_jax import models
from contrastive_jax.errors import ConfigError
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import grad_cache, objective, optim
from contrastive_jax.train.checkpoint import (
    Checkpointer,
    CheckpointError,
    abstract_like,
    structure_signature,
)
from contrastive_jax.train.knn_monitor import KnnMonitor
from contrastive_jax.train.logging import CollapseDetector, MetricLogger
from contrastive_jax.train.step import (
    PretrainModel,
    TrainState,
    make_train_step,
    nonfinite_record,
    split_model,
)

CONFIG_FILE = "config.json"
#: Fields of a pretraining batch that reach the device.
BATCH_FIELDS = ("views", "label", "index", "metadata")

#: Where ``config.train.compilation_cache_dir="auto"`` puts JAX's compilation cache
#: (under ``$XDG_CACHE_HOME``, by default ``~/.cache``) unless JAX already has one.
AUTO_CACHE = ("contrastive_jax", "jax_compilation_cache")
#: Sub-directory of the work directory for TensorBoard events and profiler traces.
TENSORBOARD_DIR = "tensorboard"

#: Exit codes of ``python -m contrastive_jax.pretrain``.
EXIT_PREEMPTED = 75  # saved on SIGTERM; restart to continue (EX_TEMPFAIL)
EXIT_NONFINITE = 65  # loss or gradient not finite (EX_DATAERR)
EXIT_CHECKPOINT = 74  # a checkpoint could not be written or read (EX_IOERR)


class Preempted(Exception):
    """SIGTERM arrived; the current step was checkpointed."""

    def __init__(self, step: int) -> None:
        super().__init__(f"preempted by SIGTERM; checkpoint saved at step {step}")
        self.step = step


class NonFiniteLoss(FloatingPointError):
    """A step produced a NaN or inf loss or gradient."""


class ConfigMismatch(ValueError):
    """The checkpoint in the work directory was written with an incompatible config."""


def build_model(config: ml_collections.ConfigDict, num_classes: int) -> PretrainModel:
    """Encoder + head (+ optional probe) from ``config.model``, seeded by ``config.seed``."""
    rngs = nnx.Rngs(config.seed)
    encoder = models.create_encoder(config.model.encoder, rngs=rngs)
    head = models.create_head(config.model.head, encoder.num_features, rngs=rngs)
    network = models.ContrastiveModel(encoder, head)
    probe_classes = num_classes if config.train.online_probe else None
    return PretrainModel(network, encoder.num_features, probe_classes, rngs=rngs)


def init_state(
    config: ml_collections.ConfigDict,
    num_classes: int,
    *,
    steps_per_epoch: int,
    global_batch_size: int,
    total_steps: int,
):
    """A fresh (graphdef, rest, tx, schedule, TrainState) for ``config``."""
    model = build_model(config, num_classes)
    model.train()
    graphdef, params, batch_stats, rest = split_model(model)
    tx, schedule = optim.make_optimizer(
        config.optimizer,
        params,
        steps_per_epoch=steps_per_epoch,
        global_batch_size=global_batch_size,
        total_steps=total_steps,
    )
    state = TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        batch_stats=batch_stats,
        opt_state=tx.init(params),
        rng=jax.random.key_data(jax.random.key(config.seed)),
    )
    return graphdef, rest, tx, schedule, state


def _model_fingerprint(config: ml_collections.ConfigDict) -> dict:
    return json.loads(config.model.to_json())


def _config_diff(saved: dict, current: dict) -> list[str]:
    """``part.key: checkpoint X vs config Y`` for every differing field of two nested dicts."""
    return sorted(
        f"{part}.{key}: checkpoint {saved.get(part, {}).get(key)!r} vs config "
        f"{current.get(part, {}).get(key)!r}"
        for part in set(saved) | set(current)
        for key in set(saved.get(part, {})) | set(current.get(part, {}))
        if saved.get(part, {}).get(key) != current.get(part, {}).get(key)
    )


def _check_compatible(
    config: ml_collections.ConfigDict, signature: list[str], meta: dict, step: int
) -> None:
    """Raises ConfigMismatch unless the checkpoint's model config and state structure match."""
    saved = meta.get("model")
    current = _model_fingerprint(config)
    if saved is not None and saved != current:
        raise ConfigMismatch(
            f"the checkpoint at step {step} was written with a different model config "
            f"({'; '.join(_config_diff(saved, current))}); use a new --workdir or restore "
            "the old config"
        )
    saved_signature = meta.get("state_signature")
    if saved_signature is not None and saved_signature != signature:
        first = next(
            (f"checkpoint {a!r} vs config {b!r}" for a, b in zip(saved_signature, signature, strict=False)
             if a != b),
            f"checkpoint {len(saved_signature)} arrays vs config {len(signature)}",
        )
        raise ConfigMismatch(
            f"the checkpoint at step {step} holds a training state of a different structure "
            f"(optimizer or online probe changed? first difference: {first}); use a new "
            "--workdir or restore the old config"
        )


def _prepare_workdir(workdir: str) -> str:
    workdir = os.path.abspath(workdir)
    try:
        os.makedirs(workdir, exist_ok=True)
        probe = os.path.join(workdir, f".write-test-{os.getpid()}")
        with open(probe, "w", encoding="utf-8") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as err:
        raise OSError(f"work directory {workdir} is not writable: {err}") from err
    return workdir


class _SigtermFlag:
    """Turns SIGTERM into a flag the loop polls (main thread only).

    The loop attaches the flag to each batch as it is drawn and feeds it into
    the step (the ``stop`` batch field), whose collectives tell every process
    if any process was signalled, so all of them save the same step together.
    """

    def __init__(self) -> None:
        self.raised = False
        self._previous = None

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        except ValueError:  # not the main thread: leave signals alone
            self._previous = None
        return self

    def _handle(self, signum, frame) -> None:
        self.raised = True

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def _nonfinite_text(logged: dict[str, float]) -> str:
    return ", ".join(
        f"{k}={v:.6g}" for k, v in logged.items() if k.startswith("loss") or k == "grad_norm"
    )


def configure_compilation_cache(directory: str) -> str | None:
    """Points JAX's persistent compilation cache at ``directory``; returns the cache in use.

    ``"auto"``: keep the cache JAX is already configured with (the
    ``JAX_COMPILATION_CACHE_DIR`` environment variable or ``jax.config``), else
    use ``$XDG_CACHE_HOME/contrastive_jax/jax_compilation_cache`` (by default
    under ``~/.cache``). ``""``: leave JAX's settings alone. Any other value: that
    directory. Entries are keyed by the program, the devices and the JAX
    version, so runs of other configs can share one directory; JAX stores only
    programs that took at least ``jax_persistent_cache_min_compile_time_secs``
    (1 s by default) to compile.
    """
    current = jax.config.values.get("jax_compilation_cache_dir") or None
    if directory == "auto":
        if current:
            return current
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        directory = os.path.join(base, *AUTO_CACHE)
    elif not directory:
        return current
    directory = os.path.abspath(os.path.expanduser(directory))
    if directory != current:
        from jax.experimental.compilation_cache import compilation_cache

        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as err:
            raise OSError(
                f"config.train.compilation_cache_dir={directory} cannot be created ({err}); "
                'pass another directory, or "" to leave the compilation cache off'
            ) from err
        compilation_cache.set_cache_dir(directory)
        compilation_cache.reset_cache()  # the next compilation opens the new directory
    return directory


def _warmup_steps(optimizer: ml_collections.ConfigDict, steps_per_epoch: int) -> int:
    """The learning-rate warm-up in steps (``warmup_steps``, else ``warmup_epochs``)."""
    if optimizer.get("warmup_steps") is not None:
        return int(optimizer.warmup_steps)
    return round(float(optimizer.get("warmup_epochs", 0.0)) * steps_per_epoch)


def _profile_range(config: ml_collections.ConfigDict, total_steps: int) -> tuple[int, int] | None:
    """``config.train.profile_steps`` as (first, last) 1-based steps, or None."""
    steps = tuple(config.train.get("profile_steps") or ())
    if not steps:
        return None
    if len(steps) != 2 or not all(isinstance(s, int) for s in steps) or not (
        1 <= steps[0] <= steps[1] <= total_steps
    ):
        raise ValueError(
            f"config.train.profile_steps={steps!r} must be two steps (first, last) with "
            f"1 <= first <= last <= {total_steps} (the run's total steps), e.g. "
            "--config.train.profile_steps='(20, 25)'"
        )
    return steps


def _several_processes() -> bool:
    return jax.process_count() > 1


class _Batch(NamedTuple):
    arrays: dict[str, jax.Array]  # the global batch, on the devices
    stop: bool  # this process's SIGTERM flag when the batch was drawn


class _DevicePrefetch:
    """Global batches put on the devices ahead of the step that consumes them.

    ``take()`` returns the next batch; ``fill()`` (called right after a step is
    dispatched) draws and transfers batches until ``depth`` are waiting, so the
    transfers overlap the running step. Drawing happens on the calling (main)
    thread: each batch carries the SIGTERM flag as it was when it was drawn.
    ``depth`` 0 transfers each batch when it is taken.
    """

    def __init__(self, local_batches: Iterator[dict], mesh, sigterm: _SigtermFlag, *,
                 depth: int, remaining: int) -> None:
        self._local = local_batches
        self._mesh = mesh
        self._sigterm = sigterm
        self.depth = depth
        self._remaining = remaining  # batches still to draw
        self._queue: collections.deque[_Batch] = collections.deque()
        self.seconds = 0.0  # host time spent drawing and transferring

    def _draw(self) -> None:
        started = time.perf_counter()
        local = {k: v for k, v in next(self._local).items() if k in BATCH_FIELDS}
        stop = self._sigterm.raised
        local["stop"] = np.full(len(local["label"]), stop, np.int32)
        self._queue.append(_Batch(data_lib.make_global_batch(local, self._mesh), stop))
        self._remaining -= 1
        self.seconds += time.perf_counter() - started

    def fill(self) -> None:
        while len(self._queue) < self.depth and self._remaining > 0:
            self._draw()

    def take(self) -> _Batch:
        if not self._queue:
            self._draw()
        return self._queue.popleft()


class _CompileTimer:
    """Seconds JAX spends tracing/lowering and compiling (or loading from the cache) while active."""

    _TRACE = ("/jax/core/compile/jaxpr_trace_duration",
              "/jax/core/compile/jaxpr_to_mlir_module_duration")
    _COMPILE = "/jax/core/compile/backend_compile_duration"

    def __init__(self) -> None:
        self.trace_seconds = 0.0
        self.compile_seconds = 0.0
        self.cache_hits = 0

    def _duration(self, event: str, seconds: float, **kwargs) -> None:
        if event in self._TRACE:
            self.trace_seconds += seconds
        elif event == self._COMPILE:
            self.compile_seconds += seconds

    def _event(self, event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.cache_hits += 1

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        jax.monitoring.register_event_listener(self._event)
        return self

    def __exit__(self, *exc) -> None:
        jax.monitoring.unregister_event_duration_listener(self._duration)
        jax.monitoring.unregister_event_listener(self._event)


def train(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Pretrains (or resumes) according to ``config`` in ``workdir``; returns a summary.

    Raises:
      Preempted: SIGTERM arrived; the step reached was checkpointed.
      NonFiniteLoss: a step's loss or gradient was NaN/inf (without
        ``config.train.skip_nonfinite``); the last good checkpoint is kept.
      ConfigMismatch: the work directory's checkpoint has another model/state structure.
      CheckpointError: a checkpoint could not be written (full disk, ...), or
        none of the checkpoints present could be read.
      OSError: the work directory is not writable.
      ValueError: a bad config or input (e.g. a corrupt image file).
    """
    with _SigtermFlag() as sigterm:
        return _train(config, workdir, sigterm)


def _train(config: ml_collections.ConfigDict, workdir: str, sigterm: _SigtermFlag) -> dict:
    cache_dir = configure_compilation_cache(str(config.train.get("compilation_cache_dir", "auto")))
    terms = objective.parse_terms(config.loss)
    mesh = make_mesh()
    source = data_lib.load_source(config.data)
    global_batch = int(config.data.global_batch_size)
    if global_batch % jax.device_count():
        raise ConfigError(
            f"config.data.global_batch_size={global_batch} must be divisible by the "
            f"{jax.device_count()} devices"
        )
    steps_per_epoch = source.split("train").num_examples // global_batch
    if steps_per_epoch < 1:
        raise ConfigError(
            f"config.data.global_batch_size={global_batch} exceeds the "
            f"{source.split('train').num_examples} training examples of {source.name!r}"
        )
    total_steps = int(config.train.total_steps or config.train.epochs * steps_per_epoch)
    profile = _profile_range(config, total_steps)
    prefetch_depth = int(config.train.get("prefetch", 2))
    if prefetch_depth < 0:
        raise ConfigError(f"config.train.prefetch must be >= 0 batches, got {prefetch_depth}")
    collapse = CollapseDetector(
        threshold=float(config.train.get("collapse_threshold", -0.2)),
        patience=int(config.train.get("collapse_patience", 3)),
        after_step=_warmup_steps(config.optimizer, steps_per_epoch),
    )
    grad_cache.num_micro_batches(  # a bad micro_batch_size fails here, before the workdir exists
        global_batch // jax.device_count(), config.train.get("micro_batch_size"))
    knn = (KnnMonitor(config, source, total_steps=total_steps)
           if config.train.get("eval_every") else None)  # the online kNN monitor, or None
    # Only now, with the config and the data checked, is the work directory created: a run
    # refused for its config or input leaves nothing behind.
    workdir = _prepare_workdir(workdir)

    graphdef, rest, tx, schedule, state = init_state(
        config,
        source.num_classes,
        steps_per_epoch=steps_per_epoch,
        global_batch_size=global_batch,
        total_steps=total_steps,
    )
    state = jax.device_put(state, replicated(mesh))
    signature = structure_signature(state)

    checkpointer = Checkpointer(workdir, max_to_keep=config.train.keep_checkpoints)
    present = checkpointer.steps()
    try:
        restored = checkpointer.restore_latest(
            abstract_like(state),
            check_meta=lambda meta, step: _check_compatible(config, signature, meta, step),
        )
        if restored is None and present:
            raise CheckpointError(
                f"every checkpoint in {checkpointer.directory} (steps {present}) is damaged; "
                f"they were moved to {checkpointer.damaged_directory}. Run again to start "
                "from step 0"
            )
    except BaseException:
        checkpointer.close()
        raise
    skipped = 0  # non-finite steps skipped so far in the run (carried over on resume)
    if restored is not None:
        state, restored_meta = restored
        skipped = int(restored_meta.get("nonfinite_steps", 0))
    start_step = int(state.step)
    if jax.process_index() == 0:
        with open(os.path.join(workdir, CONFIG_FILE), "w", encoding="utf-8") as f:
            f.write(config.to_json_best_effort(indent=2))

    step_fn = make_train_step(graphdef, rest, tx, terms, schedule, mesh,
                              micro_batch_size=config.train.get("micro_batch_size"))
    record = jax.device_put(nonfinite_record(terms, skipped), replicated(mesh))
    batches = _DevicePrefetch(
        data_lib.make_pretrain_iterator(
            config.data, seed=config.seed, start_step=start_step, source=source
        ),
        mesh,
        sigterm,
        depth=prefetch_depth,
        remaining=total_steps - start_step,
    )
    logger = MetricLogger(
        workdir, total_steps=total_steps, start_step=start_step, images_per_step=global_batch
    )
    if start_step:
        logger.message(f"resumed from the checkpoint at step {start_step} in {workdir}")
    agree_late = _several_processes()  # the stop flag read one step late, from the devices

    def meta(step: int, nonfinite_steps: int) -> dict:
        return {
            "step": step,
            "seed": int(config.seed),
            "num_classes": source.num_classes,
            "model": _model_fingerprint(config),
            "state_signature": signature,
            "nonfinite_steps": nonfinite_steps,
        }

    def read_guard(done: int, logged: dict) -> tuple[dict[str, float], int]:
        """At a log or checkpoint step: the step's metrics and the non-finite count.

        Raises NonFiniteLoss (without skip_nonfinite) if a step since the last
        read was not finite; with it, reports the skipped steps and clears the
        record's first step.
        """
        nonlocal record, reported
        values, (count, first, first_values) = jax.device_get((logged, record))
        count, first = int(count), int(first)
        if first:
            text = _nonfinite_text({k: float(v) for k, v in first_values.items()})
            if not config.train.skip_nonfinite:
                with contextlib.suppress(CheckpointError):  # a save in flight holds a good state
                    checkpointer.wait()
                good = checkpointer.steps()
                raise NonFiniteLoss(
                    f"non-finite loss or gradient at step {first} ({text}); the last good "
                    f"checkpoint (step {good[-1] if good else 'none'}) is kept in "
                    f"{checkpointer.directory}. Set --config.train.skip_nonfinite=True "
                    "to skip such steps instead."
                )
            logger.message(
                f"skipped non-finite steps: {count - reported} up to step {done}, the first at "
                f"step {first} ({text}); {count} in this run"
            )
            record = jax.device_put(nonfinite_record(terms, count), replicated(mesh))
        reported = count
        return {k: float(v) for k, v in values.items()}, count

    reported = skipped
    timing = {"trace_seconds": 0.0, "compile_seconds": 0.0, "first_step_seconds": 0.0,
              "compile_cache_hits": 0}
    step_call = 0.0  # host seconds inside the step call (dispatch), after the first step
    check_seconds = 0.0  # host seconds at log and checkpoint steps (waiting, logging, saving)
    last: dict[str, float] = {}
    pending_stop = None  # multi-process: the previous step's agreed stop flag, on the devices
    profiling = False
    first_log = True
    started = time.perf_counter()
    clock = started
    try:
        batches.fill()
        for step in range(start_step, total_steps):
            done = step + 1
            batch = batches.take()
            if profile and done == profile[0]:
                jax.profiler.start_trace(os.path.join(workdir, TENSORBOARD_DIR))
                profiling = True
            if step == start_step:
                with _CompileTimer() as compiled:
                    state, logged, record = step_fn(state, batch.arrays, record)
                    logged["loss"].block_until_ready()  # once per run: compilation left out
                    checkpointer.compile_checksum(state)
                clock = time.perf_counter()
                timing.update(trace_seconds=compiled.trace_seconds,
                              compile_seconds=compiled.compile_seconds,
                              first_step_seconds=clock - started,
                              compile_cache_hits=compiled.cache_hits)
                logger.start_clock(done)
            else:
                called = time.perf_counter()
                state, logged, record = step_fn(state, batch.arrays, record)
                step_call += time.perf_counter() - called
            batches.fill()  # the next batches go to the devices while this step runs
            if profiling and done == profile[1]:
                logged["loss"].block_until_ready()
                jax.profiler.stop_trace()
                profiling = False
                logger.message(
                    f"profile of steps {profile[0]}-{profile[1]} written to "
                    f"{os.path.join(workdir, TENSORBOARD_DIR)}; view it with tensorboard "
                    f"--logdir {os.path.join(workdir, TENSORBOARD_DIR)} (Profile tab)"
                )
            if agree_late:
                preempted = pending_stop is not None and bool(pending_stop)
                pending_stop = logged["stop"]
                pending_stop.copy_to_host_async()
            else:
                preempted = batch.stop
            is_log = done % config.train.log_every == 0 or done == total_steps
            is_checkpoint = done % config.train.checkpoint_every == 0 or done == total_steps
            if not (is_log or is_checkpoint or preempted):
                continue
            checked = time.perf_counter()
            values, skipped = read_guard(done, logged)
            if is_log:
                last = dict(values)
                last.update(logger.throughput(done))
                if knn is not None and knn.due(done):  # its time left out of the throughput
                    last.update(knn(state, graphdef, rest))
                    logger.start_clock(done)
                last["skipped_steps"] = float(skipped)
                if first_log:  # how long the step took to build, once per run
                    last.update({k: float(v) for k, v in timing.items()})
                    first_log = False
                logger.write(done, last)
                warning = collapse.update(done, last.get("uniformity", float("nan")))
                if warning:
                    logger.warning(warning)
            if is_checkpoint or preempted:
                checkpointer.save(done, state, meta(done, skipped))
            if preempted:
                checkpointer.flush()
                raise Preempted(done)
            check_seconds += time.perf_counter() - checked
        loop_end = time.perf_counter()
        checkpointer.flush()
    except BaseException:
        # Stopping on an error: a failing close (e.g. the metric files on the same
        # full disk) must not replace the error that says what went wrong.
        closers = [("metric logger", logger.close), ("checkpointer", checkpointer.close)]
        if profiling:
            closers.insert(0, ("profiler", jax.profiler.stop_trace))
        for name, close in closers:
            try:
                close()
            except Exception as err:  # noqa: BLE001 - reported, the original error propagates
                logging.warning("while stopping, closing the %s failed too: %s", name, err)
        raise
    logger.close()
    checkpointer.close()
    finished = time.perf_counter()
    steps_run = total_steps - start_step
    timed = max(steps_run - 1, 0)  # the steps after the first (compiled) one
    return {
        "workdir": workdir,
        "start_step": start_step,
        "final_step": total_steps,
        "final_loss": last.get("loss", float("nan")),
        "metrics": last,
        "skipped_steps": skipped,
        "seconds": finished - started,
        "images_per_s": timed * global_batch / max(finished - clock, 1e-9),
        "images_per_s_per_device": timed * global_batch / max(finished - clock, 1e-9)
        / jax.device_count(),
        **timing,
        # Host time per step, after the first: drawing and transferring the input;
        # inside the step call (dispatch); and all of the host's work outside the
        # step call and outside log/checkpoint steps (input, bookkeeping).
        "input_seconds_per_step": batches.seconds / max(steps_run, 1),
        "step_call_seconds_per_step": step_call / max(timed, 1),
        "host_seconds_per_step": (loop_end - clock - check_seconds - step_call) / max(timed, 1),
        "check_seconds": check_seconds,
        # Once per run, after the last step: the final save's wait and verification, closing.
        "final_save_seconds": finished - loop_end,
        "compilation_cache_dir": cache_dir,
        "collapse_warning": collapse.warned,
    }
