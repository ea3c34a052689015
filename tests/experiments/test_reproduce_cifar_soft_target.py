"""The CIFAR-10 proxy of soft-target InfoNCE's Table 1 (``experiments/reproduce/cifar_soft_target.py``) and its
classifier trainer (``_cifar_classifier.py``).

The unmarked tests check the four training losses, the classifier's shapes, a tiny NLL run on
random 8x8 images (resume, skip, budget refusal) and the tables from fake run records, in
seconds and without the CIFAR data; the ``slow`` one runs ``--quick`` end to end (skipped when the
shared CIFAR-10 folder is absent).
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import eval as eval_lib
from tests.experiments.scripts import load_script


@pytest.fixture(scope="module")
def st():
    return load_script("cifar_soft_target")


@pytest.fixture(scope="module")
def clf(st):
    return st.clf  # the module object the driver uses


@pytest.fixture(scope="module")
def methods(st):
    return st.make_methods(np.full(10, 0.1, np.float32))


def _batch(seed=0, b=20, k=10):
    rng = np.random.default_rng(seed)
    logits = jnp.asarray(rng.normal(size=(b, k)) * 2, jnp.float32)
    labels = jnp.asarray(np.arange(b) % k, jnp.int32)  # every class exactly b / k times
    soft = jnp.asarray(rng.dirichlet(np.ones(k), size=b), jnp.float32)
    return logits, labels, jax.nn.one_hot(labels, k), soft


# ----------------------------------------------------------------------------- losses


def test_methods_and_mix_flags(methods):
    assert list(methods) == ["nll", "stce", "infonce", "sti"]
    assert {m: v.mix for m, v in methods.items()} == {
        "nll": False, "stce": True, "infonce": False, "sti": True}


def test_one_hot_reductions(methods):
    logits, labels, onehot, soft = _batch()
    loss = {m: float(v.loss_fn(logits, labels, onehot)) for m, v in methods.items()}
    # STCE on one-hot targets is NLL; STI on one-hot targets is hard InfoNCE.
    assert loss["stce"] == pytest.approx(loss["nll"], rel=1e-6)
    assert loss["sti"] == pytest.approx(loss["infonce"], rel=1e-6)
    # Hard InfoNCE ignores the targets argument (it uses the labels) ...
    assert float(methods["infonce"].loss_fn(logits, labels, soft)) == pytest.approx(
        loss["infonce"], rel=1e-6)
    # ... and NLL too, while the soft-target losses do not.
    assert float(methods["nll"].loss_fn(logits, labels, soft)) == pytest.approx(loss["nll"])
    assert abs(float(methods["sti"].loss_fn(logits, labels, soft)) - loss["sti"]) > 1e-3
    assert abs(float(methods["stce"].loss_fn(logits, labels, soft)) - loss["stce"]) > 1e-3
    # Each class m = 2 times in the batch and uniform eta -> InfoNCE = NLL + log m (hard InfoNCE
    # is NLL on count-shifted logits: docs/reproductions.md, "Soft-target InfoNCE protocol").
    assert loss["infonce"] == pytest.approx(loss["nll"] + np.log(2), rel=1e-5)


def test_class_prior_is_used(st):
    logits, labels, onehot, _ = _batch(1)
    skewed = np.linspace(1, 3, 10).astype(np.float32)
    skewed /= skewed.sum()
    uniform = st.make_methods(np.full(10, 0.1, np.float32))["infonce"].loss_fn
    other = st.make_methods(skewed)["infonce"].loss_fn
    assert abs(float(uniform(logits, labels, onehot)) - float(other(logits, labels, onehot))) > 1e-3


def test_class_prior_helper(clf):
    np.testing.assert_allclose(clf.class_prior(np.array([0, 1, 1, 3]), 4), [0.25, 0.5, 0, 0.25])
    with pytest.raises(ValueError, match="labels"):
        clf.class_prior(np.array([0, 4]), 4)


def test_paper_mix_is_cached_and_gives_soft_targets(clf):
    assert clf.paper_mix(10) is clf.paper_mix(10)
    x = jnp.ones((4, 8, 8, 3))
    images, targets = jax.jit(clf.paper_mix(10))(jax.random.PRNGKey(0), x, jnp.arange(4))
    assert images.shape == x.shape and targets.shape == (4, 10)
    np.testing.assert_allclose(np.asarray(targets).sum(1), 1.0, rtol=1e-6)
    assert float(targets.min()) >= 0.01 - 1e-7  # label smoothing 0.1 / K


# ----------------------------------------------------------------------------- classifier


@pytest.fixture(scope="module")
def tiny(clf):
    """A 1-conv encoder on 8x8 images, batch 8: compiles in a few seconds. The tests that
    train share it (and so the compiled step of ``nll``)."""
    return clf.Config(task="tiny", epochs=2, batch=8, hidden=16, checkpoint_every=1,
                      encoder=dataclasses.replace(clf.ENCODER, convs=((8, 2),)))


def test_classifier_shapes_and_weight_decay_mask(clf, tiny):
    config = clf.Config(task="t", epochs=1)
    assert config.encoder.convs == ((32, 2), (64, 2), (128, 2)) and config.encoder.in_channels == 3
    key = jax.random.PRNGKey(0)
    params = jax.eval_shape(lambda k: clf.init_classifier(config, k), key)  # nothing compiled
    assert set(params) == {"conv0", "conv1", "conv2", "fc0", "fc1"}
    assert params["fc0"]["w"].shape == (128, 128) and params["fc1"]["w"].shape == (128, 10)
    assert params["fc1"]["b"].shape == (10,)
    assert clf.cu.weight_mask(params)["fc1"] == {"w": True, "b": False}
    x = jax.ShapeDtypeStruct((3, 32, 32, 3), jnp.float32)
    assert jax.eval_shape(lambda p, x: clf.classifier_logits(config, p, x), params, x).shape == (
        3, 10)
    # No batch statistics: an image's logits do not depend on the rest of its batch.
    small = clf.init_classifier(tiny, key)
    images = np.random.default_rng(0).random((3, 8, 8, 3), dtype=np.float32)
    logits = clf.predict_logits(tiny, small, images)
    assert logits.shape == (3, 10) and logits.dtype == np.float64
    alone = clf.predict_logits(tiny, small, images[:1])
    np.testing.assert_allclose(alone[0], logits[0], rtol=1e-5, atol=1e-6)


def test_evaluate_logits_record(clf):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(60, 10)) * 3
    labels = rng.integers(0, 10, 60)
    rec = clf.evaluate_logits(logits, labels)
    correct = logits.argmax(1) == labels
    assert rec["top1"]["accuracy"] == pytest.approx(correct.mean())
    np.testing.assert_array_equal(clf.correct_bits(rec), correct)
    np.testing.assert_array_equal(clf.correct_bits(rec, "top5"),
                                  eval_lib.topk_correct(logits, labels, 5))
    probs = clf.softmax_np(logits)
    assert rec["ece"] == pytest.approx(eval_lib.expected_calibration_error(probs, labels))
    assert rec["nll"] == pytest.approx(-np.mean(np.log(probs[np.arange(60), labels])))
    assert len(rec["confidence"]) == 60 and sum(rec["reliability"]["count"]) == 60
    assert len(rec["reliability"]["accuracy"]) == clf.NUM_BINS
    json.dumps(rec, allow_nan=False)  # empty bins are None, not NaN


def test_tiny_run_resume_skip_and_budget(clf, methods, tiny, tmp_path):
    """A 2-epoch NLL run on 32 random 8x8 images, with noisy-label style ``extra`` fields."""
    rng = np.random.default_rng(0)
    x = rng.random((32, 8, 8, 3), dtype=np.float32)
    y = np.arange(32) % 10
    progress = clf.common.Progress(2, "tiny")
    nll = methods["nll"]

    def run(config):
        return clf.run_classifier(config, "nll", nll.loss_fn, nll.mix, x, y, x[:12], y[:12], 0,
                                  tmp_path, progress, extra={"noise": 0.2})

    record = run(tiny)
    assert record["epochs"] == 2 and len(record["epoch_losses"]) == 2 and not record["diverged"]
    assert record["noise"] == 0.2 and record["num_train"] == 32 and record["num_test"] == 12
    assert np.all(np.isfinite(record["epoch_losses"]))
    assert 0.0 <= record["test"]["ece"] <= 1.0 and len(record["test"]["confidence"]) == 12
    path = clf.common.run_path(tmp_path, "tiny", "nll", 0)
    assert path.exists() and not path.with_name("seed0.ckpt.npz").exists()
    # A finished run is loaded, not retrained; a different budget is refused.
    assert run(tiny) == record == json.loads(path.read_text())
    with pytest.raises(ValueError, match="different budgets"):
        run(dataclasses.replace(tiny, epochs=3))


def test_training_resumes_from_checkpoint(clf, methods, tiny, tmp_path):
    x = np.random.default_rng(1).random((32, 8, 8, 3), dtype=np.float32)  # shapes as above
    y = np.arange(32) % 10
    nll = methods["nll"]
    ckpt = tmp_path / "a.ckpt.npz"
    # run_classifier's compilation key: the compiled step of the test above is reused.
    key = (clf.model_identity(tiny), "nll", nll.loss_fn, None)
    full, losses_full = clf.train(tiny, nll.loss_fn, False, x, y, 0, ckpt, print, key)
    ckpt.unlink()
    one = dataclasses.replace(tiny, epochs=1)
    assert clf.model_identity(one) == clf.model_identity(tiny)
    clf.train(one, nll.loss_fn, False, x, y, 0, ckpt, print, key)
    resumed, losses_resumed = clf.train(tiny, nll.loss_fn, False, x, y, 0, ckpt, print, key)
    np.testing.assert_allclose(losses_resumed, losses_full, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- tables


def _fake_results(clf, seeds=(0, 1), n=80):
    """Run records of the four methods: STI's logits are the labels' one-hot (all correct)."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, n)
    results = {}
    for m in ("nll", "stce", "infonce", "sti"):
        results[m] = []
        for s in seeds:
            logits = rng.normal(size=(n, 10))
            if m == "sti":
                logits = logits + 5 * np.eye(10)[labels]
            results[m].append({
                "task": "fake", "method": m, "seed": s, "epochs": 3, "batch": 8,
                "num_train": 100, "num_test": n, "epoch_losses": [2.0, 1.5, 1.0 + s],
                "diverged": False, "test": clf.evaluate_logits(logits, labels), "seconds": 1.0})
    return results


