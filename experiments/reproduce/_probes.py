"""Probes on arrays that only the reproductions use: scikit-learn logistic regression.

:func:`logistic_probe` (multinomial logistic regression on standardised features, test
accuracy with a bootstrap interval; :func:`logistic_predict` its per-example predictions),
:func:`few_shot_rows` (a k-per-class training subset) and
:func:`cross_validated_binary_probe` (stratified k-fold AUC and balanced accuracy with the
training folds sub-sampled, the downstream protocol of Dufumier et al. 2021,
arXiv:2111.05643, Fig. 3). The library's probes (the linear probe of the papers' protocol,
kNN, ridge) are :mod:`contrastive_jax.eval.checkpoint`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from contrastive_jax import eval as eval_lib


def _check_probe_arrays(features: np.ndarray, labels: np.ndarray, name: str) -> None:
    if np.ndim(features) != 2:
        raise ValueError(f"`{name}_x` must have shape [N, F], got {np.shape(features)}")
    if np.shape(labels) != (np.shape(features)[0],):
        raise ValueError(
            f"`{name}_y` must have shape [{np.shape(features)[0]}], got {np.shape(labels)}"
        )
    if not np.all(np.isfinite(features)):
        raise ValueError(f"`{name}_x` holds non-finite values")


def logistic_probe(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    *,
    resamples: int = 1000,
    seed: int = 0,
    max_iter: int = 2000,
) -> dict[str, Any]:
    """Test accuracy of a logistic-regression probe on frozen features.

    The features are standardised with the training mean and standard deviation
    (scikit-learn's ``StandardScaler``), then scikit-learn's ``LogisticRegression``
    (multinomial, L2 penalty C = 1, L-BFGS, ``max_iter``) is fitted; the test
    accuracy carries a 95 % percentile-bootstrap interval over ``resamples``
    resamples of the test set (:func:`contrastive_jax.eval.bootstrap_accuracy`).

    Args:
      train_x: float [N, F]; train_y: int [N] with at least two classes.
      test_x: float [M, F]; test_y: int [M].
      resamples, seed: the bootstrap's.
      max_iter: L-BFGS iterations.

    Returns:
      ``{"accuracy", "mean", "low", "high", "std"}`` (fractions).

    Raises:
      ValueError: wrong shapes, non-finite features, one class only.
    """
    _check_probe_arrays(test_x, test_y, "test")
    predicted = logistic_predict(train_x, train_y, test_x, max_iter=max_iter)
    return eval_lib.bootstrap_accuracy(predicted == test_y, resamples=resamples, seed=seed)


def logistic_predict(
    train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, *, max_iter: int = 2000
) -> np.ndarray:
    """Test predictions int [M] of :func:`logistic_probe`'s classifier (per-example, e.g. for a
    paired bootstrap between two probes of the same test set).

    Raises:
      ValueError: wrong shapes, non-finite features, one class only.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    _check_probe_arrays(train_x, train_y, "train")
    if np.ndim(test_x) != 2 or np.shape(test_x)[1] != np.shape(train_x)[1]:
        raise ValueError(
            f"`test_x` must have shape [M, {np.shape(train_x)[1]}], got {np.shape(test_x)}"
        )
    if not np.all(np.isfinite(test_x)):
        raise ValueError("`test_x` holds non-finite values")
    classes = np.unique(train_y)
    if len(classes) < 2:
        raise ValueError(f"`train_y` must hold at least two classes, got {classes.tolist()}")
    scaler = StandardScaler().fit(train_x)
    clf = LogisticRegression(max_iter=max_iter).fit(scaler.transform(train_x), train_y)
    return clf.predict(scaler.transform(test_x))


def few_shot_rows(labels: np.ndarray, shots: int, seed: int) -> np.ndarray:
    """Rows of a ``shots``-per-class subset of ``labels`` (int [N]), drawn without replacement.

    Returns int [K * shots], class by class in increasing label order, drawn with
    ``numpy.random.default_rng(seed)``.

    Raises:
      ValueError: a class has fewer than ``shots`` examples.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        if len(members) < shots:
            raise ValueError(f"class {c} has {len(members)} examples, fewer than shots={shots}")
        rows.append(rng.choice(members, shots, replace=False))
    return np.concatenate(rows)


def cross_validated_binary_probe(
    features: np.ndarray,
    labels: np.ndarray,
    *,
    train_sizes: tuple[int, ...],
    folds: int = 5,
    seed: int = 0,
    max_iter: int = 2000,
) -> dict[int, dict[str, float]]:
    """Stratified k-fold logistic regression with sub-sampled training folds (binary labels).

    For each of ``folds`` stratified folds (scikit-learn's ``StratifiedKFold``,
    shuffled with ``seed``) and each size ``n`` of ``train_sizes``, ``min(n, |fold|)``
    rows of the training folds are drawn (``numpy.random.default_rng([seed, n])``),
    a logistic regression on standardised features is fitted and scored on the
    held-out fold: ROC AUC of the decision function and balanced accuracy of its
    sign. Both are averaged over the folds.

    Args:
      features: float [N, F]; labels: int [N] in {0, 1}.
      train_sizes: training-set sizes N_train.
      folds, seed, max_iter: see above.

    Returns:
      ``{n: {"auc": float, "bacc": float}}`` for each size.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score, roc_auc_score
    from sklearn.model_selection import StratifiedKFold
    from sklearn.preprocessing import StandardScaler

    _check_probe_arrays(features, labels, "features")
    if set(np.unique(labels).tolist()) != {0, 1}:
        raise ValueError(f"`labels` must be binary {{0, 1}}, got {np.unique(labels).tolist()}")
    out = {}
    for n_train in train_sizes:
        rng = np.random.default_rng([seed, n_train])
        aucs, baccs = [], []
        splits = StratifiedKFold(folds, shuffle=True, random_state=seed).split(features, labels)
        for train_rows, test_rows in splits:
            rows = rng.choice(train_rows, min(n_train, len(train_rows)), replace=False)
            scaler = StandardScaler().fit(features[rows])
            clf = LogisticRegression(max_iter=max_iter).fit(
                scaler.transform(features[rows]), labels[rows]
            )
            score = clf.decision_function(scaler.transform(features[test_rows]))
            aucs.append(roc_auc_score(labels[test_rows], score))
            baccs.append(balanced_accuracy_score(labels[test_rows], score > 0))
        out[int(n_train)] = {"auc": float(np.mean(aucs)), "bacc": float(np.mean(baccs))}
    return out
