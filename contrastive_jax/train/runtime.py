"""The trainer's host-side machinery: preemption, the compilation cache, timers, the profiler.

* :class:`SigtermFlag` turns SIGTERM and SIGINT into a flag the loop polls; the loop attaches it to
  each batch (:class:`contrastive_jax.train.inputs.DevicePrefetch`) and the step's
  collectives tell every process if any process was signalled, so all of them save the
  same step together.
* :func:`configure_compilation_cache` points JAX's persistent compilation cache at a
  directory, so a restarted run loads its executable instead of compiling it.
* :class:`RunClock` holds a run's timing and profiling: the first step timed apart
  (:class:`CompileTimer`: tracing and compilation, or loading from the cache), the host's
  time per step, and the :class:`Profiler`, a ``jax.profiler`` trace of a range of steps.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import jax
from etils import epath

from contrastive_jax.errors import ConfigError
from contrastive_jax.train import paths

#: Where ``config.train.compilation_cache_dir="auto"`` puts JAX's compilation cache
#: (under ``$XDG_CACHE_HOME``, by default ``~/.cache``) unless JAX already has one.
AUTO_CACHE = ("contrastive_jax", "jax_compilation_cache")


class SigtermFlag:
    """Turns SIGTERM and SIGINT (Ctrl-C) into a flag (``raised``) while the context is active
    (main thread only): the run saves the step it reached and stops (exit code 75).

    ``signal_name`` is the signal that arrived first. A second SIGINT does not wait for the
    save: it raises ``KeyboardInterrupt`` at once (the checkpoints already written are kept).
    Elsewhere than on the main thread signals are left alone and the flag stays False.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.raised = False
        self.signal_name = "SIGTERM"
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> SigtermFlag:
        try:
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        except ValueError:  # not the main thread: leave signals alone
            self._previous = {}
        return self

    def _handle(self, signum, frame) -> None:
        if self.raised and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not self.raised:
            self.signal_name = signal.Signals(signum).name
        self.raised = True

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            if previous is not None:
                signal.signal(signum, previous)
        self._previous = {}


def configure_compilation_cache(directory: str) -> str | None:
    """Points JAX's persistent compilation cache at ``directory``; returns the cache in use.

    ``"auto"``: keep the cache JAX is already configured with (the
    ``JAX_COMPILATION_CACHE_DIR`` environment variable or ``jax.config``), else
    use ``$XDG_CACHE_HOME/contrastive_jax/jax_compilation_cache`` (by default
    under ``~/.cache``). ``""``: leave JAX's settings alone. Any other value: that
    directory (local or ``gs://``). Entries are keyed by the program, the devices and the
    JAX version, so runs of other configs can share one directory; JAX stores only
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
    path = paths.as_path(directory)
    if str(path) != current:
        from jax.experimental.compilation_cache import compilation_cache

        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OSError(
                f"config.train.compilation_cache_dir={path} cannot be created ({err}); "
                'pass another directory, or "" to leave the compilation cache off'
            ) from err
        compilation_cache.set_cache_dir(str(path))
        compilation_cache.reset_cache()  # the next compilation opens the new directory
    return str(path)


class CompileTimer:
    """Seconds JAX spends tracing/lowering and compiling (or loading from the cache) while active."""

    _TRACE = ("/jax/core/compile/jaxpr_trace_duration",
              "/jax/core/compile/jaxpr_to_mlir_module_duration")
    _COMPILE = "/jax/core/compile/backend_compile_duration"

    def __init__(self) -> None:
        self.trace_seconds = 0.0
        self.compile_seconds = 0.0
        self.cache_hits = 0

    def _duration(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event in self._TRACE:
            self.trace_seconds += duration_secs
        elif event == self._COMPILE:
            self.compile_seconds += duration_secs

    def _event(self, event: str, **kwargs: str | int) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.cache_hits += 1

    def __enter__(self) -> CompileTimer:
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        jax.monitoring.register_event_listener(self._event)
        return self

    def __exit__(self, *exc) -> None:
        jax.monitoring.unregister_event_duration_listener(self._duration)
        jax.monitoring.unregister_event_listener(self._event)

    def first_step(self, seconds: float) -> dict[str, float]:
        """The figures reported once per run, with the first step's wall time."""
        return {"trace_seconds": self.trace_seconds, "compile_seconds": self.compile_seconds,
                "first_step_seconds": seconds, "compile_cache_hits": self.cache_hits}


