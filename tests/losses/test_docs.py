"""The argument text the losses share is written once (losses/_docs.py) and formatted in."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from contrastive_jax import losses
from contrastive_jax.losses import _docs

LOSSES_DIR = Path(losses.__file__).parent


def test_a_marker_becomes_the_wrapped_argument_text_at_its_indentation():
    doc = "Summary.\n\n    Args:\n      x: first.\n      {block_size}\n        A note.\n"
    out = _docs.splice(doc)
    lines = out.splitlines()
    start = lines.index("      block_size: stream over blocks of this many anchor rows, holding a "
                        "[block, global")
    body = lines[start + 1:]
    assert body[-1] == "        A note."
    assert all(line.startswith("        ") for line in body)
    assert all(len(line) <= 92 for line in lines)
    assert "None chooses the dense form" in out and out.endswith("\n")


def test_rows_names_the_row_count():
    assert "[B]" in _docs.splice("  {valid}", rows="B")
    assert "[N]" in _docs.splice("  {valid}")


def test_an_unknown_marker_is_refused_by_name():
    with pytest.raises(ValueError, match="axis_nme"):
        _docs.splice("    {axis_nme}")


def test_every_registered_loss_is_formatted_by_the_decorator():
    for name in losses.names():
        fn = losses.get(name)
        assert getattr(fn, _docs.SPLICED, False), name
        assert "axis_name:" in inspect.getdoc(fn), name


def test_the_shared_text_is_not_copied_into_the_loss_modules():
    for key in ("block_size", "axis_name", "axis_name_split", "num_classes"):
        phrase = _docs.ARGS[key].split(": ", 1)[1][:40]
        holders = [p.name for p in LOSSES_DIR.glob("*.py") if phrase in p.read_text()]
        assert holders == ["_docs.py"], (key, holders)
