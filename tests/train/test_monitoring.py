"""Watching a run: one plain line per log step on stderr (readable in a file; the progress bar
only on a terminal), the same scalars and the hyperparameters in TensorBoard, an optional W&B
run, and a bucket's metrics written at every checkpoint."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import struct
import sys
import types
from pathlib import Path

import pytest

from contrastive_jax.errors import ConfigError
from contrastive_jax.train import flops, loop, metrics_log
from contrastive_jax.train.metrics_log import METRICS_FILE, MetricLogger, format_line
from contrastive_jax.train.spec import parse
from tests.train import cli_config, runs

#: The line of each log step of the 20-step run (the peak given for its CPU devices).
LINE = re.compile(
    r"^step (\d+)/20 epoch \d+\.\d\d loss \d+\.\d{4} lr [0-9.e-]+ img/s [0-9.e+]+ "
    r"eta \d+:\d\d:\d\d mfu (\d+\.\d)% mem (\d+\.\d\d)GiB$"
)


def _events(directory: Path) -> list:
    """Every event of the TensorBoard files under ``directory`` (TFRecord framing)."""
    from tensorboardX.proto.event_pb2 import Event

    events = []
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            events.append(Event.FromString(data[at + 12:at + 12 + length]))
            at += 12 + length + 4
    return events


@pytest.mark.slow
def test_a_20_step_run_logs_readable_lines_and_the_scalars_and_hparams_to_tensorboard(
    tmp_path, monkeypatch
):
    # CPUs have no known peak: give them one (small, as the tiny encoder's step is), so that
    # the MFU of the counted FLOPs shows.
    monkeypatch.setattr(metrics_log, "peak_flops", lambda kind: 1e8)
    counted = []
    count_jaxpr = flops.count_jaxpr
    monkeypatch.setattr(flops, "count_jaxpr",
                        lambda jaxpr: counted.append(count_jaxpr(jaxpr)) or counted[-1])
    config = cli_config.tiny_config(20, checkpoint_every=10)
    config.train.log_every = 5
    workdir = tmp_path / "run"
    log_file = tmp_path / "run.err"
    with runs.tiny_encoder(), log_file.open("w") as stderr:
        monkeypatch.setattr(sys, "stderr", stderr)
        summary = loop.train(config, str(workdir))
    text = log_file.read_text()
    assert "\r" not in text, "a progress bar wrote to a file"
    lines = [m for m in map(LINE.match, text.splitlines()) if m]
    assert [int(m[1]) for m in lines] == [5, 10, 15, 20], text
    assert all(float(m[2]) > 0 and float(m[3]) > 0 for m in lines), text
    (count,) = counted  # the step's FLOPs, counted once
    assert count.flops > 0
    metrics = summary["metrics"]
    steps_per_s = metrics["images_per_s"] / config.data.global_batch_size
    assert metrics["mfu"] == pytest.approx(count.flops * steps_per_s / (1e8 * 8))
    assert metrics["epoch"] == pytest.approx(20 / (1437 // 32))
    assert metrics["eta_s"] == 0.0 and metrics["peak_memory_bytes"] > 2**20

    events = _events(workdir / "tensorboard")
    scalars = {(v.tag, e.step) for e in events for v in e.summary.value if v.HasField("simple_value")}
    for tag in ("loss", "learning_rate", "images_per_s", "eta_s", "mfu", "epoch",
                "peak_memory_bytes"):
        assert {(tag, step) for step in (5, 10, 15, 20)} <= scalars, tag
    hparams = b"".join(v.metadata.plugin_data.content for e in events for v in e.summary.value
                       if v.metadata.plugin_data.plugin_name == "hparams")
    assert b"optimizer.base_learning_rate" in hparams and b"train.log_every" in hparams


def test_the_line_says_n_a_for_an_unknown_peak_and_leaves_out_what_is_not_logged():
    assert format_line(3, 10, {"loss": 1.23456, "images_per_s": 512.0, "eta_s": 61.4,
                               "peak_memory_bytes": 3 * 2**29}, mfu_known=False) == (
        "step 3/10 loss 1.2346 img/s 512 eta 0:01:01 mfu n/a mem 1.50GiB")
    assert format_line(3, 10, {"loss": 1.0, "mfu": 0.3125}) == "step 3/10 loss 1.0000 mfu 31.2%"


def test_the_mfu_divides_the_counted_flops_by_the_devices_peak(tmp_path):
    logger = MetricLogger(tmp_path, total_steps=4, start_step=0, images_per_step=8,
                          num_devices=2, enabled=True, device_kind="NVIDIA H100 80GB HBM3",
                          stream=io.StringIO())
    assert logger.peak_flops == 989e12
    logger.flops_per_step = 989e12  # one second of one device's peak
    logger.start_clock(0)
    out = logger.throughput(2)  # two steps in far less than a second
    # 989e12 FLOPs a step at images_per_s / 8 steps a second, over 2 devices of 989e12
    assert out["mfu"] == pytest.approx(out["images_per_s"] / 16)
    logger.close()
    cpu = MetricLogger(tmp_path / "cpu", total_steps=4, start_step=0, images_per_step=8,
                       enabled=True, device_kind="cpu", stream=io.StringIO())
    cpu.flops_per_step = 1e9
    assert cpu.peak_flops is None and "mfu" not in cpu.throughput(2)
    cpu.close()


class _FakeWandb(types.ModuleType):
    """What the logger calls of ``wandb``, recorded."""

    def __init__(self) -> None:
        super().__init__("wandb")
        self.calls: list = []

    def init(self, **kwargs):
        self.calls.append(("init", kwargs))
        return self

    def log(self, scalars, step):
        self.calls.append(("log", step, scalars))

    def finish(self):
        self.calls.append(("finish",))


def test_the_wandb_writer_gets_the_scalars_and_the_config_only_when_configured(
    tmp_path, monkeypatch
):
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    off = MetricLogger(tmp_path / "off", total_steps=4, start_step=0, images_per_step=8,
                       enabled=True, stream=io.StringIO())
    off.write(2, {"loss": 1.0})
    off.close()
    assert fake.calls == []
    on = MetricLogger(tmp_path / "on", total_steps=4, start_step=0, images_per_step=8,
                      enabled=True, stream=io.StringIO(), hparams={"seed": 3},
                      wandb_project="demo")
    on.write(2, {"loss": 1.0})
    on.close()
    (_, init), *rest = fake.calls
    assert (init["project"], init["name"], init["config"]) == ("demo", "on", {"seed": 3})
    assert rest == [("log", 2, {"loss": 1.0}), ("finish",)]


def test_a_wandb_project_without_wandb_is_refused_as_a_config_error(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "wandb" else find_spec(name, *args))
    config = cli_config.tiny_config()
    config.train.wandb_project = "demo"
    with pytest.raises(ConfigError, match=r"pip install 'contrastive_jax\[wandb\]'"):
        parse(config)


def test_a_buckets_metrics_are_written_at_each_flush_not_only_at_the_end(tmp_path, monkeypatch):
    # An object store cannot append: the object is written whole at each flush.
    monkeypatch.setattr(metrics_log.paths, "is_cloud", lambda path: True)
    (tmp_path / METRICS_FILE).write_text('{"step": 1, "loss": 3.0}\n')  # a resumed run's
    logger = MetricLogger(tmp_path, total_steps=4, start_step=1, images_per_step=8,
                          enabled=True, stream=io.StringIO())
    logger.write(2, {"loss": 2.0})
    assert len((tmp_path / METRICS_FILE).read_text().splitlines()) == 1
    logger.flush()
    logger.write(3, {"loss": 1.0})
    logger.flush()
    lines = (tmp_path / METRICS_FILE).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]
    logger.close()


def test_no_progress_bar_unless_the_stream_is_a_terminal(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, bar in ((io.StringIO(), False), (Terminal(), True)):
        logger = MetricLogger(tmp_path / str(bar), total_steps=4, start_step=0,
                              images_per_step=8, enabled=True, stream=stream)
        logger.write(2, {"loss": 1.0})
        logger.close()
        assert ("\r" in stream.getvalue()) is bar
        assert "step 2/4 loss 1.0000" in stream.getvalue()
