"""The API reference site builds with warnings as errors, and shows spliced docstrings whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_site_builds_strictly_with_the_projnce_shared_arguments_spliced(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "api" / "losses" / "index.html").read_text()
    assert "{loss_inputs}" not in page and "{shared_args}" not in page
    assert page.count("compiled class-slot counts") >= 5  # the shared text, in each of the five losses
    assert not (tmp_path / "_griffe").exists()  # the build's extension is not published
