"""Weighted k-nearest-neighbour classifier on frozen features (Wu et al. 2018, InstDisc).

"Unsupervised Feature Learning via Non-Parametric Instance Discrimination" (Wu, Xiong, Yu,
Lin, CVPR 2018): features are L2-normalised, a query ``q`` takes the ``k`` train features with
the highest cosine similarity ``s_i = q . x_i``, each neighbour votes for its class with weight
``exp(s_i / tau)``, and class ``c`` scores

    w_c = sum_{i in top-k(q)} exp(s_i / tau) * [y_i = c].

Defaults: ``k = 20``, ``tau = 0.07`` (larger banks often use k = 200). The returned scores
are the votes normalised per query, ``p_c = w_c / sum_c' w_c'``, computed with weights
``exp((s_i - s_1) / tau)``, ``s_1`` the top similarity, so no temperature overflows float32.
Normalising by a positive per-query constant keeps the ranking of the classes, hence the
top-1/top-5 accuracy, of ``w_c``.

Memory: queries are processed ``chunk_size`` at a time against the whole train bank, so the
peak is one ``[chunk_size, M]`` float32 similarity block (1024 x 50,000 -> 205 MB).
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np


def _l2_rows(x: jax.Array) -> jax.Array:
    return x / jnp.maximum(jnp.linalg.norm(x, axis=1, keepdims=True), 1e-12)


@partial(jax.jit, static_argnames=("num_classes", "k", "chunk_size"))
def _knn_scores(
    bank: jax.Array,
    bank_y: jax.Array,
    queries: jax.Array,
    temperature: jax.Array,
    *,
    num_classes: int,
    k: int,
    chunk_size: int,
) -> jax.Array:
    bank = _l2_rows(bank)
    n, f = queries.shape
    chunks = math.ceil(n / chunk_size)
    padded = jnp.zeros((chunks * chunk_size, f), queries.dtype).at[:n].set(queries)

    def one_chunk(q: jax.Array) -> jax.Array:
        sims, idx = jax.lax.top_k(_l2_rows(q) @ bank.T, k)
        # max instead of sims[:, :1]: a second slice of the sorted similarities stops XLA from
        # rewriting top_k into its fast TopK kernel (a full sort of [chunk, M] is ~10x slower).
        weights = jnp.exp((sims - jnp.max(sims, axis=1, keepdims=True)) / temperature)
        votes = jnp.einsum("qk,qkc->qc", weights, jax.nn.one_hot(bank_y[idx], num_classes))
        return votes / jnp.sum(votes, axis=1, keepdims=True)

    scores = jax.lax.map(one_chunk, padded.reshape(chunks, chunk_size, f))
    return scores.reshape(chunks * chunk_size, num_classes)[:n]


def knn_scores(
    train_x: np.ndarray | jax.Array,
    train_y: np.ndarray | jax.Array,
    test_x: np.ndarray | jax.Array,
    *,
    num_classes: int,
    k: int = 20,
    temperature: float = 0.07,
    chunk_size: int = 1024,
) -> np.ndarray:
    """Weighted kNN class scores of ``test_x`` against the bank ``(train_x, train_y)``.

    Args:
      train_x: float [M, F] bank features (L2-normalised inside).
      train_y: int [M] bank labels in ``[0, num_classes)``.
      test_x: float [N, F] query features (L2-normalised inside).
      num_classes: K.
      k: neighbours per query, ``1 <= k <= M``.
      temperature: tau of the weights ``exp(s / tau)``.
      chunk_size: queries per similarity block.

    Returns:
      float32 [N, K] normalised class votes ``p_c`` (rows sum to 1); feed to
      :func:`contrastive_jax.eval.topk_correct`. Ties in similarity are resolved as
      ``lax.top_k`` does (lower bank index first).
    """
    for name, x in (("train_x", train_x), ("test_x", test_x)):
        if getattr(x, "ndim", None) != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"`{name}` must be a float array of shape [N, F]")
    if train_x.shape[1] != test_x.shape[1]:
        raise ValueError(
            f"`train_x` and `test_x` must have the same feature size, got "
            f"{train_x.shape[1]} and {test_x.shape[1]}"
        )
    if getattr(train_y, "shape", None) != (train_x.shape[0],):
        raise ValueError(f"`train_y` must have shape [{train_x.shape[0]}]")
    if not 1 <= k <= train_x.shape[0]:
        raise ValueError(f"`k` must be in [1, M={train_x.shape[0]}], got {k}")
    if temperature <= 0 or chunk_size < 1:
        raise ValueError(
            f"`temperature` must be > 0 and `chunk_size` >= 1, got {temperature}, {chunk_size}"
        )
    scores = _knn_scores(
        jnp.asarray(train_x, jnp.float32),
        jnp.asarray(train_y, jnp.int32),
        jnp.asarray(test_x, jnp.float32),
        jnp.float32(temperature),
        num_classes=num_classes,
        k=k,
        chunk_size=min(chunk_size, test_x.shape[0]),
    )
    return np.asarray(scores)
