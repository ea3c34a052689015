"""Run bookkeeping and reporting shared by the reproduction drivers (no training code).

A driver builds an ``ml_collections`` config, pretrains with the library
(:func:`pretrain`, i.e. :func:`contrastive_jax.train.loop.train`, Orbax checkpoints in
the run's work directory), embeds the splits with the frozen network at the steps it
probes (:func:`embeddings_at`, :func:`initial_embeddings`), probes them with
:mod:`contrastive_jax.eval.checkpoint`, and writes per-run JSON, tables and plots with the
helpers here.

A *run* is one (setting, method, seed) triple. Its result is one JSON file,
``<out>/runs/<setting>/<method>/seed<k>.json``, written atomically when the run
finishes; drivers skip runs whose JSON exists, and an unfinished run resumes from
the newest checkpoint of its work directory (``<out>/work/...``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

#: Stored in every per-run JSON of a driver on the library's trainer, and part of the budget a
#: stored run must match: a record of the former hand-made stack (no such field) is refused
#: instead of being skipped as done.
TRAINER = "contrastive_jax.train.loop"


def run_path(out: Path, setting: str, method: str, seed: int) -> Path:
    """Where the result JSON of one (setting, method, seed) run lives."""
    return Path(out) / "runs" / setting / method / f"seed{seed}.json"


def work_path(out: Path, setting: str, method: str, seed: int) -> Path:
    """The library's work directory (checkpoints, metrics.jsonl) of one run."""
    return Path(out) / "work" / setting / method / f"seed{seed}"


