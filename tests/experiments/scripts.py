"""Import the experiment scripts (``experiments/reproduce/*.py``, ``experiments/bench/*.py``),
which are not a package, as modules for the tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
REPRODUCE = EXPERIMENTS / "reproduce"


def load_script(name: str, directory: Path = REPRODUCE) -> ModuleType:
    """``<directory>/<name>.py`` as the module ``_script_<name>``, registered in ``sys.modules``
    (dataclasses look their module up there); ``directory`` goes on ``sys.path`` so the
    script's own sibling imports (``import _cifar_common``) resolve."""
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    spec = importlib.util.spec_from_file_location(f"_script_{name}", directory / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
