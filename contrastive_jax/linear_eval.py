"""Linear evaluation of a pretrained encoder: the papers' protocol, or a fast probe.

    # the paper's protocol: the *_linear recipe (a frozen encoder, a linear head trained on
    # the mesh with augmented images, validated each epoch), writing a run of its own
    python -m contrastive_jax.linear_eval --pretrained runs/supcon_cifar10 \\
        --workdir runs/supcon_cifar10_linear --config supcon_cifar10_linear
    # the fast probe on cached features (small data): SGD on the frozen features
    python -m contrastive_jax.linear_eval --pretrained runs/quickstart

``--pretrained`` names the run it reads (a pretraining work directory, whose newest readable
checkpoint is used, or a checkpoint directory ``<workdir>/checkpoints/<step>``), ``--workdir``
the run it writes, as in ``pretrain``.

With ``--config`` (a packaged ``*_linear`` recipe or a config file, with ``--config.*``
overrides and every flag of ``pretrain``) the recipe runs as ``pretrain`` runs it, with
``config.model.init_from`` set to ``--pretrained``: the protocol of the paper whose recipe it
is (docs/evaluation.md), its accuracy in ``<workdir>/validation.json``. ``--print_config``
prints that config and the run's sizes instead (:mod:`contrastive_jax.sizing.print_config`).

Without ``--config``: the fast probe. The encoder, frozen, embeds both splits once (the
evaluation transform, no augmentation), and a linear probe is trained on those features
(:class:`~contrastive_jax.eval.ProbeProtocol`: the SupCon/SINCERE schedule, SGD momentum 0.9,
batch 512, warm-up then cosine; the one place of its defaults, which the flags below take),
beside kNN and ridge readings of the same features; top-1/top-5 test accuracy with 95 %
bootstrap intervals (see :mod:`contrastive_jax.eval.checkpoint`). ``--evaluators`` names
others of the registry (:mod:`contrastive_jax.eval.registry`) to run on the checkpoint
instead, e.g. ``--evaluators knn_monitor,validation``: the loop's own evaluators. The results are printed and
written as JSON to ``<workdir>/eval.json`` (``--workdir`` defaults to the pretrained run's
directory; either may be a ``gs://`` path), the figures (confusion matrix, class-by-class
cosine similarity, within/between-class histograms) beside it.

Exit codes: those of every command-line tool (:class:`~contrastive_jax.errors.ExitCode`,
docs/cli.md), as ``pretrain``'s: 2 on a bad flag or config (``--epochs 0``: before any work)
or a missing run or checkpoint, 74 when none of the checkpoints present can be read. A failed
evaluation leaves no ``--workdir`` of its own behind.
"""

from __future__ import annotations

from contrastive_jax._cli import quiet_startup, run_tool

quiet_startup()  # before JAX loads

import json
import sys

from absl import app, flags, logging

from contrastive_jax import pretrain
from contrastive_jax._sections import describe, in_domain
from contrastive_jax.errors import ConfigError, ExitCode
from contrastive_jax.eval import registry
from contrastive_jax.eval.checkpoint import (
    PROBES,
    RESULTS_FILE,
    evaluate_checkpoint,
    format_results,
)
from contrastive_jax.eval.linear import ProbeProtocol
from contrastive_jax.train import paths
from contrastive_jax.train.pretrained import locate_checkpoint

#: ``pretrain``'s flags (--config, --workdir, the multi-host ones) are this tool's too.
flags.adopt_module_key_flags(pretrain)
parse_flags = pretrain.parse_flags

_PRETRAINED = flags.DEFINE_string(
    "pretrained", None,
    "The run to evaluate: a pretraining work directory (its newest readable checkpoint) or a "
    "checkpoint directory <workdir>/checkpoints/<step>.")
_DEFAULTS = ProbeProtocol()
_EPOCHS = flags.DEFINE_integer("epochs", _DEFAULTS.epochs, "Fast probe: epochs.")
_BASE_LR = flags.DEFINE_float("base_lr", _DEFAULTS.base_lr,
                              "Fast probe: peak learning rate after warm-up.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", _DEFAULTS.batch_size, "Fast probe: batch size.")
_WARMUP_EPOCHS = flags.DEFINE_integer(
    "warmup_epochs", _DEFAULTS.warmup_epochs,
    f"Fast probe: warm-up epochs ({_DEFAULTS.warmup_from} -> base_lr).")
_WEIGHT_DECAY = flags.DEFINE_float("weight_decay", _DEFAULTS.weight_decay,
                                   "Fast probe: coupled L2 on the probe.")
