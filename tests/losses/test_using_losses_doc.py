"""The code of ``docs/using-losses.md`` runs: its ``python`` blocks, in order, in one
namespace, on the 8 simulated devices of the test session (each block asserts what
the page says of it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "using-losses.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_page_has_its_sections():
    text = PAGE.read_text()
    for needle in ("jax.jit", "nnx.Optimizer", 'axis_name="batch"', '("data", "fsdp")',
                   "jax.pmap", "valid=valid", "block_size"):
        assert any(needle in block for block in python_blocks(text)), needle


@pytest.mark.slow
def test_every_code_block_runs():
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    namespace: dict = {"__name__": "using_losses_doc"}
    for i, block in enumerate(python_blocks(PAGE.read_text())):
        exec(compile(block, f"{PAGE.name}[block {i}]", "exec"), namespace)  # noqa: S102
