"""Contrastive pretraining on every device of every process.

    python -m contrastive_jax.pretrain --config experiments/configs/sincere_cifar10.py \
        --workdir runs/sincere --config.data.global_batch_size=512

Multi-host: pass --coordinator_address=HOST:PORT --num_processes=N --process_id=I
to every process (or launch under SLURM / Open MPI / Cloud TPU, whose environment
``jax.distributed.initialize()`` reads by itself). Re-running the same command in
the same --workdir resumes from its newest checkpoint.

Exit codes: 0 done; 75 preempted by SIGTERM after saving a checkpoint (restart
to continue); 65 non-finite loss or gradient; 2 bad config or environment.
"""

from __future__ import annotations

import json
import logging
import sys

from absl import app, flags
from ml_collections import config_flags

from contrastive_jax.parallel import initialize_distributed

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file with get_config().")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and logs.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "HOST:PORT of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv: list[str]) -> int:
    del argv
    logging.getLogger("absl").setLevel(logging.WARNING)
    initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    from contrastive_jax.train import loop  # after distributed initialisation

    try:
        summary = loop.train(_CONFIG.value, _WORKDIR.value)
    except loop.Preempted as err:
        print(str(err), file=sys.stderr)
        return loop.EXIT_PREEMPTED
    except loop.NonFiniteLoss as err:
        print(f"error: {err}", file=sys.stderr)
        return loop.EXIT_NONFINITE
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in summary.items() if k != "metrics"}, indent=2))
    return 0


if __name__ == "__main__":
    app.run(main)
