"""Online kNN monitor: weighted kNN top-1 of the encoder's features during pretraining.

An evaluator (:mod:`.evaluator`, registered as ``knn_monitor``): every
``config.train.eval_every`` steps (a multiple of ``log_every``; 0: off) the loop runs it on the
current network, and ``linear_eval --evaluators knn_monitor`` on a checkpoint's. It embeds a fixed *bank* of training examples and a fixed set of held-out *queries* with the
encoder in evaluation mode (batch norm on its running statistics, no dropout) and the
evaluation transform, and classifies each query by the temperature-weighted vote of its
``k`` nearest bank features under cosine similarity (Wu et al. 2018; the classifier is
:func:`contrastive_jax.eval.knn.knn_scores`):

    p_c(q) ∝ sum_{i in top-k(q)} exp(s_i / tau) [y_i = c],   s_i = cos(f(q), f(x_i)).

It returns ``knn_top1`` (the fraction of queries whose top class is their label) and
``knn_seconds`` (the wall time of the evaluation, embedding included), which the loop logs
beside the online linear probe's ``probe_accuracy`` in the progress bar, TensorBoard and
``metrics.jsonl``.

Data: the queries are the ``test`` split; a source without one gives its queries from the
training split, disjoint from the bank. The bank (``knn_bank_size`` examples, 0: the whole
training split) and the queries (``knn_query_size``, 0: the whole split) are class-balanced
subsets drawn once with ``config.data.data_seed`` (for a split streamed from TFDS records:
its first examples), so every evaluation of a run sees the same images. Labels are the
clean labels of the evaluation pipeline.

Embedding is :func:`contrastive_jax.eval.embed.embed_split` (one cached jit, shared with
evaluation). Every process runs the whole evaluation on its own devices (its copy of the
encoder's replicated parameters, its own copy of the bank and queries), so no collective
is needed and every process count gets the same numbers; only process 0 writes the logs.

References:
  Zhirong Wu, Yuanjun Xiong, Stella X. Yu and Dahua Lin (2018). Unsupervised Feature
  Learning via Non-Parametric Instance-level Discrimination. CVPR 2018, arXiv:1805.01978,
  Sec. 3.4 (weighted k-nearest-neighbour classifier).
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

import jax
import numpy as np
from flax import nnx

from contrastive_jax import data as data_lib
from contrastive_jax.errors import ConfigError
from contrastive_jax.eval.embed import embed_split
from contrastive_jax.eval.evaluator import Setup
from contrastive_jax.eval.knn import knn_scores


def _subset(split: data_lib.Split, size: int, seed: int, option: str,
            exclude: np.ndarray | None = None) -> data_lib.Split:
    """A class-balanced subset of ``size`` examples (0: all) of ``split``, avoiding ``exclude``."""
    # Records: the first examples (no labels in memory to balance).
    if split.streamed or split.labels is None:
        return split
    rows = np.arange(split.num_examples)
    if exclude is not None:
        rows = np.setdiff1d(rows, exclude)
    if size and size < len(rows):
        rows = rows[data_lib.class_balanced_subset(split.labels[rows], size, seed,
                                                   option=option)]
    return split.take(rows)


class KnnMonitor:
    """Weighted kNN top-1 of the encoder's features on a fixed bank and query set.

    Args:
      setup: the run (:class:`~contrastive_jax.eval.evaluator.Setup`): its train section's
        ``eval_every``, ``knn_k``, ``knn_temperature``, ``knn_bank_size`` and
        ``knn_query_size``, its data section's evaluation transform, ``data_seed`` and
        ``global_batch_size``, and its loaded source.

    Raises:
      ConfigError: ``knn_k`` larger than the bank, a dataset without labelled splits, or
        a source without a test split whose training split is streamed or too small for
        bank and queries.
    """

    metrics: ClassVar[tuple[str, ...]] = ("knn_top1", "knn_seconds")

    def __init__(self, setup: Setup) -> None:
        train, data, source = setup.spec.train, setup.spec.data, setup.source
        self.k = train.knn_k
        self.temperature = float(train.knn_temperature)
        bank_size, query_size = train.knn_bank_size, train.knn_query_size
        if source is None:
            raise ConfigError(
                f"config.train.eval_every={train.eval_every}: the online kNN monitor needs a dataset "
                f"with labelled splits, and {data.dataset!r} has none; set eval_every=0"
            )
        self.data = data
        self.num_classes = source.num_classes
        seed = data.data_seed
        train_split = source.split("train")
        if "test" in source.splits:
            self.query_split = _subset(source.split("test"), query_size, seed,
                                       "config.train.knn_query_size")
            self.queries_from = "test"
        else:  # no held-out split: queries are training examples outside the bank
            if train_split.streamed:
                raise ConfigError(
                    f"{source.name!r} has no test split and its training split is streamed; "
                    "the kNN monitor (config.train.eval_every) needs a held-out split"
                )
            query_size = query_size or max(1, train_split.num_examples // 5)
            self.query_split = _subset(train_split, query_size, seed + 1,
                                       "config.train.knn_query_size")
            self.queries_from = "train"
        exclude = None
        if self.queries_from == "train":
            exclude = np.flatnonzero(np.isin(train_split.example_ids(),
                                             self.query_split.example_ids()))
        self.bank_split = _subset(train_split, bank_size, seed, "config.train.knn_bank_size",
                                  exclude=exclude)
        self._sizes = {"bank": bank_size or self.bank_split.num_examples,
                       "query": query_size or self.query_split.num_examples}
        if self.bank_split.streamed:
            self._sizes["bank"] = min(self._sizes["bank"], self.bank_split.num_examples)
        if self.query_split.streamed:
            self._sizes["query"] = min(self._sizes["query"], self.query_split.num_examples)
        if not 1 <= self.k <= self._sizes["bank"]:
            raise ConfigError(
                f"config.train.knn_k={self.k} must be in [1, {self._sizes['bank']}] (the bank)"
            )
        self._source = dataclasses.replace(
            source, splits={"bank": self.bank_split, "query": self.query_split}
        )
        self._batch_size = -(-data.global_batch_size // jax.process_count())

    @property
    def sizes(self) -> dict[str, int]:
        """Examples in the bank and in the query set."""
        return dict(self._sizes)

    @classmethod
    def interval(cls, setup: Setup) -> int:
        """``config.train.eval_every`` (0: off)."""
        return setup.spec.train.eval_every

    def run(self, network: nnx.Module, step: int) -> dict[str, float]:
        """``{"knn_top1", "knn_seconds"}`` of ``network``'s encoder (blocks until computed)."""
        del step  # the same bank and queries at every step
        started = time.perf_counter()
        bank, query = (
            embed_split(network, self.data, split, batch_size=self._batch_size,
                        source=self._source, max_examples=self._sizes[split])
            for split in ("bank", "query")
        )
        scores = knn_scores(bank.features, bank.labels, query.features,
                            num_classes=self.num_classes, k=self.k, temperature=self.temperature)
        top1 = float(np.mean(np.argmax(scores, axis=1) == query.labels))
        return {"knn_top1": top1, "knn_seconds": time.perf_counter() - started}
