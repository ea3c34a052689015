"""The pretraining loop: build, resume, step, log, checkpoint, stop cleanly.

``train(config, workdir)`` resumes from the newest readable checkpoint in
``workdir`` without being asked, saves every ``config.train.checkpoint_every``
steps (asynchronously) and at the end, and on SIGTERM or SIGINT saves the current step and
raises :class:`Preempted`. A resume runs the config the work directory recorded
(:mod:`.record`: another is refused before anything is written, a change a resume may make
is recorded with its step).

The host runs ahead of the devices. Between log and checkpoint steps it reads
nothing back from them: the non-finite guard stays on the devices (a
:class:`~contrastive_jax.train.step.NonFinite` record the step updates, read at
the next log or checkpoint step), the next ``config.train.device_prefetch`` batches
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
:mod:`.verify`) live in their own modules. :func:`train` reads top to bottom: parse the
config (:func:`.spec.parse`), load the input, build the run (:func:`.build.build`) and trace
its step (:func:`.build.check_step`), all before the work directory exists; then a session
restores, loops, saves and summarises. The work directory may be local or ``gs://``
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
import numpy as np
from etils import epath
from flax import nnx

from contrastive_jax.errors import (
    ConfigError,
    ConfigMismatch,
    InputError,
    NonFiniteLoss,
    Preempted,
)
from contrastive_jax.eval import registry, validation
from contrastive_jax.eval.evaluator import Evaluator, Setup, due
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import flops, inputs, paths, pretrained, record, runtime
from contrastive_jax.train.build import Run, abstract_args, build, check_step
from contrastive_jax.train.checkpoint import (
    Checkpointer,
    CheckpointError,
    abstract_like,
    structure_signature,
)
from contrastive_jax.train.metrics_log import CollapseDetector, MetricLogger, flat_hparams
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import nonfinite_record

#: The final and the best evaluation on the held-out split (``config.train.validate_every_epochs``).
VALIDATION_FILE = "validation.json"
#: Sub-directory of the work directory for TensorBoard events and profiler traces.
TENSORBOARD_DIR = "tensorboard"


def train(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Pretrains (or resumes) according to ``config`` in ``workdir``; returns a summary.

    Raises:
      Preempted: SIGTERM or SIGINT arrived; the step reached was checkpointed.
      NonFiniteLoss: a step's loss or gradient was NaN/inf (without
        ``config.train.skip_nonfinite``); the last good checkpoint is kept.
      ConfigMismatch: the work directory's run was started with another config (in a field
        a resume may not change: :mod:`.record`), or its checkpoint has another model/state
        structure.
      CheckpointError: a checkpoint could not be written (full disk, ...), or
        none of the checkpoints present could be read.
      OSError: the work directory is not writable.
      ValueError: a bad config or input (e.g. a corrupt image file).
    """
    with runtime.SigtermFlag() as sigterm:  # SIGTERM/SIGINT: a flag the loop polls, from the start
        # Parse, load, build and check: a run refused for its config or input leaves nothing
        # behind, so all of it happens before the work directory is created.
        spec = parse(config)
        cache_dir = runtime.configure_compilation_cache(spec.train.compilation_cache_dir)
        train_input = inputs.load_input(spec.data, seed=spec.seed)
        check_classes(spec, train_input.num_classes)
        run = build(spec, make_mesh(), train_input.facts)
        check_step(run)
        run = run._replace(state=pretrained.initialise(run.state, spec))  # config.model.init_from
        # A resume runs the recorded config: another is refused, an allowed change recorded.
        changes = _check_resume(paths.as_path(workdir), spec, run.plan.total_steps)
        evaluators = registry.in_run(Setup(
            spec, train_input.source, run.mesh, total_steps=run.plan.total_steps,
            steps_per_epoch=run.plan.steps_per_epoch))  # those the config sets an interval for
        session = _Session.open(run, _prepare_workdir(workdir), train_input, sigterm, changes,
                                evaluators)
        session.loop()
        return {"workdir": str(session.directory), **session.summary(),
                "compilation_cache_dir": cache_dir}


