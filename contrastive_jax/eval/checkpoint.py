"""A pretraining checkpoint evaluated: its frozen encoder probed, or its classifier scored.

    from contrastive_jax.eval.checkpoint import evaluate_checkpoint, format_results
    results = evaluate_checkpoint("runs/quickstart")
    print(format_results(results))

The encoder is restored in inference mode (BatchNorm on its running statistics) and never
updated. :func:`evaluate_checkpoint` runs evaluators of the registry
(:mod:`contrastive_jax.eval.registry`) on it, by default the probes of
:mod:`contrastive_jax.eval.probes` (linear, kNN and ridge on the frozen features of the
training and test splits, with 95 % bootstrap intervals), and any other by name (the online
kNN monitor, the validation of a classifier head).

With ``output_dir`` and the linear probe it also draws, for the test set: the linear probe's
confusion matrix, the class-by-class mean cosine similarity of the projection-head outputs
(the space the loss shaped; SINCERE Fig. 2) and the within- vs between-class
cosine-similarity histograms of the last class (SINCERE Fig. 3 shows "truck", CIFAR-10's
last). With ``pixel_baseline`` the same probes run on the raw (normalised, flattened) test
images, the reference a learned representation has to beat.

``python -m contrastive_jax.linear_eval`` is the command-line front end.

Classifiers trained end to end (the ``classifier`` head, or any head whose outputs are
class scores, trained with the label losses of :mod:`contrastive_jax.losses`):
:func:`evaluate_classifier` scores the head's logits on a split of a checkpoint with
:func:`classifier_metrics` (top-1/top-5 with bootstrap intervals, expected calibration
error and reliability bins, NLL; Hugger & Uhlmann 2024, arXiv:2404.14076, Sec. 4.2).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from contrastive_jax import data as data_lib
from contrastive_jax import eval as eval_lib
from contrastive_jax.data import batching
from contrastive_jax.eval import registry
from contrastive_jax.eval.embed import Embedded, embed_split
from contrastive_jax.eval.evaluator import Setup
from contrastive_jax.eval.linear import ProbeProtocol
from contrastive_jax.eval.probes import LinearProbe, accuracies
from contrastive_jax.parallel import make_mesh
from contrastive_jax.train import paths
from contrastive_jax.train.pretrained import Pretrained, load_pretrained
from contrastive_jax.train.spec import parse

#: Where the command-line tools write the results in a work directory.
RESULTS_FILE = "eval.json"
#: Plots written by :func:`evaluate_checkpoint` with ``output_dir``.
PLOT_FILES = ("confusion_matrix.png", "class_similarity.png", "similarity_histogram.png")
#: The evaluators :func:`evaluate_checkpoint` runs unless told others.
PROBES = ("linear", "knn", "ridge")


def checkpoint_setup(run: Pretrained, source: data_lib.Source, protocol: ProbeProtocol,
                     features: str = "features") -> Setup:
    """The :class:`~contrastive_jax.eval.evaluator.Setup` of a restored run: its config's
    sections, its source, every device of this process's mesh."""
    spec = parse(run.config)
    per_epoch = batching.steps_per_epoch(source.split("train").num_examples,
                                         spec.data.global_batch_size, source.name)
    return Setup(spec=spec, source=source, mesh=make_mesh(), total_steps=run.step,
                 steps_per_epoch=per_epoch, probe=protocol, features=features)


def _plot(output_dir: str, title: str, predictions: np.ndarray, projections: Embedded,
          class_names: tuple[str, ...]) -> None:
    """The three figures of the module docstring into ``output_dir``."""
    k = len(class_names)
    confusion, similarity, histogram = (paths.as_path(output_dir) / f for f in PLOT_FILES)
    matrix = eval_lib.confusion_matrix(predictions, projections.labels, k)
    eval_lib.plot_confusion_matrices({title: matrix}, class_names, confusion)
    z = {title: projections.features}
    eval_lib.plot_class_similarity(z, projections.labels, class_names, similarity)
    eval_lib.plot_within_between_histograms(z, projections.labels, k - 1, class_names, histogram)


