"""Evaluate a pretraining checkpoint: embed both splits with the frozen encoder, then probe.

    from contrastive_jax.evaluate import evaluate_checkpoint, format_results
    results = evaluate_checkpoint("runs/quickstart")
    print(format_results(results))

The encoder is restored in inference mode (BatchNorm on its running
statistics) and never updated: the training and test splits (clean labels,
evaluation transform, no augmentation) are embedded once, and everything after
that works on the frozen features:

* a linear classifier trained with the SupCon/SINCERE protocol (SGD momentum
  0.9, batch 512, learning rate warmed up 0.05 -> ``base_lr`` over 10 epochs
  then cosine-annealed; SINCERE, Feeney & Hughes 2023, arXiv:2309.14277,
  Section 4.3), reported as top-1 and top-5 test accuracy with 95 %
  percentile-bootstrap intervals over 1,000 resamples of the test set (SINCERE
  Section 4.2; docs/reproductions.md, "SINCERE protocol");
* a weighted kNN classifier (k = 20, cosine, temperature 0.07; Wu et al. 2018);
* a closed-form ridge probe with its penalty chosen on a held-out 10 %.

With ``output_dir`` it also draws, for the test set: the linear probe's
confusion matrix, the class-by-class mean cosine similarity of the
projection-head outputs (the space the loss shaped; SINCERE Fig. 2) and the
within- vs between-class cosine-similarity histograms of the last class
(SINCERE Fig. 3 shows "truck", CIFAR-10's last). With ``pixel_baseline`` the same
probes run on the raw (normalised, flattened) test images, the reference a
learned representation has to beat.

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
from contrastive_jax.embed import Embedded, embed_split, pixel_split
from contrastive_jax.eval.linear import ProbeProtocol
from contrastive_jax.train import paths
from contrastive_jax.train.pretrained import load_pretrained

#: Where the command-line tools write the results in a work directory.
RESULTS_FILE = "eval.json"
#: Plots written by :func:`evaluate_checkpoint` with ``output_dir``.
PLOT_FILES = ("confusion_matrix.png", "class_similarity.png", "similarity_histogram.png")


def _accuracies(scores: np.ndarray, labels: np.ndarray, resamples: int, seed: int) -> dict:
    """Top-1 and top-5 (top-K for K < 5 classes) accuracy with bootstrap intervals."""
    k5 = min(5, scores.shape[1])
    return {
        f"top{k}": eval_lib.bootstrap_accuracy(
            eval_lib.topk_correct(scores, labels, k), resamples=resamples, seed=seed
        )
        for k in (1, k5)
    }


def probe_features(
    train: Embedded,
    test: Embedded,
    num_classes: int,
    protocol: ProbeProtocol | None = None,
) -> tuple[dict[str, Any], np.ndarray]:
    """Linear, kNN and ridge probes trained on ``train`` and scored on ``test``.

    Args:
      train, test: frozen features [N, F] with labels.
      num_classes: K.
      protocol: see :class:`~contrastive_jax.eval.ProbeProtocol` (None: its defaults).

    Returns:
      ``({"linear": ..., "knn": ..., "ridge": ...}, predictions)``: per probe,
      top-1/top-5 accuracy dicts (``accuracy``, ``mean``, ``low``, ``high``,
      ``std``; :func:`contrastive_jax.eval.bootstrap_accuracy`), and the linear
      probe's test predictions int [N_test].
    """
    protocol = ProbeProtocol() if protocol is None else protocol
    resamples, seed = protocol.resamples, protocol.seed
    probe = eval_lib.train_linear_classifier(
        train.features,
        train.labels,
        num_classes=num_classes,
        epochs=protocol.epochs,
        batch_size=protocol.batch_size,
        base_lr=protocol.base_lr,
        momentum=protocol.momentum,
        warmup_epochs=protocol.warmup_epochs,
        warmup_from=protocol.warmup_from,
        weight_decay=protocol.weight_decay,
        feature_norm=protocol.feature_norm,
        seed=seed,
    )
    logits = eval_lib.predict_logits(probe, test.features)
    linear = _accuracies(logits, test.labels, resamples, seed)
    linear["final_train_loss"] = float(probe.train_loss[-1])
    knn = _accuracies(
        eval_lib.knn_scores(train.features, train.labels, test.features, num_classes=num_classes),
        test.labels,
        resamples,
        seed,
    )
    ridge_probe = eval_lib.fit_ridge_probe(
        train.features, train.labels, num_classes=num_classes, seed=seed
    )
    ridge = _accuracies(
        eval_lib.ridge_scores(ridge_probe, test.features), test.labels, resamples, seed
    )
    ridge["alpha"] = ridge_probe.alpha
    return {"linear": linear, "knn": knn, "ridge": ridge}, np.argmax(logits, axis=1)


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
    output_dir: str | None = None,
    pixel_baseline: bool = False,
    **protocol: Any,
) -> dict[str, Any]:
    """Linear, kNN and ridge evaluation of the encoder restored from ``path``.

    Args:
      path: a pretraining work directory (newest readable checkpoint) or a
        checkpoint directory ``<workdir>/checkpoints/<step>``.
      output_dir: where to draw the figures (:data:`PLOT_FILES`); None: none.
      pixel_baseline: also probe the raw test images (``results["pixels"]``).
      **protocol: fields of :class:`~contrastive_jax.eval.ProbeProtocol` (e.g. ``epochs=5``).

    Returns:
      A JSON-serialisable dict: the linear probe's ``top1`` and ``top5`` test
      accuracy (fractions) and ``top1_ci``/``top5_ci`` ([low, high], 95 %),
      the checkpoint, dataset sizes and protocol, and the per-probe results of
      :func:`probe_features` under ``linear``, ``knn`` and ``ridge`` (and
      under ``pixels`` with ``pixel_baseline``).
    """
    run = load_pretrained(path)
    source = data_lib.load_source(run.config.data)
    train = embed_split(run.network, run.config.data, "train", source=source)
    test = embed_split(run.network, run.config.data, "test", source=source)
    protocol = ProbeProtocol(**protocol)
    probes, predictions = probe_features(train, test, source.num_classes, protocol)
    linear = probes["linear"]
    top5 = f"top{min(5, source.num_classes)}"
    results = {
        "top1": linear["top1"]["accuracy"],
        "top1_ci": [linear["top1"]["low"], linear["top1"]["high"]],
        "top5": linear[top5]["accuracy"],
        "top5_ci": [linear[top5]["low"], linear[top5]["high"]],
        "workdir": run.workdir,
        "step": run.step,
        "dataset": source.name,
        "num_train": int(train.features.shape[0]),
        "num_test": int(test.features.shape[0]),
        "num_features": int(train.features.shape[1]),
        "protocol": dataclasses.asdict(protocol),
        **probes,
    }
    if pixel_baseline:
        results["pixels"], _ = probe_features(
            pixel_split(run.config.data, "train", source=source),
            pixel_split(run.config.data, "test", source=source),
            source.num_classes,
            protocol,
        )
    if output_dir is not None:
        projections = embed_split(
            run.network, run.config.data, "test", output="projections", source=source
        )
        title = f"{run.config.loss.name}, step {run.step}"
        _plot(output_dir, title, predictions, projections, source.class_names)
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
    record: dict[str, Any] = _accuracies(logits, labels, resamples, seed)
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
      :class:`contrastive_jax.embed.Embedded` with ``features`` = logits float32 [N, K].
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
    """A few human-readable lines: accuracy and 95 % interval of each probe."""
    lines = [
        f"{results['dataset']}: {results['num_train']} train / {results['num_test']} test "
        f"examples, {results['num_features']} features, checkpoint step {results['step']}"
    ]
    sections = {"": results}
    if "pixels" in results:
        sections["pixels "] = results["pixels"]
    for name, probes in sections.items():
        for probe in ("linear", "knn", "ridge"):
            parts = [
                f"{key} {100 * value['accuracy']:.2f} % "
                f"[{100 * value['low']:.2f}, {100 * value['high']:.2f}]"
                for key, value in probes[probe].items()
                if key.startswith("top")
            ]
            lines.append(f"  {name + probe:<13} " + "   ".join(parts))
    return "\n".join(lines)
