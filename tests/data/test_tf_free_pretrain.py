"""Pretraining (from an image folder, ArrayRecord and TFRecord files), the kNN monitor,
linear evaluation and an evaluation recipe with TensorFlow absent, as on the JAX CUDA images.

TensorFlow is made absent by :mod:`tests.no_tensorflow`: in the subprocesses
``importlib.util.find_spec("tensorflow")`` is None and ``import tensorflow`` raises
ModuleNotFoundError, exactly as where it is not installed (TFDS itself still imports: it
reads dataset metadata without TensorFlow). The datasets are written beforehand in this
process (TFDS writes with TensorFlow: the ``prepare`` extra).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.data.helpers import write_image_folder, write_tfds_dataset
from tests.no_tensorflow import ROOT, absent_env

_TRAIN = """
import importlib.util
from contrastive_jax.train import loop
from tests.no_tensorflow import loaded
from tests.train.cli_config import tiny_config
from tests.train.runs import tiny_encoder

assert importlib.util.find_spec("tensorflow") is None
config = tiny_config(total_steps=3, checkpoint_every=3)
config.data.dataset = {dataset!r}
config.data.data_dir = {data_dir!r}
config.data.image_size = 16
config.data.global_batch_size = 16
config.train.eval_every = 3
config.train.knn_query_size = 8
config.train.compilation_cache_dir = ""
with tiny_encoder():
    summary = loop.train(config, {workdir!r})
assert summary["final_step"] == 3, summary
print("tensorflow modules:", loaded(), "loss:", summary["final_loss"])
"""


def _train_without_tensorflow(dataset: str, data_dir: str, workdir: str) -> str:
    script = textwrap.dedent(_TRAIN).format(dataset=dataset, data_dir=data_dir, workdir=workdir)
    env = absent_env({**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=900, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_cli_pretraining_with_knn_then_linear_eval_without_tensorflow(tmp_path):
    """What a GPU user runs first: pretrain from an image folder with the kNN monitor on,
    then the linear evaluation of the run, both command lines, TensorFlow absent."""
    from tests.train import runs

    folder = write_image_folder(str(tmp_path / "folder"), shape=(20, 24, 3), per_class=(16, 4))
    workdir = str(tmp_path / "run")
    env = cli_env_without_tensorflow(tmp_path, 2, str(tmp_path / "jax_cache"))
    flags = (*data_flags(("image_folder", folder), 2), "--config.train.eval_every=2",
             "--config.train.knn_query_size=8", "--config.model.encoder.name=small_cnn")
    assert runs.run_pretrain(workdir, *flags, env=env) == 0, runs.log_text(workdir)
    knn = [r for r in runs.metrics(workdir) if "knn_top1" in r]
    assert [r["step"] for r in knn] == [2] and 0.0 <= knn[0]["knn_top1"] <= 1.0, knn
    done = subprocess.run(
        [sys.executable, "-m", "contrastive_jax.linear_eval", "--pretrained", workdir,
         "--epochs", "2", "--resamples", "20"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.load(open(os.path.join(workdir, "eval.json"), encoding="utf-8"))["step"] == 2


@pytest.mark.slow
def test_pretrain_from_array_record_without_tensorflow(tmp_path):
    data_dir = write_tfds_dataset(str(tmp_path / "data"), "varimg", "array_record", train=48,
                                  test=8, shards=2)
    out = _train_without_tensorflow("varimg", data_dir, str(tmp_path / "run"))
    assert "tensorflow modules: []" in out, out


@pytest.mark.slow
def test_an_evaluation_recipe_without_tensorflow(tmp_path):
    """The paper's protocol through linear_eval: supcon_cifar10_linear (a frozen encoder, a
    linear head, validation on the test split each epoch) for 2 epochs of a small image
    folder, on the encoder of a 2-step supcon_cifar10 run (both with a small CNN for the
    ResNet-50)."""
    from tests.train import runs

    folder = write_image_folder(str(tmp_path / "folder"), shape=(32, 32, 3), per_class=(16, 4))
    env = cli_env_without_tensorflow(tmp_path, 2, str(tmp_path / "jax_cache"))
    small = ("--config.model.encoder.name=small_cnn", "--config.data.dataset=image_folder",
             f"--config.data.data_dir={folder}", "--config.data.global_batch_size=16")
    pretrained = str(tmp_path / "pretrained")
    code = runs.run_pretrain(pretrained, *small, "--config.train.total_steps=2", env=env,
                             config="supcon_cifar10")
    assert code == 0, runs.log_text(pretrained)
    linear = str(tmp_path / "linear")
    done = subprocess.run(
        [sys.executable, "-m", "contrastive_jax.linear_eval", "--pretrained", pretrained,
         "--workdir", linear, "--config", "supcon_cifar10_linear", *small,
         "--config.train.epochs=2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    validation = json.load(open(os.path.join(linear, "validation.json"), encoding="utf-8"))
    assert 0.0 <= validation["final"]["top1"] <= 1.0, validation


@pytest.mark.slow
def test_pretrain_from_an_image_folder_without_tensorflow(tmp_path):
    folder = write_image_folder(str(tmp_path / "folder"), shape=(20, 24, 3), per_class=(16, 4))
    out = _train_without_tensorflow("image_folder", folder, str(tmp_path / "run"))
    assert "tensorflow modules: []" in out, out


def cli_env_without_tensorflow(tmp_path, num_devices: int, cache_dir: str) -> dict[str, str]:
    """The CLI's environment with TensorFlow absent (:func:`tests.no_tensorflow.absent_env`)."""
    from tests.train import runs

    del tmp_path
    return absent_env(runs.cli_env(num_devices, cache_dir))


