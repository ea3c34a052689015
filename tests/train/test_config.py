"""The pretraining config: every field is overridable from the command line."""

from __future__ import annotations

import os

import ml_collections
from absl import flags
from ml_collections import config_flags

from contrastive_jax.train.config import default_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICKSTART = os.path.join(ROOT, "experiments", "configs", "quickstart.py")


def _leaves(config: ml_collections.ConfigDict, prefix: str = ""):
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", config.get_ref(key)


def test_no_field_is_an_untyped_none():
    """``--config.x=...`` cannot override a field whose only type is NoneType."""
    untyped = [name for name, ref in _leaves(default_config()) if ref.get_type() is type(None)]
    assert not untyped, f"use config_dict.placeholder(<type>) for {untyped}"


def _parse(*overrides: str) -> ml_collections.ConfigDict:
    argv = ["prog", f"--config={QUICKSTART}", *overrides]
    values = flags.FlagValues()
    # Override flags are declared from the argument list, as the CLIs do from sys.argv.
    config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
    values(argv)
    return values.config


def test_command_line_overrides_reach_nested_fields_and_their_aliases():
    config = _parse(
        "--config.batch_size=64",
        "--config.num_steps=7",
        "--config.dataset=folder:/data/images",
        "--config.checkpoint_every=3",
        "--config.seed=5",
        "--config.loss.name=supcon",
        "--config.optimizer.warmup_steps=10",
        "--config.optimizer.grad_clip_norm=1.0",
        "--config.model.encoder.bn_axis_name=data",
    )
    assert config.data.global_batch_size == 64
    assert config.train.total_steps == 7
    assert config.data.dataset == "folder:/data/images"
    assert config.train.checkpoint_every == 3
    assert (config.seed, config.loss.name) == (5, "supcon")
    assert config.optimizer.warmup_steps == 10 and config.optimizer.grad_clip_norm == 1.0
    assert config.model.encoder.bn_axis_name == "data"
    nested = _parse("--config.data.global_batch_size=32")
    assert nested.batch_size == 32
