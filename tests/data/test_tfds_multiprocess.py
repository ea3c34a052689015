"""Per-process reading of streamed TFDS datasets across real processes (gloo on CPU).

2 processes x 4 simulated devices read their shares of every global batch of
a TFDS dataset (TFRecord and ArrayRecord) and build global arrays with ``make_global_batch`` (views
finished on the devices); the global batches and a loss computed on them equal
those of 1 process x 8 devices. The training loop's own 2-process test on the
same datasets is in ``tests/train/test_tfds_pretrain.py``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from contrastive_jax.data import records
from tests.data.helpers import write_tfds_dataset

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    return env


def _port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("fmt", [records.TFRECORD, records.ARRAY_RECORD])
def test_two_processes_read_their_shares_of_the_same_global_batches(tmp_path, fmt):
    data_dir = write_tfds_dataset(str(tmp_path / "tfds"), "varimg", fmt, train=96, shards=2)
    worker = [sys.executable, "-m", "tests.data.multiprocess_worker", "varimg", data_dir]
    one = str(tmp_path / "one.npz")
    done = subprocess.run([*worker, one], cwd=ROOT, env=_env(8), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    two = str(tmp_path / "two.npz")
    address = f"localhost:{_port()}"
    procs = [subprocess.Popen([*worker, two, address, "2", str(pid)], cwd=ROOT, env=_env(4),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for pid in (0, 1)]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    a, b = np.load(one), np.load(two)
    assert a["index"].shape == (3, 16)
    for index in a["index"]:
        assert len(set(index.tolist())) == 16
    np.testing.assert_array_equal(a["index"], b["index"])
    np.testing.assert_allclose(a["checksum"], b["checksum"], rtol=1e-6)
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
