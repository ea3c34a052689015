"""Confusion matrix and the PNG figures of contrastive_jax.eval.plots."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from contrastive_jax.eval import (
    confusion_matrix,
    plot_class_similarity,
    plot_confusion_matrices,
    plot_within_between_histograms,
)

NAMES = ["plane", "car", "bird", "truck"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 2000


def embeddings(seed):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(4), 30)
    return rng.normal(size=(4, 16))[labels] + rng.normal(size=(120, 16)), labels


def test_confusion_matrix_hand_example_and_sklearn():
    pred, labels = np.array([0, 1, 1, 2, 0]), np.array([0, 1, 2, 2, 1])
    np.testing.assert_array_equal(
        confusion_matrix(pred, labels, 3), [[1, 0, 0], [1, 1, 0], [0, 1, 1]])
    rng = np.random.default_rng(0)
    pred, labels = rng.integers(0, 7, 500), rng.integers(0, 7, 500)
    np.testing.assert_array_equal(confusion_matrix(pred, labels, 7),
                                  sk_confusion_matrix(labels, pred, labels=range(7)))


def test_confusion_matrix_rejects_out_of_range():
    with pytest.raises(ValueError, match="lie in"):
        confusion_matrix(np.array([0, 3]), np.array([0, 1]), 3)


@pytest.mark.slow
def test_plots_write_pngs(tmp_path):
    z1, labels = embeddings(1)
    z2, _ = embeddings(2)
    cm = confusion_matrix(np.random.default_rng(3).integers(0, 4, 120), labels, 4)
    paths = [
        plot_confusion_matrices({"SupCon": cm, "SINCERE": cm.T}, NAMES, tmp_path / "a" / "cm.png"),
        plot_confusion_matrices({"counts": cm}, NAMES, tmp_path / "cm_counts.png",
                                normalize=False),
        plot_class_similarity({"SupCon": z1, "SINCERE": z2}, labels, NAMES, tmp_path / "sim.png"),
        plot_within_between_histograms({"SupCon": z1}, labels, 3, NAMES, tmp_path / "hist.png"),
    ]
    assert [p.name for p in paths] == ["cm.png", "cm_counts.png", "sim.png", "hist.png"]
    for path in paths:
        assert_png(path)


def test_plots_reject_bad_input(tmp_path):
    z, labels = embeddings(0)
    with pytest.raises(ValueError, match="shape"):
        plot_confusion_matrices({"m": np.eye(3)}, NAMES, tmp_path / "x.png")
    with pytest.raises(ValueError, match="cls"):
        plot_within_between_histograms({"m": z}, labels, 4, NAMES, tmp_path / "y.png")
    assert not list(tmp_path.iterdir())
