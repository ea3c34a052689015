"""Make packages absent from a Python process, as in an environment that lacks them.

``install(("tensorflow",))`` wraps every finder of ``sys.meta_path`` so that
``importlib.util.find_spec("tensorflow")`` returns None and ``import tensorflow`` raises
ModuleNotFoundError: exactly what a process sees where TensorFlow is not installed (the JAX
CUDA images), which is what libraries that probe for it (TFDS, etils, Orbax) and
:func:`contrastive_jax._extras.require` test. (``sys.modules[name] = None`` makes
``find_spec`` raise ValueError instead, and a finder that returns a spec which fails to load
makes ``find_spec`` succeed: neither is an absent package.)

For a subprocess, put :data:`SITE` (a folder holding a ``sitecustomize.py`` that calls
:func:`install` for ``CONTRASTIVE_JAX_ABSENT``, comma-separated) first on ``PYTHONPATH``
with the repository root, or use :func:`absent_env`.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The folder of the ``sitecustomize.py`` that installs the finder in a new interpreter.
SITE = os.path.join(ROOT, "tests", "absent_site")
#: The variable naming the packages :data:`SITE` makes absent.
VARIABLE = "CONTRASTIVE_JAX_ABSENT"


class _Without(importlib.abc.MetaPathFinder):
    """The finders of ``sys.meta_path``, blind to the packages ``absent``."""

    def __init__(self, finders: Sequence, absent: Sequence[str]) -> None:
        self.finders = list(finders)
        self.absent = frozenset(absent)

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.absent:
            return None
        for finder in self.finders:
            find = getattr(finder, "find_spec", None)
            spec = None if find is None else find(name, path, target)
            if spec is not None:
                return spec
        return None

    def invalidate_caches(self) -> None:
        for finder in self.finders:
            if hasattr(finder, "invalidate_caches"):
                finder.invalidate_caches()


def install(absent: Sequence[str] = ("tensorflow",)) -> None:
    """Makes the top-level packages ``absent`` unfindable in this process.

    Raises:
      RuntimeError: one of them is already imported.
    """
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in absent)
    if loaded:
        raise RuntimeError(f"already imported, cannot be made absent: {loaded[:5]}")
    sys.meta_path[:] = [_Without(sys.meta_path, absent)]


def loaded(packages: Sequence[str] = ("tensorflow",)) -> list[str]:
    """The modules of ``packages`` imported in this process."""
    return sorted(m for m in sys.modules if m.split(".")[0] in packages)


def absent_env(env: dict[str, str], absent: Sequence[str] = ("tensorflow",)) -> dict[str, str]:
    """``env`` for a subprocess in which ``absent`` are not installed (and the repository
    is importable)."""
    path = [SITE, ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    return {**env, "PYTHONPATH": os.pathsep.join(path), VARIABLE: ",".join(absent)}
