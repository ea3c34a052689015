"""The pretraining loop: build, resume, step, log, checkpoint, stop cleanly.

``train(config, workdir)`` resumes from the newest readable checkpoint in
``workdir`` without being asked, saves every ``config.train.checkpoint_every``
steps (asynchronously) and at the end, and on SIGTERM saves the current step and
raises :class:`Preempted`.

A resumed run is the run it would have been: the input pipeline yields the
batches of a pure function of (seed, step) from the restored step on, dropout
keys derive from (seed, step, device) (:mod:`.step`), and the checkpoint holds
parameters, batch statistics and optimiser state. Before any array is read, the
checkpoint's model config and state structure are compared with the current
config (:class:`ConfigMismatch`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from contrastive_jax import data as data_lib
from contrastive_jax import models
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import objective, optim
from contrastive_jax.train.checkpoint import (
    Checkpointer,
    CheckpointError,
    abstract_like,
    structure_signature,
)
from contrastive_jax.train.logging import MetricLogger
from contrastive_jax.train.step import PretrainModel, TrainState, make_train_step, split_model

CONFIG_FILE = "config.json"
#: Fields of a pretraining batch that reach the device.
BATCH_FIELDS = ("views", "label", "index", "metadata")

#: Exit codes of ``python -m contrastive_jax.pretrain``.
EXIT_PREEMPTED = 75  # saved on SIGTERM; restart to continue (EX_TEMPFAIL)
EXIT_NONFINITE = 65  # loss or gradient not finite (EX_DATAERR)
EXIT_CHECKPOINT = 74  # a checkpoint could not be written or read (EX_IOERR)


class Preempted(Exception):
    """SIGTERM arrived; the current step was checkpointed."""

    def __init__(self, step: int) -> None:
        super().__init__(f"preempted by SIGTERM; checkpoint saved at step {step}")
        self.step = step


class NonFiniteLoss(FloatingPointError):
    """A step produced a NaN or inf loss or gradient."""


class ConfigMismatch(ValueError):
    """The checkpoint in the work directory was written with an incompatible config."""


def build_model(config: ml_collections.ConfigDict, num_classes: int) -> PretrainModel:
    """Encoder + head (+ optional probe) from ``config.model``, seeded by ``config.seed``."""
    rngs = nnx.Rngs(config.seed)
    encoder = models.create_encoder(config.model.encoder, rngs=rngs)
    head = models.create_head(config.model.head, encoder.num_features, rngs=rngs)
    network = models.ContrastiveModel(encoder, head)
    probe_classes = num_classes if config.train.online_probe else None
    return PretrainModel(network, encoder.num_features, probe_classes, rngs=rngs)


def init_state(
    config: ml_collections.ConfigDict,
    num_classes: int,
    *,
    steps_per_epoch: int,
    global_batch_size: int,
    total_steps: int,
):
    """A fresh (graphdef, rest, tx, schedule, TrainState) for ``config``."""
    model = build_model(config, num_classes)
    model.train()
    graphdef, params, batch_stats, rest = split_model(model)
    tx, schedule = optim.make_optimizer(
        config.optimizer,
        params,
        steps_per_epoch=steps_per_epoch,
        global_batch_size=global_batch_size,
        total_steps=total_steps,
    )
    state = TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        batch_stats=batch_stats,
        opt_state=tx.init(params),
        rng=jax.random.key_data(jax.random.key(config.seed)),
    )
    return graphdef, rest, tx, schedule, state


def _model_fingerprint(config: ml_collections.ConfigDict) -> dict:
    return json.loads(config.model.to_json())


def _config_diff(saved: dict, current: dict) -> list[str]:
    """``part.key: checkpoint X vs config Y`` for every differing field of two nested dicts."""
    return sorted(
        f"{part}.{key}: checkpoint {saved.get(part, {}).get(key)!r} vs config "
        f"{current.get(part, {}).get(key)!r}"
        for part in set(saved) | set(current)
        for key in set(saved.get(part, {})) | set(current.get(part, {}))
        if saved.get(part, {}).get(key) != current.get(part, {}).get(key)
    )


def _check_compatible(
    config: ml_collections.ConfigDict, signature: list[str], meta: dict, step: int
) -> None:
    """Raises ConfigMismatch unless the checkpoint's model config and state structure match."""
    saved = meta.get("model")
    current = _model_fingerprint(config)
    if saved is not None and saved != current:
        raise ConfigMismatch(
            f"the checkpoint at step {step} was written with a different model config "
            f"({'; '.join(_config_diff(saved, current))}); use a new --workdir or restore "
            "the old config"
        )
    saved_signature = meta.get("state_signature")
    if saved_signature is not None and saved_signature != signature:
        first = next(
            (f"checkpoint {a!r} vs config {b!r}" for a, b in zip(saved_signature, signature, strict=False)
             if a != b),
            f"checkpoint {len(saved_signature)} arrays vs config {len(signature)}",
        )
        raise ConfigMismatch(
            f"the checkpoint at step {step} holds a training state of a different structure "
            f"(optimizer or online probe changed? first difference: {first}); use a new "
            "--workdir or restore the old config"
        )


