"""Linear evaluation of a pretrained encoder: frozen features, a linear probe, bootstrap intervals.

    python -m contrastive_jax.linear_eval --workdir runs/quickstart
    python -m contrastive_jax.linear_eval --checkpoint runs/quickstart/checkpoints/660 \
        --epochs 100 --base_lr 5.0

Restores the encoder of the newest readable checkpoint in ``--workdir`` (or of
the given ``--checkpoint`` directory), freezes it and reports linear-probe
(SupCon/SINCERE protocol), kNN and ridge top-1/top-5 test accuracy with 95 %
bootstrap intervals; see :mod:`contrastive_jax.evaluate` for the protocol.
The results are printed and written as JSON to ``<workdir>/eval.json``
(or ``--output``; either may be a ``gs://`` path), the figures (confusion matrix, class-by-class cosine
similarity, within/between-class histograms) beside it. Exit codes: those of every
command-line tool (:class:`~contrastive_jax.errors.ExitCode`, docs/cli.md); 2 on a missing
or unreadable checkpoint or a bad argument.
"""

from __future__ import annotations

from contrastive_jax._cli import parse_flags, quiet_startup, run_tool

quiet_startup()  # before JAX loads

import json
import sys

from absl import app, flags, logging

from contrastive_jax.errors import ExitCode
from contrastive_jax.evaluate import RESULTS_FILE, evaluate_checkpoint, format_results
from contrastive_jax.train import paths
from contrastive_jax.train.pretrained import locate_checkpoint

_WORKDIR = flags.DEFINE_string("workdir", None, "Pretraining work directory (newest checkpoint).")
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "A checkpoint directory <workdir>/checkpoints/<step> instead of --workdir."
)
_OUTPUT = flags.DEFINE_string("output", None, f"JSON results path (default <workdir>/{RESULTS_FILE}).")
_EPOCHS = flags.DEFINE_integer("epochs", 100, "Linear-probe epochs.")
_BASE_LR = flags.DEFINE_float("base_lr", 5.0, "Peak learning rate after warm-up.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 512, "Linear-probe batch size.")
_WARMUP_EPOCHS = flags.DEFINE_integer("warmup_epochs", 10, "Warm-up epochs (0.05 -> base_lr).")
_WEIGHT_DECAY = flags.DEFINE_float("weight_decay", 0.0, "Coupled L2 on the probe.")
_FEATURE_NORM = flags.DEFINE_enum(
    "feature_norm", "standardize", ["standardize", "l2", "none"], "Feature normalisation."
)
_RESAMPLES = flags.DEFINE_integer("resamples", 1000, "Bootstrap resamples of the test set.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the probe's minibatch order and the bootstrap.")
_PIXEL_BASELINE = flags.DEFINE_bool(
    "pixel_baseline", False, "Also probe the raw pixels, the baseline to beat."
)


def main(argv: list[str]) -> int:
    del argv
    logging.set_verbosity(logging.WARNING)  # JAX reports absent TPU/GPU backends at INFO
    if (_WORKDIR.value is None) == (_CHECKPOINT.value is None):
        print("error: give exactly one of --workdir and --checkpoint", file=sys.stderr)
        return ExitCode.USAGE
    return run_tool(_evaluate)


def _evaluate() -> int:
    path = _WORKDIR.value or _CHECKPOINT.value
    output = paths.as_path(_OUTPUT.value or locate_checkpoint(path)[0])
    if not _OUTPUT.value:
        output = output / RESULTS_FILE
    results = evaluate_checkpoint(
        path,
        epochs=_EPOCHS.value,
        base_lr=_BASE_LR.value,
        batch_size=_BATCH_SIZE.value,
        warmup_epochs=_WARMUP_EPOCHS.value,
        weight_decay=_WEIGHT_DECAY.value,
        feature_norm=_FEATURE_NORM.value,
        resamples=_RESAMPLES.value,
        seed=_SEED.value,
        output_dir=str(output.parent),
        pixel_baseline=_PIXEL_BASELINE.value,
    )
    output.write_text(json.dumps(results, indent=2))
    print(format_results(results))
    print(f"results written to {output}")
    return ExitCode.OK


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
