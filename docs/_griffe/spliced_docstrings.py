"""Griffe extension for the API site: docstrings whose text is spliced in at import time.

``contrastive_jax.losses._projnce`` writes the arguments its five losses share once and splices
them into each docstring at import (``_document``). Griffe reads the source, not the imported
function, so this extension applies the module's own splice to the docstrings it finds there.
"""

from __future__ import annotations

import importlib
from typing import Any

import griffe

#: module -> name of its ``str -> str`` function that splices the shared text into a docstring
SPLICES = {"contrastive_jax.losses._projnce": "_splice_shared_args"}


class SplicedDocstrings(griffe.Extension):
    """Applies the splice of :data:`SPLICES` to the docstrings of those modules' functions."""

    def on_function_instance(self, *, func: griffe.Function, **kwargs: Any) -> None:
        splice = SPLICES.get(func.module.path)
        if splice is None or func.docstring is None:
            return
        module = importlib.import_module(func.module.path)
        func.docstring.value = getattr(module, splice)(func.docstring.value)
