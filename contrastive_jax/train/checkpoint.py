"""Orbax checkpoints of the training state in ``<workdir>/checkpoints``.

Each checkpoint holds two items: ``state`` (the pytree of arrays: parameters,
batch statistics, optimiser state, step, RNG) and ``meta`` (JSON: step, input
position, the config that produced it). Saves are asynchronous; the last
``max_to_keep`` are kept. :meth:`Checkpointer.restore_latest` walks back from
the newest checkpoint and skips (and reports) any it cannot read.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

CHECKPOINT_DIR = "checkpoints"


class CheckpointError(RuntimeError):
    """No usable checkpoint where one was required."""


def checkpoint_dir(workdir: str) -> str:
    return os.path.join(os.path.abspath(workdir), CHECKPOINT_DIR)


class Checkpointer:
    """Saves and restores (state, meta) pairs with an Orbax ``CheckpointManager``."""

    def __init__(
        self,
        workdir: str,
        *,
        max_to_keep: int = 3,
        asynchronous: bool = True,
    ) -> None:
        if max_to_keep < 1:
            raise ValueError(f"checkpoint max_to_keep must be >= 1, got {max_to_keep}")
        self.directory = checkpoint_dir(workdir)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            enable_async_checkpointing=asynchronous,
            create=True,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def steps(self) -> list[int]:
        """Steps of the finalised checkpoints, oldest first."""
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Starts an (asynchronous) save of ``state`` and ``meta`` at ``step``."""
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
        """Restores the checkpoint at ``step`` into the structure of ``abstract_state``."""
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()
            ),
        )
        return restored.state, dict(restored.meta)

    def restore_meta(self, step: int) -> dict:
        """Only the JSON item of the checkpoint at ``step``."""
        restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(restored.meta)

    def restore_latest(self, abstract_state: Any) -> tuple[Any, dict] | None:
        """The newest checkpoint that restores, or None if there is none.

        A checkpoint that fails to restore (truncated, incomplete, corrupt) is
        reported and skipped in favour of the previous one.
        """
        for step in reversed(self.steps()):
            try:
                return self.restore(step, abstract_state)
            except Exception as err:  # noqa: BLE001 - any read failure means "damaged"
                logging.warning(
                    "checkpoint at step %d in %s cannot be restored (%s: %s); trying an older one",
                    step,
                    self.directory,
                    type(err).__name__,
                    err,
                )
        return None

    def wait(self) -> None:
        """Blocks until pending asynchronous saves are written."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of a pytree of arrays, for restoring into."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)
