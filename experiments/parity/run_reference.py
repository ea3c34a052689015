"""Run the reference ``main_supcon.py`` (HobbitLong/SupContrast) unmodified, on the CPU.

    python experiments/parity/run_reference.py --workdir runs/parity/ref_s0 --seed 0 \\
        --supcon-dir ../shared/peers/HobbitLong-SupContrast -- \\
        --dataset path --data_folder runs/parity/data/train \\
        --mean "(0.4914, 0.4822, 0.4465)" --std "(0.2023, 0.1994, 0.2010)" \\
        --size 16 --batch_size 128 --epochs 10 --learning_rate 0.05 --temp 0.07 --cosine \\
        --num_workers 0 --print_freq 5

Everything after ``--`` is passed to ``main_supcon.py`` as its own command line. This wrapper
needs only PyTorch and torchvision (it runs in their environment, not ours) and changes nothing
in the reference's files. At run time it:

* loads the checkout's ``util.py``, ``losses.py`` and ``networks/resnet_big.py`` from their files
  under the names ``main_supcon.py`` imports them by (``util``, ``losses``,
  ``networks.resnet_big``), so the script's imports find them;
* registers a no-op ``tensorboard_logger`` module (``Logger(logdir, flush_secs).log_value``
  does nothing) when the real package is not installed: the script only logs loss and learning
  rate to TensorBoard with it;
* seeds ``random``, ``numpy`` and ``torch`` with ``--seed`` (the script sets no seed);
* sets the number of PyTorch threads (``--threads``);
* runs the script as ``__main__`` from ``--workdir`` (it writes ``./save/SupCon/...``);
* counts the images it trains on and writes their throughput (images/s over the whole run, data
  loading included, as our trainer reports it) to ``<workdir>/throughput.json``.

No ``.cuda()`` call needs patching: the script guards each with ``torch.cuda.is_available()``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import runpy
import sys
import time
import types
from pathlib import Path


def _stub_tensorboard_logger() -> None:
    try:
        import tensorboard_logger  # noqa: F401
    except ImportError:
        module = types.ModuleType("tensorboard_logger")

        class Logger:
            def __init__(self, logdir=None, flush_secs=2, **kwargs):
                self.logdir = logdir

            def log_value(self, name, value, step=None):
                pass

        module.Logger = Logger
        sys.modules["tensorboard_logger"] = module


def _load_module(name: str, path: Path) -> types.ModuleType:
    """Imports the file ``path`` as the module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _load_reference_modules(checkout: Path) -> types.ModuleType:
    """The checkout's modules that ``main_supcon.py`` imports; returns ``util``."""
    networks = types.ModuleType("networks")  # a directory without __init__.py in the checkout
    networks.__path__ = [str(checkout / "networks")]
    sys.modules["networks"] = networks
    networks.resnet_big = _load_module("networks.resnet_big", checkout / "networks" / "resnet_big.py")
    _load_module("losses", checkout / "losses.py")
    return _load_module("util", checkout / "util.py")


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        print("error: pass main_supcon.py's arguments after --", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--supcon-dir", required=True, help="HobbitLong/SupContrast checkout")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv[:split])
    script = Path(args.supcon_dir).resolve() / "main_supcon.py"
    if not script.is_file():
        print(f"error: {script} not found (--supcon-dir)", file=sys.stderr)
        return 2

    import numpy as np
    import torch

    random.seed(args.seed)
    np.random.seed(args.seed)  # noqa: NPY002 - the legacy global state the reference uses
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    _stub_tensorboard_logger()
    util = _load_reference_modules(script.parent)
    # Count training images: main_supcon.py calls TwoCropTransform once per image per epoch.

    counter = {"images": 0}
    original_call = util.TwoCropTransform.__call__

    def counting_call(self, x):
        counter["images"] += 1
        return original_call(self, x)

    util.TwoCropTransform.__call__ = counting_call
    os.makedirs(args.workdir, exist_ok=True)
    data_args = [os.path.abspath(a) if os.path.isdir(a) else a for a in argv[split + 1:]]
    os.chdir(args.workdir)
    sys.argv = [str(script)] + data_args
    started = time.perf_counter()
    runpy.run_path(str(script), run_name="__main__")
    elapsed = time.perf_counter() - started
    summary = {
        "images": counter["images"],
        "seconds": elapsed,
        "images_per_s": counter["images"] / elapsed,
        "torch": torch.__version__,
        "threads": args.threads,
        "argv": data_args,
    }
    with open("throughput.json", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
