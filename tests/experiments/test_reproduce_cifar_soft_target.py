"""The CIFAR-10 proxy of soft-target InfoNCE's Table 1 (``experiments/reproduce/cifar_soft_target.py``,
configs ``experiments/configs/cifar_soft_target.py``).

The unmarked tests check the four methods' configs (terms, mixing stage, class prior), their
losses on one batch, and the tables from fake run records, in seconds and without the CIFAR data;
the ``slow`` one runs ``--quick`` end to end with the library's trainer, then again to check that
finished runs are skipped (skipped when the shared CIFAR-10 folder is absent).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import losses
from contrastive_jax.eval import checkpoint
from contrastive_jax.train import objective
from experiments.configs import cifar_soft_target as configs
from experiments.reproduce import _common as common
from experiments.reproduce import cifar_soft_target as st

SHARED_CIFAR10 = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10"


def _batch(seed=0, b=20, k=10):
    rng = np.random.default_rng(seed)
    logits = jnp.asarray(rng.normal(size=(b, k)) * 2, jnp.float32)
    labels = jnp.asarray(np.arange(b) % k, jnp.int32)  # every class exactly b / k times
    return logits, labels


# ----------------------------------------------------------------------------- configs


def test_method_configs_select_terms_and_the_mixing_stage():
    for method, (term, mixed) in configs.METHODS.items():
        config = configs.get_config(f"{method},3")
        (parsed,) = objective.parse_terms(config.loss)
        assert parsed.name == term and parsed.kwargs == {} and parsed.temperature == 1.0
        assert (parsed.mixing is not None) == mixed
        assert parsed.target == ("soft_label" if mixed else "label")
        assert config.train.epochs == 3 and config.data.global_batch_size == 256
        assert config.data.num_views == 1 and config.model.head.out_features == 10
        assert config.model.encoder.name == "small_cnn"
        assert config.model.encoder.channels == (32, 64, 128)
    mixing = objective.parse_terms(configs.get_config("sti").loss)[0].mixing
    assert mixing == objective.Mixing(10, 0.1, 0.8, 1.0, 1.0, 0.5)  # the paper's recipe
    assert configs.get_config("nll").train.epochs == configs.EPOCHS
    for bad in ("ce", "sti,0", "sti,x", "sti,2,3"):
        with pytest.raises(ValueError, match="METHOD"):
            configs.get_config(bad)


def test_method_losses_on_one_hot_targets():
    """STCE on one-hot targets is NLL, STI is hard InfoNCE; with each class m = 2 times in the
    batch and uniform eta, hard InfoNCE = NLL + log m (docs/reproductions.md)."""
    logits, labels = _batch()
    values = {}
    for method in configs.METHODS:
        (t,) = objective.parse_terms(configs.get_config(method).loss)
        soft = jax.nn.one_hot(labels, 10) if t.mixing is not None else None
        targets = objective.Targets(jnp.arange(20), labels, None, soft_label=soft)
        values[method] = float(objective.evaluate([t], logits, targets, axis_name=None)[0])
    assert values["stce"] == pytest.approx(values["nll"], rel=1e-6)
    assert values["sti"] == pytest.approx(values["infonce"], rel=1e-6)
    assert values["infonce"] == pytest.approx(values["nll"] + np.log(2), rel=1e-5)


def test_class_prior_reaches_the_infonce_terms():
    logits, labels = _batch(1)
    skewed = tuple(np.linspace(1, 3, 10) / np.linspace(1, 3, 10).sum())
    config = configs.get_config("infonce")
    config.loss.kwargs.label_soft_target_infonce.class_prior = skewed
    (t,) = objective.parse_terms(config.loss)
    targets = objective.Targets(jnp.arange(20), labels, None)
    value = float(objective.evaluate([t], logits, targets, axis_name=None)[0])
    expected = losses.soft_target_infonce(logits, jax.nn.one_hot(labels, 10),
                                          class_prior=jnp.asarray(skewed, jnp.float32))
    assert value == pytest.approx(float(expected), rel=1e-6)
    uniform = losses.soft_target_infonce(logits, jax.nn.one_hot(labels, 10))
    assert abs(value - float(uniform)) > 1e-3
    np.testing.assert_allclose(st.class_prior(np.array([0, 1, 1, 3]), 4), [0.25, 0.5, 0, 0.25])
    with pytest.raises(ValueError, match="labels"):
        st.class_prior(np.array([0, 4]), 4)


# ----------------------------------------------------------------------------- tables


def _test_record(logits, labels):
    """What ``common.classifier_test`` stores, from logits."""
    from contrastive_jax import eval as eval_lib

    record = checkpoint.classifier_metrics(logits, labels, resamples=200)
    for k in (1, 5):
        record[f"top{k}"]["bits"] = common.pack_bits(eval_lib.topk_correct(logits, labels, k))
    record["confidence"] = [round(float(c), 6) for c in checkpoint.softmax(logits).max(1)]
    return record


def _fake_results(seeds=(0, 1), n=80):
    """Run records of the four methods: STI's logits favour the labels (all correct)."""
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
                "diverged": False, "test": _test_record(logits, labels), "seconds": 1.0})
    return results