def evaluate_checkpoint(
    path: str,
    *,
    evaluators: tuple[str, ...] = PROBES,
    output_dir: str | None = None,
    pixel_baseline: bool = False,
    **protocol: Any,
) -> dict[str, Any]:
    """The evaluators ``evaluators`` of the registry on the encoder restored from ``path``.

    Args:
      path: a pretraining work directory (newest readable checkpoint) or a
        checkpoint directory ``<workdir>/checkpoints/<step>``.
      evaluators: names in :data:`contrastive_jax.eval.registry.EVALUATORS`.
      output_dir: where to draw the figures (:data:`PLOT_FILES`; with ``linear`` among
        ``evaluators``); None: none.
      pixel_baseline: also run the probes among ``evaluators`` on the raw test images
        (``results["pixels"]``).
      **protocol: fields of :class:`~contrastive_jax.eval.ProbeProtocol` (e.g. ``epochs=5``).

    Returns:
      A JSON-serialisable dict: each evaluator's metrics under its name; with ``linear``,
      its ``top1`` and ``top5`` test accuracy (fractions) and ``top1_ci``/``top5_ci``
      ([low, high], 95 %) at the top level too; the checkpoint, dataset sizes and protocol.

    Raises:
      ConfigError: a name that is not an evaluator, or an evaluator the run cannot feed.
    """
    run = load_pretrained(path)
    source = data_lib.load_source(run.config.data)
    protocol_ = ProbeProtocol(**protocol)
    setup = checkpoint_setup(run, source, protocol_)
    built = registry.by_name(setup, tuple(evaluators))
    results: dict[str, Any] = {
        "workdir": run.workdir,
        "step": run.step,
        "dataset": source.name,
        "num_train": source.split("train").num_examples,
        "num_test": source.split("test").num_examples if "test" in source.splits else 0,
        "num_features": int(run.network.encoder.num_features),
        "protocol": dataclasses.asdict(protocol_),
    }
    for name, evaluator in built.items():
        results[name] = evaluator.run(run.network, run.step)
    linear = built.get("linear")
    if isinstance(linear, LinearProbe):
        top5 = f"top{min(5, source.num_classes)}"
        top = results["linear"]
        results.update({"top1": top["top1"]["accuracy"],
                        "top1_ci": [top["top1"]["low"], top["top1"]["high"]],
                        "top5": top[top5]["accuracy"],
                        "top5_ci": [top[top5]["low"], top[top5]["high"]]})
    probes = [name for name in evaluators if name in PROBES]
    if pixel_baseline and probes:
        pixels = checkpoint_setup(run, source, protocol_, features="pixels")
        results["pixels"] = {name: evaluator.run(run.network, run.step)
                             for name, evaluator in registry.by_name(pixels, tuple(probes)).items()}
    if output_dir is not None and isinstance(linear, LinearProbe):
        assert linear.predictions is not None
        projections = embed_split(
            run.network, run.config.data, "test", output="projections", source=source
        )
        title = f"{run.config.loss.name}, step {run.step}"
        _plot(output_dir, title, linear.predictions, projections, source.class_names)
    return results


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row softmax of ``logits / temperature`` in float64: float [N, K] -> float64 [N, K]."""
    if not temperature > 0:
        raise ValueError(f"`temperature` must be > 0, got {temperature}")
    z = np.asarray(logits, np.float64) / temperature
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def classifier_metrics(
    logits: np.ndarray,
    labels: np.ndarray,
    *,
    temperature: float = 1.0,
    num_bins: int = 15,
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Test metrics of class scores: accuracy, calibration and NLL of ``softmax(logits / tau)``.

    Args:
      logits: float [N, K] class scores; labels: int [N] in [0, K).
      temperature: tau of the class probabilities ``p = softmax(logits / tau)``.
      num_bins: M equal-width confidence bins of the ECE
        (:func:`contrastive_jax.eval.expected_calibration_error`; the soft-target paper's 15).
      resamples, seed: the bootstrap intervals of the accuracies.

    Returns:
      JSON-able ``{"top1", "top5"}`` (:func:`contrastive_jax.eval.bootstrap_accuracy` of
      top-k correctness; top-K when K < 5), ``"ece"`` (in [0, 1]), ``"nll"``
      (``mean -log p[y]``, nats), ``"reliability"`` (per bin ``count``, ``accuracy``,
      ``confidence``; None for an empty bin) and ``"num_examples"``.

    Raises:
      ValueError: logits not [N, K] finite floats, labels of another length or outside [0, K).
    """
    logits = np.asarray(logits)
    if logits.ndim != 2 or not np.issubdtype(logits.dtype, np.floating):
        raise ValueError(f"`logits` must be float [N, K], got {logits.dtype} {logits.shape}")
    if not np.all(np.isfinite(logits)):
        raise ValueError("`logits` holds non-finite values")
    probs = softmax(logits, temperature)
    labels = np.asarray(labels)
    bins = eval_lib.reliability_bins(probs, labels, num_bins)  # checks the labels
    record: dict[str, Any] = accuracies(logits, labels, resamples, seed)
    record["ece"] = eval_lib.expected_calibration_error(probs, labels, num_bins)
    picked = probs[np.arange(len(labels)), labels]
    record["nll"] = float(-np.mean(np.log(np.maximum(picked, np.finfo(np.float64).tiny))))
    record["reliability"] = {
        name: [float(v) if np.isfinite(v) else None for v in bins[name]]
        for name in ("accuracy", "confidence")
    }
    record["reliability"]["count"] = [int(c) for c in bins["count"]]
    record["num_examples"] = int(len(labels))
    return record


