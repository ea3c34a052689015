"""Exceptions that the command-line tools report as a usage error (exit code 2).

All subclass :class:`ValueError`, so ``except ValueError`` still catches them; any other
``ValueError`` reaching a command-line tool is a bug and is shown with its traceback.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config field has a bad value; the message names the field and the allowed values."""


class InputError(ValueError):
    """Input data or a file the run reads is unusable (e.g. a corrupt image)."""


class CorruptImageError(ValueError):
    """An image file that cannot be decoded; the message names the file."""