def _prepare_workdir(workdir: str) -> str:
    workdir = os.path.abspath(workdir)
    try:
        os.makedirs(workdir, exist_ok=True)
        probe = os.path.join(workdir, f".write-test-{os.getpid()}")
        with open(probe, "w", encoding="utf-8") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as err:
        raise OSError(f"work directory {workdir} is not writable: {err}") from err
    return workdir


class _SigtermFlag:
    """Turns SIGTERM into a flag the loop polls (main thread only).

    The loop feeds the flag into each step (the ``stop`` batch field), whose
    collectives tell every process if any process was signalled, so all of
    them save the same step together.
    """

    def __init__(self) -> None:
        self.raised = False
        self._previous = None

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        except ValueError:  # not the main thread: leave signals alone
            self._previous = None
        return self

    def _handle(self, signum, frame) -> None:
        self.raised = True

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def _nonfinite_text(logged: dict[str, float]) -> str:
    return ", ".join(
        f"{k}={v:.6g}" for k, v in logged.items() if k.startswith("loss") or k == "grad_norm"
    )


def train(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Pretrains (or resumes) according to ``config`` in ``workdir``; returns a summary.

    Raises:
      Preempted: SIGTERM arrived; the step reached was checkpointed.
      NonFiniteLoss: a step's loss or gradient was NaN/inf (without
        ``config.train.skip_nonfinite``); the last good checkpoint is kept.
      ConfigMismatch: the work directory's checkpoint has another model/state structure.
      CheckpointError: a checkpoint could not be written (full disk, ...), or
        none of the checkpoints present could be read.
      OSError: the work directory is not writable.
      ValueError: a bad config or input (e.g. a corrupt image file).
    """
    with _SigtermFlag() as sigterm:
        return _train(config, workdir, sigterm)


def _train(config: ml_collections.ConfigDict, workdir: str, sigterm: _SigtermFlag) -> dict:
    workdir = _prepare_workdir(workdir)
    terms = objective.parse_terms(config.loss)
    mesh = make_mesh()
    source = data_lib.load_source(config.data)
    global_batch = int(config.data.global_batch_size)
    if global_batch % jax.device_count():
        raise ValueError(
            f"config.data.global_batch_size={global_batch} must be divisible by the "
            f"{jax.device_count()} devices"
        )
    steps_per_epoch = source.split("train").num_examples // global_batch
    if steps_per_epoch < 1:
        raise ValueError(
            f"config.data.global_batch_size={global_batch} exceeds the "
            f"{source.split('train').num_examples} training examples of {source.name!r}"
        )
    total_steps = int(config.train.total_steps or config.train.epochs * steps_per_epoch)

    graphdef, rest, tx, schedule, state = init_state(
        config,
        source.num_classes,
        steps_per_epoch=steps_per_epoch,
        global_batch_size=global_batch,
        total_steps=total_steps,
    )
    state = jax.device_put(state, replicated(mesh))
    signature = structure_signature(state)

    checkpointer = Checkpointer(workdir, max_to_keep=config.train.keep_checkpoints)
    present = checkpointer.steps()
    try:
        restored = checkpointer.restore_latest(
            abstract_like(state),
            check_meta=lambda meta, step: _check_compatible(config, signature, meta, step),
        )
        if restored is None and present:
            raise CheckpointError(
                f"every checkpoint in {checkpointer.directory} (steps {present}) is damaged; "
                f"they were moved to {checkpointer.damaged_directory}. Run again to start "
                "from step 0"
            )
    except BaseException:
        checkpointer.close()
        raise
    if restored is not None:
        state, _ = restored
    start_step = int(state.step)
    if jax.process_index() == 0:
        with open(os.path.join(workdir, CONFIG_FILE), "w", encoding="utf-8") as f:
            f.write(config.to_json_best_effort(indent=2))

    step_fn = make_train_step(graphdef, rest, tx, terms, schedule, mesh)
    batches = data_lib.make_pretrain_iterator(
        config.data, seed=config.seed, start_step=start_step, source=source
    )
    logger = MetricLogger(
        workdir, total_steps=total_steps, start_step=start_step, images_per_step=global_batch
    )
    if start_step:
        logger.message(f"resumed from the checkpoint at step {start_step} in {workdir}")

    def meta(step: int) -> dict:
        return {
            "step": step,
            "input_position": step,
            "seed": int(config.seed),
            "num_classes": source.num_classes,
            "model": _model_fingerprint(config),
            "state_signature": signature,
        }

    skipped = 0
    last: dict[str, float] = {}
    started = time.perf_counter()
    try:
        for step in range(start_step, total_steps):
            local = {k: v for k, v in next(batches).items() if k in BATCH_FIELDS}
            local["stop"] = np.full(len(local["label"]), sigterm.raised, np.int32)
            batch = data_lib.make_global_batch(local, mesh)
            state, logged = step_fn(state, batch)
            done = step + 1
            if not bool(logged["finite"]):
                text = _nonfinite_text({k: float(v) for k, v in jax.device_get(logged).items()})
                if not config.train.skip_nonfinite:
                    good = checkpointer.steps()
                    raise NonFiniteLoss(
                        f"non-finite loss or gradient at step {done} ({text}); the last good "
                        f"checkpoint (step {good[-1] if good else 'none'}) is kept in "
                        f"{checkpointer.directory}. Set --config.train.skip_nonfinite=True "
                        "to skip such steps instead."
                    )
                skipped += 1
                logger.message(f"skipped non-finite step {done} ({text})")
            if done % config.train.log_every == 0 or done == total_steps:
                last = {k: float(v) for k, v in jax.device_get(logged).items()}
                last["images_per_s"] = logger.throughput(done)
                last["skipped_steps"] = float(skipped)
                logger.write(done, last)
            preempted = bool(logged["stop"])
            if done % config.train.checkpoint_every == 0 or done == total_steps or preempted:
                checkpointer.save(done, state, meta(done))
            if preempted:
                checkpointer.flush()
                raise Preempted(done)
        checkpointer.flush()
    except BaseException:
        # Stopping on an error: a failing close (e.g. the metric files on the same
        # full disk) must not replace the error that says what went wrong.
        for name, close in (("metric logger", logger.close), ("checkpointer", checkpointer.close)):
            try:
                close()
            except Exception as err:  # noqa: BLE001 - reported, the original error propagates
                logging.warning("while stopping, closing the %s failed too: %s", name, err)
        raise
    logger.close()
    checkpointer.close()
    elapsed = time.perf_counter() - started
    return {
        "workdir": workdir,
        "start_step": start_step,
        "final_step": total_steps,
        "final_loss": last.get("loss", float("nan")),
        "metrics": last,
        "skipped_steps": skipped,
        "seconds": elapsed,
        "images_per_s": (total_steps - start_step) * global_batch / max(elapsed, 1e-9),
    }
