"""A config section's dataclass as the fields of an ``ml_collections.ConfigDict``.

The sections of a run (:class:`contrastive_jax.train.config.TrainSpec`,
:class:`contrastive_jax.train.objective.LossSpec`,
:class:`contrastive_jax.train.optim.OptimizerSpec`, :class:`contrastive_jax.data.DataSpec`,
:class:`contrastive_jax.models.EncoderSpec` and :class:`~contrastive_jax.models.HeadSpec`)
declare every field and default once, as frozen dataclasses; :func:`section_fields` makes the
command line's config of them. Needs ml_collections only when called.

Each section declares the domain of each of its numeric fields in a ``DOMAINS`` mapping
(field -> ``"> 0"``, ``"int >= 1"``, ``"[0, 1)"``, ...) that its ``__post_init__`` checks with
:func:`check_domains`: a value outside it, NaN or inf is refused when the config is parsed.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any

from contrastive_jax.errors import ConfigError


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


def _bounds(domain: str) -> tuple[bool, float | None, bool, float | None, bool]:
    """``(integer, low, low_closed, high, high_closed)`` of a domain: ``"> 0"``, ``">= 0"``,
    ``"int >= 1"``, ``"[0, 1)"``, ``"(0, 1]"``, ``"any"`` (every finite number)."""
    integer = domain.startswith("int")
    text = domain.removeprefix("int").strip()
    if text in ("any", ""):
        return integer, None, False, None, False
    if text[0] in "[(":
        low, high = (float(x) for x in text[1:-1].split(","))
        return integer, low, text[0] == "[", high, text[-1] == "]"
    op, number = text.split()
    return integer, float(number), op == ">=", None, False


def in_domain(value: Any, domain: str) -> bool:
    """Whether ``value`` (a number, or a tuple of numbers each of which must be) is finite and
    in ``domain`` (:func:`_bounds`); a bool is no number.

    Examples:
      >>> in_domain(0.5, "(0, 1]"), in_domain(0.0, "> 0"), in_domain(float("nan"), "any")
      (True, False, False)
      >>> in_domain((1, 2), "int >= 1"), in_domain(1.5, "int >= 1")
      (True, False)
    """
    if isinstance(value, (tuple, list)):
        return all(in_domain(v, domain) for v in value)
    integer, low, low_closed, high, high_closed = _bounds(domain)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if integer and not isinstance(value, int):
        return False
    if not math.isfinite(value):
        return False
    if low is not None and not (value >= low if low_closed else value > low):
        return False
    return high is None or (value <= high if high_closed else value < high)


def check_domains(section: Any, domains: Mapping[str, str], where: str) -> None:
    """Raises ConfigError naming the first field of ``section`` (a section dataclass) whose
    value is not None and not in its domain of ``domains`` (field name -> domain,
    :func:`in_domain`): ``config.loss.temperature must be a finite number > 0, got 0.0``."""
    for name, domain in domains.items():
        value = getattr(section, name)
        if value is not None and not in_domain(value, domain):
            each = "each value of " if isinstance(value, (tuple, list)) else ""
            raise ConfigError(f"{each}{where}.{name} must be {describe(domain)}, got {value!r}")


def describe(domain: str) -> str:
    """A domain in words: ``"an int >= 1"``, ``"a finite number > 0"``, ``"in [0, 1)"``."""
    integer = domain.startswith("int")
    text = domain.removeprefix("int").strip()
    if integer:
        return f"an int {text}" if text and text != "any" else "an int"
    if text == "any":
        return "a finite number"
    return f"in {text}" if text[0] in "[(" else f"a finite number {text}"
