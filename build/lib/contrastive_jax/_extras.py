"""Import guards for the optional parts of the package.

The core install (no extra) has what :mod:`contrastive_jax.losses` and
:mod:`contrastive_jax.metrics` need. Models, data, training and evaluation need the ``train``
extra; each of those packages calls :func:`require` first, so a missing library is reported
with the extra that installs it instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util
import sys


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (its parents may be)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package, or one blocked in sys.modules
        return False


def require(part: str, modules: tuple[str, ...], extra: str = "train") -> None:
    """Checks that ``modules`` are installed; if not, names them and the extra that has them.

    Args:
      part: the importing part of the package, e.g. ``"contrastive_jax.train"``.
      modules: module names ``part`` imports, e.g. ``("flax", "orbax.checkpoint")``.
      extra: the extra of ``pyproject.toml`` that installs them.

    Raises:
      ModuleNotFoundError: a module is not installed; the message names the missing modules
        and the ``pip install`` command of ``extra``.
    """
    missing = [module for module in modules if not _installed(module)]
    if missing:
        raise ModuleNotFoundError(
            f"{part} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed; install the {extra!r} extra: pip install 'contrastive_jax[{extra}]'",
            name=missing[0],
        )
