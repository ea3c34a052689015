"""The quickstart: pretrain on the built-in digits, then evaluate the frozen encoder.

    python -m contrastive_jax.quickstart --workdir runs/quickstart   # what `make quickstart` runs

Runs the packaged config :mod:`contrastive_jax.configs.quickstart` (SINCERE, a narrow CIFAR-stem
ResNet-18, scikit-learn's digits on a cluttered 16×16 canvas; a few minutes on
a laptop CPU) through the same code as ``python -m contrastive_jax.pretrain``,
then the linear, kNN and ridge probes of ``python -m contrastive_jax.linear_eval``
on the frozen encoder and on the raw pixels, and prints both. Re-running it
resumes or, when the run is complete, only evaluates. Any field can be
overridden, e.g. ``--config.loss.name=supcon``; ``--config.train.total_steps=6`` is a
smoke test of a few seconds (the warm-up is clamped to fit, with a warning).
``--print_config`` prints the resolved config and the run's sizes and exits, writing nothing
(:mod:`contrastive_jax.sizing.print_config`).

Also installed as the console script ``contrastive-jax-quickstart``. Its exit codes are those
of every command-line tool (:class:`~contrastive_jax.errors.ExitCode`, docs/cli.md): 2 on a
bad config (refused before the work directory is created), input or work directory.
"""

from __future__ import annotations

from contrastive_jax._cli import quiet_startup, run_tool

quiet_startup()  # before JAX loads

from contrastive_jax._extras import require

require("contrastive_jax.quickstart", ("ml_collections", "flax", "optax", "grain", "sklearn"))

import json
import os
import time
from pathlib import Path

from absl import app, flags, logging

from contrastive_jax import pretrain
from contrastive_jax.errors import ExitCode
from contrastive_jax.eval.checkpoint import RESULTS_FILE, evaluate_checkpoint, format_results
from contrastive_jax.sizing.print_config import run_cli as print_config
from contrastive_jax.train import loop

QUICKSTART_CONFIG = Path(__file__).resolve().parent / "configs" / "quickstart.py"
#: Where the quickstart writes when --workdir is not given.
DEFAULT_WORKDIR = "runs/quickstart"

#: The flags of pretrain's (one definition for every tool, so the tools import side by side)
#: that are the quickstart's, with its own defaults (set in parse_flags).
KEY_FLAGS = ("config", "workdir", "print_config")
for _name in KEY_FLAGS:
    flags.declare_key_flag(_name)


def parse_flags(argv: list[str]) -> list[str]:
    """``pretrain``'s flag parsing, with the quickstart's defaults: its packaged config and
    ``runs/quickstart``."""
    flags.FLAGS.set_default("config", str(QUICKSTART_CONFIG))
    flags.FLAGS.set_default("workdir", DEFAULT_WORKDIR)
    return pretrain.parse_flags(argv)


def main(argv: list[str]) -> int:
    del argv
    logging.set_verbosity(logging.WARNING)  # JAX reports absent TPU/GPU backends at INFO
    if flags.FLAGS.print_config:
        return print_config(pretrain.config_flag(), None)
    return run_tool(_quickstart, workdir=pretrain.workdir_flag())


def _quickstart() -> int:
    config, workdir = pretrain.config_flag(), pretrain.workdir_flag()
    started = time.perf_counter()
    summary = loop.train(config, workdir)
    trained = time.perf_counter()
    results = evaluate_checkpoint(workdir, output_dir=workdir, pixel_baseline=True)
    evaluated = time.perf_counter()
    with open(os.path.join(summary["workdir"], RESULTS_FILE), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    metrics = summary["metrics"]
    print(f"\npretraining: {summary['final_step']} steps of {config.loss.name} on "
          f"{config.data.dataset} in {summary['workdir']}")
    if metrics:
        print(f"  final loss {metrics['loss']:.4f}, alignment {metrics['alignment']:.3f}, "
              f"uniformity {metrics['uniformity']:.3f}, {summary['images_per_s']:.0f} images/s")
    print("frozen-encoder evaluation (95 % bootstrap intervals), then the same probes on raw pixels:")
    print(format_results(results))
    pixels = results["pixels"]["linear"]["top1"]["accuracy"]
    print(f"linear top-1: {100 * results['top1']:.1f} % learned vs {100 * pixels:.1f} % raw pixels; "
          f"results and plots in {summary['workdir']}")
    # Where the time went (a resumed or finished run counts only what it ran).
    print(f"time: {evaluated - started:.0f} s, of which pretraining {trained - started:.0f} s (its "
          f"first step, compiled or read from the cache, {summary.get('first_step_seconds', 0.0):.0f} "
          f"s) and evaluation {evaluated - trained:.0f} s")
    return ExitCode.OK


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
