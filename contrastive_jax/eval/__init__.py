"""Feature-level evaluation: linear, kNN and ridge probes, accuracy bootstrap, figures.

Everything here takes frozen features (numpy or JAX arrays [N, F]) and labels, never models;
``python -m contrastive_jax.linear_eval`` extracts the features and calls these functions.
Needs the ``train`` extra (``pip install 'contrastive_jax[train]'``).

* :mod:`.linear`: SGD linear probe with the SupCon/SINCERE schedule (Feeney & Hughes 2023, Sec. 4.3).
* :mod:`.knn`: weighted kNN (Wu et al. 2018), k = 20, tau = 0.07.
* :mod:`.ridge`: closed-form ridge probe on one-hot targets.
* :mod:`.bootstrap`: top-k accuracy, percentile and paired bootstrap (the paper's Table 2).
* :mod:`.plots`: confusion matrices and SINCERE Figs. 2, 3.
"""

from contrastive_jax._extras import require

require("contrastive_jax.eval", ("optax", "sklearn", "matplotlib", "flax", "grain",
                                  "ml_collections"))

from contrastive_jax.eval.bootstrap import (
    bootstrap_accuracy,
    paired_bootstrap_difference,
    topk_accuracy,
    topk_correct,
)
from contrastive_jax.eval.calibration import (
    calibration_error_from_confidence,
    expected_calibration_error,
    reliability_bins,
    reliability_from_confidence,
)
from contrastive_jax.eval.knn import knn_scores
from contrastive_jax.eval.linear import (
    LinearClassifier,
    ProbeProtocol,
    normalize_features,
    predict_logits,
    train_linear_classifier,
    warmup_cosine_lr,
)
from contrastive_jax.eval.plots import (
    confusion_matrix,
    plot_class_similarity,
    plot_confusion_matrices,
    plot_within_between_histograms,
)
from contrastive_jax.eval.ridge import DEFAULT_ALPHAS, RidgeProbe, fit_ridge_probe, ridge_scores

__all__ = [
    "ProbeProtocol",
    "DEFAULT_ALPHAS",
    "LinearClassifier",
    "RidgeProbe",
    "bootstrap_accuracy",
    "calibration_error_from_confidence",
    "confusion_matrix",
    "expected_calibration_error",
    "fit_ridge_probe",
    "knn_scores",
    "normalize_features",
    "paired_bootstrap_difference",
    "plot_class_similarity",
    "plot_confusion_matrices",
    "plot_within_between_histograms",
    "predict_logits",
    "reliability_bins",
    "reliability_from_confidence",
    "ridge_scores",
    "topk_accuracy",
    "topk_correct",
    "train_linear_classifier",
    "warmup_cosine_lr",
]
