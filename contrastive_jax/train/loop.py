"""The pretraining loop: build, resume, step, log, checkpoint, stop cleanly.

``train(config, workdir)`` resumes from the newest readable checkpoint in
``workdir`` without being asked, saves every ``config.train.checkpoint_every``
steps (asynchronously) and at the end, and on SIGTERM saves the current step and
raises :class:`Preempted`.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from contrastive_jax import data as data_lib
from contrastive_jax import models
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import objective, optim
from contrastive_jax.train.checkpoint import Checkpointer, abstract_like
from contrastive_jax.train.logging import MetricLogger
from contrastive_jax.train.step import PretrainModel, TrainState, make_train_step, split_model

CONFIG_FILE = "config.json"
#: Fields of a pretraining batch that reach the device.
BATCH_FIELDS = ("views", "label", "index", "metadata")

#: Exit codes of ``python -m contrastive_jax.pretrain``.
EXIT_PREEMPTED = 75  # saved on SIGTERM; restart to continue (EX_TEMPFAIL)
EXIT_NONFINITE = 65  # loss or gradient not finite (EX_DATAERR)


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


def _check_compatible(config: ml_collections.ConfigDict, meta: dict, step: int) -> None:
    saved = meta.get("model")
    current = _model_fingerprint(config)
    if saved is not None and saved != current:
        diff = sorted(
            f"{part}.{key}: checkpoint {saved.get(part, {}).get(key)!r} vs config "
            f"{current.get(part, {}).get(key)!r}"
            for part in set(saved) | set(current)
            for key in set(saved.get(part, {})) | set(current.get(part, {}))
            if saved.get(part, {}).get(key) != current.get(part, {}).get(key)
        )
        raise ConfigMismatch(
            f"the checkpoint at step {step} was written with a different model config "
            f"({'; '.join(diff)}); use a new --workdir or restore the old config"
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
    """Turns SIGTERM into a flag the loop polls (main thread only)."""

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


def train(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Pretrains (or resumes) according to ``config`` in ``workdir``; returns a summary."""
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

    checkpointer = Checkpointer(workdir, max_to_keep=config.train.keep_checkpoints)
    restored = checkpointer.restore_latest(abstract_like(state))
    if restored is not None:
        state, meta = restored
        _check_compatible(config, meta, int(state.step))
    elif checkpointer.steps():
        raise RuntimeError(
            f"no checkpoint in {checkpointer.directory} could be restored (steps "
            f"{checkpointer.steps()}); move the directory away to start afresh"
        )
    start_step = int(state.step)
    if jax.process_index() == 0:
        with open(os.path.join(workdir, CONFIG_FILE), "w", encoding="utf-8") as f:
            f.write(config.to_json_best_effort(indent=2))

    step_fn = make_train_step(
        graphdef, rest, tx, terms, schedule, mesh, skip_nonfinite=config.train.skip_nonfinite
    )
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
            "num_classes": source.num_classes,
            "model": _model_fingerprint(config),
        }

    skipped = 0
    last: dict[str, float] = {}
    started = time.perf_counter()
    try:
        with _SigtermFlag() as sigterm:
            for step in range(start_step, total_steps):
                local = next(batches)
                batch = data_lib.make_global_batch(
                    {k: v for k, v in local.items() if k in BATCH_FIELDS}, mesh
                )
                state, logged = step_fn(state, batch)
                done = step + 1
                if not bool(logged["finite"]):
                    host = {k: float(v) for k, v in jax.device_get(logged).items()}
                    terms_text = ", ".join(
                        f"{k}={v:.6g}" for k, v in host.items() if k.startswith("loss")
                    )
                    if not config.train.skip_nonfinite:
                        raise NonFiniteLoss(
                            f"non-finite loss or gradient at step {done} ({terms_text}, "
                            f"grad_norm={host['grad_norm']:.6g}); the last good checkpoint is "
                            f"kept in {checkpointer.directory}. Set "
                            "--config.train.skip_nonfinite=True to skip such steps instead."
                        )
                    skipped += 1
                    logger.message(f"skipped non-finite step {done} ({terms_text})")
                if done % config.train.log_every == 0 or done == total_steps:
                    last = {k: float(v) for k, v in jax.device_get(logged).items()}
                    last["images_per_s"] = logger.throughput(done)
                    last["skipped_steps"] = float(skipped)
                    logger.write(done, last)
                if done % config.train.checkpoint_every == 0 or done == total_steps:
                    checkpointer.save(done, state, meta(done))
                if sigterm.raised:
                    checkpointer.save(done, state, meta(done))
                    checkpointer.wait()
                    raise Preempted(done)
        checkpointer.wait()
    finally:
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
