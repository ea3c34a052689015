"""Griffe extension for the API site: docstrings whose text is spliced in at import time.

``contrastive_jax.losses.projnce`` writes the arguments its five losses share once and splices
them into each docstring with ``_document`` at the markers ``{loss_inputs}`` and
``{shared_args}``. Griffe reads the source, not the imported function, so this extension does
the same splice on the docstrings it finds there.
"""

from __future__ import annotations

import importlib
from typing import Any

import griffe

#: module -> {marker: name of the module attribute whose text replaces it}
SPLICES = {
    "contrastive_jax.losses.projnce": {"{loss_inputs}": "_LOSS_INPUTS",
                                       "{shared_args}": "_SHARED_ARGS"},
}


class SplicedDocstrings(griffe.Extension):
    """Replaces the markers of :data:`SPLICES` in the docstrings of those modules' functions."""

    def on_function_instance(self, *, func: griffe.Function, **kwargs: Any) -> None:
        splices = SPLICES.get(func.module.path)
        if not splices or func.docstring is None:
            return
        module = importlib.import_module(func.module.path)
        text = func.docstring.value
        for marker, attribute in splices.items():
            text = text.replace(marker, getattr(module, attribute))
        func.docstring.value = text