def classifier_logits(path: str, split: str = "test", *, source=None) -> Embedded:
    """The head outputs (class scores) of every example of ``split``, from a checkpoint.

    Args:
      path: a work directory (newest readable checkpoint) or ``<workdir>/checkpoints/<step>``.
      split: the split to score (evaluation transform, clean labels).
      source: the run's data source (None: loaded from the run's data config).

    Returns:
      :class:`contrastive_jax.eval.embed.Embedded` with ``features`` = logits float32 [N, K].
    """
    run = load_pretrained(path)
    source = data_lib.load_source(run.config.data) if source is None else source
    return embed_split(run.network, run.config.data, split, output="projections", source=source)


def evaluate_classifier(
    path: str,
    split: str = "test",
    *,
    temperature: float = 1.0,
    num_bins: int = 15,
    resamples: int = 1000,
    seed: int = 0,
    source=None,
) -> tuple[dict[str, Any], Embedded]:
    """:func:`classifier_metrics` of a checkpoint's head on ``split``.

    Returns:
      (the metrics record, the logits of :func:`classifier_logits`, for per-example
      statistics such as paired bootstraps).
    """
    scored = classifier_logits(path, split, source=source)
    record = classifier_metrics(
        scored.features, scored.labels, temperature=temperature, num_bins=num_bins,
        resamples=resamples, seed=seed,
    )
    return record, scored


def format_results(results: dict[str, Any]) -> str:
    """A few human-readable lines: each evaluator's metrics (a probe's accuracies with their
    95 % intervals)."""
    lines = [
        f"{results['dataset']}: {results['num_train']} train / {results['num_test']} test "
        f"examples, {results['num_features']} features, checkpoint step {results['step']}"
    ]
    sections = {"": results}
    if "pixels" in results:
        sections["pixels "] = results["pixels"]
    for prefix, section in sections.items():
        for name in registry.EVALUATORS:
            if name not in section:
                continue
            metrics = section[name]
            records = {k: v for k, v in metrics.items() if isinstance(v, dict)}  # a probe's
            lines.append(f"  {prefix + name:<13} " + "   ".join(
                _format_metric(key, value) for key, value in (records or metrics).items()))
    return "\n".join(lines)


def _format_metric(key: str, value: Any) -> str:
    """``top1 61.20 % [59.10, 63.20]`` of a bootstrap record, ``knn_top1 0.612`` of a number."""
    if isinstance(value, dict):
        return (f"{key} {100 * value['accuracy']:.2f} % "
                f"[{100 * value['low']:.2f}, {100 * value['high']:.2f}]")
    return f"{key} {value:.4g}"
