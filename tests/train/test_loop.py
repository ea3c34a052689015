"""The loop keeps the devices busy: no device-to-host reads between log
steps, batches prefetched to the devices, the non-finite guard and the SIGTERM
agreement without per-step reads, the compilation cache, profiling, throughput
per device; and the collapse warning.

The runs use the tiny conv encoder (``runs.TinyEncoder``) and share a
compilation cache, like ``test_resume.py``.
"""

from __future__ import annotations

import contextlib
import glob
import io
import logging
import os
import signal
import time

import jax
import numpy as np
import pytest
from jax._src.array import ArrayImpl

from contrastive_jax.errors import NonFiniteLoss, Preempted
from contrastive_jax.parallel import make_mesh
from contrastive_jax.train import inputs, loop, runtime, verify
from contrastive_jax.train.build import build
from contrastive_jax.train.metrics_log import CollapseDetector
from contrastive_jax.train.spec import parse
from tests.train import cli_config, runs
from tests.train.runs import fast_runs  # noqa: F401  (autouse: this module's runs)
from tests.train.tiny import tiny_config

TOTAL = 8
LOG_EVERY = 4


class _Events:
    """What the loop does, in order: batch draws, step calls, device-to-host reads, warnings."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []

    def reads_between(self, first_step: int, last_step: int) -> int:
        """Blocking reads after step ``first_step`` is called and before ``last_step`` is."""
        start = self.log.index(("step", first_step))
        end = self.log.index(("step", last_step))
        return sum(1 for kind, _ in self.log[start:end] if kind == "read")

    def drawn_before(self, step: int) -> int:
        end = self.log.index(("step", step))
        return sum(1 for kind, _ in self.log[:end] if kind == "draw")


@contextlib.contextmanager
def _spied(monkeypatch, events: _Events):
    """Records step calls, batch draws and every device-to-host read of a ``jax.Array``.

    Every host read of a jax.Array (``np.asarray``, ``float``, ``bool``,
    ``int``, ``.item()``, ``.tolist()``) goes through ``ArrayImpl._value``;
    ``jax.device_get`` is counted too.
    """
    value = ArrayImpl._value

    def spy_value(self):
        events.log.append(("read", 0))
        return value.fget(self)

    device_get = jax.device_get

    def spy_device_get(tree):
        events.log.append(("read", 0))
        return device_get(tree)

    session_step = loop._Session._step
    calls = []

    def spy_step(self, step, batch):
        calls.append(None)
        events.log.append(("step", len(calls)))
        return session_step(self, step, batch)

    def draw(position, batch):
        events.log.append(("draw", position))
        return batch

    runs.patch_batches(monkeypatch, draw)
    monkeypatch.setattr(loop._Session, "_step", spy_step)
    monkeypatch.setattr(ArrayImpl, "_value", property(spy_value))
    monkeypatch.setattr(jax, "device_get", spy_device_get)

    # The checksum of the checkpoints, with the number of jaxpr traces during each call
    # (its cache emptied first, so the run's first checksum is traced wherever it is).
    checksums = verify._checksums
    checksums.clear_cache()
    traces = []

    def traced(event: str, seconds: float, **kwargs) -> None:
        if event == "/jax/core/compile/jaxpr_trace_duration":
            traces.append(None)

    def spy_checksums(tree):
        before = len(traces)
        result = checksums(tree)
        events.log.append(("checksum", len(traces) - before))
        return result

    monkeypatch.setattr(verify, "_checksums", spy_checksums)
    jax.monitoring.register_event_duration_secs_listener(traced)
    try:
        yield
    finally:
        jax.monitoring.unregister_event_duration_listener(traced)


def _config(total: int = TOTAL, **train):
    config = cli_config.tiny_config(total, checkpoint_every=total)
    config.train.log_every = LOG_EVERY
    config.train.update(train)
    return config


@pytest.fixture(scope="module")
def spied_run(tmp_path_factory):
    """One run of 8 steps, logged every 4, profiled at steps 1-2, with every
    embedding counted as collapsed: (workdir, summary, events, console output, log)."""
    workdir = str(tmp_path_factory.mktemp("spied"))
    events = _Events()
    console = io.StringIO()
    handler = logging.Handler()
    handler.records = []
    handler.emit = handler.records.append
    logging.getLogger().addHandler(handler)
    config = _config(profile_steps=(1, 2), collapse_threshold=-100.0, collapse_patience=2)
    try:
        with pytest.MonkeyPatch.context() as monkeypatch, _spied(monkeypatch, events), \
                contextlib.redirect_stderr(console):
            summary = loop.train(config, workdir)
    finally:
        logging.getLogger().removeHandler(handler)
    log = "\n".join(r.getMessage() for r in handler.records)
    return workdir, summary, events, console.getvalue(), log


@pytest.mark.slow
def test_no_device_to_host_read_between_log_steps(spied_run):
    _, summary, events, _, _ = spied_run
    assert summary["final_step"] == TOTAL
    # Steps 5, 6, 7 are neither log nor checkpoint steps: nothing is read while they run.
    assert events.reads_between(LOG_EVERY + 1, TOTAL) == 0
    # The spy does see the reads of a log step (step 4's metrics).
    assert events.reads_between(LOG_EVERY, LOG_EVERY + 1) > 0


def test_the_checkpoint_checksum_is_compiled_with_the_first_step(spied_run):
    """The checkpoint's checksum is compiled with the first step, not at the first save,
    where the devices would wait for it (1.5 s for the quickstart's 244 arrays on the CPU)."""
    _, _, events, _, _ = spied_run
    second = events.log.index(("step", 2))
    assert [e for e in events.log[:second] if e[0] == "checksum"] == [("checksum", 1)]
    assert [e for e in events.log[second:] if e[0] == "checksum"] == [("checksum", 0)]  # the save


def test_batches_are_drawn_and_put_on_devices_ahead(spied_run):
    _, _, events, _, _ = spied_run
    # prefetch=2: when step k is called, the batches of steps k+1 and k+2 are already
    # drawn (and transferred) while step k-1 ran.
    for step in range(2, TOTAL - 1):
        assert events.drawn_before(step) == step + 1, events.log
    assert events.drawn_before(TOTAL) == TOTAL  # never beyond the last step


def test_throughput_per_device_and_compile_time_are_logged(spied_run):
    workdir, summary, _, _, _ = spied_run
    records = runs.metrics(workdir)
    assert [r["step"] for r in records] == [LOG_EVERY, TOTAL]
    for record in records:
        assert record["images_per_s"] > 0
        assert record["images_per_s_per_device"] == pytest.approx(
            record["images_per_s"] / jax.device_count())
    first = records[0]
    assert first["compile_seconds"] > 0 and first["trace_seconds"] > 0
    assert first["first_step_seconds"] >= first["compile_seconds"]
    assert "compile_seconds" not in records[1]  # once per run
    assert summary["images_per_s_per_device"] == pytest.approx(
        summary["images_per_s"] / jax.device_count())
    assert summary["input_seconds_per_step"] > 0 and summary["step_call_seconds_per_step"] > 0
    # The input drawn after the first step is host time outside the step calls.
    assert summary["host_seconds_per_step"] >= summary["input_seconds_per_step"]


def test_profile_steps_write_a_trace(spied_run):
    workdir, _, _, console, _ = spied_run
    traces = glob.glob(os.path.join(workdir, loop.TENSORBOARD_DIR, "plugins", "profile", "*",
                                    "*.xplane.pb"))
    assert len(traces) == 1 and os.path.getsize(traces[0]) > 0
    assert "profile of steps 1-2 written to" in console


def test_collapse_is_warned_once_on_console_and_in_log(spied_run):
    _, summary, _, console, log = spied_run
    assert summary["collapse_warning"]
    # Two collapsed log steps (4 and 8) with patience 2: one warning, at step 8.
    assert console.count("warning: the embeddings collapsed onto one point") == 1
    assert log.count("the embeddings collapsed onto one point") == 1
    assert "from step 4 to 8" in log and "larger temperature" in log


@pytest.mark.slow
def test_a_second_run_loads_the_step_from_the_compilation_cache(spied_run, tmp_path):
    summary = loop.train(_config(TOTAL), str(tmp_path / "again"))  # the same program
    assert summary["compile_cache_hits"] >= 1
    assert summary["compilation_cache_dir"] == jax.config.values["jax_compilation_cache_dir"]


@pytest.mark.slow
def test_nonfinite_step_between_log_steps_stops_at_the_next_check(tmp_path, monkeypatch):
    """NaN at step 3, checks at 2 (checkpoint) and 4: stops at 4 naming step 3, keeps step 2."""
    workdir = str(tmp_path / "run")
    runs.nan_at(monkeypatch, 3)
    config = _config(TOTAL)
    config.train.checkpoint_every = 2
    with pytest.raises(NonFiniteLoss, match=r"at step 3 \(.*grad_norm=nan") as info:
        loop.train(config, workdir)
    assert "last good checkpoint (step 2)" in str(info.value)
    assert runs.checkpoint_steps(workdir) == [2]
    assert runs.metrics(workdir) == []  # step 4's metrics come after a non-finite step


@pytest.mark.slow
def test_skipped_nonfinite_steps_are_reported_at_the_next_log_step(tmp_path, monkeypatch, capsys):
    workdir = str(tmp_path / "run")
    runs.nan_at(monkeypatch, 3)
    summary = loop.train(_config(TOTAL, skip_nonfinite=True), workdir)
    assert summary["skipped_steps"] == 1
    assert {r["step"]: r["skipped_steps"] for r in runs.metrics(workdir)} == {4: 1.0, 8: 1.0}
    out = capsys.readouterr().err
    assert out.count("skipped non-finite steps: 1 up to step 4, the first at step 3") == 1
    assert "grad_norm=nan" in out


@pytest.mark.slow
def test_sigterm_agreement_read_one_step_late(tmp_path, monkeypatch):
    """The multi-process path in one process: the flag drawn with step 3's batch is read
    after step 4 is called, so the run saves step 4 and stops there, and resumes exactly."""
    monkeypatch.setattr(loop, "_several_processes", lambda: True)
    sent = []

    def change(position, batch):
        if position == 2 and not sent:
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)
        return batch

    runs.patch_batches(monkeypatch, change)
    workdir = str(tmp_path / "run")
    config = _config(6)
    config.train.checkpoint_every = 2
    config.train.log_every = 1
    with pytest.raises(Preempted, match="step 4"):
        loop.train(config, workdir)
    assert runs.checkpoint_steps(workdir) == [2, 4]
    monkeypatch.undo()
    monkeypatch.setattr(loop, "_several_processes", lambda: True)
    reference = str(tmp_path / "reference")
    loop.train(config, reference)
    summary = loop.train(config, workdir)
    assert summary["start_step"] == 4
    runs.assert_same_state(runs.read_state(workdir, 6), runs.read_state(reference, 6))


