"""Training logs: a console progress bar, TensorBoard event files and a
JSON-lines file (``<workdir>/metrics.jsonl``), written by process 0 only."""

from __future__ import annotations

import json
import os
import time

import jax
from tqdm.auto import tqdm

METRICS_FILE = "metrics.jsonl"


class MetricLogger:
    """Writes scalars per step to TensorBoard and JSON lines; drives the progress bar.

    Args:
      workdir: directory for ``metrics.jsonl`` and the TensorBoard events.
      total_steps: length of the run, for the progress bar and the ETA.
      start_step: the step the run starts (or resumes) at.
      images_per_step: global images per step, for the images/s figure.
      enabled: False on processes other than 0.
    """

    def __init__(
        self,
        workdir: str,
        *,
        total_steps: int,
        start_step: int,
        images_per_step: int,
        enabled: bool | None = None,
    ) -> None:
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self.images_per_step = images_per_step
        self._last_time = time.perf_counter()
        self._last_step = start_step
        self._writer = None
        self._jsonl = None
        self._bar = None
        if not self.enabled:
            return
        from tensorboardX import SummaryWriter

        os.makedirs(workdir, exist_ok=True)
        self._writer = SummaryWriter(logdir=os.path.join(workdir, "tensorboard"))
        self._jsonl = open(os.path.join(workdir, METRICS_FILE), "a", encoding="utf-8")  # noqa: SIM115
        self._bar = tqdm(
            total=total_steps, initial=start_step, unit="step", dynamic_ncols=True, leave=True
        )

    def throughput(self, step: int) -> float:
        """Images per second since the previous call (and resets the clock)."""
        now = time.perf_counter()
        elapsed = max(now - self._last_time, 1e-9)
        rate = (step - self._last_step) * self.images_per_step / elapsed
        self._last_time, self._last_step = now, step
        return rate

    def write(self, step: int, scalars: dict[str, float]) -> None:
        """Logs ``scalars`` at ``step`` to every sink and updates the progress bar."""
        if not self.enabled:
            return
        record = {"step": int(step), "time": time.time()}
        record.update({k: float(v) for k, v in scalars.items()})
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        for key, value in scalars.items():
            self._writer.add_scalar(key, float(value), int(step))
        shown = {k: f"{float(v):.4g}" for k, v in scalars.items()
                 if k in ("loss", "learning_rate", "images_per_s")}
        self._bar.set_postfix(shown, refresh=False)
        self._bar.update(int(step) - self._bar.n)

    def message(self, text: str) -> None:
        """A line on the console that does not break the progress bar."""
        if self.enabled:
            tqdm.write(text)

    def close(self) -> None:
        if not self.enabled:
            return
        self._bar.close()
        self._writer.close()
        self._jsonl.close()