def test_summary_and_table_format(st, clf):
    results = _fake_results(clf)
    text, summary = st.summarise(results)
    lines = text.splitlines()
    assert lines[0].startswith("| method | seeds | top-1 (%)")
    assert any(line.startswith("| STI | 2 | 100.00 ± 0.00 |") for line in lines)
    assert any(line.startswith("| NLL | 2 |") for line in lines)
    assert set(summary["methods"]) == {"nll", "stce", "infonce", "sti"}
    nll = summary["methods"]["nll"]
    top1 = [100 * r["test"]["top1"]["accuracy"] for r in results["nll"]]
    assert nll["top1"]["mean"] == pytest.approx(np.mean(top1))
    assert nll["top1"]["std"] == pytest.approx(np.std(top1, ddof=1))
    assert nll["final_train_loss"]["mean"] == pytest.approx(1.5)  # last epochs 1.0 and 2.0
    assert set(summary["differences"]) == {"sti_minus_stce", "sti_minus_nll", "infonce_minus_nll"}
    d = summary["differences"]["sti_minus_nll"]
    assert [p["seed"] for p in d["per_seed"]] == [0, 1]
    assert d["per_seed"][0]["top1_diff"] == pytest.approx(100 - top1[0])
    assert d["per_seed"][0]["top1_significant"]  # 100 % vs chance on 80 images
    assert "STI − STCE" in text and "s1: +" in text and "90.84" in text and "15.8" in text
    json.dumps(summary, allow_nan=False)


