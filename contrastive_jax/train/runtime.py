"""The trainer's host-side machinery: preemption, the compilation cache, timers, the profiler.

* :class:`SigtermFlag` turns SIGTERM into a flag the loop polls; the loop attaches it to
  each batch (:class:`contrastive_jax.train.inputs.DevicePrefetch`) and the step's
  collectives tell every process if any process was signalled, so all of them save the
  same step together.
* :func:`configure_compilation_cache` points JAX's persistent compilation cache at a
  directory, so a restarted run loads its executable instead of compiling it.
* :class:`CompileTimer` measures tracing and compilation (or loading from the cache);
  :class:`LoopTimes` the host's time per step.
* :class:`Profiler` writes a ``jax.profiler`` trace of a range of steps.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

import jax
from etils import epath

from contrastive_jax.train import paths

#: Where ``config.train.compilation_cache_dir="auto"`` puts JAX's compilation cache
#: (under ``$XDG_CACHE_HOME``, by default ``~/.cache``) unless JAX already has one.
AUTO_CACHE = ("contrastive_jax", "jax_compilation_cache")


class SigtermFlag:
    """Turns SIGTERM into a flag (``raised``) while the context is active (main thread only).

    Elsewhere than on the main thread signals are left alone and the flag stays False.
    """

    def __init__(self) -> None:
        self.raised = False
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def __enter__(self) -> SigtermFlag:
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


@dataclasses.dataclass
class LoopTimes:
    """Host seconds of a run, after its first (compiled) step.

    Attributes:
      step_call: inside the step call (dispatch).
      checks: at log and checkpoint steps (waiting, logging, saving).
    """

    step_call: float = 0.0
    checks: float = 0.0


def profile_range(steps, total_steps: int) -> tuple[int, int] | None:
    """``config.train.profile_steps`` as (first, last) 1-based steps, or None if empty."""
    steps = tuple(steps or ())
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