def test_bad_profile_steps_and_prefetch_are_named(tmp_path):
    for field, value, match in [
        ("profile_steps", (3, 2), r"profile_steps=\(3, 2\) must be two steps"),
        ("profile_steps", (1, 99), r"last <= 8"),
        ("device_prefetch", -1, "device_prefetch must be an int >= 0"),
    ]:
        config = _config(TOTAL)
        config.train[field] = value
        with pytest.raises(ValueError, match=match):
            loop.train(config, str(tmp_path / field))


def test_device_prefetch_queue():
    mesh = make_mesh()
    drawn = []

    def local_batches():
        for i in range(100):
            drawn.append(i)
            yield {"views": np.full((8, 2, 4, 4, 1), i, np.float32),
                   "label": np.zeros(8, np.int32), "index": np.arange(8, dtype=np.int32),
                   "unused": np.zeros(8)}

    flag = {"raised": False}
    queue = inputs.DevicePrefetch(local_batches(), mesh, lambda: flag["raised"], depth=2,
                                  remaining=3)
    queue.fill()
    assert drawn == [0, 1]
    flag["raised"] = True  # SIGTERM after two batches were drawn
    first = queue.take()
    queue.fill()
    assert drawn == [0, 1, 2]
    assert isinstance(first.arrays["views"], jax.Array) and "unused" not in first.arrays
    assert first.arrays["views"].sharding.spec[0] == "data"
    assert float(first.arrays["views"][0, 0, 0, 0, 0]) == 0.0
    assert [first.stop, queue.take().stop, queue.take().stop] == [False, False, True]
    assert int(np.asarray(first.arrays["stop"]).max()) == 0
    queue.fill()
    assert drawn == [0, 1, 2]  # ``remaining`` batches only

    drawn.clear()
    lazy = inputs.DevicePrefetch(local_batches(), mesh, lambda: False, depth=0, remaining=2)
    lazy.fill()
    assert drawn == []  # depth 0: drawn and transferred only when taken
    lazy.take()
    assert drawn == [0]


