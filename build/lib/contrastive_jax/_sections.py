"""A config section's dataclass as the fields of an ``ml_collections.ConfigDict``.

The sections of a run (:class:`contrastive_jax.train.config.TrainSpec`,
:class:`contrastive_jax.train.objective.LossSpec`,
:class:`contrastive_jax.train.optim.OptimizerSpec`, :class:`contrastive_jax.data.DataSpec`,
:class:`contrastive_jax.models.EncoderSpec` and :class:`~contrastive_jax.models.HeadSpec`)
declare every field and default once, as frozen dataclasses; :func:`section_fields` makes the
command line's config of them. Needs ml_collections only when called.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any


def section_fields(spec_class: type) -> dict[str, Any]:
    """A section dataclass's fields and defaults as ``ConfigDict`` values.

    A None default becomes a typed placeholder (so the command line can set it; the type is
    the field's annotation without None), a mapping a ``ConfigDict``.
    """
    import ml_collections  # the config layer's library; the sections themselves need none
    from ml_collections import config_dict

    hints = typing.get_type_hints(spec_class)
    defaults = spec_class()  # every field of a section has a default
    fields = {}
    for field in dataclasses.fields(spec_class):
        value = getattr(defaults, field.name)
        if value is None:
            kinds = [t for t in typing.get_args(hints[field.name]) if t is not type(None)]
            value = config_dict.placeholder(typing.get_origin(kinds[0]) or kinds[0])
        elif isinstance(value, Mapping):
            value = ml_collections.ConfigDict(dict(value))
        fields[field.name] = value
    return fields