def save_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically (temporary file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_json(path: Path) -> Any | None:
    """The JSON content of ``path``, or None if it does not exist."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1; 0 for a single value)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("`values` must not be empty")
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return float(arr.mean()), std


def stat(values: Sequence[float]) -> dict:
    """``{"mean", "std", "n", "values"}`` of ``values`` (sample std, ddof = 1; 0 for one value)."""
    mean, std = mean_std(values)
    return {"mean": mean, "std": std, "n": len(values), "values": [float(v) for v in values]}


def fmt_mean_std(values: Sequence[float], digits: int = 3) -> str:
    """``"m ± s"`` with ``digits`` decimals."""
    m, s = mean_std(values)
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


class Progress:
    """Console progress lines with elapsed wall time and a simple ETA."""

    def __init__(self, total: int, name: str):
        self.total, self.name, self.done, self.start = total, name, 0, time.time()

    def log(self, message: str, finished: bool = True) -> None:
        """Print ``message``; count one more finished unit if ``finished``."""
        self.done += int(finished)
        elapsed = time.time() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else math.nan
        print(
            f"[{self.name} {self.done}/{self.total} {elapsed:6.0f}s eta {eta:5.0f}s] {message}",
            flush=True,
        )


def load_finished(path: Path, budget: dict[str, Any], progress: Progress,
                  label: str) -> dict | None:
    """The stored record of a finished run at ``path`` (logged as skipped), or None.

    Raises:
      ValueError: the stored run's ``budget`` fields (epochs, batch, ...) differ from
        ``budget``; runs of different budgets must not be mixed in one table.
    """
    done = load_json(path)
    if done is None:
        return None
    stored = {k: done.get(k) for k in budget}
    if stored != budget:
        raise ValueError(f"{path} holds a run with {stored}, not {budget}: runs of different "
                         "budgets must not be mixed")
    progress.log(f"{label}: done, skipped")
    return done


#: The --quick budget of the CIFAR proxies: epochs, training and test images (seed 0 only).
QUICK_EPOCHS, QUICK_TRAIN, QUICK_TEST = 2, 256, 200


def parse_cifar_options(parser: argparse.ArgumentParser, argv: list[str] | None, *, epochs: int,
                        images: tuple[int, int], default_out: Path, quick_out: Path,
                        quick_note: str = "") -> argparse.Namespace:
    """Adds the options every CIFAR proxy driver shares to ``parser`` (after its own), parses
    ``argv`` and checks them.

    The options: ``--seeds`` (default 0 1 2), ``--epochs`` (default ``epochs``), ``--quick``
    (:data:`QUICK_EPOCHS` epochs, seed 0, :data:`QUICK_TRAIN` / :data:`QUICK_TEST` images;
    ``quick_note`` ends its help), ``--aggregate_only``, ``--out`` (default ``default_out``,
    with ``--quick`` ``quick_out``; created) and ``--data_dir`` (the CIFAR-10 image folder,
    needed unless ``--aggregate_only``).

    Returns:
      The parsed arguments with the ``--quick`` budget applied, plus ``num_train`` and
      ``num_test``: ``images`` (training, test), or the quick ones.
    """
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_EPOCHS} epochs, seed 0, "
                             f"{QUICK_TRAIN}/{QUICK_TEST} images{quick_note}")
    parser.add_argument("--aggregate_only", action="store_true",
                        help="train nothing; summarise the finished runs")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results directory (default {default_out}; --quick: {quick_out})")
    parser.add_argument("--data_dir", type=Path, default=None,
                        help="CIFAR-10 image folder <root>/{train,test}/<class>/<image> "
                             "(needed unless --aggregate_only)")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1, got {args.epochs}")
    if not args.aggregate_only and (args.data_dir is None or not args.data_dir.is_dir()):
        parser.error(f"--data_dir {args.data_dir}: give a CIFAR-10 image folder "
                     "<root>/{train,test}/<class>/<image>")
    args.num_train, args.num_test = images
    if args.quick:
        args.epochs, args.seeds = QUICK_EPOCHS, [0]
        args.num_train, args.num_test = QUICK_TRAIN, QUICK_TEST
    if args.out is None:
        args.out = quick_out if args.quick else default_out
    args.out.mkdir(parents=True, exist_ok=True)
    return args


# ----------------------------------------------------------------------------- library calls


def steps_per_epoch(config: ml_collections.ConfigDict) -> int:
    """Optimiser steps per epoch of ``config`` (the trainer drops each epoch's last partial batch)."""
    from contrastive_jax import data

    return data.load_source(config.data).split("train").num_examples // int(
        config.data.global_batch_size
    )


def schedule_checkpoints(config: ml_collections.ConfigDict, total_steps: int,
                         probe_steps: Sequence[int]) -> ml_collections.ConfigDict:
    """``config`` set to run ``total_steps`` and keep a checkpoint at every step of ``probe_steps``.

    Checkpoints are written every ``gcd(probe_steps)`` steps and all of them are kept.
    """
    if not probe_steps or min(probe_steps) < 1 or max(probe_steps) > total_steps:
        raise ValueError(f"probe steps {list(probe_steps)} must lie in [1, {total_steps}]")
    every = math.gcd(*map(int, probe_steps))
    config = ml_collections.ConfigDict(config.to_dict())
    config.train.total_steps = int(total_steps)
    config.train.checkpoint_every = every
    config.train.keep_checkpoints = total_steps // every + 1
    return config


def pretrain(config: ml_collections.ConfigDict, workdir: Path) -> dict:
    """Pretrains (or resumes) with the library's trainer; a finished run returns at once."""
    from contrastive_jax.train import loop

    return loop.train(config, str(workdir))


def train_or_diverge(config: ml_collections.ConfigDict, workdir: Path, progress: Progress,
                     label: str, verb: str = "pretraining") -> bool:
    """:func:`pretrain` ``config`` in ``workdir`` (logged as ``"<label>: <verb> in <workdir>"``).

    Returns:
      True if the loss turned non-finite (:class:`contrastive_jax.errors.NonFiniteLoss`,
      logged), False when the run reached its last step.
    """
    from contrastive_jax.errors import NonFiniteLoss

    progress.log(f"{label}: {verb} in {workdir}", finished=False)
    try:
        pretrain(config, workdir)
    except NonFiniteLoss as err:
        progress.log(f"{label}: {err}", finished=False)
        return True
    return False


def embeddings_at(workdir: Path, step: int, splits: Sequence[str], source=None) -> dict:
    """Encoder features of ``splits`` from the checkpoint at ``step`` of ``workdir``.

    Returns ``{split: contrastive_jax.eval.embed.Embedded}`` (features [N, F], labels [N]).
    """
    from contrastive_jax.eval.embed import embed_split
    from contrastive_jax.train.checkpoint import CHECKPOINT_DIR
    from contrastive_jax.train.pretrained import load_pretrained

    run = load_pretrained(str(Path(workdir) / CHECKPOINT_DIR / str(step)))
    return {s: embed_split(run.network, run.config.data, s, source=source) for s in splits}


def initial_embeddings(config: ml_collections.ConfigDict, splits: Sequence[str],
                       source=None) -> dict:
    """Encoder features of ``splits`` from the network ``config`` initialises (its seed)."""
    from contrastive_jax import data
    from contrastive_jax.eval.embed import embed_split
    from contrastive_jax.train.spec import parse
    from contrastive_jax.train.step import build_model

    source = data.load_source(config.data) if source is None else source
    network = build_model(parse(config).model, seed=config.seed).network
    network.eval()
    return {s: embed_split(network, config.data, s, source=source) for s in splits}


def read_losses(workdir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(steps, losses) logged in ``workdir/metrics.jsonl``; a resumed step keeps its last entry."""
    by_step: dict[int, float] = {}
    with open(Path(workdir) / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if "loss" in record:
                by_step[int(record["step"])] = float(record["loss"])
    steps = np.array(sorted(by_step), dtype=np.int64)
    return steps, np.array([by_step[s] for s in steps], dtype=np.float64)


def epoch_mean_losses(workdir: Path, steps_per_epoch: int) -> list[float]:
    """Mean logged loss of each epoch (steps ``e S + 1 .. (e + 1) S``) of a run logged every step."""
    steps, values = read_losses(workdir)
    epochs = (steps - 1) // steps_per_epoch
    return [float(values[epochs == e].mean()) for e in np.unique(epochs)]


def checkpoint_steps(workdir: Path) -> list[int]:
    """Steps of the checkpoints in the work directory ``workdir`` (sorted)."""
    from contrastive_jax.train.checkpoint import CHECKPOINT_DIR

    folder = Path(workdir) / CHECKPOINT_DIR
    if not folder.exists():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def pretrain_and_probe(
    config: ml_collections.ConfigDict,
    workdir: Path,
    *,
    epochs: int,
    probes: Sequence[int],
    splits: Sequence[str],
    probe,
    progress: Progress,
    label: str,
    source=None,
) -> dict:
    """Pretrains ``config`` for ``epochs`` with the library, then probes the probe epochs.

    Checkpoints are kept at the end of every epoch of ``probes``; each is embedded
    (``splits``, frozen encoder features) and passed to ``probe(epoch, embeddings)``,
    which returns a JSON-able record. A run whose loss turns non-finite
    (:class:`contrastive_jax.errors.NonFiniteLoss`) is probed at the checkpoints it
    reached, then ``probe(epoch, None)`` records the first probe epoch it missed.

    Returns:
      ``{"probes": [...], "diverged": bool, "epoch_losses": [...], "seconds": float}``.
    """
    from contrastive_jax import data
    source = data.load_source(config.data) if source is None else source
    per_epoch = source.split("train").num_examples // int(config.data.global_batch_size)
    config = schedule_checkpoints(config, epochs * per_epoch, [e * per_epoch for e in probes])
    start = time.time()
    diverged = train_or_diverge(config, workdir, progress, label)
    saved = set(checkpoint_steps(workdir))
    records = []
    for epoch in probes:
        if epoch * per_epoch not in saved:
            records.append(probe(epoch, None))
            break
        records.append(probe(epoch, embeddings_at(workdir, epoch * per_epoch, splits, source)))
        progress.log(f"{label}: epoch {epoch} probe {records[-1]['summary']}", finished=False)
    return {
        "probes": records,
        "diverged": diverged,
        "epoch_losses": epoch_mean_losses(workdir, per_epoch),
        "seconds": time.time() - start,
    }


def labelled_probe(seed: int, shots: int = 5, resamples: int = 1000):
    """``probe(epoch, {"train", "test"} embeddings or None)``: logistic-probe test accuracy
    trained on all labels (``full``) and on ``shots`` per class (``shot<k>``), each with a 95 %
    bootstrap interval (:func:`experiments.reproduce._probes.logistic_probe`); None records a
    diverged run."""
    from experiments.reproduce import _probes

    few_name = f"shot{shots}"

    def probe(epoch: int, emb: dict | None) -> dict:
        record: dict = {"epoch": epoch}
        if emb is None:
            record.update({"full": None, few_name: None, "summary": "diverged"})
            return record
        train, test = emb["train"], emb["test"]
        few = _probes.few_shot_rows(train.labels, shots, seed)
        for name, rows in (("full", slice(None)), (few_name, few)):
            record[name] = _probes.logistic_probe(
                train.features[rows], train.labels[rows], test.features, test.labels,
                resamples=resamples, seed=seed,
            )
        record["summary"] = (f"full {record['full']['accuracy']:.3f} "
                             f"{shots}-shot {record[few_name]['accuracy']:.3f}")
        return record

    return probe


def final(result: dict) -> dict:
    """The last probe record of a run."""
    return result["probes"][-1]


def accuracy(result: dict, which: str, probe: dict | None = None) -> float:
    """Probe accuracy ``which`` (``full`` / ``shot5``) of ``probe`` (default: the run's last);
    NaN for a diverged run."""
    rec = probe or final(result)
    return float("nan") if rec.get(which) is None else rec[which]["accuracy"]


def summarise_probes(results: dict[tuple[str, str], list[dict]]) -> tuple[str, dict]:
    """Markdown table and JSON summary of the final probe accuracies of runs probed with
    :func:`labelled_probe` (5 shots), one row per ``(setting, method)`` key of ``results``
    (its runs over seeds): mean ± std of ``full`` and ``shot5``, and each seed's 95 % CI.

    Returns:
      ``(table, {"<setting>/<method>": {"full": (mean, std), "shot5": (mean, std),
      "seeds": [...]}})``.
    """
    summary, rows = {}, []
    for (setting, method), runs in results.items():
        full = [accuracy(r, "full") for r in runs]
        shot = [accuracy(r, "shot5") for r in runs]
        cis = " ".join(
            f"[{final(r)['full']['low']:.3f}, {final(r)['full']['high']:.3f}]"
            for r in runs if final(r).get("full"))
        summary[f"{setting}/{method}"] = {"full": mean_std(full), "shot5": mean_std(shot),
                                          "seeds": [r["seed"] for r in runs]}
        rows.append([setting, method, len(runs), fmt_mean_std(full), fmt_mean_std(shot), cis])
    header = ["setting", "method", "seeds", "full-label acc", "5-shot acc",
              "95 % bootstrap CI (full, per seed)"]
    return markdown_table(header, rows), summary


def projections(config: ml_collections.ConfigDict, split: str, *, workdir: Path | None = None,
                step: int | None = None, source=None):
    """Projection-head outputs (the space the loss shaped) of ``split``, network in eval mode.

    From the checkpoint at ``step`` of ``workdir``, or, without ``workdir``, from the network
    ``config`` initialises (its seed). Returns :class:`contrastive_jax.eval.embed.Embedded`
    (features [N, D] = the projections, labels [N]).
    """
    from contrastive_jax import data
    from contrastive_jax.eval.embed import embed_split
    from contrastive_jax.train.checkpoint import CHECKPOINT_DIR
    from contrastive_jax.train.pretrained import load_pretrained
    from contrastive_jax.train.spec import parse
    from contrastive_jax.train.step import build_model

    source = data.load_source(config.data) if source is None else source
    if workdir is None:
        network = build_model(parse(config).model, seed=config.seed).network
        network.eval()
    else:
        network = load_pretrained(str(Path(workdir) / CHECKPOINT_DIR / str(step))).network
    return embed_split(network, config.data, split, output="projections", source=source)


# ----------------------------------------------------------------------------- SINCERE claim


def pack_bits(correct: np.ndarray) -> str:
    """Per-example correctness (bool [N]) as a hex string, for paired tests between runs."""
    return np.packbits(np.asarray(correct, bool)).tobytes().hex()


def unpack_bits(text: str, n: int) -> np.ndarray:
    """The bool [n] correctness :func:`pack_bits` stored."""
    return np.unpackbits(np.frombuffer(bytes.fromhex(text), np.uint8))[:n].astype(bool)


def loss_references(train_labels: np.ndarray, batch: int, views: int, seed: int = 0) -> dict:
    """Reference values of SupCon and SINCERE on random ``batch``-image batches
    (docs/reproductions.md, "SINCERE protocol").

    Over 2,000 batches drawn without replacement from ``train_labels`` (n = views * batch
    embeddings each), the anchor-weighted means of ``log |P_t|`` (SupCon's floor),
    ``log(n - 1)`` (SupCon at constant embeddings), ``log(1 + |N_t|)`` (SINCERE at constant
    embeddings) and of ``|P_t|`` (same-class views per anchor).
    """
    rng = np.random.default_rng(seed)
    k = int(train_labels.max()) + 1
    floors, const_sincere, positives = [], [], []
    for _ in range(2000):
        counts = np.bincount(rng.choice(train_labels, batch, replace=False), minlength=k) * views
        weights = counts / counts.sum()
        present = counts > 0
        pos = counts[present] - 1
        floors.append(np.sum(weights[present] * np.log(np.maximum(pos, 1))))
        const_sincere.append(np.sum(weights[present] * np.log1p(views * batch - counts[present])))
        positives.append(np.sum(weights[present] * pos))
    return {
        "supcon_floor": float(np.mean(floors)),
        "supcon_constant": float(np.log(views * batch - 1)),
        "sincere_constant": float(np.mean(const_sincere)),
        "positives_per_anchor": float(np.mean(positives)),
    }


def class_similarities(z: np.ndarray, labels: np.ndarray, num_classes: int,
                       hist_class: int) -> dict:
    """Class-by-class mean cosine similarity ``M_ab`` of ``z`` [N, D] (SINCERE Fig. 2;
    :func:`contrastive_jax.metrics.class_similarity_matrix`), its mean diagonal / off-diagonal
    (``mean_within`` / ``mean_between``), and the mean within-class and class-vs-rest cosine of
    class ``hist_class`` (Fig. 3)."""
    from contrastive_jax import metrics

    matrix = metrics.class_similarity_matrix(z, labels, num_classes)
    within, between = metrics.within_between_similarities(z, labels, hist_class % num_classes)
    return {
        "matrix": np.round(matrix, 6).tolist(),
        **metrics.similarity_summary(matrix),
        "hist_class_within": float(within.mean()),
        "hist_class_between": float(between.mean()),
    }


def pm(s: dict, digits: int = 3) -> str:
    """``"mean ± std"`` of a :func:`stat` record."""
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


#: The two losses of the SINCERE claim, in table order.
SINCERE_LOSSES = ("sincere", "supcon")


def compare_sincere_supcon(pairs: Sequence[tuple[dict, dict]], resamples: int = 1000) -> dict:
    """Mean ± std over seeds of every statistic of the SINCERE claim, and paired tests.

    Args:
      pairs: one ``(sincere_record, supcon_record)`` per seed, each with ``references``
        (:func:`loss_references`), ``num_test``, ``loss_initial``, ``loss_final``,
        ``similarity`` (``{"projection" | "encoder": class_similarities(...)}``) and
        ``linear`` (``{"top1" | "top5": bootstrap accuracy + "bits"}``).
      resamples: of the paired bootstrap of SINCERE - SupCon (seed 0).

    Returns:
      ``{"seeds", "references", "sincere", "supcon", "supcon_minus_sincere",
      "paired_sincere_minus_supcon"}`` (accuracies in %), what :func:`sincere_tables` prints.
    """
    from contrastive_jax import eval as eval_lib

    entry: dict = {"seeds": len(pairs), "references": pairs[0][0]["references"]}
    for i, loss in enumerate(SINCERE_LOSSES):
        rs = [p[i] for p in pairs]
        entry[loss] = {
            "loss_initial": stat([r["loss_initial"] for r in rs]),
            "loss_final": stat([r["loss_final"] for r in rs]),
            **{f"{space}_{key}": stat([r["similarity"][space][key] for r in rs])
               for space in ("projection", "encoder") for key in ("mean_within", "mean_between")},
            **{f"linear_{top}": stat([100 * r["linear"][top]["accuracy"] for r in rs])
               for top in rs[0]["linear"]},
            "linear_per_seed": [{top: {k: 100 * v[k] for k in ("accuracy", "low", "high")}
                                 for top, v in r["linear"].items()} for r in rs],
        }
    entry["supcon_minus_sincere"] = {
        f"{space}_{key}": stat([sup["similarity"][space][key] - sin["similarity"][space][key]
                                for sin, sup in pairs])
        for space in ("projection", "encoder") for key in ("mean_within", "mean_between")
    }
    paired = {}
    for top in pairs[0][0]["linear"]:
        tests = []
        for sin, sup in pairs:
            n = sin["num_test"]
            d = eval_lib.paired_bootstrap_difference(
                unpack_bits(sin["linear"][top]["bits"], n), unpack_bits(sup["linear"][top]["bits"], n),
                resamples=resamples, seed=0,
            )
            tests.append({k: (100 * v if k != "significant" else v) for k, v in d.items()})
        paired[top] = tests
    entry["paired_sincere_minus_supcon"] = paired
    return entry


def sincere_tables(summary: dict) -> str:
    """Markdown tables of ``{"b<batch>": compare_sincere_supcon(...)}`` (mean ± std over seeds):
    losses against their references (Table 1), class similarities (Fig. 2), linear probe
    accuracy (Table 2) and the paired bootstrap of SINCERE - SupCon."""
    lines = []
    for key, e in summary.items():
        ref = e["references"]
        lines += [
            f"### batch {key[1:]} ({e['seeds']} seeds; mean same-class partners per anchor "
            f"|P_t| = {ref['positives_per_anchor']:.1f})",
            "",
            "| loss | initial loss | final loss | constant-embedding value | SupCon floor "
            "E log|P_t| |",
            "|---|---|---|---|---|",
        ]
        for loss in SINCERE_LOSSES:
            floor = f"{ref['supcon_floor']:.3f}" if loss == "supcon" else "0"
            lines.append(f"| {loss} | {pm(e[loss]['loss_initial'])} | {pm(e[loss]['loss_final'])} "
                         f"| {ref[f'{loss}_constant']:.3f} | {floor} |")
        lines += ["", "| loss | space | within | between |", "|---|---|---|---|"]
        for loss in SINCERE_LOSSES:
            for space in ("projection", "encoder"):
                lines.append(f"| {loss} | {space} | {pm(e[loss][f'{space}_mean_within'])} "
                             f"| {pm(e[loss][f'{space}_mean_between'])} |")
        for space in ("projection", "encoder"):
            d = e["supcon_minus_sincere"]
            lines.append(f"| SupCon − SINCERE | {space} | {pm(d[f'{space}_mean_within'])} "
                         f"| {pm(d[f'{space}_mean_between'])} |")
        tops = list(e["paired_sincere_minus_supcon"])
        lines += ["", "| loss | " + " | ".join(f"{t} mean ± std (%)" for t in tops)
                  + " | per-seed " + " / ".join(tops) + " [95 % CI] |",
                  "|---|" + "---|" * (len(tops) + 1)]
        for loss in SINCERE_LOSSES:
            per_seed = "; ".join(
                " / ".join(f"{s[t]['accuracy']:.2f} [{s[t]['low']:.2f}, {s[t]['high']:.2f}]"
                           for t in tops)
                for s in e[loss]["linear_per_seed"])
            lines.append(f"| {loss} | " + " | ".join(pm(e[loss][f"linear_{t}"], 2) for t in tops)
                         + f" | {per_seed} |")
        lines += ["", "| paired SINCERE − SupCon (pp) | per seed: diff [95 % CI] |", "|---|---|"]
        for t in tops:
            cells = "; ".join(f"{d['diff']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"
                              + (" significant" if d["significant"] else "")
                              for d in e["paired_sincere_minus_supcon"][t])
            lines.append(f"| {t} | {cells} |")
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- classifier runs


def classifier_test(workdir: Path, step: int, source, *, temperature: float = 1.0,
                    num_bins: int = 15, resamples: int = 1000, seed: int = 0) -> dict:
    """Test metrics of a classifier head at ``step`` of ``workdir``
    (:func:`contrastive_jax.eval.checkpoint.evaluate_classifier`), with the per-example top-1/top-5
    correctness (:func:`pack_bits` ``bits``) and confidence (max probability of
    ``softmax(logits / temperature)``, rounded to 1e-6) for paired bootstraps."""
    from contrastive_jax import eval as eval_lib
    from contrastive_jax.eval import checkpoint
    from contrastive_jax.train.checkpoint import CHECKPOINT_DIR

    record, scored = checkpoint.evaluate_classifier(
        str(Path(workdir) / CHECKPOINT_DIR / str(step)), temperature=temperature,
        num_bins=num_bins, resamples=resamples, seed=seed, source=source)
    for k in (1, 5):
        correct = eval_lib.topk_correct(scored.features, scored.labels, k)
        record[f"top{k}"]["bits"] = pack_bits(correct)
    probs = checkpoint.softmax(scored.features, temperature)
    record["confidence"] = [round(float(c), 6) for c in probs.max(axis=1)]
    return record


def correct_bits(test: dict, which: str = "top1") -> np.ndarray:
    """Per-example correctness bool [N] stored in a :func:`classifier_test` record."""
    return unpack_bits(test[which]["bits"], len(test["confidence"]))


def train_classifier(config: ml_collections.ConfigDict, workdir: Path, *, epochs: int, source,
                     progress: Progress, label: str, temperature: float = 1.0,
                     num_bins: int = 15) -> dict:
    """Trains (or resumes) a classifier ``config`` for ``epochs`` with the library, then scores
    its head on the test split (:func:`classifier_test`) from the final checkpoint.

    A run whose loss turns non-finite (:class:`contrastive_jax.errors.NonFiniteLoss`) is
    recorded as diverged, with no test record.

    Returns:
      ``{"test": record or None, "diverged": bool, "epoch_losses": [...], "final_step": int,
      "seconds": float}``.
    """
    per_epoch = source.split("train").num_examples // int(config.data.global_batch_size)
    total = epochs * per_epoch
    config = schedule_checkpoints(config, total, [total])
    start = time.time()
    diverged = train_or_diverge(config, workdir, progress, label, "training")
    test = None if diverged else classifier_test(
        workdir, total, source, temperature=temperature, num_bins=num_bins, seed=0)
    return {"test": test, "diverged": diverged,
            "epoch_losses": epoch_mean_losses(workdir, per_epoch), "final_step": total,
            "seconds": time.time() - start}


def classifier_summary(test: dict | None) -> str:
    """One-line summary of a :func:`classifier_test` record (None: diverged)."""
    if test is None:
        return "diverged"
    return (f"top-1 {test['top1']['accuracy']:.3f} top-5 {test['top5']['accuracy']:.3f} "
            f"ECE {test['ece']:.3f} NLL {test['nll']:.3f}")
