"""Contrastive pretraining on every device of every process.

    python -m contrastive_jax.pretrain --workdir runs/sincere \
        --config "$(python -m contrastive_jax.configs sincere_cifar10)" \
        --config.data.data_dir=PATH --config.data.global_batch_size=512

Multi-host: pass --coordinator_address=HOST:PORT --num_processes=N --process_id=I
to every process (or launch under SLURM / Open MPI / Cloud TPU, whose environment
``jax.distributed.initialize()`` reads by itself). Re-running the same command in
the same --workdir resumes from its newest checkpoint.

Exit codes (:class:`~contrastive_jax.errors.ExitCode`, the table of every command-line
tool, docs/cli.md): 0 done; 75 stopped by SIGTERM or SIGINT after saving a checkpoint (restart
to continue); 65 non-finite loss or gradient; 74 a checkpoint could not be
written (full disk?) or none could be read; 2 a bad config
(:class:`~contrastive_jax.errors.ConfigError`, refused before --workdir is created), input
(e.g. a corrupt image, a dataset that is not prepared) or environment (unwritable
--workdir, a resume with another config than the run's: docs/cli.md, Resume); 1 with a
traceback for anything else, which
is a bug.
With several processes, when one dies the others abort (SIGABRT) after
--heartbeat_timeout_seconds.

``--dry_run`` compiles the config's training step for ``--devices N`` simulated CPU devices or
a TPU slice (``--target tpu-v4-32``) without data and prints per-device memory, FLOPs and a
projected step time (:mod:`contrastive_jax.sizing.dry_run`)::

    python -m contrastive_jax.pretrain --dry_run --devices 32 --peak_tflops 275 \\
        --config "$(python -m contrastive_jax.configs simclr_imagenet)"

``--print_config`` prints the resolved, checked config and the run's sizes (devices, global
and per-device batch, steps per epoch and in all, warm-up steps, peak learning rate;
:mod:`contrastive_jax.sizing.print_config`) and exits 0, writing nothing and reading no data::

    python -m contrastive_jax.pretrain --config supcon_cifar10 --print_config --devices 8

``--dry_run --fit`` finds the gradient-caching ``train.micro_batch_size`` that fits the
config's global batch into each device's memory (``--device_memory_gib``, or a TPU target's
HBM) by compiling the step for a few candidates (:mod:`contrastive_jax.sizing.micro_batch_search`).

Also installed as the console script ``contrastive-jax-pretrain``; the configs
that ship with the package are listed by ``python -m contrastive_jax.configs``.
"""

from __future__ import annotations

from contrastive_jax._cli import parse_flags as cli_parse_flags
from contrastive_jax._cli import quiet_startup, run_tool

quiet_startup()  # before JAX loads

from contrastive_jax._extras import require

require("contrastive_jax.pretrain", ("ml_collections", "flax", "optax", "grain"))

import json
import logging
import math
import sys

from absl import app, flags
from ml_collections import config_flags

from contrastive_jax.errors import ConfigError, ExitCode, check_fields
from contrastive_jax.parallel import initialize_distributed

_CONFIG = config_flags.DEFINE_config_file(
    "config", None,
    "A packaged recipe's name (supcon_cifar10; `python -m contrastive_jax.configs` lists them) "
    "or the path of a file with get_config(), either with an optional :arg for get_config(arg).",
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and logs.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "HOST:PORT of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
_HEARTBEAT = flags.DEFINE_integer(
    "heartbeat_timeout_seconds", 100,
    "Multi-process: stop when another process has been silent this long.",
)
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False,
    "Compile the config's training step without data and print per-device memory, FLOPs and "
    "a projected step time (contrastive_jax.sizing.dry_run); --workdir is not needed.",
)
_PRINT_CONFIG = flags.DEFINE_bool(
    "print_config", False,
    "Print the resolved, checked config and the run's sizes (per-device batch, steps, warm-up, "
    "peak learning rate; --devices N for another mesh), then exit 0; writes nothing.",
)
_DEVICES = flags.DEFINE_integer(
    "devices", None, "--dry_run, --print_config: devices of the mesh (simulated CPU devices "
    "for --target=cpu; --print_config's default: the devices here).",
)
_TARGET = flags.DEFINE_string(
    "target", "cpu", "--dry_run: 'cpu' or a TPU slice such as tpu-v4-32, tpu-v5e-16, "
    "tpu-v5p-32, tpu-v6e-16 (compiled ahead of time; needs libtpu: the 'tpu' extra).",
)
_PEAK_TFLOPS = flags.DEFINE_float(
    "peak_tflops", None, "--dry_run: peak TFLOP/s per device for the projected step time "
    "(default: a TPU target's bf16 peak).",
)
_MFU = flags.DEFINE_float("mfu", 0.4, "--dry_run: assumed model FLOPs utilisation.")
_FIT = flags.DEFINE_bool(
    "fit", False, "--dry_run: find the per-device batch and the gradient-caching "
    "train.micro_batch_size that fit the config's global batch into each device's memory "
    "(contrastive_jax.sizing.micro_batch_search); compiles the step a few times.",
)
_DEVICE_MEMORY_GIB = flags.DEFINE_float(
    "device_memory_gib", None, "--dry_run: memory per device in GiB that the step must fit "
    "(default: a TPU target's HBM; simulated CPU devices have none).",
)
def config_flag():
    """The ConfigDict of ``--config`` with its overrides (None when not given)."""
    return _CONFIG.value


