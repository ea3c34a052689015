"""The pretraining config: every field is overridable from the command line."""

from __future__ import annotations

import importlib.util
import os
import sys

import ml_collections
import pytest
from absl import flags
from ml_collections import config_flags

from contrastive_jax.errors import ConfigError
from contrastive_jax.train.config import check_config, default_config

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


def test_command_line_overrides_reach_nested_fields():
    config = _parse(
        "--config.data.global_batch_size=64",
        "--config.train.total_steps=7",
        "--config.data.dataset=folder:/data/images",
        "--config.train.checkpoint_every=3",
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


def _shipped_configs():
    """Every config file that ships: the packaged ones and the experiments'."""
    packaged = os.path.join(ROOT, "contrastive_jax", "configs")
    experiments = os.path.join(ROOT, "experiments", "configs")
    return sorted(
        os.path.join(folder, name)
        for folder in (packaged, experiments)
        for name in os.listdir(folder)
        if name.endswith(".py") and not name.startswith("_")
    )


@pytest.mark.parametrize("path", _shipped_configs(), ids=os.path.basename)
def test_every_shipped_config_declares_only_known_fields(path):
    name = f"shipped_config_{os.path.basename(path)[:-3]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:  # dataclasses look their module up
        patch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
    check_config(module.get_config())


@pytest.mark.parametrize(
    "section, field, nearest",
    [
        ("train", "device_prefech", "config.train.device_prefetch"),
        ("loss", "mixng", "config.loss.mixing"),
        ("optimizer", "warmup_step", "config.optimizer.warmup_steps"),
        ("data", "globalbatch_size", "config.data.global_batch_size"),
    ],
)
def test_an_unknown_field_names_the_nearest_one(section, field, nearest):
    config = default_config()
    config[section][field] = 1
    with pytest.raises(ConfigError, match=f"config.{section}.{field} is not a config field; "
                                          f"did you mean {nearest}"):
        check_config(config)


def test_an_unknown_override_names_the_nearest_field():
    from contrastive_jax.pretrain import _check_override

    _check_override("config.model.encoder.channels")  # an encoder's own field: checked later
    _check_override("config.loss.kwargs.projnce")  # keyed by term names
    with pytest.raises(ConfigError, match="did you mean config.train.device_prefetch"):
        _check_override("config.train.device_prefech")
    with pytest.raises(ConfigError, match="did you mean config.loss.mixing.mixup_alpha"):
        _check_override("config.loss.mixing.mixup_alph")


def test_every_field_the_code_reads_is_declared():
    config = default_config()
    assert not config.loss.targets and config.loss.mixing.num_classes is None
    assert config.train.device_prefetch == 2 and config.train.collapse_threshold == -0.2


@pytest.mark.parametrize(
    "old, new",
    [
        ("train.prefetch", "train.device_prefetch"),
        ("optimizer.epochs", "optimizer.schedule_epochs"),
        ("optimizer.total_steps", "optimizer.schedule_steps"),
        ("dataset", "data.dataset"),
        ("batch_size", "data.global_batch_size"),
        ("num_steps", "train.total_steps"),
        ("checkpoint_every", "train.checkpoint_every"),
    ],
)
def test_a_renamed_field_is_refused_with_its_new_name(old, new):
    from contrastive_jax.pretrain import _check_override

    *section, name = old.split(".")
    config = default_config()
    (config[section[0]] if section else config)[name] = 1
    message = f"config.{old} was renamed to config.{new}"
    with pytest.raises(ConfigError, match=message):
        check_config(config)
    with pytest.raises(ConfigError, match=message):
        _check_override(f"config.{old}")


def test_a_saved_config_of_an_old_name_loads_under_the_new_one():
    from contrastive_jax.train.config import rename_saved

    saved = {"train": {"prefetch": 4}, "optimizer": {"epochs": 8.0, "name": "sgd"}}
    assert rename_saved(saved) == {"train": {"device_prefetch": 4},
                                   "optimizer": {"schedule_epochs": 8.0, "name": "sgd"}}


def test_a_saved_config_of_the_top_level_aliases_loads_under_the_section_names():
    """Work directories written while the four top-level names were aliases hold both."""
    from contrastive_jax.train.config import rename_saved

    saved = {"seed": 1, "dataset": "digits", "batch_size": 64, "num_steps": 6,
             "checkpoint_every": 3, "data": {"dataset": "digits", "global_batch_size": 64},
             "train": {"total_steps": 6, "checkpoint_every": 3}}
    assert rename_saved(saved) == {"seed": 1,
                                   "data": {"dataset": "digits", "global_batch_size": 64},
                                   "train": {"total_steps": 6, "checkpoint_every": 3}}
    saved["batch_size"] = 32
    with pytest.raises(ConfigError, match=r"config\.batch_size=32 but "
                                          r"config\.data\.global_batch_size=64"):
        rename_saved(saved)
