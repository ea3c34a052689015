"""Training logs, written by process 0 only: at every log step one plain line on stderr
(:func:`format_line`: step, epoch, loss, learning rate, images/s, ETA, MFU, peak memory),
readable in a SLURM ``.out`` file or ``kubectl logs``, and a progress bar on top when stderr
is a terminal; TensorBoard event files with the same scalars and the run's hyperparameters;
a JSON-lines file (``<workdir>/metrics.jsonl``; in a bucket written whole at every
checkpoint; a resume drops the records after its step, which it logs again, so each step is
there once); an optional Weights & Biases run (``config.train.wandb_project``, the ``wandb``
extra). And the collapse detector that reads the logged uniformity."""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

import jax
from tqdm.auto import tqdm

from contrastive_jax.train import paths
from contrastive_jax.train.device_peaks import peak_flops

if TYPE_CHECKING:
    from tensorboardX import SummaryWriter

METRICS_FILE = "metrics.jsonl"
#: Scalars shown on the progress bar, under shorter names.
_BAR_FIELDS = {
    "loss": "loss",
    "learning_rate": "lr",
    "probe_accuracy": "probe",
    "knn_top1": "knn",
    "images_per_s": "img/s",
    "images_per_s_per_device": "img/s/dev",
}


class MetricLogger:
    """Writes the scalars of each log step to every sink: a line on stderr, TensorBoard,
    JSON lines and W&B; drives the progress bar.

    Args:
      workdir: directory for ``metrics.jsonl`` and the TensorBoard events (local or
        ``gs://``, :mod:`.paths`).
      total_steps: length of the run, for the log line, the progress bar and the ETA.
      start_step: the step the run starts (or resumes) at.
      images_per_step: global images per step, for the images/s figure.
      num_devices: devices sharing those images, for images/s per device and the MFU.
      enabled: False on processes other than 0.
      steps_per_epoch: for the epoch of a log line; None: no epoch.
      device_kind: the devices' kind, whose peak rate (:mod:`.device_peaks`) the MFU divides
        by; None: this process's first device's.
      hparams: the run's hyperparameters (:func:`flat_hparams`) for TensorBoard's HParams
        tab and the W&B run's config; None: none written.
      wandb_project: a W&B project to log to as well; "" (the default): no W&B.
      stream: where the log lines and messages go (default ``sys.stderr``); the progress bar
        is drawn on it only when it is a terminal.

    ``flops_per_step`` (the FLOPs of one step over every device, set by the loop from
    :mod:`.flops` where :attr:`peak_flops` is known) gives the ``mfu`` scalar.
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        total_steps: int,
        start_step: int,
        images_per_step: int,
        num_devices: int | None = None,
        enabled: bool | None = None,
        steps_per_epoch: int | None = None,
        device_kind: str | None = None,
        hparams: dict[str, str | int | float | bool] | None = None,
        wandb_project: str = "",
        stream: IO[str] | None = None,
    ) -> None:
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self.images_per_step = images_per_step
        self.num_devices = jax.device_count() if num_devices is None else num_devices
        self.total_steps, self.steps_per_epoch = total_steps, steps_per_epoch
        kind = jax.local_devices()[0].device_kind if device_kind is None else device_kind
        self.peak_flops = peak_flops(kind)
        self.flops_per_step: float | None = None
        self.stream = sys.stderr if stream is None else stream
        self._last_time = time.perf_counter()
        self._last_step = start_step
        self._started: tuple[float, int] | None = None  # the ETA's clock: (time, step)
        self._writer: SummaryWriter | None = None
        self._jsonl: IO[str] | None = None
        self._metrics: Any = None  # metrics.jsonl's path
        self._cloud = False
        self._lines: list[str] = []  # in a bucket: every line, the object written whole
        self._bar: tqdm | None = None
        self._wandb: Any = None
        if not self.enabled:
            return
        from tensorboardX import SummaryWriter, record_writer

        directory = paths.as_path(workdir)
        directory.mkdir(parents=True, exist_ok=True)
        self._cloud = paths.is_cloud(directory)
        if self._cloud:  # the events too go through the path layer
            scheme = str(directory).split(":", 1)[0]
            record_writer.register_writer_factory(scheme, _PathRecordWriters())
        self._writer = SummaryWriter(logdir=str(directory / "tensorboard"))
        if hparams:
            _write_hparams(self._writer, hparams)
        self._metrics = directory / METRICS_FILE
        if self._cloud:
            # An object store cannot append: through fsspec, "a" starts the object afresh and
            # would drop a resumed run's earlier lines, so they are kept and the object is
            # written whole at every flush (each checkpoint) and at the end. A run killed
            # with SIGKILL loses the lines after its last checkpoint.
            earlier = (self._metrics.read_text(encoding="utf-8") if self._metrics.exists()
                       else "")
            self._lines = records_up_to(earlier, start_step)
        else:
            if self._metrics.exists():  # a resume logs the steps after start_step again
                self._metrics.write_text("".join(records_up_to(
                    self._metrics.read_text(encoding="utf-8"), start_step)), encoding="utf-8")
            self._jsonl = self._metrics.open("a", encoding="utf-8")
        if wandb_project:
            self._wandb = _wandb_run(wandb_project, directory, hparams or {})
        if _is_terminal(self.stream):
            self._bar = tqdm(total=total_steps, initial=start_step, unit="step",
                             dynamic_ncols=True, leave=True, file=self.stream)

    def start_clock(self, step: int) -> None:
        """Restarts the throughput clock at ``step`` (after compiling, so it is not counted);
        the first call also starts the ETA's clock."""
        self._last_time, self._last_step = time.perf_counter(), step
        if self._started is None:
            self._started = (self._last_time, step)

    def leave_out(self, seconds: float) -> None:
        """Leaves ``seconds`` (an evaluation's) out of the throughput clock."""
        self._last_time += seconds

    def throughput(self, step: int) -> dict[str, float]:
        """``images_per_s`` and ``images_per_s_per_device`` since the previous call (or
        :meth:`start_clock`), ``mfu`` where the FLOPs and the device's peak are known, and
        restarts the clock."""
        now = time.perf_counter()
        elapsed = max(now - self._last_time, 1e-9)
        rate = (step - self._last_step) * self.images_per_step / elapsed
        self._last_time, self._last_step = now, step
        out = {"images_per_s": rate, "images_per_s_per_device": rate / self.num_devices}
        if self.flops_per_step and self.peak_flops:
            steps_per_s = rate / self.images_per_step
            out["mfu"] = self.flops_per_step * steps_per_s / (self.peak_flops * self.num_devices)
        return out

    def progress(self, step: int) -> dict[str, float]:
        """``epoch``, ``eta_s`` (the steps left at the mean pace since the clock first
        started, evaluations and checkpoints included) and ``peak_memory_bytes``
        (:func:`peak_memory_bytes`) at ``step``."""
        out: dict[str, float] = {}
        if self.steps_per_epoch:
            out["epoch"] = step / self.steps_per_epoch
        if self._started is not None and step > self._started[1]:
            pace = (time.perf_counter() - self._started[0]) / (step - self._started[1])
            out["eta_s"] = pace * (self.total_steps - step)
        memory = peak_memory_bytes()
        if memory is not None:
            out["peak_memory_bytes"] = float(memory)
        return out

    def write(self, step: int, scalars: dict[str, float], *, line: bool = True) -> None:
        """Logs ``scalars`` at ``step`` to every sink and updates the progress bar; with
        ``line``, also the log line (:func:`format_line`) on the stream."""
        writer = self._writer
        if writer is None:  # not enabled
            return
        record = {"step": int(step), "time": time.time()}
        record.update({k: float(v) for k, v in scalars.items()})
        text = json.dumps(record) + "\n"
        if self._jsonl is not None:
            self._jsonl.write(text)
            self._jsonl.flush()
        else:  # a bucket's, written at the next flush
            self._lines.append(text)
        for key, value in scalars.items():
            writer.add_scalar(key, float(value), int(step))
        if self._wandb is not None:
            self._wandb.log({k: float(v) for k, v in scalars.items()}, step=int(step))
        if line:
            self.message(format_line(step, self.total_steps, scalars,
                                     mfu_known=self.peak_flops is not None))
        if self._bar is not None:
            shown = {short: f"{float(scalars[k]):.4g}" for k, short in _BAR_FIELDS.items()
                     if k in scalars}
            self._bar.set_postfix(shown, refresh=False)
            self._bar.update(int(step) - self._bar.n)

    def flush(self) -> None:
        """Makes what was logged so far durable: TensorBoard's events and, in a bucket,
        metrics.jsonl (the object written whole); the loop calls it at every checkpoint."""
        if self._writer is None:  # not enabled
            return
        self._writer.flush()
        if self._cloud:
            self._metrics.write_text("".join(self._lines), encoding="utf-8")

    def message(self, text: str) -> None:
        """A line on the stream that does not break the progress bar."""
        if not self.enabled:
            return
        if self._bar is not None:
            tqdm.write(text, file=self.stream)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def warning(self, text: str) -> None:
        """A warning on the stream (above the progress bar) and in the log (``logging``)."""
        logging.warning("%s", text)
        self.message(f"warning: {text}")
        if self._bar is not None:
            self._bar.set_description("collapsed?", refresh=False)

    def close(self) -> None:
        if self._writer is None:  # not enabled
            return
        if self._bar is not None:
            self._bar.close()
        self.flush()
        self._writer.close()
        if self._jsonl is not None:
            self._jsonl.close()
        if self._wandb is not None:
            self._wandb.finish()