def workdir_flag() -> str | None:
    """``--workdir``."""
    return _WORKDIR.value


def _check_override(name: str) -> None:
    """Raises ConfigError if ``--<name>`` (``config.a.b``) overrides a field no config declares."""
    from contrastive_jax.train.config import OPEN_FIELDS, check_renamed, default_config

    check_renamed(name)
    node, where = default_config(), "config"
    for part in name.split(".")[1:]:
        check_fields(where, [part], node.keys())
        node, where = node[part], f"{where}.{part}"
        if not hasattr(node, "keys") or where.removeprefix("config.") in OPEN_FIELDS:
            return


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, where an override of an undeclared field is a usage error (exit 2)
    that names the nearest field, not a traceback."""
    try:
        return cli_parse_flags(argv)
    except (AttributeError, KeyError):
        for arg in argv[1:]:
            name = arg.split("=", 1)[0].lstrip("-")
            if name.startswith("config."):
                try:
                    _check_override(name)
                except ConfigError as err:
                    print(f"error: --{name}: {err}", file=sys.stderr)
                    sys.exit(ExitCode.USAGE)
        raise


def json_safe(tree):
    """``tree`` (dicts, lists, scalars) with every non-finite float as None: JSON has no NaN.

    Examples:
      >>> json_safe({"final_loss": float("nan"), "steps": [1, float("inf"), 2.5]})
      {'final_loss': None, 'steps': [1, None, 2.5]}
    """
    if isinstance(tree, dict):
        return {k: json_safe(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [json_safe(v) for v in tree]
    if isinstance(tree, float) and not math.isfinite(tree):
        return None
    return tree


def main(argv: list[str]) -> int:
    del argv
    logging.getLogger("absl").setLevel(logging.WARNING)
    if _CONFIG.value is None:
        print("error: --config is required: a packaged recipe's name or a config file",
              file=sys.stderr)
        return ExitCode.USAGE
    if (_FIT.value or _DEVICE_MEMORY_GIB.value is not None) and not _DRY_RUN.value:
        print("error: --fit and --device_memory_gib need --dry_run", file=sys.stderr)
        return ExitCode.USAGE
    if _PRINT_CONFIG.value:
        from contrastive_jax.sizing.print_config import run_cli as print_config

        return print_config(_CONFIG.value, _DEVICES.value)
    if _DRY_RUN.value:
        from contrastive_jax.sizing.micro_batch_search import run_cli
        from contrastive_jax.train.device_peaks import GiB

        memory = _DEVICE_MEMORY_GIB.value
        return run_cli(_CONFIG.value, num_devices=_DEVICES.value, target=_TARGET.value,
                       peak_tflops=_PEAK_TFLOPS.value, mfu=_MFU.value, search=_FIT.value,
                       device_memory_bytes=None if memory is None else round(memory * GiB))
    if not _WORKDIR.value:
        print("error: --workdir is required (except with --dry_run)", file=sys.stderr)
        return ExitCode.USAGE
    try:
        initialize_distributed(
            _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
            heartbeat_timeout_seconds=_HEARTBEAT.value,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return ExitCode.USAGE
    from contrastive_jax.train import loop  # after distributed initialisation

    def pretrain() -> int:
        summary = loop.train(_CONFIG.value, _WORKDIR.value)
        print(json.dumps(json_safe({k: v for k, v in summary.items() if k != "metrics"}),
                         indent=2, allow_nan=False))
        return ExitCode.OK

    # Errors go through report_error: threads of a failed checkpoint write may still be
    # printing (see contrastive_jax._cli.report_error).
    return run_tool(pretrain, workdir=_WORKDIR.value)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
