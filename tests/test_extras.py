"""The core install: losses and metrics import with jax, numpy and scipy alone; the parts
that need the ``train`` extra say so when it is missing.

The extras' libraries are made absent in a subprocess as where they are not installed
(:mod:`tests.no_tensorflow`); ``make test-all`` also checks a real core-only install from the
wheel (tests/test_wheel.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.no_tensorflow import ROOT

#: What the ``train`` and ``prepare`` extras install and the core must not import.
TRAIN_ONLY = (
    "flax", "optax", "orbax", "orbax.checkpoint", "ml_collections", "tensorflow",
    "tensorflow_datasets", "sklearn", "matplotlib", "tqdm", "tensorboardX",
)


def _run(body: str) -> subprocess.CompletedProcess:
    absent = sorted({name.split(".")[0] for name in TRAIN_ONLY})
    script = f"import sys\nfrom tests.no_tensorflow import install\ninstall({absent!r})\n"
    script += textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


@pytest.mark.slow
def test_losses_and_metrics_work_without_the_train_extra():
    result = _run(
        """
        import jax.numpy as jnp
        import contrastive_jax
        from contrastive_jax import losses, metrics

        z = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        labels = jnp.array([0, 0, 1, 1])
        print(float(losses.sincere(z, labels, temperature=0.1)))
        print(float(metrics.uniformity(z)))
        loaded = sorted(n for n in {TRAIN_ONLY!r} if sys.modules.get(n) is not None)
        print("loaded:", loaded)
        """.replace("{TRAIN_ONLY!r}", repr(TRAIN_ONLY))
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[2] == "loaded: []"


#: The parts that need the ``train`` extra (``module:attribute`` for an attribute that loads its
#: module on first use).
TRAIN_PARTS = [
    "contrastive_jax.train",
    "contrastive_jax.train.optim",
    "contrastive_jax.models",
    "contrastive_jax.data",
    "contrastive_jax.eval",
    "contrastive_jax.pretrain",
    "contrastive_jax.quickstart",
    "contrastive_jax.linear_eval",
    "contrastive_jax.export",
    "contrastive_jax.eval.checkpoint",
    "contrastive_jax.eval.embed",
]


@pytest.fixture(scope="module")
def import_errors() -> dict:
    """What importing each of :data:`TRAIN_PARTS` prints, from one subprocess: every attempt
    starts with no ``contrastive_jax`` module loaded, as in a fresh interpreter."""
    result = _run(
        f"""
        import importlib, json
        printed = {{}}
        for part in {TRAIN_PARTS!r}:
            for loaded in [m for m in sys.modules if m.split(".")[0] == "contrastive_jax"]:
                del sys.modules[loaded]
            name, _, attribute = part.partition(":")
            try:
                imported = importlib.import_module(name)
                if attribute:
                    getattr(imported, attribute)
            except ModuleNotFoundError as err:
                printed[part] = str(err)
            else:
                printed[part] = "imported"
        print(json.dumps(printed))
        """
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", TRAIN_PARTS)
def test_a_part_that_needs_the_train_extra_names_it(module, import_errors):
    assert "pip install 'contrastive_jax[train]'" in import_errors[module], import_errors[module]


def test_the_version_is_written_once_and_cited_as_it():
    """``contrastive_jax.__version__`` is the one source (pyproject reads it); CITATION.cff
    cites the same version, and the wheel ships LICENSE and py.typed (tests/test_wheel.py
    installs it)."""
    import contrastive_jax

    project = _pyproject()
    root = Path(__file__).resolve().parents[1]
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "contrastive_jax.__version__"}
    cited = re.search(r"^version: (\S+)$", (root / "CITATION.cff").read_text(encoding="utf-8"),
                      re.MULTILINE)
    assert cited and cited.group(1) == contrastive_jax.__version__
    assert (root / "LICENSE").read_text(encoding="utf-8").lstrip().startswith("Apache License")
    assert (root / "contrastive_jax" / "py.typed").exists()
    assert project["tool"]["setuptools"]["package-data"]["contrastive_jax"] == ["py.typed"]


def _pyproject() -> dict:
    root = Path(__file__).resolve().parents[1]
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_floors_make_test_min_installs_are_the_declared_ones():
    """constraints/min.txt pins each core dependency (and jaxlib, jax's pair) to its ``>=``
    bound in pyproject.toml, so ``make test-min`` tests the floors users are promised."""
    root = Path(__file__).resolve().parents[1]
    floors = dict(re.findall(r"^([a-z][\w-]*)>=([\w.]+)$", "\n".join(
        _pyproject()["project"]["dependencies"]), re.MULTILINE))
    pinned = dict(re.findall(r"^([a-z][\w-]*)==([\w.]+)$",
                             (root / "constraints" / "min.txt").read_text(encoding="utf-8"),
                             re.MULTILINE))
    assert set(floors) == {"jax", "numpy", "scipy"}
    assert pinned == {**floors, "jaxlib": floors["jax"]}
