"""One process of ``test_tfds_multiprocess.py``: global batches of a streamed TFDS dataset.

    python -m tests.data.multiprocess_worker DATASET DATA_DIR OUT [ADDRESS NUM_PROCESSES PROCESS_ID]

Joins the job (gloo on CPU) when the last three arguments are given, draws 3
pretraining steps, builds each global batch with ``make_global_batch`` on a
mesh over every device of every process, and computes under ``jax.jit`` on the
sharded arrays the SupCon loss of a fixed random projection of the views.
Process 0 writes, per step, the global ``index`` (gathered to the host), a
checksum of the global views and the loss to ``OUT`` (``.npz``).
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from contrastive_jax import data
from contrastive_jax.losses import supcon
from contrastive_jax.parallel import initialize_distributed, make_mesh

STEPS = 3


def main(argv: list[str]) -> None:
    dataset, data_dir, out = argv[:3]
    if len(argv) > 3:
        initialize_distributed(argv[3], int(argv[4]), int(argv[5]), heartbeat_timeout_seconds=30)
    mesh = make_mesh()
    config = data.default_data_config()
    config.update(dataset=dataset, data_dir=data_dir, image_size=16, global_batch_size=16)
    iterator = data.make_pretrain_iterator(config, seed=5, start_step=2)
    projection = jax.random.normal(jax.random.PRNGKey(0), (16 * 16 * 3, 8))

    @jax.jit
    def summarise(views, label):
        b, v = views.shape[:2]
        z = views.reshape(b * v, -1) @ projection
        loss = supcon(z, jnp.repeat(label, v), temperature=0.5)
        return loss, jnp.sum(views * jnp.arange(views.size).reshape(views.shape) % 7)

    rows = {"index": [], "checksum": [], "loss": []}
    for _ in range(STEPS):
        local = next(iterator)
        batch = iterator.on_device(data.make_global_batch(
            {k: local[k] for k in ("views", "label", "index", "step")}, mesh))
        loss, checksum = summarise(batch["views"], batch["label"])
        rows["index"].append(multihost_utils.process_allgather(batch["index"], tiled=True))
        rows["checksum"].append(float(checksum))
        rows["loss"].append(float(loss))
    if jax.process_index() == 0:
        np.savez(out, **{k: np.asarray(v) for k, v in rows.items()})


if __name__ == "__main__":
    main(sys.argv[1:])
