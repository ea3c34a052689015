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
