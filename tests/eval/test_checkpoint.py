"""contrastive_jax.eval.checkpoint: classifier metrics of logits and of a trained classifier
checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contrastive_jax.eval import checkpoint


def test_classifier_metrics_by_hand():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, 6)) * 3
    labels = rng.integers(0, 6, 50)
    rec = checkpoint.classifier_metrics(logits, labels, temperature=2.0, num_bins=10,
                                      resamples=200)
    p = np.exp(logits / 2.0)
    p /= p.sum(1, keepdims=True)
    assert rec["top1"]["accuracy"] == pytest.approx(np.mean(logits.argmax(1) == labels))
    top5 = np.argsort(-logits, 1)[:, :5]
    assert rec["top5"]["accuracy"] == pytest.approx(np.mean((top5 == labels[:, None]).any(1)))
    assert rec["nll"] == pytest.approx(-np.mean(np.log(p[np.arange(50), labels])))
    conf, hit = p.max(1), p.argmax(1) == labels
    edges = np.linspace(0, 1, 11)
    ece = sum(abs(hit[m].mean() - conf[m].mean()) * m.mean()
              for m in ((conf > lo) & (conf <= hi) for lo, hi in zip(edges[:-1], edges[1:], strict=True))
              if m.any())
    assert rec["ece"] == pytest.approx(ece)
    assert sum(rec["reliability"]["count"]) == 50 == rec["num_examples"]
    assert None in rec["reliability"]["accuracy"] or min(rec["reliability"]["count"]) > 0
    json.dumps(rec, allow_nan=False)
    # Temperature changes calibration and NLL, not accuracy.
    sharp = checkpoint.classifier_metrics(logits, labels, temperature=0.5, resamples=200)
    assert sharp["top1"] == checkpoint.classifier_metrics(logits, labels, resamples=200)["top1"]
    assert sharp["nll"] != pytest.approx(rec["nll"])


@pytest.mark.parametrize(
    "logits, labels, match",
    [
        (np.zeros((3,)), np.zeros(3, int), "logits"),
        (np.full((2, 3), np.nan), np.zeros(2, int), "non-finite"),
        (np.zeros((2, 3)), np.array([0, 3]), "labels"),
    ],
)
def test_classifier_metrics_refuses_bad_input(logits, labels, match):
    with pytest.raises(ValueError, match=match):
        checkpoint.classifier_metrics(logits, labels)


@pytest.mark.slow
def test_evaluate_classifier_scores_the_heads_logits(tmp_path):
    """A 2-step small-CNN classifier on digits: its checkpoint's test logits and their metrics."""
    from contrastive_jax import data
    from contrastive_jax.train import loop
    from tests.train.test_mixing_stage import classifier_config

    config = classifier_config("label_cross_entropy")
    config.train.total_steps = 2
    loop.train(config, str(tmp_path))
    record, scored = checkpoint.evaluate_classifier(str(tmp_path), resamples=100)
    n_test = data.load_source(config.data).split("test").num_examples
    assert scored.features.shape == (n_test, 10) and record["num_examples"] == n_test
    np.testing.assert_array_equal(np.sort(scored.index), np.arange(n_test))
    assert record == checkpoint.classifier_metrics(scored.features, scored.labels, resamples=100)
    assert 0.0 <= record["ece"] <= 1.0 and record["top1"]["accuracy"] <= record["top5"]["accuracy"]