class _Session:
    """A run in its work directory: state, checkpointer, non-finite guard, logger, clock and
    input, from the restored step to the end (:meth:`loop`)."""

    def __init__(self, run: Run, directory: epath.Path, state, checkpointer: Checkpointer,
                 skipped: int, batches: inputs.DevicePrefetch,
                 evaluations: list[validation.Record] | None = None,
                 evaluators: dict[str, tuple[Evaluator, int]] | None = None) -> None:
        self.run, self.directory, self.state = run, directory, state
        self.checkpointer, self.batches = checkpointer, batches
        spec, sizes = run.spec, run.plan
        self.start_step = int(state.step)
        self.guard = _NonFiniteGuard(list(spec.terms), run.mesh, checkpointer, skipped,
                                     skip=spec.train.skip_nonfinite)
        self.logger = MetricLogger(directory, total_steps=sizes.total_steps,
                                   start_step=self.start_step, images_per_step=sizes.global_batch,
                                   steps_per_epoch=sizes.steps_per_epoch,
                                   hparams=flat_hparams(spec.config.to_dict()),
                                   wandb_project=spec.train.wandb_project)
        self.clock = runtime.RunClock(sizes.profile, directory / TENSORBOARD_DIR)
        self.collapse = CollapseDetector(threshold=spec.train.collapse_threshold,
                                         patience=spec.train.collapse_patience,
                                         after_step=sizes.warmup_steps)
        self.meta = {"seed": spec.seed, "num_classes": run.facts.num_classes,
                     "model": _model_fingerprint(spec.config),
                     "state_signature": structure_signature(state)}
        self.last: dict[str, float] = {}  # the metrics of the last log step
        self.unlogged: dict[str, float] = {}  # the first step's timing, until logged
        self.pending_stop: jax.Array | None = None  # several processes: the last step's stop
        self.sigterm: runtime.SigtermFlag | None = None  # the stop signal's flag
        self.evaluators = dict(evaluators or {})  # name -> (evaluator, interval in steps)
        # The held-out evaluations of the run so far (restored ones: the final and the best).
        self.evaluations: list[validation.Record] = list(evaluations or [])

    @classmethod
    def open(cls, run: Run, directory: epath.Path, train_input: inputs.Input,
             sigterm: runtime.SigtermFlag, changes: dict[str, list],
             evaluators: dict[str, tuple[Evaluator, int]]) -> _Session:
        """Restores the newest readable checkpoint of ``directory`` (if any) and records the
        run beside it: a new run's config, a resume's ``changes`` (:mod:`.record`); the
        metric log keeps the steps up to the restored one."""
        state = jax.device_put(run.state, replicated(run.mesh))
        checkpointer = Checkpointer(directory, max_to_keep=run.spec.train.keep_checkpoints)
        state, meta = _restore(checkpointer, state, run.spec.config, structure_signature(state))
        skipped = int(meta.get("nonfinite_steps", 0))  # older checkpoints have no count
        evaluations = [validation.Record(*r) for r in meta.get("evaluations", [])]
        start_step = int(state.step)
        if jax.process_index() == 0:
            record.write(directory, run.spec.config, start_step, changes)
        batches = inputs.DevicePrefetch(
            train_input.batches(start_step), run.mesh, lambda: sigterm.raised,
            depth=run.spec.train.device_prefetch, remaining=run.plan.total_steps - start_step,
        )
        session = cls(run, directory, state, checkpointer, skipped, batches, evaluations,
                      evaluators)
        session.sigterm = sigterm
        session.logger.message(parameter_count(state))
        if start_step:
            session.logger.message(f"resumed from the checkpoint at step {start_step} in "
                                   f"{directory}")
        if start_step and changes:
            session.logger.message(
                f"changed from step {start_step} on (recorded in "
                f"{directory / record.AMENDMENTS_FILE}): " + "; ".join(
                    f"config.{name} {old!r} -> {new!r}" for name, (old, new) in changes.items()))
        if start_step and run.plan.total_steps == start_step:
            session.logger.message(f"the run is complete: step {start_step} of "
                                   f"{run.plan.total_steps}")
        return session

    def loop(self) -> None:
        """Steps to the end; the host reads nothing back but at log and checkpoint steps."""
        profiler = self.clock.profiler
        try:
            self.batches.fill()
            for step in range(self.start_step, self.run.plan.total_steps):
                batch = self.batches.take()
                profiler.before_step(step + 1)
                logged = self._step(step, batch)
                self.batches.fill()  # the next batches go to the devices while this step runs
                message = profiler.after_step(step + 1, logged["loss"])
                if message:
                    self.logger.message(message)
                self._after_step(step + 1, logged, self._preempted(batch, logged))
            self.clock.loop_ended()
            self.checkpointer.flush()  # the last save written and verified
        except BaseException:
            _close_on_error(profiler, self.logger, self.checkpointer)
            raise
        self.logger.close()
        self.checkpointer.close()

    def _step(self, step: int, batch: inputs.Batch) -> dict:
        """Runs one step; the first (compiled, or loaded from the cache) is timed apart."""
        guard, step_fn = self.guard, self.run.step
        if step > self.start_step:
            with self.clock.call():
                self.state, logged, guard.record = step_fn(self.state, batch.arrays,
                                                           guard.record)
            return logged
        with self.clock.first_step(self.batches.seconds):
            self.state, logged, guard.record = step_fn(self.state, batch.arrays, guard.record)
            logged["loss"].block_until_ready()
            self.checkpointer.compile_checksum(self.state)
        self.unlogged = dict(self.clock.once)
        if self.logger.enabled and self.logger.peak_flops:  # the MFU's FLOPs, counted once
            traced = step_fn.trace(*abstract_args(self.run))
            self.logger.flops_per_step = flops.count_jaxpr(traced.jaxpr).flops
        self.logger.start_clock(step + 1)
        return logged

    def _preempted(self, batch: inputs.Batch, logged: dict) -> bool:
        """Whether to stop after this step. With several processes the stop flag is read
        from the devices one step late, after the next step was dispatched."""
        if not _several_processes():
            return batch.stop
        preempted = self.pending_stop is not None and bool(self.pending_stop)
        self.pending_stop = logged["stop"]
        self.pending_stop.copy_to_host_async()
        return preempted

    def _after_step(self, done: int, logged: dict, preempted: bool) -> None:
        """Logs, evaluates, checkpoints and stops at the steps that ask for it."""
        train, total = self.run.spec.train, self.run.plan.total_steps
        is_log = done % train.log_every == 0 or done == total
        is_checkpoint = done % train.checkpoint_every == 0 or done == total
        evaluating = [name for name, (_, every) in self.evaluators.items()
                      if due(every, done, total)]
        if not (is_log or is_checkpoint or evaluating or preempted):
            return
        with self.clock.checking():
            values, skipped = self.guard.read(done, logged, self.logger)
            values.update(self._evaluate(done, evaluating, skip_log=not is_log))
            if is_log:
                self._log(done, values, skipped)
            if is_checkpoint or preempted:
                self.logger.flush()  # the metrics so far, durable before the checkpoint is
                self.checkpointer.save(done, self.state, {
                    **self.meta, "step": done, "nonfinite_steps": skipped,
                    "evaluations": [list(r) for r in self._kept_evaluations()]})
            if preempted:
                self.checkpointer.flush()
                raise Preempted(done, self.sigterm.signal_name if self.sigterm else "SIGTERM")

    def _evaluate(self, done: int, names: list[str], *, skip_log: bool) -> dict[str, float]:
        """The metrics of the evaluators ``names`` after step ``done``, on the network in
        evaluation mode; logged (at a step that is no log step, on their own) and left out of
        img/s. The validation's are kept for the final and best report."""
        if not names:
            return {}
        started = time.perf_counter()
        model = nnx.merge(self.run.graphdef, self.state.params, self.state.batch_stats,
                          self.run.rest)
        model.eval()
        scalars: dict[str, float] = {}
        for name in names:
            scalars.update(self.evaluators[name][0].run(model.network, done))
        if "val_top1" in scalars:
            record = validation.Record(done, done / self.run.plan.steps_per_epoch,
                                       scalars["val_top1"], scalars["val_top5"])
            self.evaluations = [r for r in self.evaluations if r.step < done] + [record]
            self.logger.message(f"step {done} (epoch {record.epoch:.4g}): top-1 "
                                f"{100 * record.top1:.2f} %, top-5 {100 * record.top5:.2f} % "
                                f"on the {validation.SPLIT} split")
        if skip_log:
            self.logger.write(done, scalars, line=False)
        self.logger.leave_out(time.perf_counter() - started)
        return scalars

    def _kept_evaluations(self) -> list[validation.Record]:
        """The evaluations a checkpoint keeps: the best and the last."""
        top = validation.best(self.evaluations)
        return sorted({r for r in (top, *self.evaluations[-1:]) if r is not None},
                      key=lambda r: r.step)

    def validation_report(self) -> dict[str, Any]:
        """``{"final": ..., "best": ...}`` of the held-out evaluations (empty without any);
        process 0 writes it to ``<workdir>/validation.json``."""
        if not self.evaluations:
            return {}
        report = {"final": self.evaluations[-1]._asdict(),
                  "best": validation.best(self.evaluations)._asdict()}  # type: ignore[union-attr]
        if jax.process_index() == 0:
            (self.directory / VALIDATION_FILE).write_text(json.dumps(report, indent=2))
        return report

    def _log(self, done: int, values: dict[str, float], skipped: int) -> None:
        last = {**values, **self.logger.throughput(done), **self.logger.progress(done),
                "skipped_steps": float(skipped)}
        last.update({k: float(v) for k, v in self.unlogged.items()})
        self.unlogged = {}  # how long the step took to build: logged once per run
        self.logger.write(done, last)
        warning = self.collapse.update(done, last.get("uniformity", float("nan")))
        if warning:
            self.logger.warning(warning)
        self.last = last

    def summary(self) -> dict[str, Any]:
        """Where the run ended, its metrics, and where the host's time went."""
        sizes = self.run.plan
        return {
            "start_step": self.start_step,
            "final_step": sizes.total_steps,
            "final_loss": self.last.get("loss"),  # None: no step ran (a complete run)
            "metrics": self.last,
            "skipped_steps": self.guard.reported,
            **self.clock.summary(sizes.total_steps - self.start_step, sizes.global_batch,
                                 self.batches.seconds),
            "collapse_warning": self.collapse.warned,
            "validation": self.validation_report(),
        }


