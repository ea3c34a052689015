"""The argument descriptions the losses share, written once.

A loss's docstring names a shared argument by a marker line in its ``Args:`` section,
``{axis_name}``, and :func:`shared_args` replaces each marker by ``name: description``
at import, so ``help(losses.supcon)`` shows the whole text. The API site reads
docstrings from source; its griffe extension (``docs/_griffe/spliced_docstrings.py``)
takes the docstring of the imported function instead wherever :func:`shared_args` ran.

A line indented deeper right after a marker continues that argument's description
(a loss-specific note).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from typing import TypeVar, overload

from contrastive_jax.losses import blockwise

F = TypeVar("F", bound=Callable)

#: Attribute that :func:`shared_args` sets (True) on the functions whose docstring it formatted.
SPLICED = "__shared_args_spliced__"

#: marker -> the argument line it stands for; ``{rows}`` is the name of the row count.
ARGS = {
    "axis_name": (
        "axis_name: mesh axis, or tuple of mesh axes (rows sharded over all of them, in mesh "
        "order), of the enclosing ``shard_map`` or ``pmap`` to gather the batch over; None "
        "for global arrays under ``jax.jit``, sharded over any mesh or not (see ``_core``)."
    ),
    # The losses that need no gathered rows (a per-row loss, then a global mean).
    "axis_name_split": (
        "axis_name: mesh axis, or tuple of mesh axes, of the enclosing ``shard_map`` or "
        "``pmap`` that the batch is split over; None for global arrays (see ``_core``)."
    ),
    "valid": "valid: optional bool [{rows}]; False rows are padding.",
    "block_size": (
        "block_size: stream over blocks of this many anchor rows, holding a [block, global "
        "rows] slab of logits at a time instead of the whole matrix, the gradient fused into "
        "the forward pass (see ``blockwise``); None chooses the dense form up to "
        f"{blockwise.BLOCKWISE_THRESHOLD} global rows and streams above."
    ),
    "precision": (
        "precision: arithmetic of the similarity products (the forward one and, under "
        "differentiation, the two of the gradient): ``\"float32\"`` (default) float32 at "
        "``Precision.HIGHEST``; ``\"tf32\"`` the TF32 tensor-core algorithm (GPU only); "
        "``\"bf16\"`` bfloat16 operands with float32 accumulation (``_precision``). "
        "Everything else stays float32."
    ),
    # The ProjNCE family (projnce, soft_supcon, soft_nce, med_supcon, med_nce).
    "class_embeddings": "embeddings: float [N, D] rows on this device (normalised inside).",
    "class_labels": "labels: int [N] class labels.",
    "projnce_temperature": (
        "temperature: tau > 0 (0.07 in the paper). Traced, a value that is not (or not "
        "finite) gives a NaN loss: see ``_core``."
    ),
    "projnce_valid": (
        "valid: optional bool [N]; False rows are padding (neither anchors nor candidates "
        "nor class statistics)."
    ),
    "num_classes": (
        "num_classes: optional static number of classes; labels must then lie in "
        "[0, num_classes), and the streamed form has [num_classes, D] class statistics and "
        "[block, num_classes] class products. Without it the labels are mapped to dense "
        "indices among the distinct labels of the global batch, and the streamed form runs "
        "the smallest of its compiled class-slot counts (``class_slot_sizes``) that holds "
        "them. Same value either way."
    ),
}

_MARKER = re.compile(r"^(?P<indent>[ \t]*)\{(?P<key>\w+)\}[ \t]*$")
_WIDTH = 92


def splice(doc: str, rows: str = "N") -> str:
    """``doc`` with each marker line ``{key}`` of :data:`ARGS` replaced by its text.

    The text is wrapped at the marker's indentation, continuation lines two spaces
    deeper (the Google docstring layout). Raises ValueError on a marker that is not a
    key of :data:`ARGS`.
    """
    out = []
    for line in doc.splitlines():
        match = _MARKER.match(line)
        if match is None:
            out.append(line)
            continue
        key, indent = match["key"], match["indent"]
        if key not in ARGS:
            raise ValueError(f"unknown shared-argument marker {{{key}}}; known: {sorted(ARGS)}")
        out.extend(
            textwrap.wrap(
                ARGS[key].format(rows=rows), _WIDTH, initial_indent=indent,
                subsequent_indent=indent + "  ", break_on_hyphens=False,
            )
        )
    return "\n".join(out) + ("\n" if doc.endswith("\n") else "")


@overload
def shared_args(fn: F, /) -> F: ...


@overload
def shared_args(*, rows: str = "N") -> Callable[[F], F]: ...


def shared_args(fn: F | None = None, /, *, rows: str = "N") -> F | Callable[[F], F]:
    """Decorator: formats the shared-argument markers of ``fn``'s docstring (:func:`splice`).

    ``@shared_args`` or ``@shared_args(rows="B")`` (the name of the row count in the
    shapes, for losses on class scores [B, K]).
    """

    def decorate(f: F) -> F:
        f.__doc__ = splice(f.__doc__ or "", rows)
        setattr(f, SPLICED, True)
        return f

    return decorate if fn is None else decorate(fn)
