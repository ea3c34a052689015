"""Evaluation figures: confusion matrices and the similarity figures of SINCERE (Figs. 2, 3, A.1).

Feeney & Hughes (2023), "SINCERE: Supervised Information Noise-Contrastive Estimation
REvisited", arXiv:2309.14277. Every plot function takes a mapping ``{panel title: data}`` and
draws one panel per entry side by side with shared colour scale or bins, so one call draws a
single model or the paper's SupCon-vs-SINCERE comparison. Figures are built on
:class:`matplotlib.figure.Figure` and written by its Agg canvas, without ``pyplot`` and without
touching the global backend (safe in notebooks and headless jobs). Each function writes a PNG,
creating parent directories (local or ``gs://``, through ``etils.epath``), and returns its path.

The statistics come from :mod:`contrastive_jax.metrics` (:func:`~contrastive_jax.metrics.class_similarity_matrix`,
:func:`~contrastive_jax.metrics.within_between_similarities`). SINCERE does not say which embedding space Figs. 2-3 use;
we use the L2-normalised projection output of un-augmented test images (``docs/decisions.md``),
and the functions accept any [N, D] embeddings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import sklearn.metrics
from etils import epath
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from contrastive_jax import metrics

#: Largest number of classes whose matrix cells get a printed value.
_MAX_ANNOTATED = 20


def confusion_matrix(pred: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Counts ``C[t, p] = #{i : labels_i = t, pred_i = p}``: int [N], int [N] -> int64 [K, K].

    Rows are true classes, columns predicted classes; ``trace(C) / N`` is the accuracy.
    ``sklearn.metrics.confusion_matrix`` with every class listed, after checking the inputs.
    """
    pred = np.asarray(pred)
    labels = np.asarray(labels)
    if pred.ndim != 1 or pred.shape != labels.shape:
        raise ValueError(
            f"`pred` and `labels` must be 1-D of equal length, got {pred.shape}, {labels.shape}"
        )
    if pred.size and (
        min(pred.min(), labels.min()) < 0 or max(pred.max(), labels.max()) >= num_classes
    ):
        raise ValueError(f"`pred` and `labels` must lie in [0, {num_classes})")
    if not pred.size:
        return np.zeros((num_classes, num_classes), np.int64)
    return sklearn.metrics.confusion_matrix(labels, pred, labels=np.arange(num_classes)).astype(
        np.int64
    )


def _panels(n: int, cell: float, num_classes: int) -> tuple[Figure, np.ndarray]:
    side = max(4.0, cell * num_classes)
    fig = Figure(figsize=(side * n + 1.5 * n, side), layout="constrained")
    return fig, np.atleast_1d(fig.subplots(1, n))


