"""Pretraining configs that ship with the package (``ml_collections`` files with ``get_config()``).

The command-line tools take a config as a file path; these files live inside the installed
package, so they work from any directory::

    python -m contrastive_jax.configs                       # names and paths of the packaged configs
    contrastive-jax-pretrain --workdir runs/digits \\
        --config "$(python -m contrastive_jax.configs sincere_digits)"

The papers' recipes, each docstring citing the source of every setting and the accuracy it
is expected to reach (``docs/training.md`` of the source repository has their dry-run memory
and FLOP figures):

* ``simclr_imagenet``: SimCLR (Chen et al. 2020), ResNet-50, batch 4096, LARS, 100 epochs;
* ``supcon_imagenet``, ``sincere_imagenet``: the same with SupCon (Khosla et al. 2020) or
  SINCERE (Feeney & Hughes 2023) at tau = 0.1, 350 epochs;
* ``simclr_cifar10``, ``supcon_cifar10``: the SupContrast reference code's CIFAR-10 commands
  (ResNet-50, batch 1024, 1,000 epochs);
* ``sincere_cifar10``: the SINCERE paper's CIFAR-10 recipe (ResNet-50, batch 512, 1,000 epochs).

Small configs that run on a CPU:

* ``quickstart``: SINCERE on the built-in cluttered digits, the default of
  ``python -m contrastive_jax.quickstart``.
* ``sincere_digits``: SINCERE vs SupCon on the built-in digits, the CPU proxy.
* ``sincere_cifar10_proxy``: SINCERE vs SupCon on CIFAR-10 at 16x16 with a narrow ResNet-18
  (TFDS ``cifar10``; pass ``--config.data.data_dir`` for a prepared TFDS directory or a
  folder of images).

Each recipe's ``--config.dataset`` and ``--config.data.data_dir`` say where its data are
(TFDS ``imagenet2012`` or ``cifar10`` by default).

From Python::

    from contrastive_jax import configs
    config = configs.get("quickstart")        # an ml_collections.ConfigDict
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

#: The packaged configs, by name.
NAMES = (
    "quickstart",
    "sincere_digits",
    "sincere_cifar10_proxy",
    "simclr_imagenet",
    "supcon_imagenet",
    "sincere_imagenet",
    "simclr_cifar10",
    "supcon_cifar10",
    "sincere_cifar10",
)


def path(name: str) -> str:
    """The file path of the packaged config ``name``, for ``--config`` of the command-line tools.

    Raises:
      ValueError: ``name`` is not one of :data:`NAMES`.
    """
    if name not in NAMES:
        raise ValueError(f"unknown packaged config {name!r}; choose from {', '.join(NAMES)}")
    return str(Path(__file__).resolve().parent / f"{name}.py")


def get(name: str):
    """``get_config()`` of the packaged config ``name`` (an ``ml_collections.ConfigDict``).

    Needs the ``train`` extra (``pip install 'contrastive_jax[train]'``).

    Raises:
      ValueError: ``name`` is not one of :data:`NAMES`.
    """
    path(name)  # validates the name
    return importlib.import_module(f"contrastive_jax.configs.{name}").get_config()


def main(argv: list[str]) -> int:
    """``python -m contrastive_jax.configs [NAME]``: print the path of NAME, or of every config."""
    if len(argv) > 1:
        print("usage: python -m contrastive_jax.configs [NAME]", file=sys.stderr)
        return 2
    if argv:
        try:
            print(path(argv[0]))
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    for name in NAMES:
        print(f"{name:<22} {path(name)}")
    return 0