class RunClock:
    """A run's timing and profiling, in one object: the first (compiled) step timed apart,
    the host's time in step calls and at log/checkpoint steps, and the ``jax.profiler``
    trace of ``config.train.profile_steps`` (:class:`Profiler`).

    The loop calls :meth:`first_step` (a context) around the first step, :meth:`call`
    around the others, :meth:`checking` around the work of log and checkpoint steps, and
    :meth:`loop_ended` after the last step; :meth:`summary` gives the figures.
    """

    def __init__(self, profile: tuple[int, int] | None, trace_directory: epath.Path) -> None:
        self.profiler = Profiler(profile, trace_directory)
        self.started = self.clock = time.perf_counter()  # clock: the end of the first step
        self.step_call = 0.0  # host seconds inside the step calls, after the first
        self.checks = 0.0  # host seconds at log and checkpoint steps
        self.loop_end = self.started
        self.input_before = 0.0  # input seconds spent before the first step ran
        self.once: dict[str, float] = {}  # trace, compile, first-step seconds, cache hits

    @contextlib.contextmanager
    def first_step(self, input_seconds: float) -> Iterator[None]:
        """Times the first step (tracing, compiling or loading from the cache, running);
        ``input_seconds``: the host's time drawing batches so far (before the clock starts)."""
        self.input_before = input_seconds
        with CompileTimer() as compiled:
            yield
        self.clock = time.perf_counter()
        self.once = compiled.first_step(self.clock - self.started)

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        called = time.perf_counter()
        yield
        self.step_call += time.perf_counter() - called

    @contextlib.contextmanager
    def checking(self) -> Iterator[None]:
        checked = time.perf_counter()
        yield
        self.checks += time.perf_counter() - checked

    def loop_ended(self) -> None:
        self.loop_end = time.perf_counter()

    def summary(self, steps_run: int, global_batch: int, input_seconds: float) -> dict[str, Any]:
        """The timing figures of a run's summary (see :func:`contrastive_jax.train.loop.train`);
        ``input_seconds``: the host's time drawing and transferring batches, all steps."""
        finished = time.perf_counter()
        timed = max(steps_run - 1, 0)  # the steps after the first (compiled) one
        images_per_s = timed * global_batch / max(finished - self.clock, 1e-9)
        return {
            "seconds": finished - self.started,
            "images_per_s": images_per_s,
            "images_per_s_per_device": images_per_s / jax.device_count(),
            **{"trace_seconds": 0.0, "compile_seconds": 0.0, "first_step_seconds": 0.0,
               "compile_cache_hits": 0, **self.once},
            # Host time per step, after the first: drawing and transferring the input;
            # inside the step call (dispatch); and all of the host's work outside the
            # step call and outside log/checkpoint steps (input, bookkeeping), so
            # host_seconds_per_step >= input_seconds_per_step.
            "input_seconds_per_step": (input_seconds - self.input_before) / max(timed, 1),
            "step_call_seconds_per_step": self.step_call / max(timed, 1),
            "host_seconds_per_step": (self.loop_end - self.clock - self.checks - self.step_call)
            / max(timed, 1),
            "check_seconds": self.checks,
            # Once per run, after the last step: the final save's wait and verification, closing.
            "final_save_seconds": finished - self.loop_end,
        }


def profile_range(steps, total_steps: int) -> tuple[int, int] | None:
    """``config.train.profile_steps`` as (first, last) 1-based steps, or None if empty."""
    steps = tuple(steps or ())
    if not steps:
        return None
    if len(steps) != 2 or not all(isinstance(s, int) for s in steps) or not (
        1 <= steps[0] <= steps[1] <= total_steps
    ):
        raise ConfigError(
            f"config.train.profile_steps={steps!r} must be two steps (first, last) with "
            f"1 <= first <= last <= {total_steps} (the run's total steps), e.g. "
            "--config.train.profile_steps='(20, 25)'"
        )
    return steps


class Profiler:
    """A ``jax.profiler`` trace of the steps ``first..last`` (1-based) into ``directory``."""

    def __init__(self, steps: tuple[int, int] | None, directory: epath.Path) -> None:
        self.steps = steps
        self.directory = directory
        self.active = False

    def before_step(self, done: int) -> None:
        """Starts the trace before the step that makes ``done`` steps, if it is the first."""
        if self.steps and done == self.steps[0]:
            jax.profiler.start_trace(str(self.directory))
            self.active = True

    def after_step(self, done: int, result: jax.Array) -> str | None:
        """Stops the trace once ``result`` of the last traced step is ready; returns a message."""
        if not (self.active and self.steps and done == self.steps[1]):
            return None
        result.block_until_ready()
        self.stop()
        return (f"profile of steps {self.steps[0]}-{self.steps[1]} written to {self.directory}; "
                f"view it with tensorboard --logdir {self.directory} (Profile tab)")

    def stop(self) -> None:
        if self.active:
            self.active = False
            jax.profiler.stop_trace()
