"""Import an experiment script (``experiments/reproduce/*.py``, ``experiments/bench/*.py``) for the
tests, as the module of the ``experiments`` package it is (``experiments.bench.losses``)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
REPRODUCE = EXPERIMENTS / "reproduce"


def load_script(name: str, directory: Path = REPRODUCE) -> ModuleType:
    """The module ``<directory>/<name>.py``, imported by its dotted name under ``experiments``.

    Raises:
      ValueError: ``directory`` is not inside ``experiments/``.
    """
    directory = Path(directory).resolve()
    if not directory.is_relative_to(EXPERIMENTS):
        raise ValueError(f"{directory} is not a directory of {EXPERIMENTS}")
    parts = ("experiments", *directory.relative_to(EXPERIMENTS).parts, name)
    return importlib.import_module(".".join(parts))
