"""Console-script entry points, and what the command-line tools share: the quiet start-up
and one error policy (:func:`run_tool`, the exit codes of :class:`contrastive_jax.errors.ExitCode`).

``pip install 'contrastive_jax[train]'`` installs four commands beside ``python -m``:

==============================  ===========================================
``contrastive-jax-pretrain``    ``python -m contrastive_jax.pretrain``
``contrastive-jax-linear-eval`` ``python -m contrastive_jax.linear_eval``
``contrastive-jax-quickstart``  ``python -m contrastive_jax.quickstart``
``contrastive-jax-export``      ``python -m contrastive_jax.export``
==============================  ===========================================
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

from contrastive_jax import configs
from contrastive_jax._config_file import load_error
from contrastive_jax.errors import DISK_FULL, LIBRARY_LOGGERS, ExitCode, Preempted, exit_code


def quiet_startup() -> None:
    """Hides XLA's and JAX's start-up INFO lines (and TensorFlow's, where a dependency loads
    it); call before importing them.

    XLA (and TensorFlow) log through C++ (the CPU-feature and oneDNN notices) unless
    ``TF_CPP_MIN_LOG_LEVEL`` is at least 2 when they load; JAX reports the accelerator
    back-ends it did not find at INFO. A value the user exported is kept. Warnings and errors
    still show.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)


def report_error(text: str) -> None:
    """Writes ``error: <text>`` to stderr on a line of its own, in one write.

    A run that failed can leave threads printing to the same stream after the error
    reached the main thread: the writers of a checkpoint that failed on a full disk finish
    their other files and print tracebacks, each in several writes (type, message and
    newline apart), into a progress bar's unfinished line too. ``print`` writes the
    text and the newline apart, so its line can land after another writer's unfinished
    line and begin in its middle. One write that starts with a newline keeps the error
    line whole and at the start of a line (an empty line before it when nothing
    interleaved).
    """
    sys.stderr.write(f"\nerror: {text}\n")
    sys.stderr.flush()


#: How long a failed run's error waits for the threads the run started to end.
SETTLE_SECONDS = 10.0


def settle(before: set[threading.Thread], timeout: float = SETTLE_SECONDS) -> None:
    """Quiets :data:`LIBRARY_LOGGERS` for good and waits (up to ``timeout`` seconds) for the
    non-daemon threads started since ``before`` to end: the error line that follows is the
    last thing the tool prints (the writers of a checkpoint that failed on a full disk go on
    logging their other files)."""
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    deadline = time.monotonic() + timeout
    for thread in set(threading.enumerate()) - before:
        if not thread.daemon and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def run_tool(body: Callable[[], int], *, workdir: str | None = None) -> int:
    """Runs a tool's ``body`` under the one error policy of the command-line tools.

    An error of :data:`contrastive_jax.errors.EXIT_CODES` is reported on one line
    (:func:`report_error`, after :func:`settle`: the last line printed) and its
    :class:`~contrastive_jax.errors.ExitCode` returned; any other propagates with its traceback
    (exit code 1: a bug). ``workdir`` is named in the message of a full disk.
    """
    started = set(threading.enumerate())
    try:
        return body()
    except Preempted as err:  # not an error: the run saved and asks to be restarted
        print(str(err), file=sys.stderr)
        return ExitCode.PREEMPTED
    except Exception as err:
        code = exit_code(err)
        if code is None:
            raise
        settle(started)
        if isinstance(err, OSError) and err.errno in DISK_FULL:
            report_error(f"writing to {workdir or 'the work directory'} failed ({err}); is the "
                         "disk full? Checkpoints already written are kept; free space and run "
                         "again to resume")
        else:
            report_error(str(err))
        return code


#: The arguments that ask for the tool's flags and their help (absl's short help).
HELP_ARGS = frozenset({"-h", "-?", "-help", "--help", "-helpshort", "--helpshort"})


