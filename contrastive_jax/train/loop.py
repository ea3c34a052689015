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
``jax.profiler`` trace of a range of steps next to the TensorBoard events. The input
(:mod:`.inputs`), the host-side machinery (SIGTERM flag, compilation cache, timers,
profiler: :mod:`.runtime`) and the checkpoints (:mod:`.checkpoint`, verified by
:mod:`.verify`) live in their own modules; :func:`train` reads top to bottom: set up,
restore, loop, save, summarise. The work directory may be local or ``gs://``
(:mod:`.paths`).

A resumed run is the run it would have been: the input pipeline yields the
batches of a pure function of (seed, step) from the restored step on, dropout
keys derive from (seed, step, device) (:mod:`.step`), and the checkpoint holds
parameters, batch statistics and optimiser state. Before any array is read, the
checkpoint's model config and state structure are compared with the current
config (:class:`ConfigMismatch`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Any

import jax
import ml_collections
from etils import epath

from contrastive_jax.errors import ConfigError
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import grad_cache, inputs, objective, paths, runtime
from contrastive_jax.train.checkpoint import (
    Checkpointer,
    CheckpointError,
    abstract_like,
    structure_signature,
)
from contrastive_jax.train.config import check_config
from contrastive_jax.train.knn_monitor import KnnMonitor
from contrastive_jax.train.metrics_log import CollapseDetector, MetricLogger
from contrastive_jax.train.step import (
    build_model,  # noqa: F401 - part of the loop's interface (loop.build_model)
    init_state,
    make_train_step,
    nonfinite_record,
)

CONFIG_FILE = "config.json"
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
    with runtime.SigtermFlag() as sigterm:  # SIGTERM is a flag the loop polls, from the start
        # Set up. The config and the data are checked before the work directory is created:
        # a run refused for its config or input leaves nothing behind.
        check_config(config)
        cache_dir = runtime.configure_compilation_cache(str(config.train.compilation_cache_dir))
        terms = objective.parse_terms(config.loss)
        mesh = make_mesh()
        train_input = inputs.load_input(config)
        plan = _Plan(config, train_input)
        knn = KnnMonitor(config, train_input.source, total_steps=plan.total_steps) if (
            config.train.eval_every) else None  # the online kNN monitor
        directory = _prepare_workdir(workdir)
        graphdef, rest, tx, schedule, state = init_state(
            config, train_input.num_classes, steps_per_epoch=plan.steps_per_epoch,
            global_batch_size=plan.global_batch, total_steps=plan.total_steps,
        )
        state = jax.device_put(state, replicated(mesh))
        signature = structure_signature(state)

        # Restore the newest readable checkpoint, if any.
        checkpointer = Checkpointer(directory, max_to_keep=config.train.keep_checkpoints)
        state, skipped = _restore(checkpointer, state, config, signature)
        start_step = int(state.step)
        if jax.process_index() == 0:
            (directory / CONFIG_FILE).write_text(config.to_json_best_effort(indent=2))
        meta = {"seed": int(config.seed), "num_classes": train_input.num_classes,
                "model": _model_fingerprint(config), "state_signature": signature}

        step_fn = make_train_step(graphdef, rest, tx, terms, schedule, mesh,
                                  micro_batch_size=config.train.micro_batch_size,
                                  micro_batch_loop=config.train.micro_batch_loop)
        guard = _NonFiniteGuard(terms, mesh, checkpointer, skipped,
                                skip=config.train.skip_nonfinite)
        logger = MetricLogger(directory, total_steps=plan.total_steps, start_step=start_step,
                              images_per_step=plan.global_batch)
        if start_step:
            logger.message(f"resumed from the checkpoint at step {start_step} in {directory}")
        profiler = runtime.Profiler(plan.profile, directory / TENSORBOARD_DIR)
        # With several processes the stop flag is read from the devices, one step late.
        agree_late = _several_processes()
        pending_stop = None  # that flag of the previous step, on the devices
        times, timing, unlogged, last = runtime.LoopTimes(), {}, {}, {}
        started = clock = time.perf_counter()
        batches = inputs.DevicePrefetch(
            train_input.batches(start_step), mesh, lambda: sigterm.raised,
            depth=config.train.prefetch, remaining=plan.total_steps - start_step,
        )
        try:
            # The loop: the host reads nothing back but at log and checkpoint steps.
            batches.fill()
            for step in range(start_step, plan.total_steps):
                done = step + 1
                batch = batches.take()
                profiler.before_step(done)
                if step == start_step:  # compiled (or loaded from the cache): timed apart
                    with runtime.CompileTimer() as compiled:
                        state, logged, guard.record = step_fn(state, batch.arrays, guard.record)
                        logged["loss"].block_until_ready()
                        checkpointer.compile_checksum(state)
                    clock = time.perf_counter()
                    timing = unlogged = compiled.first_step(clock - started)
                    logger.start_clock(done)
                else:
                    called = time.perf_counter()
                    state, logged, guard.record = step_fn(state, batch.arrays, guard.record)
                    times.step_call += time.perf_counter() - called
                batches.fill()  # the next batches go to the devices while this step runs
                message = profiler.after_step(done, logged["loss"])
                if message:
                    logger.message(message)
                if agree_late:
                    preempted = pending_stop is not None and bool(pending_stop)
                    pending_stop = logged["stop"]
                    pending_stop.copy_to_host_async()
                else:
                    preempted = batch.stop
                is_log = done % config.train.log_every == 0 or done == plan.total_steps
                is_checkpoint = (done % config.train.checkpoint_every == 0
                                 or done == plan.total_steps)
                if not (is_log or is_checkpoint or preempted):
                    continue
                checked = time.perf_counter()
                values, skipped = guard.read(done, logged, logger)
                if is_log:
                    last = {**values, **logger.throughput(done), "skipped_steps": float(skipped)}
                    last.update({k: float(v) for k, v in unlogged.items()})
                    unlogged = {}  # how long the step took to build: logged once per run
                    if knn is not None and knn.due(done):  # its time left out of img/s
                        last.update(knn(state, graphdef, rest))
                        logger.start_clock(done)
                    logger.write(done, last)
                    warning = plan.collapse.update(done, last.get("uniformity", float("nan")))
                    if warning:
                        logger.warning(warning)
                if is_checkpoint or preempted:
                    checkpointer.save(done, state, {**meta, "step": done,
                                                    "nonfinite_steps": skipped})
                if preempted:
                    checkpointer.flush()
                    raise Preempted(done)
                times.checks += time.perf_counter() - checked
            loop_end = time.perf_counter()
            checkpointer.flush()  # the last save written and verified
        except BaseException:
            _close_on_error(profiler, logger, checkpointer)
            raise

        # Save (the last checkpoint is flushed above) and summarise.
        logger.close()
        checkpointer.close()
        return _summary(plan, start_step, last, skipped, times, batches.seconds, timing,
                        started=started, clock=clock, loop_end=loop_end,
                        workdir=str(directory), cache_dir=cache_dir)


class _Plan:
    """The run's sizes, checked before anything is written: global batch, steps per epoch,
    total steps, the profiled steps and the collapse detector."""

    def __init__(self, config: ml_collections.ConfigDict, train_input: inputs.Input) -> None:
        self.global_batch = int(config.data.global_batch_size)
        if self.global_batch % jax.device_count():
            raise ConfigError(
                f"config.data.global_batch_size={self.global_batch} must be divisible by the "
                f"{jax.device_count()} devices"
            )
        self.steps_per_epoch = train_input.num_examples // self.global_batch
        if self.steps_per_epoch < 1:
            raise ConfigError(
                f"config.data.global_batch_size={self.global_batch} exceeds the "
                f"{train_input.num_examples} training examples of {train_input.name!r}"
            )
        self.total_steps = int(config.train.total_steps
                               or config.train.epochs * self.steps_per_epoch)
        self.profile = runtime.profile_range(config.train.profile_steps, self.total_steps)
        # A bad micro_batch_size fails here, before the work directory exists.
        grad_cache.num_micro_batches(self.global_batch // jax.device_count(),
                                     config.train.micro_batch_size)
        grad_cache.check_loop(config.train.micro_batch_loop)
        if config.train.prefetch < 0:
            raise ConfigError(
                f"config.train.prefetch must be >= 0 batches, got {config.train.prefetch}"
            )
        self.collapse = CollapseDetector(
            threshold=float(config.train.collapse_threshold),
            patience=int(config.train.collapse_patience),
            after_step=max(_warmup_steps(config.optimizer, self.steps_per_epoch),
                           int(config.loss.temperature_warmup_steps)),
        )


def _restore(checkpointer: Checkpointer, state, config: ml_collections.ConfigDict,
             signature: list[str]) -> tuple[Any, int]:
    """(the state of the newest readable checkpoint, or ``state``; the non-finite steps
    skipped so far). Closes the checkpointer and raises if checkpoints exist but none
    restores, or if the newest was written with another model or state structure."""
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
    if restored is None:
        return state, 0
    state, meta = restored
    return state, int(meta.get("nonfinite_steps", 0))  # older checkpoints have no count


class _NonFiniteGuard:
    """The on-device record of non-finite steps (``record``, threaded through the step),
    read by the host at log and checkpoint steps only."""

    def __init__(self, terms, mesh, checkpointer: Checkpointer, skipped: int, *,
                 skip: bool) -> None:
        self._terms, self._mesh, self._checkpointer = terms, mesh, checkpointer
        self._skip = skip
        self.record = jax.device_put(nonfinite_record(terms, skipped), replicated(mesh))
        self._reported = skipped  # non-finite steps reported so far

    def read(self, done: int, logged: dict, logger: MetricLogger) -> tuple[dict[str, float], int]:
        """The step's metrics and the run's non-finite count.

        Raises NonFiniteLoss (without skip_nonfinite) if a step since the last
        read was not finite; with it, reports the skipped steps and clears the
        record's first step.
        """
        values, (count, first, first_values) = jax.device_get((logged, self.record))
        count, first = int(count), int(first)
        if first:
            text = _nonfinite_text({k: float(v) for k, v in first_values.items()})
            if not self._skip:
                with contextlib.suppress(CheckpointError):  # a save in flight holds a good state
                    self._checkpointer.wait()
                good = self._checkpointer.steps()
                raise NonFiniteLoss(
                    f"non-finite loss or gradient at step {first} ({text}); the last good "
                    f"checkpoint (step {good[-1] if good else 'none'}) is kept in "
                    f"{self._checkpointer.directory}. Set --config.train.skip_nonfinite=True "
                    "to skip such steps instead."
                )
            logger.message(
                f"skipped non-finite steps: {count - self._reported} up to step {done}, the "
                f"first at step {first} ({text}); {count} in this run"
            )
            self.record = jax.device_put(nonfinite_record(self._terms, count),
                                         replicated(self._mesh))
        self._reported = count
        return {k: float(v) for k, v in values.items()}, count


def _close_on_error(profiler: runtime.Profiler, logger: MetricLogger,
                    checkpointer: Checkpointer) -> None:
    """Stops the profiler and closes the logger and the checkpointer of a failing run.

    A failing close (e.g. the metric files on the same full disk) must not replace the
    error that says what went wrong: it is logged as a warning.
    """
    closers = [("profiler", profiler.stop), ("metric logger", logger.close),
               ("checkpointer", checkpointer.close)]
    for name, close in closers:
        try:
            close()
        except Exception as err:  # noqa: BLE001 - reported, the original error propagates
            logging.warning("while stopping, closing the %s failed too: %s", name, err)


def _summary(plan: _Plan, start_step: int, last: dict, skipped: int, times: runtime.LoopTimes,
             input_seconds: float, timing: dict, *, started: float, clock: float,
             loop_end: float, workdir: str, cache_dir: str | None) -> dict[str, Any]:
    """The run's summary: where it ended, its metrics, and where the host's time went."""
    finished = time.perf_counter()
    steps_run = plan.total_steps - start_step
    timed = max(steps_run - 1, 0)  # the steps after the first (compiled) one
    images_per_s = timed * plan.global_batch / max(finished - clock, 1e-9)
    return {
        "workdir": workdir,
        "start_step": start_step,
        "final_step": plan.total_steps,
        "final_loss": last.get("loss", float("nan")),
        "metrics": last,
        "skipped_steps": skipped,
        "seconds": finished - started,
        "images_per_s": images_per_s,
        "images_per_s_per_device": images_per_s / jax.device_count(),
        **{"trace_seconds": 0.0, "compile_seconds": 0.0, "first_step_seconds": 0.0,
           "compile_cache_hits": 0, **timing},
        # Host time per step, after the first: drawing and transferring the input;
        # inside the step call (dispatch); and all of the host's work outside the
        # step call and outside log/checkpoint steps (input, bookkeeping).
        "input_seconds_per_step": input_seconds / max(steps_run, 1),
        "step_call_seconds_per_step": times.step_call / max(timed, 1),
        "host_seconds_per_step": (loop_end - clock - times.checks - times.step_call)
        / max(timed, 1),
        "check_seconds": times.checks,
        # Once per run, after the last step: the final save's wait and verification, closing.
        "final_save_seconds": finished - loop_end,
        "compilation_cache_dir": cache_dir,
        "collapse_warning": plan.collapse.warned,
    }


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


def _prepare_workdir(workdir: str) -> epath.Path:
    path = paths.as_path(workdir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise OSError(f"work directory {path} is not writable: {err}") from err
    return path


def _nonfinite_text(logged: dict[str, float]) -> str:
    return ", ".join(
        f"{k}={v:.6g}" for k, v in logged.items() if k.startswith("loss") or k == "grad_norm"
    )


def _warmup_steps(optimizer: ml_collections.ConfigDict, steps_per_epoch: int) -> int:
    """The learning-rate warm-up in steps (``warmup_steps``, else ``warmup_epochs``)."""
    if optimizer.warmup_steps is not None:
        return int(optimizer.warmup_steps)
    return round(float(optimizer.warmup_epochs) * steps_per_epoch)


def _several_processes() -> bool:
    return jax.process_count() > 1