_FEATURE_NORM = flags.DEFINE_enum(
    "feature_norm", _DEFAULTS.feature_norm, ["standardize", "l2", "none"],
    "Fast probe: feature normalisation.")
_RESAMPLES = flags.DEFINE_integer("resamples", _DEFAULTS.resamples,
                                  "Fast probe: bootstrap resamples of the test set.")
_SEED = flags.DEFINE_integer("seed", _DEFAULTS.seed,
                             "Fast probe: seed of the minibatch order and the bootstrap.")
_PIXEL_BASELINE = flags.DEFINE_bool(
    "pixel_baseline", False, "Fast probe: also probe the raw pixels, the baseline to beat.")
_EVALUATORS = flags.DEFINE_list(
    "evaluators", list(PROBES),
    "Fast probe: the evaluators to run on the checkpoint (contrastive_jax.eval.registry).")
_PROBE_FLAGS = (_EPOCHS, _BASE_LR, _BATCH_SIZE, _WARMUP_EPOCHS, _WEIGHT_DECAY, _FEATURE_NORM,
                _RESAMPLES, _SEED, _PIXEL_BASELINE, _EVALUATORS)


def main(argv: list[str]) -> int:
    logging.set_verbosity(logging.WARNING)  # JAX reports absent TPU/GPU backends at INFO
    if _PRETRAINED.value is None:
        print("error: --pretrained is required: the run to evaluate", file=sys.stderr)
        return ExitCode.USAGE
    config = pretrain.config_flag()
    if config is not None:
        return _protocol(config, argv)
    return run_tool(_probe)


def _protocol(config, argv: list[str]) -> int:
    """The recipe of ``--config`` on the encoder of ``--pretrained``, run as ``pretrain``."""
    given = [f"--{flag.name}" for flag in _PROBE_FLAGS if flags.FLAGS[flag.name].present]
    if given:
        print(f"error: {', '.join(given)} set the fast probe, which --config replaces by its "
              "recipe (set its fields with --config.*)", file=sys.stderr)
        return ExitCode.USAGE
    if not pretrain.workdir_flag() and not flags.FLAGS.print_config:
        print("error: --workdir is required with --config: the run the recipe writes",
              file=sys.stderr)
        return ExitCode.USAGE
    if config.model.init_from not in (None, "", _PRETRAINED.value):
        print(f"error: --config.model.init_from={config.model.init_from!r} and --pretrained="
              f"{_PRETRAINED.value!r} name two runs; give --pretrained only", file=sys.stderr)
        return ExitCode.USAGE
    config.model.init_from = _PRETRAINED.value
    return pretrain.main(argv)


#: The fast probe's flags with a domain, and it (:func:`contrastive_jax._sections.in_domain`).
PROBE_DOMAINS = {"epochs": "int >= 1", "batch_size": "int >= 1", "warmup_epochs": "int >= 0",
                 "base_lr": "> 0", "weight_decay": ">= 0", "resamples": "int >= 1"}


def _check_probe_flags() -> None:
    """Raises ConfigError naming the first probe flag outside its domain, or an evaluator
    that is not registered."""
    for name, domain in PROBE_DOMAINS.items():
        value = flags.FLAGS[name].value
        if not in_domain(value, domain):
            raise ConfigError(f"--{name} must be {describe(domain)}, got {value!r}")
    registry.check_names(tuple(_EVALUATORS.value))  # before the checkpoint is read


def _probe() -> int:
    _check_probe_flags()
    pretrained = _PRETRAINED.value
    workdir = paths.as_path(pretrain.workdir_flag() or locate_checkpoint(pretrained)[0])
    created = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return _write_probe(pretrained, workdir)
    except BaseException:
        if created:  # a failed evaluation leaves no directory of its own behind
            workdir.rmtree(missing_ok=True)
        raise


def _write_probe(pretrained: str, workdir) -> int:
    """The fast probe of ``pretrained``, its results and figures written to ``workdir``."""
    output = workdir / RESULTS_FILE
    results = evaluate_checkpoint(
        pretrained,
        evaluators=tuple(_EVALUATORS.value),
        epochs=_EPOCHS.value,
        base_lr=_BASE_LR.value,
        batch_size=_BATCH_SIZE.value,
        warmup_epochs=_WARMUP_EPOCHS.value,
        weight_decay=_WEIGHT_DECAY.value,
        feature_norm=_FEATURE_NORM.value,
        resamples=_RESAMPLES.value,
        seed=_SEED.value,
        output_dir=str(workdir),
        pixel_baseline=_PIXEL_BASELINE.value,
    )
    output.write_text(json.dumps(results, indent=2))
    print(format_results(results))
    print(f"results written to {output}")
    return ExitCode.OK


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
