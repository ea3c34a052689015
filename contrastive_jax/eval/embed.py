"""Embed a whole split with a frozen network: features or projections, in split order.

    from contrastive_jax import data
    from contrastive_jax.eval import embed
    from contrastive_jax.train.pretrained import load_pretrained

    run = load_pretrained("runs/quickstart")
    source = data.load_source(run.config.data)
    test = embed.embed_split(run.network, run.config.data, "test", source=source)
    test.features, test.labels          # [N, F] float32, [N] int32

The network must be in evaluation mode (``load_pretrained`` returns it so):
BatchNorm then uses its running statistics, so an example's features do not
depend on the batch it sits in, and nothing in the network is updated.
Batches are sharded over this process's devices. The forward pass is one jitted
function for the whole module, cached by the network's structure and the batch shape,
so embedding split after split (or, in the online kNN monitor, the same bank and queries
at every evaluation) compiles once.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from contrastive_jax import data as data_lib
from contrastive_jax.parallel import DATA_AXIS

#: What :func:`embed_split` can return per example.
OUTPUTS = ("features", "projections")


class Embedded(NamedTuple):
    """A split passed through the network, padding removed.

    Attributes:
      features: float32 [N, F] encoder output (or head output for ``"projections"``).
      labels: int32 [N] clean class labels.
      index: int64 [N] example ids (rows of the split).
    """

    features: np.ndarray
    labels: np.ndarray
    index: np.ndarray


@functools.partial(jax.jit, static_argnums=(0, 1))
def _forward(graphdef: Any, output: str, state: Any, images: jax.Array) -> jax.Array:
    """Features or projections float32 [B, ...] of ``images`` by the network ``(graphdef, state)``."""
    features, projections = nnx.merge(graphdef, state)(images)
    return (features if output == "features" else projections).astype(jnp.float32)


def _on_local_devices(tree: Any, mesh: Mesh) -> Any:
    """``tree`` replicated on ``mesh`` (this process's devices).

    A leaf that is a global array spanning other processes' devices too (a replicated
    train state) contributes its copy on this process's first device.
    """
    sharding = NamedSharding(mesh, P())
    return jax.tree.map(
        lambda a: jax.device_put(
            a.addressable_data(0)
            if isinstance(a, jax.Array) and not a.is_fully_addressable else a,
            sharding,
        ),
        tree,
    )


def _eval_batches(data_config, split: str, batch_size: int, source):
    """This process's view of every batch of ``split`` (the whole split, in order)."""
    return data_lib.make_eval_iterator(
        data_config, split, batch_size, process_index=0, process_count=1, source=source
    )


def _row_info(batch: dict) -> dict:
    """The per-row fields :func:`_stack` keeps (not the images)."""
    return {k: batch[k] for k in ("valid", "label", "index")}


def _stack(rows: list[np.ndarray], batches: list[dict]) -> Embedded:
    """Concatenates per-batch outputs, dropping padded rows."""
    keep = [b["valid"] for b in batches]
    return Embedded(
        np.concatenate([r[k] for r, k in zip(rows, keep, strict=True)]).astype(np.float32),
        np.concatenate([b["label"][k] for b, k in zip(batches, keep, strict=True)]).astype(np.int32),
        np.concatenate([b["index"][k] for b, k in zip(batches, keep, strict=True)]),
    )


def pixel_split(
    data_config: ml_collections.ConfigDict,
    split: str,
    *,
    batch_size: int = 256,
    source: data_lib.Source | None = None,
) -> Embedded:
    """The raw evaluation images of ``split`` as features: [N, S·S·3] normalised pixels.

    The baseline a learned representation must beat: the same evaluation
    transform and normalisation the encoder sees, flattened.
    """
    batches, rows = [], []
    for batch in _eval_batches(data_config, split, batch_size, source):
        batches.append(_row_info(batch))
        rows.append(batch["image"].reshape(batch["image"].shape[0], -1))
    return _stack(rows, batches)


def embed_split(
    network: nnx.Module,
    data_config: ml_collections.ConfigDict,
    split: str,
    *,
    output: str = "features",
    batch_size: int = 256,
    source: data_lib.Source | None = None,
    max_examples: int | None = None,
) -> Embedded:
    """Runs every example of ``split`` through ``network`` once, in order.

    Every process embeds the whole split on its own devices (no collective); the network's
    arrays may be global arrays replicated over every process (a train state): each process
    uses its own copy.

    Args:
      network: a ``ContrastiveModel`` in eval mode (``network(x)`` ->
        (features, projections)).
      data_config: the data config of the run (image size, normalisation).
      split: a split of ``source``, e.g. ``"train"`` or ``"test"``.
      output: ``"features"`` (encoder output, what linear evaluation uses) or
        ``"projections"`` (the head output the loss saw).
      batch_size: images per forward pass; rounded up to a multiple of the
        local device count.
      source: an already loaded source (else loaded from ``data_config``).
      max_examples: embed only the split's first ``max_examples`` examples (None: all).

    Returns:
      :class:`Embedded` with one row per example of the split (or its first
      ``max_examples``).

    Raises:
      ValueError: a bad ``output``, ``batch_size`` < 1 or ``max_examples`` < 1.
    """
    if output not in OUTPUTS:
        raise ValueError(f"`output` must be one of {OUTPUTS}, got {output!r}")
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}")
    if max_examples is not None and max_examples < 1:
        raise ValueError(f"`max_examples` must be >= 1 or None, got {max_examples}")
    mesh = Mesh(np.asarray(jax.local_devices()), (DATA_AXIS,))
    sharding = NamedSharding(mesh, P(DATA_AXIS))
    batch_size = -(-batch_size // mesh.size) * mesh.size
    graphdef, state = nnx.split(network)
    state = _on_local_devices(state, mesh)
    iterator = _eval_batches(data_config, split, batch_size, source)
    if max_examples is not None:
        iterator = itertools.islice(iterator, math.ceil(max_examples / batch_size))
    batches, rows = [], []
    for batch in iterator:
        batches.append(_row_info(batch))
        images = jax.device_put(batch["image"], sharding)
        rows.append(np.asarray(_forward(graphdef, output, state, images)))
    embedded = _stack(rows, batches)
    if max_examples is not None:
        embedded = Embedded(*(a[:max_examples] for a in embedded))
    return embedded