def test_correct_bits_round_trip():
    rng = np.random.default_rng(2)
    logits, labels = rng.normal(size=(30, 10)), rng.integers(0, 10, 30)
    rec = _test_record(logits, labels)
    np.testing.assert_array_equal(common.correct_bits(rec), logits.argmax(1) == labels)
    assert rec["top1"]["accuracy"] == pytest.approx(np.mean(logits.argmax(1) == labels))


def test_summary_and_table_format():
    results = _fake_results()
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


def test_summary_of_partial_results():
    results = _fake_results(seeds=(0,))
    del results["stce"]
    text, summary = st.summarise(results)
    assert set(summary["differences"]) == {"sti_minus_nll", "infonce_minus_nll"}
    assert "± 0.00" in text  # one seed: std 0
    empty_text, empty = st.summarise({})
    assert empty["methods"] == {} and empty["differences"] == {} and "90.84" in empty_text


def test_paired_ece_bootstrap():
    results = _fake_results(seeds=(0,))
    a, b = results["sti"][0]["test"], results["nll"][0]["test"]
    d = st.paired_ece_bootstrap(a, b, resamples=200)
    assert d["diff"] == pytest.approx(a["ece"] - b["ece"], abs=1e-5)
    assert d["low"] <= d["high"]
    same = st.paired_ece_bootstrap(a, a, resamples=50)
    assert same["diff"] == 0 and same["low"] == same["high"] == 0 and not same["significant"]


def test_cli_needs_the_data_folder(tmp_path):
    with pytest.raises(SystemExit):
        st.main(["--quick", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        st.main(["--quick", "--out", str(tmp_path), "--data_dir", str(tmp_path / "absent")])


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_quick_end_to_end_and_resume(tmp_path, capsys):
    if not SHARED_CIFAR10.is_dir():
        pytest.skip(f"shared CIFAR-10 folder {SHARED_CIFAR10} not present")
    flags = ["--quick", "--out", str(tmp_path), "--data_dir", str(SHARED_CIFAR10)]
    st.main(flags)
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
    assert record["trainer"] == common.TRAINER
    np.testing.assert_allclose(record["class_prior"], 0.1, atol=0.01)
    top1 = record["test"]["top1"]
    assert 0.0 <= top1["low"] <= top1["high"] <= 1.0
    assert top1["accuracy"] <= record["test"]["top5"]["accuracy"]
    assert record["test"]["num_examples"] == 200 and len(record["test"]["confidence"]) == 200
    # The library's work directory: Orbax checkpoint of the last step, per-step losses.
    work = common.work_path(tmp_path, name, "sti", 0)
    assert common.checkpoint_steps(work) == [2]
    assert (work / "metrics.jsonl").exists()
    capsys.readouterr()
    st.main(flags)  # everything finished: loaded, not retrained
    assert capsys.readouterr().out.count("done, skipped") == 4
    st.main(["--quick", "--aggregate_only", "--out", str(tmp_path)])
    assert (tmp_path / f"{name}_table.md").read_text() == table
    # A record of the former hand-made stack (no "trainer") is refused, not skipped as done.
    path = tmp_path / "runs" / name / "nll" / "seed0.json"
    old = json.loads(path.read_text())
    del old["trainer"]
    path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="budgets"):
        st.main(flags)
