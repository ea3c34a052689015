"""The probes of a frozen encoder as evaluators: linear, kNN and ridge on its features.

Each probe is trained on the features of the ``train`` split and scored on those of the
``test`` split (clean labels, the evaluation transform, no augmentation), embedded once for
all the probes of one :class:`~contrastive_jax.eval.evaluator.Setup` (``setup.cache``):

* ``linear``: SGD on the features, the SupCon/SINCERE protocol (``setup.probe``,
  :class:`~contrastive_jax.eval.ProbeProtocol`; SINCERE, Feeney & Hughes 2023,
  arXiv:2309.14277, Section 4.3);
* ``knn``: a weighted kNN classifier (k = 20, cosine, temperature 0.07; Wu et al. 2018);
* ``ridge``: a closed-form ridge probe, its penalty chosen on a held-out 10 %.

Each returns its top-1 and top-5 test accuracy (top-K for K < 5 classes) with 95 %
percentile-bootstrap intervals over ``setup.probe.resamples`` resamples of the test set
(:func:`contrastive_jax.eval.bootstrap_accuracy`; SINCERE Section 4.2). With
``setup.features == "pixels"`` the probes read the normalised, flattened test images
instead: the baseline a learned representation has to beat.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from flax import nnx

from contrastive_jax.errors import ConfigError
from contrastive_jax.eval.bootstrap import bootstrap_accuracy, topk_correct
from contrastive_jax.eval.embed import Embedded, embed_split, pixel_split
from contrastive_jax.eval.evaluator import Setup
from contrastive_jax.eval.knn import knn_scores
from contrastive_jax.eval.linear import predict_logits, train_linear_classifier
from contrastive_jax.eval.ridge import fit_ridge_probe, ridge_scores


def accuracies(scores: np.ndarray, labels: np.ndarray, resamples: int, seed: int) -> dict:
    """Top-1 and top-5 (top-K for K < 5 classes) accuracy of ``scores`` float [N, K] with
    bootstrap intervals: ``{"top1": ..., "top5": ...}`` of
    :func:`~contrastive_jax.eval.bootstrap_accuracy` records."""
    k5 = min(5, scores.shape[1])
    return {f"top{k}": bootstrap_accuracy(topk_correct(scores, labels, k),
                                          resamples=resamples, seed=seed)
            for k in (1, k5)}


def frozen_splits(setup: Setup, network: nnx.Module, step: int) -> tuple[Embedded, Embedded]:
    """The ``train`` and ``test`` splits as features of ``network`` (or as pixels), embedded
    once per network and step for every probe of ``setup``."""
    cached = setup.cache.get("frozen_splits")
    # The network itself is held (not its id, which a later network may reuse) and compared.
    if cached is None or cached[0] is not network or cached[1] != step:
        data, source = setup.spec.data, setup.source
        if setup.features == "pixels":
            train, test = (pixel_split(data, split, source=source) for split in ("train", "test"))
        else:
            train, test = (embed_split(network, data, split, source=source)
                           for split in ("train", "test"))
        cached = setup.cache["frozen_splits"] = (network, step, (train, test))
    return cached[2]


class _Probe:
    """What the three probes share: the setup, no interval in a run (the probes run on a
    checkpoint, ``linear_eval``)."""

    metrics: ClassVar[tuple[str, ...]] = ("top1", "top5")

    def __init__(self, setup: Setup) -> None:
        if setup.source is None:
            raise ConfigError("the probes need a dataset with train and test splits")
        self.setup = setup
        self.num_classes = setup.source.num_classes

    @classmethod
    def interval(cls, setup: Setup) -> int:
        del setup
        return 0


class LinearProbe(_Probe):
    """The linear probe; after :meth:`run`, :attr:`predictions` holds its test predictions
    int [N_test] (the confusion matrix's)."""

    predictions: np.ndarray | None = None

    def run(self, network: nnx.Module, step: int) -> dict[str, Any]:
        """``{"top1", "top5", "final_train_loss"}``."""
        train, test = frozen_splits(self.setup, network, step)
        protocol = self.setup.probe
        probe = train_linear_classifier(
            train.features, train.labels, num_classes=self.num_classes,
            epochs=protocol.epochs, batch_size=protocol.batch_size, base_lr=protocol.base_lr,
            momentum=protocol.momentum, warmup_epochs=protocol.warmup_epochs,
            warmup_from=protocol.warmup_from, weight_decay=protocol.weight_decay,
            feature_norm=protocol.feature_norm, seed=protocol.seed)
        logits = predict_logits(probe, test.features)
        self.predictions = np.argmax(logits, axis=1)
        return {**accuracies(logits, test.labels, protocol.resamples, protocol.seed),
                "final_train_loss": float(probe.train_loss[-1])}


class KnnProbe(_Probe):
    """The weighted kNN classifier on the whole training split."""

    def run(self, network: nnx.Module, step: int) -> dict[str, Any]:
        """``{"top1", "top5"}``."""
        train, test = frozen_splits(self.setup, network, step)
        scores = knn_scores(train.features, train.labels, test.features,
                            num_classes=self.num_classes)
        return accuracies(scores, test.labels, self.setup.probe.resamples, self.setup.probe.seed)


class RidgeProbe(_Probe):
    """The closed-form ridge probe on one-hot targets."""

    def run(self, network: nnx.Module, step: int) -> dict[str, Any]:
        """``{"top1", "top5", "alpha"}`` (the penalty chosen)."""
        train, test = frozen_splits(self.setup, network, step)
        protocol = self.setup.probe
        probe = fit_ridge_probe(train.features, train.labels, num_classes=self.num_classes,
                                seed=protocol.seed)
        return {**accuracies(ridge_scores(probe, test.features), test.labels,
                             protocol.resamples, protocol.seed),
                "alpha": probe.alpha}
