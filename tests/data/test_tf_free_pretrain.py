"""Pretraining from an ArrayRecord TFDS dataset and from an image folder with TensorFlow
absent (the default input path), on 8 simulated devices.

TensorFlow is blocked by a meta-path finder that fails its import, so that
``importlib.util.find_spec`` (what etils and TFDS probe) and ``import tensorflow`` both
behave as on an accelerator image without it, while TFDS itself still imports (it reads
dataset metadata without TensorFlow). ``sys.modules[name] = None``, the blocker of
tests/train/test_tf_free.py, would make TFDS believe TensorFlow is loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.data.helpers import write_image_folder, write_tfds_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_BLOCKER = """
import importlib.abc, importlib.machinery, sys


class _NoTensorFlow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "tensorflow":
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r} (blocked)", name=spec.name)

    def exec_module(self, module):
        raise AssertionError("unreachable")


sys.meta_path.insert(0, _NoTensorFlow())
"""

_TRAIN = """
import sys
from contrastive_jax.train import loop
from tests.train.cli_config import tiny_config
from tests.train.runs import tiny_encoder

config = tiny_config(total_steps=3, checkpoint_every=3)
config.data.loader = "grain"
config.data.dataset = {dataset!r}
config.data.data_dir = {data_dir!r}
config.data.image_size = 16
config.data.global_batch_size = 16
config.train.compilation_cache_dir = ""
with tiny_encoder():
    summary = loop.train(config, {workdir!r})
assert summary["final_step"] == 3, summary
tf_loaded = sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow")
print("tensorflow modules:", tf_loaded, "loss:", summary["final_loss"])
"""


def _train_without_tensorflow(dataset: str, data_dir: str, workdir: str) -> str:
    script = _BLOCKER + textwrap.dedent(_TRAIN).format(
        dataset=dataset, data_dir=data_dir, workdir=workdir)
    env = {**os.environ, "PYTHONPATH": ROOT,
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=900, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow
def test_pretrain_from_array_record_without_tensorflow(tmp_path):
    data_dir = write_tfds_dataset(str(tmp_path / "data"), "varimg", "array_record", train=48,
                                  test=8, shards=2)
    out = _train_without_tensorflow("varimg", data_dir, str(tmp_path / "run"))
    assert "tensorflow modules: []" in out, out


@pytest.mark.slow
def test_pretrain_from_an_image_folder_without_tensorflow(tmp_path):
    folder = write_image_folder(str(tmp_path / "folder"), shape=(20, 24, 3), per_class=(16, 4))
    out = _train_without_tensorflow("image_folder", folder, str(tmp_path / "run"))
    assert "tensorflow modules: []" in out, out


def cli_env_without_tensorflow(tmp_path, num_devices: int, cache_dir: str) -> dict[str, str]:
    """The CLI's environment with TensorFlow blocked at start-up (a ``sitecustomize``)."""
    from tests.train import runs

    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_BLOCKER)
    env = runs.cli_env(num_devices, cache_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(site), ROOT])
    return env


#: The two kinds of image data the default path reads from disk.
KINDS = ("image_folder", "array_record")


def data_flags(data: tuple[str, str], total: int) -> tuple[str, ...]:
    dataset, data_dir = data
    return ("--config.data.loader=grain", f"--config.data.dataset={dataset}",
            f"--config.data.data_dir={data_dir}", "--config.data.image_size=16",
            "--config.data.global_batch_size=16", f"--config.train.total_steps={total}",
            "--config.train.checkpoint_every=2")


def write_datasets(root: str) -> dict[str, tuple[str, str]]:
    """kind -> (config.data.dataset, config.data.data_dir) of a small dataset of each kind
    under ``root`` (``folder/`` and ``tfds/``), written with TensorFlow present."""
    folder = write_image_folder(os.path.join(root, "folder"), shape=(20, 24, 3),
                                per_class=(24, 4))
    records = write_tfds_dataset(os.path.join(root, "tfds"), "varimg", "array_record",
                                 train=48, test=8, shards=2)
    return {"image_folder": ("image_folder", folder), "array_record": ("varimg", records)}


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