#: The kinds of image data the input path reads from disk.
KINDS = ("image_folder", "array_record", "tfrecord")


def data_flags(data: tuple[str, str], total: int) -> tuple[str, ...]:
    dataset, data_dir = data
    return (f"--config.data.dataset={dataset}",
            f"--config.data.data_dir={data_dir}", "--config.data.image_size=16",
            "--config.data.global_batch_size=16", f"--config.train.total_steps={total}",
            "--config.train.checkpoint_every=2")


def write_datasets(root: str) -> dict[str, tuple[str, str]]:
    """kind -> (config.data.dataset, config.data.data_dir) of a small dataset of each kind
    under ``root`` (``folder/``, ``tfds/`` and ``tfds_tfrecord/``; TFDS writes with
    TensorFlow)."""
    folder = write_image_folder(os.path.join(root, "folder"), shape=(20, 24, 3),
                                per_class=(24, 4))
    records = write_tfds_dataset(os.path.join(root, "tfds"), "varimg", "array_record",
                                 train=48, test=8, shards=2)
    tfrecords = write_tfds_dataset(os.path.join(root, "tfds_tfrecord"), "varimg", "tfrecord",
                                   train=48, test=8, shards=2)
    return {"image_folder": ("image_folder", folder), "array_record": ("varimg", records),
            "tfrecord": ("varimg", tfrecords)}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, tuple[str, str]]:
    return write_datasets(str(tmp_path_factory.mktemp("tf_free_cli")))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("jax_cache"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_two_processes_match_one_without_tensorflow(datasets, cache, tmp_path, kind):
    from tests.train import runs
    from tests.train.test_tfds_pretrain import _free_port

    flags = data_flags(datasets[kind], 3)
    single = str(tmp_path / "single")
    env8 = cli_env_without_tensorflow(tmp_path, 8, cache)
    assert runs.run_pretrain(single, *flags, env=env8) == 0, runs.log_text(single)
    pair = str(tmp_path / "pair")
    address = f"--coordinator_address=localhost:{_free_port()}"
    env4 = cli_env_without_tensorflow(tmp_path, 4, cache)
    procs = []
    for pid in (0, 1):
        log = open(f"{pair}.p{pid}.log", "w", encoding="utf-8")  # noqa: SIM115
        command = runs.pretrain_command(pair, *flags, address, "--num_processes=2",
                                        f"--process_id={pid}")
        procs.append(subprocess.Popen(command, cwd=ROOT, env=env4, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    codes = [p.wait(timeout=1800) for p in procs]
    logs = "".join(open(f"{pair}.p{pid}.log", encoding="utf-8").read() for pid in (0, 1))
    assert codes == [0, 0], logs
    one, two = runs.losses_by_step(single), runs.losses_by_step(pair)
    assert sorted(two) == [1, 2, 3]
    # The same global batches; the gradients reduced over 2 processes round differently.
    np.testing.assert_allclose([two[s] for s in (1, 2, 3)], [one[s] for s in (1, 2, 3)],
                               rtol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_sigkill_then_resume_without_tensorflow_is_bit_identical(datasets, cache, tmp_path,
                                                                  kind):
    import signal
    import time

    from tests.train import runs

    total = 8
    flags = data_flags(datasets[kind], total)
    env = cli_env_without_tensorflow(tmp_path, 8, cache)
    reference = str(tmp_path / "reference")
    assert runs.run_pretrain(reference, *flags, env=env) == 0, runs.log_text(reference)
    workdir = str(tmp_path / "killed")
    proc = runs.start_pretrain(workdir, *flags, env=env)
    runs.wait_for_step(proc, workdir, 4)
    deadline = time.monotonic() + 600
    while not runs.checkpoint_steps(workdir):
        assert proc.poll() is None and time.monotonic() < deadline, runs.log_text(workdir)
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert max(runs.losses_by_step(workdir)) < total, "the run finished before the kill"
    assert runs.run_pretrain(workdir, *flags, env=env) == 0, runs.log_text(workdir)
    assert "resumed from the checkpoint at step" in runs.log_text(workdir)
    runs.assert_same_state(runs.read_state(workdir, total), runs.read_state(reference, total))
    assert runs.losses_by_step(workdir) == runs.losses_by_step(reference)


@pytest.mark.slow
def test_tfrecord_pretrains_with_the_losses_of_its_array_record_copy(datasets, tmp_path):
    """A TFRecord TFDS dataset, read directly with TensorFlow absent, on 8 devices: step for
    step the losses of its ArrayRecord copy (``prepare``, run here, where TensorFlow is)."""
    from contrastive_jax.data import prepare
    from tests.train import runs

    name, tfrecords = datasets["tfrecord"]
    copy = prepare.from_tfds(name, tfrecords, str(tmp_path / "copy"))
    losses = {}
    for kind, data_dir in (("tfrecord", tfrecords), ("copy", str(tmp_path / "copy"))):
        workdir = str(tmp_path / kind)
        out = _train_without_tensorflow(name, data_dir, workdir)
        assert "tensorflow modules: []" in out, out
        losses[kind] = runs.losses_by_step(workdir)
    assert os.path.isdir(copy) and sorted(losses["tfrecord"]) == [1, 2, 3]
    assert losses["tfrecord"] == losses["copy"]