#: The targets of the loss terms that read the class labels.
LABEL_TARGETS = ("label", "soft_label")


def check_classes(spec, num_classes: int) -> None:
    """Data of one class cannot teach a loss that reads the labels: refused (InputError);
    with a self-supervised loss, a warning that the probes of the labels read 100 %.

    A loss term on labels (SINCERE, SupCon, ...) has no sample of another class to contrast
    with (its loss is 0 from the first step), and the online probe and linear evaluation of
    one class are right by construction.
    """
    if num_classes >= 2:
        return
    where = f"config.data.dataset={spec.data.dataset!r} has {num_classes} class"
    on_labels = [t.name for t in spec.terms if t.target in LABEL_TARGETS]
    if on_labels:
        raise InputError(
            f"{where}: the loss term {on_labels[0]!r} (config.loss.name) reads the class "
            "labels and has no other class to contrast with (its loss would be 0); use data "
            "of at least two classes, or a self-supervised loss such as nt_xent")
    logging.warning("%s: the online probe and linear evaluation of its labels read 100 %% "
                    "and say nothing about the embedding", where)


def _check_resume(directory: epath.Path, spec, total_steps: int) -> dict[str, list]:
    """The changes a resume of ``directory`` makes to fields a resume may change
    (:func:`.record.compare`, which refuses any other change).

    Raises:
      ConfigMismatch: another config than the run's (in a field a resume may not change).
      ConfigError: a run length below the newest checkpoint's step (a run of that length
        ended before it; at it, the run is complete).
    """
    changes = record.compare(directory, spec.config)
    steps = record.checkpoint_steps(directory)
    if steps and total_steps < steps[-1]:
        raise ConfigError(
            f"the run is {total_steps} steps long (config.train.total_steps, or "
            f"config.train.epochs), below the newest checkpoint in {directory / 'checkpoints'} "
            f"(step {steps[-1]}): a run cannot be shortened past a step it took; set "
            f"config.train.total_steps >= {steps[-1]} (= {steps[-1]}: the run is complete) or "
            "use a new --workdir")
    return changes


