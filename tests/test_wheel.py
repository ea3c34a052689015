"""The wheel works outside the checkout: the README's install section, run for real.

Builds the wheel from a copy of the sources, installs it without extras into a fresh
virtual environment and runs the README's loss example from a directory outside the
checkout, with TensorFlow absent; then installs the ``train`` extra into the same
environment and runs the quickstart console script for a few steps. Slow (pip installs
jax, TensorFlow and the rest; pip may reuse its local wheel cache), so ``make test-all``
only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_loss_example() -> str:
    """The first Python block of the README's "Install" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "the README's Install section has no Python example"
    return blocks[0]


def _run(command: list[str], cwd: Path, timeout: int = 1800) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "PYTHONPATH", "VIRTUAL_ENV", "TF_CPP_MIN_LOG_LEVEL")}
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "contrastive_jax", source / "contrastive_jax",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
          "-w", str(dist), str(source)], cwd=tmp_path)
    (wheel,) = dist.glob("contrastive_jax-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    probe = _run([str(python), "-c", "import importlib.util as u; "
                  "print(u.find_spec('tensorflow'), u.find_spec('flax'))"], cwd=outside)
    assert probe.stdout.split() == ["None", "None"], "the core install pulled the train extra"
    (outside / "example.py").write_text(readme_loss_example(), encoding="utf-8")
    example = _run([str(python), "example.py"], cwd=outside)
    assert re.search(r"\d\.\d", example.stdout), example.stdout
    located = _run([str(python), "-c", "import contrastive_jax; print(contrastive_jax.__file__)"],
                   cwd=outside)
    assert str(venv) in located.stdout and str(ROOT) not in located.stdout
    missing = subprocess.run([str(python), "-c", "import contrastive_jax.train"], cwd=outside,
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode != 0
    assert "pip install 'contrastive_jax[train]'" in missing.stderr

    _run([str(python), "-m", "pip", "install", "-q", f"{wheel}[train]"], cwd=tmp_path,
         timeout=3600)
    probe = _run([str(python), "-c", "import importlib.util as u; print(u.find_spec('tensorflow'))"],
                 cwd=outside)
    assert probe.stdout.split() == ["None"], "the train extra pulled TensorFlow"
    quickstart = _run([str(venv / "bin" / "contrastive-jax-quickstart"), "--workdir", "run",
                       "--config.train.total_steps=6"], cwd=outside, timeout=1800)
    assert "pretraining: 6 steps of sincere+global_uniformity on digits_cluttered" in quickstart.stdout
    assert "linear top-1" in quickstart.stdout
    assert (outside / "run" / "eval.json").is_file()
    assert "cpu_feature_guard" not in quickstart.stderr
