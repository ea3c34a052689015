"""Import the reference PyTorch code from its own directory at run time (never copied here).

Two checkouts are read:

* ``supcon_dir``: github.com/HobbitLong/SupContrast (Khosla et al., 2020, arXiv:2004.11362), for
  ``losses.py`` (``SupConLoss``), ``networks/resnet_big.py`` (``SupConResNet``),
  ``main_supcon.py`` and ``util.py``;
* ``sincere_dir``: github.com/tufts-ml/SupContrast (Feeney & Hughes, arXiv:2309.14277), for
  ``revised_losses.py`` (``SINCERELoss``).

Both are required arguments (``--supcon-dir``/``--sincere-dir`` on the command line): the
harness has no default location for code outside this repository.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def require_torch() -> ModuleType:
    """``import torch``, or ImportError naming the extra that installs it."""
    try:
        import torch
    except ImportError as err:
        raise ImportError(
            "the parity harness needs PyTorch: pip install -e '.[parity]' "
            "(CPU build: pip install torch==2.13.0)"
        ) from err
    return torch


def load_module(path: Path | str, name: str) -> ModuleType:
    """The Python file ``path`` imported as the module ``name`` (registered in sys.modules).

    Raises:
      FileNotFoundError: ``path`` does not exist (the message names it).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"reference file {path} not found; pass the directory of the reference checkout "
            "with --supcon-dir / --sincere-dir"
        )
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_supcon(supcon_dir: Path | str) -> tuple[ModuleType, ModuleType]:
    """(``networks/resnet_big.py``, ``losses.py``) of the HobbitLong/SupContrast checkout."""
    require_torch()
    supcon_dir = Path(supcon_dir)
    resnet_big = load_module(supcon_dir / "networks" / "resnet_big.py", "_parity_ref_resnet_big")
    losses = load_module(supcon_dir / "losses.py", "_parity_ref_supcon_losses")
    return resnet_big, losses


def load_sincere(sincere_dir: Path | str) -> ModuleType:
    """``revised_losses.py`` of the tufts-ml/SupContrast checkout."""
    require_torch()
    return load_module(Path(sincere_dir) / "revised_losses.py", "_parity_ref_revised_losses")
