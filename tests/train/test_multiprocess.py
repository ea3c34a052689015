"""Multi-process pretraining, end to end.

Two ``python -m contrastive_jax.pretrain`` processes joined on localhost (gloo
CPU collectives), 4 simulated devices each, train the same steps with the same
losses as one process with 8 devices; killing one makes the other stop with
the JAX distributed service's error within the heartbeat timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

from tests.train import runs

pytestmark = pytest.mark.slow

TOTAL = 4
FLAGS = (f"--config.train.total_steps={TOTAL}", "--config.train.checkpoint_every=2",
         "--heartbeat_timeout_seconds=10")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("jax_cache"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start_pair(workdir: str, cache_dir: str) -> list[subprocess.Popen]:
    """Both processes share ``workdir``; process i logs to ``<workdir>.p<i>.log``."""
    os.makedirs(os.path.dirname(workdir), exist_ok=True)
    address = f"--coordinator_address=localhost:{_free_port()}"
    env = runs.cli_env(num_devices=4, cache_dir=cache_dir)
    procs = []
    for pid in (0, 1):
        log = open(f"{workdir}.p{pid}.log", "w", encoding="utf-8")  # noqa: SIM115
        command = runs.pretrain_command(
            workdir, *FLAGS, address, "--num_processes=2", f"--process_id={pid}"
        )
        procs.append(subprocess.Popen(command, cwd=runs.ROOT, env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def _log(workdir: str, pid: int) -> str:
    with open(f"{workdir}.p{pid}.log", encoding="utf-8") as f:
        return f.read()


def test_two_processes_match_one_process_with_eight_devices(tmp_path, cache_dir):
    single = str(tmp_path / "single")
    assert runs.run_pretrain(single, *FLAGS, env=runs.cli_env(8, cache_dir)) == 0, \
        runs.log_text(single)
    pair = str(tmp_path / "pair")
    procs = _start_pair(pair, cache_dir)
    codes = [p.wait(timeout=1800) for p in procs]
    assert codes == [0, 0], _log(pair, 0) + _log(pair, 1)

    one, two = runs.losses_by_step(single), runs.losses_by_step(pair)
    assert sorted(two) == list(range(1, TOTAL + 1))
    np.testing.assert_allclose([two[s] for s in sorted(two)], [one[s] for s in sorted(one)],
                               rtol=1e-4)
    assert runs.checkpoint_steps(pair) == [2, 4]


def test_killing_one_process_stops_the_other(tmp_path, cache_dir):
    workdir = str(tmp_path / "pair")
    procs = _start_pair(workdir, cache_dir)
    try:
        try:
            runs.wait_for_step(procs[0], workdir, 1, timeout=1500)
        except (AssertionError, FileNotFoundError) as err:
            raise AssertionError(_log(workdir, 0) + _log(workdir, 1)) from err
        procs[1].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = procs[0].wait(timeout=300)
        waited = time.monotonic() - killed
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    log = _log(workdir, 0)
    assert code != 0, log
    assert "JAX distributed service detected fatal errors" in log, log
    assert waited < 120, f"the survivor took {waited:.0f} s to stop"
