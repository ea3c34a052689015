"""Mesh helpers and multi-process set-up, fast version.

Two Python processes joined on localhost with ``initialize_distributed`` (4
simulated CPU devices each) run a cross-process ``psum``; killing one makes
the other abort within the heartbeat timeout instead of hanging. The
pretraining version (same losses as one 8-device process) is in
``tests/train/test_multiprocess.py`` (slow).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import pytest

from contrastive_jax import parallel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = textwrap.dedent(
    """
    import sys, time
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from contrastive_jax import parallel

    port, pid, loop = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "loop"
    parallel.initialize_distributed(f"localhost:{port}", 2, pid, heartbeat_timeout_seconds=5)
    mesh = parallel.make_mesh()
    x = jax.make_array_from_process_local_data(
        parallel.batch_sharding(mesh), np.arange(4.0, dtype=np.float32) + 4 * pid
    )
    total = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a.sum(), "data"), mesh=mesh,
                                  in_specs=P("data"), out_specs=P()))
    print(f"process {jax.process_index()} of {jax.process_count()}, "
          f"{jax.local_device_count()}/{jax.device_count()} devices, psum {float(total(x))}",
          flush=True)
    while loop:
        time.sleep(0.2)
        total(x).block_until_ready()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start(port: int, pid: int, mode: str) -> subprocess.Popen:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(port), str(pid), mode], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def test_make_mesh_over_all_or_first_devices():
    assert parallel.make_mesh().shape == {"data": jax.device_count()}
    assert parallel.make_mesh(2).shape == {"data": 2}
    assert set(parallel.make_mesh(2).devices.flat) <= set(jax.devices()[:2])
    # jax.make_mesh's default is Explicit axes; shardings here are given, XLA infers the rest.
    assert parallel.make_mesh().axis_types == (jax.sharding.AxisType.Auto,)
    with pytest.raises(ValueError, match="num_devices"):
        parallel.make_mesh(jax.device_count() + 1)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("localhost:1234", None, None), {}, "must be given together"),
        (("localhost:1234", 2, 2), {}, "process_id=2 not in"),
        ((None, None, None), {"heartbeat_timeout_seconds": 0}, "heartbeat_timeout_seconds"),
    ],
)
def test_initialize_distributed_rejects_bad_arguments(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        parallel.initialize_distributed(*args, **kwargs)


def test_single_process_without_cluster_environment_is_a_no_op(monkeypatch):
    for name in parallel._CLUSTER_ENV:
        monkeypatch.delenv(name, raising=False)
    parallel.initialize_distributed()
    assert jax.process_count() == 1


@pytest.mark.slow
def test_two_processes_psum_over_eight_devices():
    port = _free_port()
    procs = [_start(port, pid, "once") for pid in (0, 1)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    for pid, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, out
        # 0 + 1 + ... + 7 = 28 over both processes' shards.
        assert f"process {pid} of 2, 4/8 devices, psum 28.0" in out


@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "coordinator"])
@pytest.mark.slow
def test_killing_one_process_stops_the_other(victim):
    survivor = 1 - victim
    port = _free_port()
    procs = [_start(port, pid, "loop") for pid in (0, 1)]
    try:
        for proc in procs:  # wait until both are in the collective loop
            line = ""
            while "psum" not in line:
                line = proc.stdout.readline()
                assert line, "worker exited before its first psum"
            assert "psum 28.0" in line, line
        procs[victim].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        out = procs[survivor].communicate(timeout=120)[0]
        waited = time.monotonic() - killed
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert procs[survivor].returncode != 0
    assert "JAX distributed service detected fatal errors" in out or "coordination service" in out
    assert waited < 60.0  # heartbeat timeout 5 s plus polling and start-up slack