def records_up_to(text: str, step: int) -> list[str]:
    """The lines of a ``metrics.jsonl`` text whose record's step is at most ``step`` (a run
    resumed at ``step`` logs the later ones again, so the log holds each step once); a line
    cut short by a kill is dropped."""
    kept = []
    for line in text.splitlines(keepends=True):
        try:
            logged = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):
            continue
        if line.endswith("\n") and logged <= step:
            kept.append(line)
    return kept


def _is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def format_line(step: int, total_steps: int, scalars: dict[str, float], *,
                mfu_known: bool = True) -> str:
    """One log line, each part present where its scalar is::

        step 20/1000 epoch 0.41 loss 4.1523 lr 0.03 img/s 1203 eta 0:05:10 mfu 31.2% mem 3.21GiB

    ``mfu n/a`` where the devices' peak is unknown (``mfu_known`` False: CPUs).
    """
    parts = [f"step {int(step)}/{total_steps}"]
    if "epoch" in scalars:
        parts.append(f"epoch {scalars['epoch']:.2f}")
    if "loss" in scalars:
        parts.append(f"loss {scalars['loss']:.4f}")
    if "learning_rate" in scalars:
        parts.append(f"lr {scalars['learning_rate']:.4g}")
    if "images_per_s" in scalars:
        parts.append(f"img/s {scalars['images_per_s']:.4g}")
    if "eta_s" in scalars:
        parts.append(f"eta {datetime.timedelta(seconds=round(scalars['eta_s']))}")
    if "mfu" in scalars:
        parts.append(f"mfu {100 * scalars['mfu']:.1f}%")
    elif not mfu_known and "images_per_s" in scalars:
        parts.append("mfu n/a")
    if "peak_memory_bytes" in scalars:
        parts.append(f"mem {scalars['peak_memory_bytes'] / 2**30:.2f}GiB")
    for key in ("knn_top1", "probe_accuracy", "val_top1"):
        if key in scalars:
            parts.append(f"{key} {scalars[key]:.4f}")
    return " ".join(parts)


