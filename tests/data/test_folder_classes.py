"""Image folders that cannot teach: a class folder without images is refused (it would count
as a class), and a training set of one class is refused for a loss that reads the labels and
warned about otherwise (docs/cli.md, Data)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from contrastive_jax._cli import run_tool
from contrastive_jax.data import sources
from contrastive_jax.errors import ExitCode, InputError
from contrastive_jax.train import loop
from contrastive_jax.train.spec import parse
from tests.train.cli_config import tiny_config


def _folder(root, counts: dict[str, int]) -> str:
    rng = np.random.default_rng(0)
    for name, count in counts.items():
        folder = root / "train" / name
        folder.mkdir(parents=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
                folder / f"{i}.png")
    return str(root)


def test_a_class_folder_without_images_is_refused_naming_it(tmp_path):
    root = _folder(tmp_path, {"a": 4, "b": 4, "c": 0})
    with pytest.raises(InputError, match=r"class folder .*train/c has no image files"):
        sources.image_folder_source(root)


def test_one_class_with_a_loss_on_labels_exits_2_before_the_work_directory(tmp_path, capsys):
    config = tiny_config()
    config.data.dataset = "folder:" + _folder(tmp_path / "data", {"only": 40})
    code = run_tool(lambda: loop.train(config, str(tmp_path / "run")))
    message = capsys.readouterr().err
    assert code == ExitCode.USAGE, message
    assert "has 1 class: the loss term 'sincere'" in message
    assert not (tmp_path / "run").exists()


def test_one_class_with_a_self_supervised_loss_is_a_warning(caplog):
    config = tiny_config()
    config.loss.name = "nt_xent"
    loop.check_classes(parse(config), 1)
    assert "has 1 class" in caplog.text and "read 100 %" in caplog.text
    loop.check_classes(parse(config), 2)  # two classes: nothing to say
    assert caplog.text.count("has 1 class") == 1