def test_configure_compilation_cache(tmp_path, monkeypatch):
    previous = runs.enable_compilation_cache(str(tmp_path / "set_by_jax"))
    try:
        assert runtime.configure_compilation_cache("auto") == str(tmp_path / "set_by_jax")
        assert runtime.configure_compilation_cache("") == str(tmp_path / "set_by_jax")
        chosen = str(tmp_path / "chosen")
        assert runtime.configure_compilation_cache(chosen) == chosen and os.path.isdir(chosen)
        assert jax.config.values["jax_compilation_cache_dir"] == chosen
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert runtime.configure_compilation_cache("auto") == str(
            tmp_path / "xdg" / "contrastive_jax" / "jax_compilation_cache")
        blocker = tmp_path / "file"
        blocker.write_text("x")
        with pytest.raises(OSError, match="compilation_cache_dir=.*cannot be created"):
            runtime.configure_compilation_cache(str(blocker / "cache"))
    finally:
        runs.restore_compilation_cache(previous)


def test_collapse_detector():
    detector = CollapseDetector(threshold=-0.2, patience=3, after_step=10)
    # During the warm-up nothing counts; a spread log step resets the run; NaN never counts.
    for step, value in [(5, -0.01), (10, -0.01), (20, -0.1), (30, -0.05), (40, -2.3),
                        (50, -0.1), (60, float("nan")), (70, -0.1), (80, -0.1)]:
        assert detector.update(step, value) is None, step
    warning = detector.update(90, -0.02)
    assert warning and "collapsed onto one point" in warning and "from step 70 to 90" in warning
    for advice in ("config.loss.warmup_temperature", "weaker augmentation", "larger temperature"):
        assert advice in warning
    assert detector.update(100, -0.01) is None  # once
    with pytest.raises(ValueError, match="patience"):
        CollapseDetector(patience=0)
    with pytest.raises(ValueError, match="threshold"):
        CollapseDetector(threshold=0.5)


def test_a_run_logs_its_parameter_count_by_part_at_the_start():
    """The count is the parameters' sizes summed, split as the state holds them."""
    spec = parse(tiny_config())
    source = inputs.load_input(spec.data, seed=0)
    run = build(spec, make_mesh(), source.facts)
    text = loop.parameter_count(run.state)
    sizes = {name: sum(int(np.size(x)) for x in jax.tree.leaves(tree)) for name, tree in (
        ("encoder", run.state.params["network"]["encoder"]),
        ("head", run.state.params["network"]["head"]), ("probe", run.state.params["probe"]))}
    total = sum(int(np.size(x)) for x in jax.tree.leaves(run.state.params))
    assert total == sum(sizes.values())
    assert text.startswith(f"parameters: {total:,} (encoder {sizes['encoder']:,}, head "
                           f"{sizes['head']:,}, probe {sizes['probe']:,}); batch statistics ")
