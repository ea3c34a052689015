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
  then cosine-annealed; seed 000 §4.3, spec/sincere-supcon.md §7.2), reported
  as top-1 and top-5 test accuracy with 95 % percentile-bootstrap intervals
  over 1,000 resamples of the test set (seed 000 §4.2);
* a weighted kNN classifier (k = 20, cosine, temperature 0.07; Wu et al. 2018);
* a closed-form ridge probe with its penalty chosen on a held-out 10 %.

``python -m contrastive_jax.linear_eval`` is the command-line front end.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from contrastive_jax import data as data_lib
from contrastive_jax import eval as eval_lib
from contrastive_jax.embed import embed_split
from contrastive_jax.train.pretrained import load_pretrained

#: Where the command-line tools write the results in a work directory.
RESULTS_FILE = "eval.json"


def _accuracies(scores: np.ndarray, labels: np.ndarray, resamples: int, seed: int) -> dict:
    """Top-1 and top-5 (top-K for K < 5 classes) accuracy with bootstrap intervals."""
    k5 = min(5, scores.shape[1])
    return {
        f"top{k}": eval_lib.bootstrap_accuracy(
            eval_lib.topk_correct(scores, labels, k), resamples=resamples, seed=seed
        )
        for k in (1, k5)
    }


def evaluate_checkpoint(
    path: str,
    *,
    epochs: int = 100,
    base_lr: float = 5.0,
    batch_size: int = 512,
    warmup_epochs: int = 10,
    weight_decay: float = 0.0,
    feature_norm: str = "standardize",
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Linear, kNN and ridge evaluation of the encoder restored from ``path``.

    Args:
      path: a pretraining work directory (newest readable checkpoint) or a
        checkpoint directory ``<workdir>/checkpoints/<step>``.
      epochs, base_lr, batch_size, warmup_epochs, weight_decay, feature_norm:
        the linear probe's protocol (:func:`contrastive_jax.eval.train_linear_classifier`).
      resamples: bootstrap resamples of the test set.
      seed: seed of the probe's minibatch order and of the bootstrap.

    Returns:
      A JSON-serialisable dict: the linear probe's ``top1`` and ``top5`` test
      accuracy (fractions) and ``top1_ci``/``top5_ci`` ([low, high], 95 %),
      the checkpoint, dataset sizes and protocol, and for ``linear``, ``knn``
      and ``ridge`` top-1/top-5 accuracy dicts with ``accuracy``, ``mean``,
      ``low``, ``high``, ``std`` (see :func:`contrastive_jax.eval.bootstrap_accuracy`).
    """
    run = load_pretrained(path)
    source = data_lib.load_source(run.config.data)
    train = embed_split(run.network, run.config.data, "train", source=source)
    test = embed_split(run.network, run.config.data, "test", source=source)
    num_classes = source.num_classes

    probe = eval_lib.train_linear_classifier(
        train.features,
        train.labels,
        num_classes=num_classes,
        epochs=epochs,
        batch_size=batch_size,
        base_lr=base_lr,
        warmup_epochs=min(warmup_epochs, epochs - 1),
        weight_decay=weight_decay,
        feature_norm=feature_norm,
        seed=seed,
    )
    linear = _accuracies(eval_lib.predict_logits(probe, test.features), test.labels, resamples, seed)
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
    top5 = f"top{min(5, num_classes)}"
    return {
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
        "protocol": {
            "epochs": epochs,
            "base_lr": base_lr,
            "batch_size": batch_size,
            "warmup_epochs": min(warmup_epochs, epochs - 1),
            "weight_decay": weight_decay,
            "feature_norm": feature_norm,
            "resamples": resamples,
            "seed": seed,
        },
        "linear": linear,
        "knn": knn,
        "ridge": ridge,
    }


def format_results(results: dict[str, Any]) -> str:
    """A few human-readable lines: accuracy and 95 % interval of each probe."""
    lines = [
        f"{results['dataset']}: {results['num_train']} train / {results['num_test']} test "
        f"examples, {results['num_features']} features, checkpoint step {results['step']}"
    ]
    for probe in ("linear", "knn", "ridge"):
        parts = []
        for key, value in results[probe].items():
            if key.startswith("top"):
                parts.append(
                    f"{key} {100 * value['accuracy']:.2f} % "
                    f"[{100 * value['low']:.2f}, {100 * value['high']:.2f}]"
                )
        lines.append(f"  {probe:<6} " + "   ".join(parts))
    return "\n".join(lines)
