"""Every numeric setting has a domain, checked when the config is parsed.

The test walks the fields of every config section: each field that holds a number (or a
tuple of numbers) must be in its section's ``DOMAINS``, and a value outside that domain
(a bound crossed, NaN, inf) is refused with exit code 2,
naming the field, before the work directory exists; ``--print_config`` refuses it too.
"""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from contrastive_jax._cli import run_tool
from contrastive_jax._sections import _bounds, in_domain
from contrastive_jax.data.config import DATA_DOMAINS, DataSpec
from contrastive_jax.errors import ExitCode
from contrastive_jax.models.factory import ENCODER_DOMAINS, HEAD_DOMAINS, EncoderSpec, HeadSpec
from contrastive_jax.sizing import print_config
from contrastive_jax.train import loop
from contrastive_jax.train.config import TRAIN_DOMAINS, TrainSpec
from contrastive_jax.train.objective import LOSS_DOMAINS, LossSpec
from contrastive_jax.train.optim import OPTIMIZER_DOMAINS, OptimizerSpec
from contrastive_jax.train.transfer import TransferSpec
from tests.train.cli_config import tiny_config

#: Each section, where its fields are in a config, and the domains of its numeric fields
#: (TransferSpec checks its one numeric field, init_head_layers, in its __post_init__).
SECTIONS = [
    (TrainSpec, "train", TRAIN_DOMAINS),
    (LossSpec, "loss", LOSS_DOMAINS),
    (OptimizerSpec, "optimizer", OPTIMIZER_DOMAINS),
    (DataSpec, "data", DATA_DOMAINS),
    (EncoderSpec, "model.encoder", ENCODER_DOMAINS),
    (HeadSpec, "model.head", HEAD_DOMAINS),
    (TransferSpec, "model", {"init_head_layers": "int >= 0"}),
]
#: Encoder fields of one encoder only, and that encoder's config.
MLP = {"name": "mlp", "in_features": 8, "widths": (16, 4)}
SMALL_CNN = {"name": "small_cnn", "channels": (8,), "strides": (2,)}
ENCODER_OF = {"in_features": MLP, "widths": MLP, "init_std": MLP,
              "channels": SMALL_CNN, "strides": SMALL_CNN}
#: Fields set only together, and a good value of the other one.
PARTNERS = {"data.mean": ("std", (1.0,)), "data.std": ("mean", (0.5,))}


def _numeric(annotation) -> bool:
    """Whether a field's type is a number, an optional number or a tuple of numbers."""
    args = [a for a in typing.get_args(annotation) if a is not type(None) and a is not Ellipsis]
    if typing.get_origin(annotation) in (tuple, typing.Union) or args:
        return any(_numeric(a) for a in args)
    return annotation in (int, float)


def test_every_numeric_field_of_every_section_has_a_domain():
    for spec_class, where, domains in SECTIONS:
        hints = typing.get_type_hints(spec_class)
        numeric = {f.name for f in dataclasses.fields(spec_class) if _numeric(hints[f.name])}
        assert numeric - set(domains) == set(), f"config.{where}: fields without a domain"
        assert set(domains) <= numeric, f"config.{where}: domains of no numeric field"
        defaults = spec_class() if spec_class is not EncoderSpec else EncoderSpec()
        for name, domain in domains.items():  # every default is in its domain
            value = getattr(defaults, name)
            assert value is None or in_domain(value, domain), (where, name, value)


def _is_tuple(annotation) -> bool:
    return typing.get_origin(annotation) is tuple or any(
        _is_tuple(a) for a in typing.get_args(annotation))


def outside(domain: str, annotation) -> list:
    """Values outside ``domain``: each bound crossed, and NaN and inf for a float."""
    integer, low, low_closed, high, high_closed = _bounds(domain)
    values: list = []
    if low is not None:
        values.append(int(low) - 1 if integer and low_closed else (
            int(low) if integer else (low - 0.5 if low_closed else low)))
    if high is not None:
        values.append(high + 0.5 if high_closed else high)
    values += [] if integer else [math.nan, math.inf]  # (a typed config refuses 1.5 for an int)
    if _is_tuple(annotation):
        return [(v,) for v in values]
    return values


CASES = [(where, name, value)
         for spec_class, where, domains in SECTIONS
         for name, domain in domains.items()
         for value in outside(domain, typing.get_type_hints(spec_class)[name])]


def _config(where: str, name: str, value):
    config = tiny_config(total_steps=2)
    if name in ENCODER_OF:
        config.model.encoder = dict(ENCODER_OF[name])
    node = config
    for part in where.split("."):
        node = node[part]
    node[name] = value
    if f"{where}.{name}" in PARTNERS:
        partner, good = PARTNERS[f"{where}.{name}"]
        node[partner] = good
    return config


@pytest.mark.parametrize(("where", "name", "value"), CASES,
                         ids=[f"{w}.{n}={v!r}" for w, n, v in CASES])
def test_a_value_outside_its_domain_exits_2_naming_the_field_and_writes_nothing(
        where, name, value, tmp_path, capsys):
    workdir = tmp_path / "run"
    code = run_tool(lambda: loop.train(_config(where, name, value), str(workdir)))
    message = capsys.readouterr().err.strip()
    assert code == ExitCode.USAGE, message
    assert message.startswith("error: ") and name in message, message
    assert not workdir.exists()


@pytest.mark.parametrize("value", [0.0, -0.1, math.nan])
def test_print_config_refuses_a_temperature_outside_its_domain(value, capsys):
    config = tiny_config()
    config.loss.temperature = value
    assert print_config.run_cli(config, 8) == ExitCode.USAGE
    assert "config.loss.temperature must be a finite number > 0" in capsys.readouterr().err
