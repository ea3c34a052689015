"""experiments/bench/loop.py --device_cores: the compiled steps run on the device cores and the
host's threads on the others, and a split that leaves the host no core is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from contrastive_jax.train import verify
from experiments.bench import loop
from tests.experiments.scripts import EXPERIMENTS

ROOT = EXPERIMENTS.parent

CORES = sorted(os.sched_getaffinity(0))

# Pins one core to the devices, runs a jitted function, then reports which cores the main
# thread, a thread it starts and the CPU client's intra-op threads may use.
PROBE = """
import json, os, sys, threading
import experiments.bench.loop as loop
loop.pin_device_cores(1)
import jax, jax.numpy as jnp
jax.jit(lambda a: jnp.tanh(a @ a))(jnp.ones((256, 256))).block_until_ready()
started = {}
thread = threading.Thread(target=lambda: started.update(cores=sorted(os.sched_getaffinity(0))))
thread.start(); thread.join()
xla = loop.thread_cores(loop.CLIENT_THREAD)
print(json.dumps({"main": sorted(os.sched_getaffinity(0)), "started": started["cores"], "xla": xla}))
"""


@pytest.mark.skipif(len(CORES) < 2, reason="needs 2 cores: 1 for the device, 1 for the host")
@pytest.mark.slow
def test_device_cores_split_the_client_from_the_host():
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["main"] == CORES[1:] and report["started"] == CORES[1:]
    assert report["xla"] and all(cores == CORES[:1] for cores in report["xla"])


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux /proc")
def test_threads_that_end_while_they_are_read_are_left_out(monkeypatch):
    """A thread listed in /proc/self/task can end before its name or its cores are read
    (under load, the CPU client's and the data pipeline's threads come and go)."""
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    gone = ended.native_id
    deadline = time.monotonic() + 10  # join returns before the kernel has reaped the task
    while os.path.exists(f"/proc/self/task/{gone}") and time.monotonic() < deadline:
        time.sleep(0.01)
    live = os.listdir("/proc/self/task")
    monkeypatch.setattr(verify.os, "listdir", lambda path: [*live, str(gone)])
    assert gone not in verify.thread_names()  # its comm vanished before it was read
    assert threading.get_native_id() in verify.thread_names()

    names = {threading.get_native_id(): "tf_XLAEigen", gone: "tf_XLAEigen"}
    monkeypatch.setattr(verify, "thread_names", lambda: names)  # its cores vanish instead
    assert loop.thread_cores(loop.CLIENT_THREAD) == [CORES]


def test_device_cores_that_leave_the_host_no_core_are_refused():
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    proc = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "bench" / "loop.py"), "--child",
         "--device_cores", str(len(CORES))],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert proc.returncode != 0
    assert f"this process may use {len(CORES)} cores" in proc.stderr