def peak_memory_bytes() -> int | None:
    """The most memory a local device has held so far: ``memory_stats()["peak_bytes_in_use"]``
    of GPUs and TPUs; on CPU devices, whose memory is the host's, this process's peak resident
    set (``getrusage``'s ``ru_maxrss``). None where neither is known."""
    devices = jax.local_devices()
    if devices[0].platform == "cpu":
        import resource  # Unix only, as the CPU figure

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, else KiB
    peaks = []
    for device in devices:
        stats = device.memory_stats()
        if stats and "peak_bytes_in_use" in stats:
            peaks.append(int(stats["peak_bytes_in_use"]))
    return max(peaks) if peaks else None


def flat_hparams(tree: dict[str, Any], prefix: str = "") -> dict[str, str | int | float | bool]:
    """A nested config dict flattened to ``{"a.b": value}`` with the values TensorBoard's
    HParams accept (str, int, float, bool; anything else, None included, as its repr).

    Examples:
      >>> flat_hparams({"seed": 0, "loss": {"name": "sincere", "temperature": None}})
      {'seed': 0, 'loss.name': 'sincere', 'loss.temperature': 'None'}
    """
    flat: dict[str, str | int | float | bool] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_hparams(value, f"{name}."))
        elif isinstance(value, str | int | float | bool):
            flat[name] = value
        else:
            flat[name] = repr(value)
    return flat


def _write_hparams(writer: SummaryWriter, hparams: dict[str, str | int | float | bool]) -> None:
    """The run's hyperparameters in its event file, for TensorBoard's HParams tab (the
    logged ``loss`` its metric)."""
    from tensorboardX.summary import hparams as hparams_summary

    for summary in hparams_summary(hparams, {"loss": float("nan")}):
        writer.file_writer.add_summary(summary)


