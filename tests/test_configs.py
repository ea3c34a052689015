"""The packaged configs: found by name inside the package, the same under experiments/configs."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from contrastive_jax import configs

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", configs.NAMES)
def test_packaged_config_lives_in_the_package_and_loads(name):
    path = Path(configs.path(name))
    assert path.is_file() and path.parent == Path(configs.__file__).resolve().parent
    config = configs.get(name)
    assert config.loss.name == "sincere" and config.data.global_batch_size > 0


@pytest.mark.parametrize("name", configs.NAMES)
def test_experiments_path_re_exports_the_packaged_config(name):
    spec = importlib.util.spec_from_file_location(
        f"_cfg_{name}", ROOT / "experiments" / "configs" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.get_config().to_dict() == configs.get(name).to_dict()


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="quickstart"):
        configs.path("imagenet")


def test_main_prints_one_path_or_all(capsys):
    assert configs.main(["quickstart"]) == 0
    assert capsys.readouterr().out.strip() == configs.path("quickstart")
    assert configs.main([]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(configs.NAMES)
    assert configs.main(["nope"]) == 2
    assert "unknown packaged config" in capsys.readouterr().err


def test_no_packaged_config_reads_outside_the_package():
    for name in configs.NAMES:
        config = configs.get(name)
        assert config.data.get("data_dir") is None, name
        assert not os.path.isabs(str(config.data.dataset))