def _matrix_panel(
    fig: Figure,
    ax: Axes,
    matrix: np.ndarray,
    class_names: Sequence[str],
    title: str,
    vmin: float,
    vmax: float,
    fmt: str,
    cmap: str,
) -> None:
    """Draws a [K, K] matrix with class ticks, a colour bar and (K <= 20) cell values."""
    k = matrix.shape[0]
    image = ax.imshow(matrix, vmin=vmin, vmax=vmax, cmap=cmap)
    ax.set_xticks(range(k), class_names, rotation=90 if k > 10 else 45, ha="right")
    ax.set_yticks(range(k), class_names)
    ax.set_title(title)
    if k <= _MAX_ANNOTATED:
        for (i, j), value in np.ndenumerate(matrix):
            red, green, blue, _ = image.cmap(image.norm(value))
            dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
            ax.text(j, i, format(value, fmt), ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")
    fig.colorbar(image, ax=ax, shrink=0.8)


def _save(fig: Figure, path: str | Path) -> epath.Path:
    path = epath.Path(path)  # a local path or a bucket's (gs://...)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        fig.savefig(f, format=path.suffix.lstrip(".") or "png", dpi=120)
    return path


def plot_confusion_matrices(
    matrices: Mapping[str, np.ndarray],
    class_names: Sequence[str],
    path: str | Path,
    *,
    normalize: bool = True,
) -> epath.Path:
    """Confusion matrices (SINCERE Fig. A.1), rows normalised to recall by default.

    Args:
      matrices: ``{title: C}`` with C int [K, K] from :func:`confusion_matrix`.
      class_names: K names for the axes.
      path: output PNG.
      normalize: divide each row by its count (``C[t, p] / sum_p C[t, p]``, empty rows 0).

    Returns:
      ``path``.
    """
    k = len(class_names)
    fig, axes = _panels(len(matrices), 0.45, k)
    for ax, (title, matrix) in zip(axes, matrices.items(), strict=True):
        matrix = np.asarray(matrix, np.float64)
        if matrix.shape != (k, k):
            raise ValueError(f"matrix {title!r} has shape {matrix.shape}, expected ({k}, {k})")
        if normalize:
            totals = matrix.sum(axis=1, keepdims=True)
            matrix = np.divide(matrix, totals, out=np.zeros_like(matrix), where=totals > 0)
        vmax = 1.0 if normalize else max(float(matrix.max()), 1.0)
        _matrix_panel(fig, ax, matrix, class_names, title, 0.0, vmax,
                      ".2f" if normalize else ".0f", "Blues")
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
    return _save(fig, path)


def plot_class_similarity(
    embeddings: Mapping[str, np.ndarray],
    labels: np.ndarray,
    class_names: Sequence[str],
    path: str | Path,
) -> epath.Path:
    """Class-by-class mean cosine similarity of test embeddings (SINCERE Fig. 2).

    Cell ``(a, b)`` is ``M_ab = mean{cos(z_i, z_j) : c_i = a, c_j = b, i != j}``
    (:func:`contrastive_jax.metrics.class_similarity_matrix`), printed in the cell for up to 20
    classes; all panels share the colour scale. The title adds the mean diagonal and mean
    off-diagonal entry (the paper's Fig. 2: SINCERE lowers them by 0.06 and 0.11 on CIFAR-10).

    Args:
      embeddings: ``{title: z}`` with z float [N, D] for the same N test examples.
      labels: int [N] in ``[0, K)``.
      class_names: K names.
      path: output PNG.

    Returns:
      ``path``.
    """
    k = len(class_names)
    mats = {t: metrics.class_similarity_matrix(z, labels, k) for t, z in embeddings.items()}
    vmin = min(float(np.nanmin(m)) for m in mats.values())
    vmax = max(float(np.nanmax(m)) for m in mats.values())
    fig, axes = _panels(len(mats), 0.55, k)
    for ax, (title, matrix) in zip(axes, mats.items(), strict=True):
        summary = metrics.similarity_summary(matrix)
        caption = (
            f"{title}\nwithin {summary['mean_within']:.3f}, "
            f"between {summary['mean_between']:.3f}"
        )
        _matrix_panel(fig, ax, matrix, class_names, caption, vmin, vmax, ".2f", "viridis")
    return _save(fig, path)


def plot_within_between_histograms(
    embeddings: Mapping[str, np.ndarray],
    labels: np.ndarray,
    cls: int,
    class_names: Sequence[str],
    path: str | Path,
    *,
    bins: int = 100,
) -> epath.Path:
    """Histograms of target vs noise cosine similarities for one class (SINCERE Fig. 3).

    Target: ``cos(z_i, z_j)`` over pairs i < j of class ``cls``; noise: pairs with one member
    in ``cls`` and one outside (:func:`contrastive_jax.metrics.within_between_similarities`).
    Densities on shared bins over the range of all panels, so shifts and spreads compare.

    Args:
      embeddings: ``{title: z}`` with z float [N, D] for the same N test examples.
      labels: int [N].
      cls: class index (SINCERE shows "truck", index 9 of CIFAR-10).
      class_names: K names.
      path: output PNG.
      bins: number of histogram bins.

    Returns:
      ``path``.
    """
    if not 0 <= cls < len(class_names):
        raise ValueError(f"`cls` must be in [0, {len(class_names)}), got {cls}")
    pairs = {t: metrics.within_between_similarities(z, labels, cls) for t, z in embeddings.items()}
    lo = min(min(w.min(initial=1.0), b.min(initial=1.0)) for w, b in pairs.values())
    hi = max(max(w.max(initial=-1.0), b.max(initial=-1.0)) for w, b in pairs.values())
    edges = np.linspace(lo, hi, bins + 1) if hi > lo else np.linspace(-1.0, 1.0, bins + 1)
    name = class_names[cls]
    fig = Figure(figsize=(5.0 * len(pairs), 3.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(pairs), sharex=True, sharey=True))
    for ax, (title, (within, between)) in zip(axes, pairs.items(), strict=True):
        ax.hist(within, bins=edges, density=True, alpha=0.6, label=f"target ({name}-{name})")
        ax.hist(between, bins=edges, density=True, alpha=0.6, label=f"noise ({name}-other)")
        ax.set_title(title)
        ax.set_xlabel("cosine similarity")
        ax.set_ylabel("density")
        ax.legend(fontsize=8)
    return _save(fig, path)