def test_summary_of_partial_results(st, clf):
    results = _fake_results(clf, seeds=(0,))
    del results["stce"]
    text, summary = st.summarise(results)
    assert set(summary["differences"]) == {"sti_minus_nll", "infonce_minus_nll"}
    assert "± 0.00" in text  # one seed: std 0
    empty_text, empty = st.summarise({})
    assert empty["methods"] == {} and empty["differences"] == {} and "90.84" in empty_text


def test_paired_ece_bootstrap(st, clf):
    results = _fake_results(clf, seeds=(0,))
    a, b = results["sti"][0]["test"], results["nll"][0]["test"]
    d = st.paired_ece_bootstrap(a, b, resamples=200)
    assert d["diff"] == pytest.approx(a["ece"] - b["ece"], abs=1e-5)
    assert d["low"] <= d["high"]
    same = st.paired_ece_bootstrap(a, a, resamples=50)
    assert same["diff"] == 0 and same["low"] == same["high"] == 0 and not same["significant"]


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_quick_end_to_end_and_resume(st, tmp_path, capsys):
    if not st.cifar.CIFAR_DIR.is_dir():
        pytest.skip(f"shared CIFAR-10 folder {st.cifar.CIFAR_DIR} not present")
    st.main(["--quick", "--out", str(tmp_path)])
    name = "quick_cifar_soft_target_2ep"
    runs = sorted((tmp_path / "runs" / name).rglob("seed0.json"))
    assert [p.parent.name for p in runs] == sorted(["nll", "stce", "infonce", "sti"])
    table = (tmp_path / f"{name}_table.md").read_text()
    assert table.startswith(f"## {name} (2 epochs, 256 training / 200 test images")
    assert "| InfoNCE | 1 |" in table and "STI − STCE" in table
    assert (tmp_path / f"{name}.png").stat().st_size > 0
    summary = json.loads((tmp_path / f"{name}_summary.json").read_text())
    assert summary["config"]["num_train"] == 256 and summary["config"]["epochs"] == 2
    record = json.loads((tmp_path / "runs" / name / "sti" / "seed0.json").read_text())
    assert record["epochs"] == 2 and len(record["epoch_losses"]) == 2
    np.testing.assert_allclose(record["class_prior"], 0.1, atol=0.01)
    top1 = record["test"]["top1"]
    assert 0.0 <= top1["low"] <= top1["high"] <= 1.0
    assert top1["accuracy"] <= record["test"]["top5"]["accuracy"]
    capsys.readouterr()
    st.main(["--quick", "--out", str(tmp_path)])  # everything finished: loaded, not retrained
    assert capsys.readouterr().out.count("done, skipped") == 4
    st.main(["--quick", "--aggregate_only", "--out", str(tmp_path)])
    assert (tmp_path / f"{name}_table.md").read_text() == table
