"""The API reference site builds with warnings as errors, and shows the losses' docstrings with
their shared argument text formatted in (as ``help()`` does)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_site_builds_strictly_with_the_shared_arguments_formatted_in(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "api" / "losses" / "index.html").read_text()
    from contrastive_jax.losses import _docs

    assert not [key for key in _docs.ARGS if "{" + key + "}" in page]  # no marker left
    assert page.count("compiled class-slot counts") >= 5  # the ProjNCE family's, in each of five
    assert page.count("None chooses the dense form") >= 14  # each of the 14 losses with block_size
    assert not (tmp_path / "_griffe").exists()  # the build's extension is not published
