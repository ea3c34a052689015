"""Exceptions that the command-line tools report as a usage error (exit code 2).

All subclass :class:`ValueError`, so ``except ValueError`` still catches them; any other
``ValueError`` reaching a command-line tool is a bug and is shown with its traceback.
"""

from __future__ import annotations

import difflib


class ConfigError(ValueError):
    """A config field has a bad value; the message names the field and the allowed values."""


class InputError(ValueError):
    """Input data or a file the run reads is unusable (e.g. a corrupt image)."""


class CorruptImageError(ValueError):
    """An image file that cannot be decoded; the message names the file."""


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