def parameter_count(state: Any) -> str:
    """``"parameters: 179,026 (encoder 175,752, head 2,624, probe 650); batch statistics
    1,264"``: the trainable parameters of ``state`` by part (the network's encoder and head,
    and what the objective adds, such as the online probe) and the running statistics."""

    def count(tree: Any) -> int:
        return sum(int(np.size(leaf)) for leaf in jax.tree.leaves(tree))

    parts: dict[str, Any] = {}
    for name in state.params.keys():
        value = state.params[name]
        if name == "network" and hasattr(value, "keys"):
            parts.update({part: value[part] for part in value.keys()})
        else:
            parts[name] = value
    by_part = ", ".join(f"{name} {count(tree):,}" for name, tree in parts.items())
    return (f"parameters: {count(state.params):,} ({by_part}); batch statistics "
            f"{count(state.batch_stats):,}")


def _restore(checkpointer: Checkpointer, state, config: ml_collections.ConfigDict,
             signature: list[str]) -> tuple[Any, dict]:
    """(the state of the newest readable checkpoint, or ``state``; its metadata: the
    non-finite steps skipped so far, the held-out evaluations; {} without one). Closes the checkpointer and raises if checkpoints exist but none
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
        return state, {}
    return restored


class _NonFiniteGuard:
    """The on-device record of non-finite steps (``record``, threaded through the step),
    read by the host at log and checkpoint steps only."""

    def __init__(self, terms, mesh, checkpointer: Checkpointer, skipped: int, *,
                 skip: bool) -> None:
        self._terms, self._mesh, self._checkpointer = terms, mesh, checkpointer
        self._skip = skip
        self.record = jax.device_put(nonfinite_record(terms, skipped), replicated(mesh))
        self.reported = skipped  # non-finite steps reported so far

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
                f"skipped non-finite steps: {count - self.reported} up to step {done}, the "
                f"first at step {first} ({text}); {count} in this run"
            )
            self.record = jax.device_put(nonfinite_record(self._terms, count),
                                         replicated(self._mesh))
        self.reported = count
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


def _model_fingerprint(config: ml_collections.ConfigDict) -> dict:
    return json.loads(config.model.to_json())


def _config_diff(saved: dict, current: dict) -> list[str]:
    """``encoder.width: checkpoint X vs config Y`` for every differing leaf of two nested
    config dicts (``config.model``: encoder, head, init_from, ...)."""
    old, new = record.flatten(saved), record.flatten(current)
    return sorted(f"{name}: checkpoint {old.get(name)!r} vs config {new.get(name)!r}"
                  for name in set(old) | set(new) if old.get(name) != new.get(name))


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


def _several_processes() -> bool:
    return jax.process_count() > 1
