"""The errors of a run and the exit code of each: one table for every command-line tool.

``python -m contrastive_jax.pretrain``, ``python -m contrastive_jax.linear_eval``,
``python -m contrastive_jax.quickstart`` and ``python -m contrastive_jax.export`` (and their
console scripts) exit with
:class:`ExitCode`; :func:`exit_code` says which for an error (docs/cli.md has the table).
The usage errors subclass :class:`ValueError`, so ``except ValueError`` still catches them;
any other ``ValueError`` reaching a command-line tool is a bug and is shown with its
traceback (exit code 1).
"""

from __future__ import annotations

import difflib
import enum
import errno


class ExitCode(enum.IntEnum):
    """Exit codes of the command-line tools (``sysexits.h`` names where one fits)."""

    OK = 0  # done
    BUG = 1  # anything else: a bug, shown with its traceback
    USAGE = 2  # bad config, input or environment; the message names the field or file
    NONFINITE = 65  # a non-finite loss or gradient stopped the run (EX_DATAERR)
    CHECKPOINT = 74  # a checkpoint could not be written (full disk?) or none read (EX_IOERR)
    PREEMPTED = 75  # SIGTERM or SIGINT: the step was saved; run again to continue (EX_TEMPFAIL)


class ConfigError(ValueError):
    """A config field has a bad value; the message names the field and the allowed values."""


class InputError(ValueError):
    """Input data or a file the run reads is unusable (e.g. a corrupt image)."""


class CorruptImageError(ValueError):
    """An image file that cannot be decoded; the message names the file."""


class ConfigMismatch(ValueError):
    """The checkpoint in the work directory was written with an incompatible config."""


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, or none of those present could be read."""


class Preempted(Exception):
    """SIGTERM (or SIGINT, Ctrl-C) arrived; the current step was checkpointed."""

    def __init__(self, step: int, signal_name: str = "SIGTERM") -> None:
        verb = "interrupted" if signal_name == "SIGINT" else "preempted"
        super().__init__(f"{verb} by {signal_name}; checkpoint saved at step {step}")
        self.step = step


class NonFiniteLoss(FloatingPointError):
    """A step produced a NaN or inf loss or gradient."""


#: The loggers of the libraries under a run (Orbax through absl, TensorStore, asyncio): a
#: damaged checkpoint or a failed write makes them log each failed piece, whose one line of
#: cause the run reports itself; they are quieted there (``contrastive_jax._cli.settle``,
#: ``contrastive_jax.train.checkpoint.quiet_libraries``).
LIBRARY_LOGGERS = ("absl", "asyncio", "orbax", "tensorstore")

#: Write errors of a full disk, a quota or a file-size limit: exit like a failed checkpoint.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

#: Each error a tool reports without a traceback, and its exit code (the first match wins).
EXIT_CODES: tuple[tuple[type[BaseException], ExitCode], ...] = (
    (Preempted, ExitCode.PREEMPTED),
    (NonFiniteLoss, ExitCode.NONFINITE),
    (CheckpointError, ExitCode.CHECKPOINT),
    (ConfigError, ExitCode.USAGE),
    (InputError, ExitCode.USAGE),
    (CorruptImageError, ExitCode.USAGE),
    (ConfigMismatch, ExitCode.USAGE),
    (FileNotFoundError, ExitCode.USAGE),  # a missing work directory or checkpoint
    (OSError, ExitCode.USAGE),  # an unwritable work directory (a full disk: CHECKPOINT)
)


def exit_code(err: BaseException) -> ExitCode | None:
    """The exit code of ``err`` by :data:`EXIT_CODES`; None for a bug (shown with a traceback).

    An ``OSError`` of a full disk (:data:`DISK_FULL`) is :attr:`ExitCode.CHECKPOINT`: what
    was written is kept and a run with space resumes.
    """
    if isinstance(err, OSError) and err.errno in DISK_FULL:
        return ExitCode.CHECKPOINT
    for kind, code in EXIT_CODES:
        if isinstance(err, kind):
            return code
    return None


def check_fields(where: str, fields, known) -> None:
    """Raises ConfigError if a name of ``fields`` is not in ``known``, naming the nearest field.

    Args:
      where: the config path of the fields, e.g. ``"config.train"``.
      fields: the names a config sets.
      known: the names the schema declares.
    """
    known = sorted(known)
    for name in sorted(set(fields) - set(known)):
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {where}.{near[0]}?" if near else f"known fields: {', '.join(known)}"
        raise ConfigError(f"{where}.{name} is not a config field; {hint}")
