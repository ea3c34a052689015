"""docs/recipes.md is the table generated from the recipes, every row marked as a match
holds the source's value, and the schedule difference the CIFAR recipes declare."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import numpy as np
import pytest

from contrastive_jax import configs
from contrastive_jax.configs import _table as table
from contrastive_jax.configs.__main__ import main as configs_main
from contrastive_jax.train import optim

ROOT = Path(__file__).resolve().parents[1]


def test_docs_recipes_is_the_generated_table():
    written = (ROOT / "docs" / "recipes.md").read_text()
    assert written == table.markdown(), (
        "docs/recipes.md is stale: python -m contrastive_jax.configs --table > docs/recipes.md")


@pytest.mark.parametrize("name", table.RECIPES)
def test_every_match_holds_the_sources_value(name):
    assert table.mismatches(name) == []


@pytest.mark.parametrize("name", table.RECIPES)
def test_every_row_names_fields_of_the_config(name):
    config = configs.get(name)
    for row in table.source(name):
        assert row.setting and row.source and row.where, row
        for field in row.fields:
            table.field_value(config, field)  # a KeyError names a field the config lacks


def test_a_config_that_leaves_its_source_fails_the_check(monkeypatch):
    config = configs.get("supcon_imagenet")
    config.optimizer.weight_decay = 1e-6
    monkeypatch.setattr(configs, "get", lambda name: config)
    assert any("weight decay" in m for m in table.mismatches("supcon_imagenet"))


def _reference_schedule(lr: float, epochs: int, warm_epochs: int, steps: int) -> np.ndarray:
    """HobbitLong/SupContrast's learning rate at each step: util.py adjust_learning_rate
    (cosine per epoch, 1-based, to lr x 0.1^3) and warmup_learning_rate (per step over the
    first epochs, from 0.01 to the cosine's value at warm_epochs: main_supcon.py:111-116)."""
    eta_min = lr * 0.1 ** 3
    warmup_to = eta_min + (lr - eta_min) * (1 + math.cos(math.pi * warm_epochs / epochs)) / 2
    values = []
    for epoch in range(1, epochs + 1):
        for batch in range(steps):
            if epoch <= warm_epochs:
                p = (batch + (epoch - 1) * steps) / (warm_epochs * steps)
                values.append(0.01 + p * (warmup_to - 0.01))
            else:
                values.append(eta_min + (lr - eta_min)
                              * (1 + math.cos(math.pi * epoch / epochs)) / 2)
    return np.asarray(values)


@pytest.mark.slow
def test_supcontrast_schedule_difference():
    """_supcontrast.py's figure: evaluated per step at batch 1024 on CIFAR-10's 50,000 images
    (48 steps per epoch), the recipe's schedule and the reference's differ by at most 1.06 %
    of the peak, near epoch 373."""
    config = configs.get("supcon_cifar10")
    steps = 50_000 // config.data.global_batch_size
    schedule = optim.make_schedule(config.optimizer.to_dict(), steps_per_epoch=steps,
                                   global_batch_size=config.data.global_batch_size,
                                   total_steps=config.train.epochs * steps)
    ours = np.asarray(schedule(np.arange(config.train.epochs * steps)))
    ref = _reference_schedule(0.5, config.train.epochs, 10, steps)
    gap = np.abs(ours - ref) / 0.5
    assert gap.max() == pytest.approx(0.0106, abs=5e-5)
    assert int(gap.argmax()) // steps + 1 == 373


def test_the_command_line_prints_the_table(capsys):
    assert configs_main(["--table"]) == 0
    assert capsys.readouterr().out == table.markdown()


def _readme_recipes_table() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("<!-- recipes table:")
    body = text[start:].split("\n", 1)[1]
    return body.split("<!-- end of recipes table -->", 1)[0]


def test_readme_recipes_table_is_the_generated_one():
    assert _readme_recipes_table() == table.readme_table(), (
        "README.md's recipes table is stale: paste contrastive_jax.configs._table.readme_table() "
        "between its markers")


def test_readme_row_reads_the_recipe_and_its_docstring():
    row = table.readme_row("sincere_cifar10").strip("|\n").split(" | ")
    assert [c.strip() for c in row] == [
        "`sincere_cifar10`", "SINCERE (Feeney & Hughes 2023)", "`cifar10`", "ResNet-50", "512",
        "1,000", "95.93 %", "not run"]
    assert table.paper_top1("sincere_imagenet") == "none published"


def test_readme_columns_from_a_docstring(monkeypatch):
    module = importlib.import_module("contrastive_jax.configs.supcon_cifar10")
    monkeypatch.setattr(module, "__doc__", "Title.\n\nExpected: 91.5 % top-1 after\nall.\n\n"
                        "Measured here: 90.2 % top-1 (runs/x).")
    assert table.paper_top1("supcon_cifar10") == "91.5 %"
    assert table.measured_here("supcon_cifar10") == "90.2 %"
    monkeypatch.setattr(module, "__doc__", "Title.\n\nExpected: better than chance.\n")
    with pytest.raises(ValueError, match="no 'N % top-1'"):
        table.paper_top1("supcon_cifar10")
    with pytest.raises(ValueError, match="Not run here"):
        table.measured_here("supcon_cifar10")
    monkeypatch.setattr(module, "__doc__", "Title only.")
    with pytest.raises(ValueError, match="no 'Expected:' paragraph"):
        table.paper_top1("supcon_cifar10")


def test_encoder_names():
    config = configs.get("quickstart")
    assert table.encoder_name(config.model.encoder) == "ResNet-18 x0.125"
    assert table.encoder_name(configs.get("supcon_cifar10").model.encoder) == "ResNet-50"