def config_argument(value: str) -> str:
    """``--config``'s value with a packaged recipe's name replaced by its file.

    ``NAME[:arg]`` (a name of :data:`contrastive_jax.configs.NAMES`) becomes ``PATH[:arg]``, as
    Flax's and big_vision's ``--config=path[:arg]`` (``arg`` goes to ``get_config(arg)``); any
    other value (a path) is kept.

    Examples:
      >>> config_argument("supcon_cifar10").endswith("configs/supcon_cifar10.py")
      True
      >>> config_argument("my/config.py:small")
      'my/config.py:small'
    """
    name, colon, arg = value.partition(":")
    return configs.path(name) + colon + arg if name in configs.NAMES else value


def _with_config_paths(argv: list[str]) -> list[str]:
    """``argv`` with the value of ``--config`` (``--config=V`` or ``--config V``) resolved by
    :func:`config_argument`."""
    out = list(argv[:1])
    args = iter(argv[1:])
    for arg in args:
        flag, equals, value = arg.partition("=")
        if flag.lstrip("-") == "config" and flag.startswith("-"):
            if not equals:
                value = next(args, None)  # type: ignore[arg-type]
                if value is None:
                    out.append(arg)
                    break
            arg = f"{flag}={config_argument(value)}"
        out.append(arg)
    return out


def _config_values(argv: list[str]) -> list[str]:
    """The values of ``--config`` (``--config=V`` or ``--config V``) in ``argv``."""
    values = []
    args = iter(argv[1:])
    for arg in args:
        flag, equals, value = arg.partition("=")
        if flag.lstrip("-") == "config" and flag.startswith("-"):
            value = value if equals else next(args, "")
            if value:
                values.append(value)
    return values


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing for every tool, with the exit codes of :class:`ExitCode`.

    ``--help`` (``-h``) prints the tool's docstring and its flags with their help to stdout and
    exits 0; a flag error (an unknown flag, a bad value) and a config that does not load (an
    unknown recipe, a missing file, a syntax error, no ``get_config`` or one that raises:
    :func:`contrastive_jax._config_file.load_error`) are usage errors: one ``error:`` line on
    stderr, exit 2. ``--helpfull`` is absl's, with every library's flags.
    ``--config`` takes a packaged recipe's name or a path, each with an optional ``:arg``
    (:func:`config_argument`).
    """
    from absl import app, flags

    if HELP_ARGS.intersection(argv[1:]):
        app.usage(shorthelp=True, writeto_stdout=True)
        sys.exit(ExitCode.OK)
    for value in _config_values(argv):  # a config that does not load: why, in one paragraph
        problem = load_error(value)
        if problem is not None:
            report_error(problem)
            sys.exit(ExitCode.USAGE)
    try:
        return flags.FLAGS(_with_config_paths(argv))
    except flags.Error as err:
        report_error(f"{err} (--help lists the flags)")
        sys.exit(ExitCode.USAGE)


def _run(module_name: str) -> None:
    """Runs a tool's ``main`` as ``python -m module_name`` would.

    absl's help reads the docstring of ``__main__`` and the flags of the module named by
    ``sys.argv[0]``: a console script's wrapper has neither, so the tool's module lends them.
    """
    quiet_startup()
    from absl import app, flags

    module = importlib.import_module(module_name)
    sys.modules["__main__"].__doc__ = module.__doc__
    for flag in flags.FLAGS.get_key_flags_for_module(module_name):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    app.run(module.main, flags_parser=getattr(module, "parse_flags", parse_flags))


def pretrain() -> None:
    """``contrastive-jax-pretrain``: see :mod:`contrastive_jax.pretrain`."""
    _run("contrastive_jax.pretrain")


def linear_eval() -> None:
    """``contrastive-jax-linear-eval``: see :mod:`contrastive_jax.linear_eval`."""
    _run("contrastive_jax.linear_eval")


def quickstart() -> None:
    """``contrastive-jax-quickstart``: see :mod:`contrastive_jax.quickstart`."""
    _run("contrastive_jax.quickstart")


def export() -> None:
    """``contrastive-jax-export``: see :mod:`contrastive_jax.export`."""
    _run("contrastive_jax.export")
