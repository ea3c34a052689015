"""The notebooks in ``notebooks/``: committed outputs are complete, error-free and made
from the current sources, and every notebook runs top to bottom in a fresh kernel
(nbclient, ``notebooks`` extra) from the installed wheel, outside the checkout.

The runs are ``slow`` (``make notebooks``, which CI runs, and ``make test-all``) and happen
as a user's would. The wheel is built once per session from a copy of the sources and
installed into a virtual environment that sees this interpreter's site-packages (jax,
Jupyter, ...: nothing is downloaded but the build backend, as in ``tests/test_wheel.py``);
``notebooks/run.py`` runs there, with the kernel in a temporary directory, no
``PYTHONPATH`` and no notebook environment variable, so notebook 03 uses its built-in data
and notebook 05 trains its short run. The executed notebooks go to a temporary directory:
the committed files are never rewritten here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
EXPECTED = [
    "01_loss_tour",
    "02_projnce_mutual_information",
    "03_soft_targets",
    "04_conditional_uniformity",
    "05_explore_a_checkpoint",
]
MAX_BYTES = 1_000_000


def _runner():
    """``notebooks/run.py`` as a module (it imports nbformat/nbclient only when executing)."""
    spec = importlib.util.spec_from_file_location("notebook_runner", NOTEBOOK_DIR / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def _outputs(cells: list[dict]) -> list[dict]:
    return [o for c in cells for o in c.get("outputs", [])]


def _stale_problems(nb: dict) -> list[str]:
    """Why a notebook's stored outputs are not one clean top-to-bottom run (empty if they are)."""
    problems = []
    cells = _code_cells(nb)
    counts = [c.get("execution_count") for c in cells]
    if counts != list(range(1, len(cells) + 1)):
        problems.append(f"execution counts {counts} are not 1..{len(cells)} in order")
    digest = _runner().source_digest
    for cell, count in zip(cells, counts, strict=True):
        if cell["metadata"].get("source_sha256") != digest(cell["source"]):
            problems.append(f"cell [{count}] was edited after it ran (re-run notebooks/run.py)")
    for i, out in enumerate(_outputs(cells)):
        if out.get("output_type") == "error":
            problems.append(f"output {i} is an error: {out.get('ename')}: {out.get('evalue')}")
        if out.get("output_type") == "stream" and "Traceback" in "".join(out.get("text", "")):
            problems.append(f"output {i} prints a traceback")
    if not any("image/png" in o.get("data", {}) for o in _outputs(cells)):
        problems.append("no figure in the outputs")
    return problems


def test_every_notebook_is_committed():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_are_fresh(path):
    assert path.stat().st_size < MAX_BYTES, f"{path.name} is {path.stat().st_size} bytes"
    nb = _load(path)
    assert nb["nbformat"] == 4
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert _stale_problems(nb) == []


def test_stale_check_catches_errors_unexecuted_and_edited_cells():
    nb = _load(NOTEBOOK_DIR / "04_conditional_uniformity.ipynb")
    cells = _code_cells(nb)
    cells[1]["outputs"] = [{"output_type": "error", "ename": "ValueError", "evalue": "x"}]
    cells[2]["execution_count"] = None
    cells[3]["source"] = "".join(cells[3]["source"]) + "\nprint('edited')"
    problems = _stale_problems(nb)
    assert any("ValueError" in p for p in problems)
    assert any("execution counts" in p for p in problems)
    assert any("edited after it ran" in p for p in problems)


#: What a user would not have set; the runs clear these so that the notebooks see none.
NOTEBOOK_VARIABLES = ("CONTRASTIVE_JAX_CHECKPOINT", "CONTRASTIVE_JAX_CIFAR10_DIR")


def _run(command: list[str], cwd: Path, timeout: int = 1800) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", *NOTEBOOK_VARIABLES)}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="session")
def wheel_python(tmp_path_factory) -> Path:
    """The interpreter of a virtual environment where the wheel of this checkout is
    installed; a ``.pth`` file adds this interpreter's site-packages for the dependencies."""
    pytest.importorskip("nbclient", reason="the `notebooks` extra is not installed")
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).is_file():
            shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "contrastive_jax", source / "contrastive_jax",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"),
          str(source)], cwd=tmp)
    (wheel,) = (tmp / "dist").glob("contrastive_jax-*.whl")

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                cwd=tmp).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "-q", str(wheel)], cwd=tmp)
    located = _run([str(python), "-c", "import contrastive_jax; print(contrastive_jax.__file__)"],
                   cwd=tmp).stdout
    assert located.startswith(site) and str(ROOT) not in located, located
    return python


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_from_the_wheel(path, wheel_python, tmp_path):
    _run([str(wheel_python), str(NOTEBOOK_DIR / "run.py"), "--output", str(tmp_path), str(path)],
         cwd=tmp_path)
    nb = _load(tmp_path / path.name)
    assert _stale_problems(nb) == []
    if path.stem == "05_explore_a_checkpoint":  # trained its short run in the kernel's directory
        text = "".join("".join(o.get("text", "")) for o in _outputs(_code_cells(nb)))
        assert re.search(r"checkpoint: .* on digits_cluttered, step 150,", text), text[-2000:]
