"""Training logs: a console progress bar, TensorBoard event files and a
JSON-lines file (``<workdir>/metrics.jsonl``), written by process 0 only; and
the collapse detector that reads the logged uniformity."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import IO, TYPE_CHECKING

import jax
from tqdm.auto import tqdm

from contrastive_jax.train import paths

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
    """Writes scalars per step to TensorBoard and JSON lines; drives the progress bar.

    Args:
      workdir: directory for ``metrics.jsonl`` and the TensorBoard events (local or
        ``gs://``, :mod:`.paths`).
      total_steps: length of the run, for the progress bar and the ETA.
      start_step: the step the run starts (or resumes) at.
      images_per_step: global images per step, for the images/s figure.
      num_devices: devices sharing those images, for images/s per device.
      enabled: False on processes other than 0.
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
    ) -> None:
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self.images_per_step = images_per_step
        self.num_devices = jax.device_count() if num_devices is None else num_devices
        self._last_time = time.perf_counter()
        self._last_step = start_step
        self._writer: SummaryWriter | None = None
        self._jsonl: IO[str] | None = None
        self._bar: tqdm | None = None
        if not self.enabled:
            return
        from tensorboardX import SummaryWriter, record_writer

        directory = paths.as_path(workdir)
        directory.mkdir(parents=True, exist_ok=True)
        if paths.is_cloud(directory):  # the events too go through the path layer
            scheme = str(directory).split(":", 1)[0]
            record_writer.register_writer_factory(scheme, _PathRecordWriters())
        self._writer = SummaryWriter(logdir=str(directory / "tensorboard"))
        metrics = directory / METRICS_FILE
        if paths.is_cloud(directory):
            # An object store cannot append: through fsspec, "a" starts the object afresh and
            # would drop a resumed run's earlier lines, so they are written again first. The
            # lines appear in the bucket when the logger closes (at the end of the run or at
            # a preemption's SIGTERM; a SIGKILLed run's are lost, its checkpoints are not).
            earlier = metrics.read_text(encoding="utf-8") if metrics.exists() else ""
            self._jsonl = metrics.open("w", encoding="utf-8")
            self._jsonl.write(earlier)
        else:
            self._jsonl = metrics.open("a", encoding="utf-8")
        self._bar = tqdm(
            total=total_steps, initial=start_step, unit="step", dynamic_ncols=True, leave=True
        )

    def start_clock(self, step: int) -> None:
        """Restarts the throughput clock at ``step`` (after compiling, so it is not counted)."""
        self._last_time, self._last_step = time.perf_counter(), step

    def throughput(self, step: int) -> dict[str, float]:
        """``images_per_s`` and ``images_per_s_per_device`` since the previous call (or
        :meth:`start_clock`), and restarts the clock."""
        now = time.perf_counter()
        elapsed = max(now - self._last_time, 1e-9)
        rate = (step - self._last_step) * self.images_per_step / elapsed
        self._last_time, self._last_step = now, step
        return {"images_per_s": rate, "images_per_s_per_device": rate / self.num_devices}

    def write(self, step: int, scalars: dict[str, float]) -> None:
        """Logs ``scalars`` at ``step`` to every sink and updates the progress bar."""
        jsonl, writer, bar = self._jsonl, self._writer, self._bar
        if jsonl is None or writer is None or bar is None:  # not enabled
            return
        record = {"step": int(step), "time": time.time()}
        record.update({k: float(v) for k, v in scalars.items()})
        jsonl.write(json.dumps(record) + "\n")
        jsonl.flush()
        for key, value in scalars.items():
            writer.add_scalar(key, float(value), int(step))
        shown = {short: f"{float(scalars[k]):.4g}" for k, short in _BAR_FIELDS.items()
                 if k in scalars}
        bar.set_postfix(shown, refresh=False)
        bar.update(int(step) - bar.n)

    def message(self, text: str) -> None:
        """A line on the console that does not break the progress bar."""
        if self.enabled:
            tqdm.write(text)

    def warning(self, text: str) -> None:
        """A warning on the console above the progress bar and in the log (``logging``)."""
        logging.warning("%s", text)
        if self._bar is not None:  # enabled
            tqdm.write(f"warning: {text}")
            self._bar.set_description("collapsed?", refresh=False)

    def close(self) -> None:
        if self._jsonl is None or self._writer is None or self._bar is None:  # not enabled
            return
        self._bar.close()
        self._writer.close()
        self._jsonl.close()


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