def _wandb_run(project: str, directory: Any, hparams: dict[str, Any]) -> Any:
    """A W&B run of ``project`` named after the work directory; a resumed run (the same
    work directory) continues the same W&B run. (``TrainSpec`` has checked that wandb is
    installed.)"""
    import wandb

    run_id = hashlib.sha1(str(directory).encode()).hexdigest()[:16]  # one run per work dir
    return wandb.init(project=project, name=directory.name, id=run_id, resume="allow",
                      config=hparams)


class _PathFile:
    """A binary file of the path layer, as tensorboardX's record writer wants it (no
    ``fileno``: nothing to ``fsync`` in a bucket)."""

    def __init__(self, path: str) -> None:
        self._file = paths.as_path(path).open("wb")

    def write(self, data: bytes) -> None:
        self._file.write(data)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class _PathRecordWriters:
    """tensorboardX's writer factory for a cloud scheme, through :mod:`.paths`."""

    def open(self, path: str) -> _PathFile:
        return _PathFile(path)

    def directory_check(self, path: str) -> None:
        paths.as_path(path).mkdir(parents=True, exist_ok=True)


#: Uniformity above which the embeddings count as collapsed (see CollapseDetector).
COLLAPSE_THRESHOLD = -0.2
#: Consecutive log steps above the threshold, after the warm-up, before the warning.
COLLAPSE_PATIENCE = 3


class CollapseDetector:
    """Warns once when the logged uniformity stays at its collapsed value.

    The logged ``uniformity`` is log E[exp(-2 ||z_i - z_j||^2)] over pairs of
    unit embeddings of the batch (Wang & Isola, 2020, "Understanding
    Contrastive Representation Learning through Alignment and Uniformity on
    the Hypersphere", arXiv:2005.10242, Eq. 2, t = 2). It is 0 when every
    embedding is the same point, and about -2.3 to -4 when they spread over the
    sphere (-4 for uniform embeddings in high dimension, where
    ||z_i - z_j||^2 is about 2). The default threshold, -0.2, is a mean
    Gaussian potential of exp(-0.2) = 0.82. Every batch whose mean squared
    distance is below 0.1 (mean cosine similarity above 0.95) lies above it, as
    uniformity >= -2 E||z_i - z_j||^2 (Jensen's inequality); and above it at
    least 64 % of the pairs have exp(-2 ||z_i - z_j||^2) > 0.5, a cosine
    similarity above 0.83 (the potential is at most 1). The embeddings then sit
    on one point and the loss at its constant-embedding value (log(N - 1) for
    NT-Xent on N rows).

    A collapse during the warm-up is common and often left again; the detector
    counts log steps only after ``after_step`` and warns once when
    ``patience`` consecutive ones are above ``threshold``.

    Args:
      threshold: uniformity above which a log step counts as collapsed.
      patience: consecutive collapsed log steps before the warning.
      after_step: log steps at or before this step (the warm-up) do not count.
    """

    def __init__(self, threshold: float = COLLAPSE_THRESHOLD, patience: int = COLLAPSE_PATIENCE,
                 after_step: int = 0) -> None:
        if patience < 1:
            raise ValueError(f"config.train.collapse_patience must be >= 1 log steps, got {patience}")
        if not threshold <= 0:
            raise ValueError(
                f"config.train.collapse_threshold must be <= 0 (uniformity never exceeds 0), got "
                f"{threshold}"
            )
        self.threshold = threshold
        self.patience = patience
        self.after_step = after_step
        self.warned = False
        self._run: list[int] = []

    def update(self, step: int, uniformity: float) -> str | None:
        """Feeds one log step; returns the warning text the first time the collapse holds."""
        if self.warned or step <= self.after_step:
            return None
        if not uniformity > self.threshold:  # NaN counts as not collapsed: reported elsewhere
            self._run = []
            return None
        self._run.append(step)
        if len(self._run) < self.patience:
            return None
        self.warned = True
        return (
            f"the embeddings collapsed onto one point: uniformity stayed above "
            f"{self.threshold:g} (0 means all embeddings identical; spread embeddings give "
            f"about -2.3 to -4) at the {len(self._run)} log steps from step {self._run[0]} to "
            f"{step}, after the warm-up, and the loss sits at its constant-embedding value. "
            "Try a temperature warm-up (config.loss.warmup_temperature=1.0, "
            "config.loss.temperature_warmup_steps=100), a weaker augmentation, or a larger "
            "temperature (config.loss.temperature)."
        )
