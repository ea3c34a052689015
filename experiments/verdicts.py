"""Grades every headline claim of ``experiments/RESULTS.md`` from the committed run records.

    python -m experiments.verdicts            # every paired comparison, then every headline verdict
    python -m experiments.verdicts --check    # exit 1, naming the row, where RESULTS.md's
                                              # headline verdict is not the rule's

Reads only ``experiments/results/**`` (the per-run JSON the reproduction scripts write) and
applies the rule written at the top of RESULTS.md ("How a verdict is graded"):

* direction ("A beats B"): per-seed paired differences ``d`` (same seed, same data); the
  claim is *reproduced* when the two-sided paired t-test across seeds gives p < 0.05 and
  every seed has the paper's sign (all of 3; 9 of 10); *not reproduced* when the same holds
  for the opposite sign; otherwise *inconclusive*.
* equivalence ("A ≈ B", margin ``delta``): *reproduced* when the 90 % t-interval of the
  mean difference lies inside ``(-delta, delta)`` (two one-sided tests at 5 %); *not
  reproduced* when the 95 % t-interval excludes 0 and the 90 % interval leaves
  ``(-delta, delta)``; otherwise *inconclusive*.
* non-inferiority ("A at least as good as B"): *reproduced* when the 90 % interval's lower
  end is above ``-delta``; *not reproduced* when the 95 % interval lies below 0; otherwise
  *inconclusive*.
* large effect ("far", "considerably"): the direction test, and the 90 % interval of the
  effect relative to the reference arm (``d / reference``) must reach ``LARGE_EFFECT_SHARE``
  of the paper's relative effect (or ``LARGE_EFFECT_NO_NUMBER`` where the paper gives no
  number): reproduced when its lower end does, not reproduced when its upper end does not.
* saturated (both arms' mean accuracy ≥ 98 %, or both MI estimates within 2 % of the true
  MI) or under-trained (an arm's final loss within 1 % of its constant-embedding value, or a
  run's selected checkpoint the first one evaluated): graded at most *inconclusive*.
* a claim with parts: *reproduced* when every part is, *partly* when some part is and
  another is not, *not reproduced* when no part is and some part is not reproduced, else
  *inconclusive*.

``HEADLINE`` names, for every row of RESULTS.md's headline table (by its paper and claim
cells), the comparisons that are its parts; ``--check`` reads the verdict cell's leading
grade and compares it with what the parts give.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from scipy import stats

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
RESULTS_PAGE = os.path.join(HERE, "RESULTS.md")
GRADES = ("not reproduced", "reproduced", "partly", "inconclusive")  # longest prefix first
#: Equivalence / non-inferiority margin for accuracies, in points (see RESULTS.md).
ACCURACY_MARGIN = 2.0
#: A large-effect claim needs at least this share of the paper's relative effect.
LARGE_EFFECT_SHARE = 0.5
#: ... or, where the paper gives no number, an effect of this share of the reference arm
#: (the same 10 % that is the equivalence margin of "comparable" for the toy's KL).
LARGE_EFFECT_NO_NUMBER = 0.10
#: Saturation: accuracies at or above this, or MI estimates within this share of the truth.
ACCURACY_CEILING = 0.98
MI_CEILING_SHARE = 0.02
#: Under-training: a final loss within this share of its constant-embedding value.
CONSTANT_LOSS_SHARE = 0.01


def _zip(a, b):
    return zip(a, b, strict=True)


def _load(path: str) -> dict:
    with open(os.path.join(RESULTS, path), encoding="utf-8") as f:
        return json.load(f)


def _t_stats(
    d: Sequence[float],
) -> tuple[float, float, float, tuple[float, float], tuple[float, float]]:
    """mean, std, two-sided paired p, 90 % and 95 % t-intervals of the mean of ``d``."""
    n = len(d)
    mean = statistics.fmean(d)
    sd = statistics.stdev(d)
    if sd == 0.0:
        p = 0.0 if mean != 0.0 else 1.0
        return mean, sd, p, (mean, mean), (mean, mean)
    se = sd / math.sqrt(n)
    p = 2 * stats.t.sf(abs(mean / se), n - 1)
    h90 = stats.t.ppf(0.95, n - 1) * se
    h95 = stats.t.ppf(0.975, n - 1) * se
    return mean, sd, p, (mean - h90, mean + h90), (mean - h95, mean + h95)


def grade(d: Sequence[float], kind: str, delta: float | None = None) -> str:
    """The verdict of RESULTS.md's rule for paired differences ``d`` (claim's side positive).

    ``kind`` is ``direction``, ``equivalence`` or ``noninferiority`` (both need the margin
    ``delta``), or ``large`` (``delta`` is then the smallest effect that counts as large).
    """
    if kind not in ("direction", "equivalence", "noninferiority", "large"):
        raise ValueError(
            f"kind must be direction, equivalence, noninferiority or large, got {kind!r}")
    if kind != "direction" and (delta is None or delta <= 0):
        raise ValueError(f"kind {kind!r} needs a positive delta, got {delta!r}")
    mean, _, p, ci90, ci95 = _t_stats(d)
    if kind in ("direction", "large"):
        allowed = len(d) // 10  # seeds allowed on the other side: none of 3, one of 10
        if p < 0.05 and sum(x <= 0 for x in d) <= allowed:
            if kind == "direction" or ci90[0] >= delta:
                return "reproduced"
            return "not reproduced" if ci90[1] < delta else "inconclusive"
        if p < 0.05 and sum(x >= 0 for x in d) <= allowed:
            return "not reproduced"
        if kind == "large" and ci90[1] < delta:
            return "not reproduced"
        return "inconclusive"
    inside = -delta < ci90[0] and ci90[1] < delta
    if kind == "equivalence":
        if inside:
            return "reproduced"
        if ci95[0] > 0 or ci95[1] < 0:
            return "not reproduced"
        return "inconclusive"
    if ci90[0] > -delta:
        return "reproduced"
    if ci95[1] < 0:
        return "not reproduced"
    return "inconclusive"


def combine(grades: Sequence[str]) -> str:
    """The verdict of a claim from the verdicts of its parts (RESULTS.md's rule)."""
    found = set(grades)
    if not found or not found <= set(GRADES) - {"partly"}:
        raise ValueError(f"part verdicts must be reproduced, not reproduced or inconclusive: "
                         f"{sorted(found)}")
    if found == {"reproduced"}:
        return "reproduced"
    if "reproduced" in found:
        return "partly"
    if "not reproduced" in found:
        return "not reproduced"
    return "inconclusive"


@dataclass(frozen=True)
class Comparison:
    """One paired comparison: per-seed differences ``d`` with the claim's side positive.

    ``note`` ("saturated: ...", "under-trained: ...") caps the verdict at inconclusive.
    """

    claim: str
    d: tuple[float, ...]
    kind: str
    delta: float | None = None
    note: str | None = None

    @property
    def test_grade(self) -> str:
        return grade(self.d, self.kind, self.delta)

    @property
    def grade(self) -> str:
        raw = self.test_grade
        return "inconclusive" if self.note and raw != "inconclusive" else raw

    def row(self) -> str:
        mean, sd, p, ci90, _ = _t_stats(self.d)
        seeds = ", ".join(f"{x:+.4g}" for x in self.d)
        if self.kind == "large":
            test = f"large (≥ {self.delta:.3g})"
        else:
            test = self.kind + (f" (δ = {self.delta:g})" if self.delta is not None else "")
        verdict = self.grade + (f" ({self.note})" if self.note else "")
        return (
            f"| {self.claim} | {test} | {seeds} | {mean:+.4g} ± {sd:.2g} | {p:.3f} | "
            f"[{ci90[0]:+.3g}, {ci90[1]:+.3g}] | {verdict} |"
        )


def _cmp(claim: str, d, kind: str, delta: float | None = None, scale: float = 1.0,
         note: str | None = None) -> Comparison:
    return Comparison(claim, tuple(scale * x for x in d), kind, delta, note)


def _saturated_accuracy(a: Sequence[float], b: Sequence[float]) -> str | None:
    """The saturation note when both arms' mean accuracy (fractions) is at the ceiling."""
    low = min(statistics.fmean(a), statistics.fmean(b))
    if low >= ACCURACY_CEILING:
        return f"saturated: both arms ≥ {100 * ACCURACY_CEILING:.0f} %"
    return None


def _near_constant(final: Sequence[float], constant: float, arm: str) -> str | None:
    """The under-training note when a run's final loss is within 1 % of its constant."""
    worst = min(abs(constant - x) / constant for x in final)
    if worst <= CONSTANT_LOSS_SHARE:
        return (f"under-trained: {arm}'s final loss within {100 * worst:.1f} % of its "
                f"constant-embedding value {constant:.3f}")
    return None


# ---------------------------------------------------------------- SINCERE, digits and CIFAR-10


def _sincere_digits(folder: str, batch: int, loss: str) -> list[dict]:
    return [_load(f"sincere/{folder}/runs/digits_b{batch}_{loss}_s{s}.json") for s in range(3)]


def _digits_note(*arms: tuple[str, list[dict]]) -> str | None:
    for name, runs in arms:
        note = _near_constant([r["loss_final"] for r in runs],
                              runs[0]["references"][f"{name}_constant"], name)
        if note:
            return note
    return None


#: Table 1 (CIFAR-10): SupCon 4.69, SINCERE 0.24 at the end of pretraining.
SINCERE_FINAL_LOSSES = (4.69, 0.24)


def _sincere_rows() -> Iterator[Comparison]:
    sup, sin = _sincere_digits("digits", 128, "supcon"), _sincere_digits("digits", 128, "sincere")
    yield _cmp(
        "SINCERE digits: initial loss, SupCon − SINCERE, minus the same for their constants",
        [
            a["loss_initial"]
            - b["loss_initial"]
            - (a["references"]["supcon_constant"] - a["references"]["sincere_constant"])
            for a, b in _zip(sup, sin)
        ],
        "equivalence",
        0.05,
    )
    paper_supcon, paper_sincere = SINCERE_FINAL_LOSSES
    far = LARGE_EFFECT_SHARE * (paper_supcon - paper_sincere) / paper_supcon
    for folder, steps in (("digits", 150), ("digits_600steps", 600)):
        sup = _sincere_digits(folder, 128, "supcon")
        sin = _sincere_digits(folder, 128, "sincere")
        note = _digits_note(("supcon", sup), ("sincere", sin))
        tag = f"SINCERE digits {steps} steps"
        yield _cmp(
            f"{tag}: final loss, SupCon − SINCERE",
            [a["loss_final"] - b["loss_final"] for a, b in _zip(sup, sin)],
            "direction", note=note,
        )
        yield _cmp(
            f"{tag}: final loss, (SupCon − SINCERE) / SupCon",
            [(a["loss_final"] - b["loss_final"]) / a["loss_final"] for a, b in _zip(sup, sin)],
            "large", far, note=note,
        )
        for key in ("mean_within", "mean_between"):
            yield _cmp(
                f"{tag}: {key[5:]}-class cosine, SupCon − SINCERE",
                [
                    a["similarity"]["projection"][key] - b["similarity"]["projection"][key]
                    for a, b in _zip(sup, sin)
                ],
                "direction", note=note,
            )
        for k in ("top1", "top5"):
            sup_acc = [a["linear"][k]["accuracy"] for a in sup]
            sin_acc = [b["linear"][k]["accuracy"] for b in sin]
            yield _cmp(
                f"{tag}: linear {k}, SINCERE − SupCon (points)",
                [b - a for a, b in _zip(sup_acc, sin_acc)],
                "equivalence", ACCURACY_MARGIN, 100,
                note=note or _saturated_accuracy(sup_acc, sin_acc),
            )
    # SupCon's problem grows with same-class partners: the between-class gap at 26 partners
    # (batch 128, 600 steps = 53 epochs) minus the gap at 7 (batch 32, 2,400 steps = 53 epochs).
    gaps = []
    for folder, batch in (("digits_600steps", 128), ("digits_2400steps", 32)):
        sup = _sincere_digits(folder, batch, "supcon")
        sin = _sincere_digits(folder, batch, "sincere")
        gaps.append([
            a["similarity"]["projection"]["mean_between"]
            - b["similarity"]["projection"]["mean_between"]
            for a, b in _zip(sup, sin)
        ])
    yield _cmp(
        "SINCERE digits 53 epochs: between-class gap at batch 128 − at batch 32",
        [a - b for a, b in _zip(*gaps)],
        "direction",
    )

    def run(method, s):
        return _load(f"cifar_proxy/runs/cifar_sincere_36ep/{method}/seed{s}.json")

    sup = [run("supcon", s) for s in range(3)]
    sin = [run("sincere", s) for s in range(3)]
    note = None
    for name, runs in (("supcon", sup), ("sincere", sin)):
        note = note or _near_constant([r["epoch_losses"][-1] for r in runs],
                                      runs[0]["references"][f"{name}_constant"], name)
    for key in ("mean_within", "mean_between"):
        yield _cmp(
            f"SINCERE CIFAR-10 proxy: {key[5:]}-class cosine, SupCon − SINCERE",
            [
                a["probes"][-1]["similarity"]["projection"][key]
                - b["probes"][-1]["similarity"]["projection"][key]
                for a, b in _zip(sup, sin)
            ],
            "direction", note=note,
        )
    for k in ("top1", "top5"):
        sup_acc = [a["probes"][-1]["linear"][k]["accuracy"] for a in sup]
        sin_acc = [b["probes"][-1]["linear"][k]["accuracy"] for b in sin]
        yield _cmp(
            f"SINCERE CIFAR-10 proxy: linear {k}, SINCERE − SupCon (points)",
            [b - a for a, b in _zip(sup_acc, sin_acc)],
            "equivalence", ACCURACY_MARGIN, 100,
            note=note or _saturated_accuracy(sup_acc, sin_acc),
        )


# ---------------------------------------------------------------- ProjNCE, synthetic and CIFAR-10

PROJNCE_FAMILY = ("projnce", "soft_supcon", "soft_nce", "med_supcon", "med_nce")
#: Epochs at which the synthetic runs measured the bound (epoch 0 is the untrained network).
BOUND_EPOCHS = (40, 80, 120, 160, 200)


def _projnce_runs(setting: str, method: str) -> list[dict]:
    return [_load(f"projnce/runs/{setting}/{method}/seed{s}.json") for s in range(3)]


def _true_mi(setting: str) -> float:
    return _load("projnce/summary.json")[setting]["true_mi"]


def _mi_note(setting: str, *arms: list[float]) -> str | None:
    truth = _true_mi(setting)
    if all(abs(truth - statistics.fmean(a)) <= MI_CEILING_SHARE * truth for a in arms):
        return f"saturated: both MI estimates within {100 * MI_CEILING_SHARE:.0f} % of the true MI"
    return None


def _label_noise_constant() -> float:
    """SupCon's constant-embedding loss at the label-noise runs' batch: log(2B - 1)."""
    from experiments.configs import cifar_label_noise

    return math.log(2 * cifar_label_noise.get_config("supcon,0.4").data.global_batch_size - 1)


def _projnce_rows() -> Iterator[Comparison]:
    for setting in ("binary", "gmm"):
        mi = {m: [r["mi_ksg"] for r in _projnce_runs(setting, m)]
              for m in ("supcon", *PROJNCE_FAMILY)}
        pairs = [(m, "supcon") for m in PROJNCE_FAMILY]
        pairs += [("soft_nce", "projnce"), ("soft_nce", "soft_supcon")]
        for a, b in pairs:
            yield _cmp(
                f"ProjNCE {setting}: MI, {a} − {b} (nats)",
                [x - y for x, y in _zip(mi[a], mi[b])],
                "direction", note=_mi_note(setting, mi[a], mi[b]),
            )
        truth = _true_mi(setting)
        for method in ("supcon", *PROJNCE_FAMILY):
            curves = [{c["epoch"]: c["bound"] for c in r["curve"]}
                      for r in _projnce_runs(setting, method)]
            for epoch in BOUND_EPOCHS:
                yield _cmp(
                    f"ProjNCE {setting}: true MI − bound, {method}, epoch {epoch} (nats)",
                    [truth - c[epoch] for c in curves],
                    "direction",
                )

    def run(p, method, s):
        return _load(f"cifar_label_noise/runs/cifar_labelnoise_p{p}_24ep/{method}/seed{s}.json")

    def acc(p, method, s, probe):
        d = run(p, method, s)
        if probe == "head":
            return 100 * d["test"]["top1"]["accuracy"]
        pr = d["probe"] if "probe" in d else d["probes"][-1]
        return (
            100
            * (pr["clean"] if probe == "clean" else next(iter(pr["noisy"].values())))["accuracy"]
        )

    def simclr(p, s, probe):
        d = _load(f"cifar_label_noise/runs/cifar_labelnoise_simclr_24ep/simclr/seed{s}.json")
        pr = d["probe"] if "probe" in d else d["probes"][-1]
        return 100 * (pr["clean"] if probe == "clean" else pr["noisy"][p])["accuracy"]

    constant = _label_noise_constant()
    supcon_note = {
        p: _near_constant([run(p, "supcon", s)["epoch_losses"][-1] for s in range(3)],
                          constant, f"SupCon at p = {p}")
        for p in ("0", "0.2", "0.4")
    }
    for p in ("0", "0.2", "0.4"):
        for method in ("projnce", "med_supcon"):
            yield _cmp(
                f"label noise p = {p}: {method} − supcon, clean probe",
                [acc(p, method, s, "clean") - acc(p, "supcon", s, "clean") for s in range(3)],
                "direction", note=supcon_note[p],
            )
    yield _cmp(
        "label noise p = 0.4: simclr − supcon, noisy probe",
        [simclr("0.4", s, "noisy") - acc("0.4", "supcon", s, "noisy") for s in range(3)],
        "direction", note=supcon_note["0.4"],
    )

    def drop(method, s, probe):
        if method == "simclr":
            return simclr("0.4", s, probe) - simclr("0", s, probe)
        return acc("0.4", method, s, probe) - acc("0", method, s, probe)

    def note(method):
        return (supcon_note["0.4"] or supcon_note["0"]) if method == "supcon" else None

    for method in ("supcon", "projnce", "med_supcon"):
        yield _cmp(
            f"label noise, drop p 0 → 0.4: simclr − {method} (noisy probes)",
            [drop("simclr", s, "noisy") - drop(method, s, "noisy") for s in range(3)],
            "direction", note=note(method),
        )
    for method in ("supcon", "projnce", "med_supcon"):
        yield _cmp(
            f"label noise, drop: {method} clean probe − CE own head",
            [drop(method, s, "clean") - drop("ce", s, "head") for s in range(3)],
            "direction", note=note(method),
        )
        yield _cmp(
            f"label noise, drop: {method} − CE, both noisy probes",
            [drop(method, s, "noisy") - drop("ce", s, "noisy") for s in range(3)],
            "direction", note=note(method),
        )


# ---------------------------------------------------------------- soft-target InfoNCE


def _toy_runs(construction: str, level: int, loss: str) -> list[dict]:
    files = sorted(
        glob.glob(
            os.path.join(RESULTS, f"soft_target/runs/{construction}_{level:02d}/{loss}/seed*.json")
        ),
        key=lambda f: int(f.rsplit("seed", 1)[1][:-5]),
    )
    runs = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            runs.append(json.load(f))
    return runs


def _toy_note(construction: str, level: int) -> str | None:
    """Under-trained when a run's selected checkpoint is the first one it evaluated."""
    runs = _toy_runs(construction, level, "nll") + _toy_runs(construction, level, "infonce")
    first = sum(r["best_epoch"] == r["eval_every"] for r in runs)
    if first:
        return (f"under-trained: {first} of {len(runs)} runs at {level} % kept their first "
                f"checkpoint")
    return None


def _soft_target_rows() -> Iterator[Comparison]:
    def kl(construction, level, loss):
        return [r["kl"] for r in _toy_runs(construction, level, loss)]

    for construction in ("alt", "spherical"):
        for level in (0, 40, 80):
            nll, nce = kl(construction, level, "nll"), kl(construction, level, "infonce")
            yield _cmp(
                f"toy {construction} {level} %: KL, NLL − InfoNCE (×1e3)",
                [a - b for a, b in _zip(nll, nce)],
                "direction", None, 1e3, note=_toy_note(construction, level),
            )
        nll, nce = kl(construction, 0, "nll"), kl(construction, 0, "infonce")
        yield _cmp(
            f"toy {construction} 0 %: KL, NLL − InfoNCE (×1e3), margin 10 % of NLL's",
            [a - b for a, b in _zip(nll, nce)],
            "equivalence", 0.1 * 1e3 * statistics.fmean(nll), 1e3,
            note=_toy_note(construction, 0),
        )
        nll, nce = kl(construction, 80, "nll"), kl(construction, 80, "infonce")
        yield _cmp(
            f"toy {construction} 80 %: KL, (NLL − InfoNCE) / NLL",
            [(a - b) / a for a, b in _zip(nll, nce)],
            "large", LARGE_EFFECT_NO_NUMBER, note=_toy_note(construction, 80),
        )
        for loss in ("nll", "infonce"):
            yield _cmp(
                f"toy {construction}: KL at 80 % − at 0 %, {loss} (×1e3)",
                [a - b for a, b in _zip(kl(construction, 80, loss), kl(construction, 0, loss))],
                "direction", None, 1e3,
                note=_toy_note(construction, 80) or _toy_note(construction, 0),
            )

    def test(epochs, method, s):
        return _load(f"cifar_soft_target/runs/cifar_soft_target_{epochs}ep/{method}/seed{s}.json")[
            "test"
        ]

    for epochs in (36, 72):

        def diff(a, b, key="top1", epochs=epochs):
            if key == "ece":
                return [
                    100 * (test(epochs, b, s)["ece"] - test(epochs, a, s)["ece"]) for s in range(3)
                ]
            return [
                100
                * (test(epochs, a, s)["top1"]["accuracy"] - test(epochs, b, s)["top1"]["accuracy"])
                for s in range(3)
            ]

        tag = f"CIFAR soft targets {epochs} ep"
        yield _cmp(f"{tag}: top-1, STI − STCE", diff("sti", "stce"), "equivalence",
                   ACCURACY_MARGIN)
        yield _cmp(f"{tag}: top-1, InfoNCE − NLL", diff("infonce", "nll"), "equivalence",
                   ACCURACY_MARGIN)
        yield _cmp(f"{tag}: top-1, STI − NLL", diff("sti", "nll"), "noninferiority",
                   ACCURACY_MARGIN)
        yield _cmp(f"{tag}: top-1, STCE − NLL", diff("stce", "nll"), "noninferiority",
                   ACCURACY_MARGIN)
        yield _cmp(f"{tag}: ECE, STCE − STI (points)", diff("sti", "stce", "ece"), "direction")


# ---------------------------------------------------------------- conditional uniformity, MIO


def _probes(path: str, method: str, s: int) -> list[dict]:
    return _load(f"{path}/{method}/seed{s}.json")["probes"]


def _conditional_rows() -> Iterator[Comparison]:
    path = "conditional_uniformity/runs/digits_100ep_20probes"
    for key in ("full", "shot5"):
        for a, b in (
            ("conditional", "supcon"),
            ("conditional", "align_uniform"),
            ("conditional", "simclr"),
            ("supcon", "align_uniform"),
            ("align_uniform", "simclr"),
        ):
            yield _cmp(
                f"cond. uniformity digits, final {key} probe: {a} − {b} (points)",
                [
                    100
                    * (
                        _probes(path, a, s)[-1][key]["accuracy"]
                        - _probes(path, b, s)[-1][key]["accuracy"]
                    )
                    for s in range(3)
                ],
                "direction",
            )
    yield _cmp(
        "cond. uniformity digits: mean full-probe accuracy over the 20 probes, "
        "conditional − supcon (points)",
        [
            100
            * statistics.fmean(
                x["full"]["accuracy"] - y["full"]["accuracy"]
                for x, y in _zip(_probes(path, "conditional", s), _probes(path, "supcon", s))
            )
            for s in range(3)
        ],
        "direction",
    )
    for epochs in (10, 30):
        path = f"conditional_uniformity/runs/phantoms_{epochs}ep_n5000"

        def auc(method, s, path=path):
            return statistics.fmean(
                v["auc"] for v in _probes(path, method, s)[-1]["n_train"].values()
            )

        yield _cmp(
            f"phantoms {epochs} ep: AUC (mean over N_train), conditional − y_aware",
            [auc("conditional", s) - auc("y_aware", s) for s in range(3)],
            "direction",
        )


def _mio_rows() -> Iterator[Comparison]:
    def full(run, method, s):
        return 100 * _probes(f"mio/runs/digits_100ep/{run}", method, s)[-1]["full"]["accuracy"]

    for variant in "ABCD":
        yield _cmp(
            f"MIO digits: mio_{variant} − simclr (points)",
            [full("main", f"mio_{variant}", s) - full("main", "simclr", s) for s in range(3)],
            "direction",
        )
    for a, b, run in (("1.5", "0.3", "lr0.3"), ("1.5", "2.0", "lr2.0")):
        yield _cmp(
            f"MIO digits lr: {a} − {b}, mio_A (points)",
            [full("main", "mio_A", s) - full(run, "mio_A", s) for s in range(3)],
            "direction",
        )
    for a, b, run in (("0.5", "0.3", "tau0.3"), ("0.5", "0.7", "tau0.7")):
        yield _cmp(
            f"MIO digits tau: {a} − {b}, mio_A (points)",
            [full("main", "mio_A", s) - full(run, "mio_A", s) for s in range(3)],
            "direction",
        )

    def cifar(method, s):
        return (
            100
            * _probes("cifar_proxy/runs/cifar_mio_adamw_36ep", method, s)[-1]["full"]["accuracy"]
        )

    for variant in "ABCD":
        yield _cmp(
            f"MIO CIFAR-10 proxy: mio_{variant} − simclr (points)",
            [cifar(f"mio_{variant}", s) - cifar("simclr", s) for s in range(3)],
            "direction",
        )


# ---------------------------------------------------------------- CLIP / SigLIP


def _two_tower_rows() -> Iterator[Comparison]:
    def top1(loss, pairing, s):
        return _load(f"two_tower/runs/digits_15ep/{loss}_{pairing}/seed{s}.json")["i2t"]

    for loss in ("clip", "siglip"):
        yield _cmp(
            f"two-tower {loss}: image→text top-1, matched − shuffled pairs",
            [top1(loss, "paired", s) - top1(loss, "shuffled", s) for s in range(3)],
            "direction",
        )


SECTIONS: tuple[Callable[[], Iterator[Comparison]], ...] = (
    _sincere_rows, _projnce_rows, _soft_target_rows, _conditional_rows, _mio_rows,
    _two_tower_rows,
)


def comparisons() -> dict[str, Comparison]:
    """Every paired comparison of the committed records, by its name."""
    found: dict[str, Comparison] = {}
    for section in SECTIONS:
        for c in section():
            if c.claim in found:
                raise ValueError(f"two comparisons named {c.claim!r}")
            found[c.claim] = c
    return found


# ---------------------------------------------------------------- the headline table


def _bound_parts() -> tuple[str, ...]:
    return tuple(
        f"ProjNCE {setting}: true MI − bound, {method}, epoch {epoch} (nats)"
        for setting in ("binary", "gmm")
        for method in ("supcon", *PROJNCE_FAMILY)
        for epoch in BOUND_EPOCHS
    )


#: (paper, claim) cells of RESULTS.md's headline table -> the comparisons that are its parts.
HEADLINE: dict[tuple[str, str], tuple[str, ...]] = {
    ("SINCERE", "initial pretraining losses alike (Table 1)"): (
        "SINCERE digits: initial loss, SupCon − SINCERE, minus the same for their constants",
    ),
    ("SINCERE", "final loss: SINCERE far lower (Table 1)"): (
        "SINCERE digits 600 steps: final loss, (SupCon − SINCERE) / SupCon",
        "SINCERE digits 150 steps: final loss, (SupCon − SINCERE) / SupCon",
    ),
    ("SINCERE", "within-class cosine lower for SINCERE (Fig. 2)"): (
        "SINCERE digits 150 steps: within-class cosine, SupCon − SINCERE",
        "SINCERE digits 600 steps: within-class cosine, SupCon − SINCERE",
    ),
    ("SINCERE", "between-class cosine lower for SINCERE (Fig. 2)"): (
        "SINCERE digits 150 steps: between-class cosine, SupCon − SINCERE",
        "SINCERE digits 600 steps: between-class cosine, SupCon − SINCERE",
    ),
    ("SINCERE", "linear top-1/top-5 indistinguishable (Table 2)"): tuple(
        f"SINCERE digits {steps} steps: linear {k}, SINCERE − SupCon (points)"
        for steps in (150, 600) for k in ("top1", "top5")
    ),
    ("SINCERE", "SupCon's problem grows with same-class inputs per batch (CIFAR-10 vs "
                "CIFAR-100; Table 1, Sec. 3.3)"): (
        "SINCERE digits 53 epochs: between-class gap at batch 128 − at batch 32",
    ),
    ("SINCERE", "Fig. 2 cosine gaps on CIFAR-10"): (
        "SINCERE CIFAR-10 proxy: within-class cosine, SupCon − SINCERE",
        "SINCERE CIFAR-10 proxy: between-class cosine, SupCon − SINCERE",
    ),
    ("SINCERE", "Table 2 on CIFAR-10: linear accuracy indistinguishable"): (
        "SINCERE CIFAR-10 proxy: linear top1, SINCERE − SupCon (points)",
        "SINCERE CIFAR-10 proxy: linear top5, SINCERE − SupCon (points)",
    ),
    ("ProjNCE", "SoftNCE best on the binary Gaussian (App. D.1)"): (
        "ProjNCE binary: MI, soft_nce − supcon (nats)",
        "ProjNCE binary: MI, soft_nce − projnce (nats)",
        "ProjNCE binary: MI, soft_nce − soft_supcon (nats)",
    ),
    ("ProjNCE", "ProjNCE and its variant lead on the 32-class mixture (App. D.1)"): (
        "ProjNCE gmm: MI, soft_nce − supcon (nats)",
        "ProjNCE gmm: MI, projnce − supcon (nats)",
        "ProjNCE gmm: MI, soft_supcon − supcon (nats)",
    ),
    ("ProjNCE", "the family beats SupCon in MI (App. D.1)"): tuple(
        f"ProjNCE {setting}: MI, {m} − supcon (nats)"
        for setting in ("binary", "gmm") for m in PROJNCE_FAMILY
    ),
    ("ProjNCE", "bound `1 + log N − loss` ≤ I(X;C) (Prop. 2.1)"): _bound_parts(),
    ("ProjNCE", "Table 3: ProjNCE ≥ SupCon under label noise"): tuple(
        f"label noise p = {p}: projnce − supcon, clean probe" for p in ("0", "0.2", "0.4")
    ),
    ("ProjNCE", "Table 3: MedSupCon best at p = 0.2–0.5"): (
        "label noise p = 0.2: med_supcon − supcon, clean probe",
        "label noise p = 0.4: med_supcon − supcon, clean probe",
    ),
    ("ProjNCE", "Table 3: supervised contrastive losses degrade faster than SimCLR, which "
                "overtakes SupCon at high noise"): (
        "label noise, drop p 0 → 0.4: simclr − supcon (noisy probes)",
        "label noise, drop p 0 → 0.4: simclr − projnce (noisy probes)",
        "label noise, drop p 0 → 0.4: simclr − med_supcon (noisy probes)",
        "label noise p = 0.4: simclr − supcon, noisy probe",
    ),
    ("ProjNCE", "Table 3: CE degrades most"): (
        "label noise, drop: supcon clean probe − CE own head",
        "label noise, drop: projnce clean probe − CE own head",
        "label noise, drop: med_supcon clean probe − CE own head",
    ),
    ("soft-target InfoNCE", "toy error grows with mode alignment for both losses (S1; Sec. 3.1, "
                            "Fig. 1)"): (
        "toy alt: KL at 80 % − at 0 %, nll (×1e3)",
        "toy alt: KL at 80 % − at 0 %, infonce (×1e3)",
        "toy spherical: KL at 80 % − at 0 %, nll (×1e3)",
        "toy spherical: KL at 80 % − at 0 %, infonce (×1e3)",
    ),
    ("soft-target InfoNCE", "toy: both losses comparable at 0 % alignment (S2; Sec. 3.1)"): (
        "toy alt 0 %: KL, NLL − InfoNCE (×1e3), margin 10 % of NLL's",
        "toy spherical 0 %: KL, NLL − InfoNCE (×1e3), margin 10 % of NLL's",
    ),
    ("soft-target InfoNCE", "InfoNCE degrades \"considerably more slowly\" than NLL (S3; "
                            "Sec. 3.1, Fig. 1)"): (
        "toy alt 80 %: KL, (NLL − InfoNCE) / NLL",
        "toy spherical 80 %: KL, (NLL − InfoNCE) / NLL",
    ),
    ("soft-target InfoNCE", "Table 1: STI ≈ STCE, InfoNCE ≈ NLL in top-1"): tuple(
        f"CIFAR soft targets {e} ep: top-1, {c}"
        for c in ("InfoNCE − NLL", "STI − STCE") for e in (36, 72)
    ),
    ("soft-target InfoNCE", "Table 1: soft-target InfoNCE at least as accurate as hard-target "
                            "NLL"): (
        "CIFAR soft targets 36 ep: top-1, STI − NLL",
        "CIFAR soft targets 72 ep: top-1, STI − NLL",
    ),
    ("soft-target InfoNCE", "Sec. 4.2, Fig. 4: STI better calibrated than STCE"): (
        "CIFAR soft targets 36 ep: ECE, STCE − STI (points)",
        "CIFAR soft targets 72 ep: ECE, STCE − STI (points)",
    ),
    ("cond. alignment/uniformity", "best representation (CIFAR-100, Fig. 2)"): (
        "cond. uniformity digits, final full probe: conditional − supcon (points)",
        "cond. uniformity digits, final full probe: conditional − align_uniform (points)",
        "cond. uniformity digits, final full probe: conditional − simclr (points)",
    ),
    ("cond. alignment/uniformity", "converges faster (CIFAR-10, Fig. 2)"): (
        "cond. uniformity digits: mean full-probe accuracy over the 20 probes, "
        "conditional − supcon (points)",
    ),
    ("cond. alignment/uniformity", "conditional uniformity beats y-Aware InfoNCE across "
                                   "N_train (BIOBD, Fig. 3)"): (
        "phantoms 10 ep: AUC (mean over N_train), conditional − y_aware",
        "phantoms 30 ep: AUC (mean over N_train), conditional − y_aware",
    ),
    ("MIO", "the best model, (D), outperforms SimCLR (Table 4)"): (
        "MIO digits: mio_D − simclr (points)",
    ),
    ("MIO", "lr sweep rises to a peak at 1.5 (Sec. 4.1)"): (
        "MIO digits lr: 1.5 − 0.3, mio_A (points)",
        "MIO digits lr: 1.5 − 2.0, mio_A (points)",
    ),
    ("MIO", "τ sweep peaks at 0.5 (Sec. 4.1)"): (
        "MIO digits tau: 0.5 − 0.7, mio_A (points)",
        "MIO digits tau: 0.5 − 0.3, mio_A (points)",
    ),
    ("MIO", "the best model, (D), outperforms SimCLR on CIFAR-10 (Table 4)"): (
        "MIO CIFAR-10 proxy: mio_D − simclr (points)",
    ),
    ("CLIP / SigLIP (beyond the seeds)", "training on matched pairs makes a held-out example "
                                         "retrieve its partner, above a shuffled-pairs control"): (
        "two-tower clip: image→text top-1, matched − shuffled pairs",
        "two-tower siglip: image→text top-1, matched − shuffled pairs",
    ),
}


def headline_verdicts(found: dict[str, Comparison] | None = None) -> dict[tuple[str, str], str]:
    """The rule's verdict of every headline claim, from its parts' comparisons."""
    found = comparisons() if found is None else found
    return {key: combine([found[part].grade for part in parts])
            for key, parts in HEADLINE.items()}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def page_verdicts(text: str) -> dict[tuple[str, str], str]:
    """(paper, claim) -> the verdict cell of every row of the page's headline table."""
    section = text.split("\n## Headline\n", 1)
    if len(section) != 2:
        raise ValueError("RESULTS.md has no '## Headline' section")
    rows: dict[tuple[str, str], str] = {}
    in_table = False
    for line in section[1].splitlines():
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if in_table:
                break
            continue
        cells = _cells(line)
        if not in_table:  # the header row, then the |---| row
            in_table = cells[:2] == ["paper", "claim"]
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        if len(cells) != 5:
            raise ValueError(f"headline row with {len(cells)} cells, not 5: {line[:80]}")
        rows[(cells[0], cells[1])] = cells[4]
    return rows


def leading_grade(cell: str) -> str | None:
    """The grade a verdict cell starts with (``**`` markup ignored), or None."""
    text = cell.replace("*", "").strip().lower()
    return next((g for g in GRADES if text == g or text.startswith(g + ":")
                 or text.startswith(g + " (")), None)


def check(page: str = RESULTS_PAGE) -> list[str]:
    """Every disagreement between the page's headline verdicts and the rule's, as sentences."""
    with open(page, encoding="utf-8") as f:
        written = page_verdicts(f.read())
    computed = headline_verdicts()
    problems = []
    for key, cell in written.items():
        name = " | ".join(key)
        if key not in computed:
            problems.append(f"row '{name}': no rule in experiments/verdicts.py HEADLINE")
            continue
        grade_written = leading_grade(cell)
        if grade_written is None:
            problems.append(f"row '{name}': verdict {cell[:60]!r} does not start with one of "
                            f"{', '.join(GRADES)}")
        elif grade_written != computed[key]:
            problems.append(f"row '{name}': RESULTS.md says {grade_written!r}, the rule gives "
                            f"{computed[key]!r}")
    problems += [f"row '{' | '.join(key)}': in HEADLINE but not in RESULTS.md's headline table"
                 for key in computed if key not in written]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare RESULTS.md's headline verdicts with the rule's; exit 1 "
                             "on a difference")
    parser.add_argument("--results", default=RESULTS_PAGE, help="the page to check")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.results)
        for problem in problems:
            print(problem, file=sys.stderr)
        if not problems:
            print(f"{len(HEADLINE)} headline verdicts of {args.results} follow the rule")
        return 1 if problems else 0
    found = comparisons()
    print("| comparison (claim's side positive) | test | per seed | mean ± std | paired p | "
          "90 % interval | grade |")
    print("|---|---|---|---|---|---|---|")
    for c in found.values():
        print(c.row())
    print()
    print("| paper | claim | parts | verdict |")
    print("|---|---|---|---|")
    verdicts = headline_verdicts(found)
    for key, parts in HEADLINE.items():
        tally = ", ".join(f"{found[p].grade}" for p in parts)
        print(f"| {key[0]} | {key[1]} | {tally} | {verdicts[key]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
