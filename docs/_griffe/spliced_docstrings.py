"""Griffe extension for the API site: the loss docstrings as ``help()`` shows them.

The losses write the argument descriptions they share once (``contrastive_jax/losses/_docs.py``)
and a decorator, ``_docs.shared_args``, formats them into each docstring at import. Griffe reads
the source, not the imported function, so for every function of ``contrastive_jax.losses`` that
the decorator formatted this extension takes the docstring of the imported function.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe

PACKAGE = "contrastive_jax.losses"


class SplicedDocstrings(griffe.Extension):
    """Replaces the source docstring of each decorated loss by its formatted one."""

    def on_function_instance(self, *, func: griffe.Function, **kwargs: Any) -> None:
        module_path = func.module.path
        if func.docstring is None or not (
            module_path == PACKAGE or module_path.startswith(PACKAGE + ".")
        ):
            return
        docs = importlib.import_module(f"{PACKAGE}._docs")
        obj = getattr(importlib.import_module(module_path), func.name, None)
        if getattr(obj, docs.SPLICED, False):
            func.docstring.value = inspect.cleandoc(obj.__doc__)
