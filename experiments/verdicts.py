"""Grades every headline claim of ``experiments/RESULTS.md`` from the committed run records.

    python -m experiments.verdicts            # prints the table RESULTS.md's verdicts come from

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

Notes on saturation and training state are not computed here; RESULTS.md adds them.
"""

from __future__ import annotations

import glob
import json
import math
import os
import statistics
import sys

from scipy import stats

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
#: Equivalence / non-inferiority margin for accuracies, in points (see RESULTS.md).
ACCURACY_MARGIN = 2.0


def _zip(a, b):
    return zip(a, b, strict=True)


def _load(path: str) -> dict:
    with open(os.path.join(RESULTS, path), encoding="utf-8") as f:
        return json.load(f)


def _t_stats(
    d: list[float],
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


def grade(d: list[float], kind: str, delta: float | None = None) -> str:
    """The verdict of RESULTS.md's rule for paired differences ``d`` (claim's side positive)."""
    mean, _, p, ci90, ci95 = _t_stats(d)
    if kind == "direction":
        allowed = len(d) // 10  # seeds allowed on the other side: none of 3, one of 10
        if p < 0.05 and sum(x <= 0 for x in d) <= allowed:
            return "reproduced"
        if p < 0.05 and sum(x >= 0 for x in d) <= allowed:
            return "not reproduced"
        return "inconclusive"
    if kind == "equivalence":
        if -delta < ci90[0] and ci90[1] < delta:
            return "reproduced"
        if (ci95[0] > 0 or ci95[1] < 0) and not (-delta < ci90[0] and ci90[1] < delta):
            return "not reproduced"
        return "inconclusive"
    if kind == "noninferiority":
        if ci90[0] > -delta:
            return "reproduced"
        if ci95[1] < 0:
            return "not reproduced"
        return "inconclusive"
    raise ValueError(f"kind must be direction, equivalence or noninferiority, got {kind!r}")


def _row(claim: str, d: list[float], kind: str, delta: float | None = None, scale: float = 1.0):
    d = [scale * x for x in d]
    mean, sd, p, ci90, _ = _t_stats(d)
    seeds = ", ".join(f"{x:+.4g}" for x in d)
    margin = f" (δ = {delta:g})" if delta is not None else ""
    return (
        f"| {claim} | {kind}{margin} | {seeds} | {mean:+.4g} ± {sd:.2g} | {p:.3f} | "
        f"[{ci90[0]:+.3g}, {ci90[1]:+.3g}] | {grade(d, kind, delta)} |"
    )


# ---------------------------------------------------------------- SINCERE, digits and CIFAR-10


def _sincere_digits(folder: str, batch: int, loss: str) -> list[dict]:
    return [_load(f"sincere/{folder}/runs/digits_b{batch}_{loss}_s{s}.json") for s in range(3)]


def _sincere_rows():
    sup, sin = _sincere_digits("digits", 128, "supcon"), _sincere_digits("digits", 128, "sincere")
    yield _row(
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
    for folder, steps in (("digits", 150), ("digits_600steps", 600)):
        sup = _sincere_digits(folder, 128, "supcon")
        sin = _sincere_digits(folder, 128, "sincere")
        tag = f"SINCERE digits {steps} steps"
        yield _row(
            f"{tag}: final loss, SupCon − SINCERE",
            [a["loss_final"] - b["loss_final"] for a, b in _zip(sup, sin)],
            "direction",
        )
        for key in ("mean_within", "mean_between"):
            yield _row(
                f"{tag}: {key[5:]}-class cosine, SupCon − SINCERE",
                [
                    a["similarity"]["projection"][key] - b["similarity"]["projection"][key]
                    for a, b in _zip(sup, sin)
                ],
                "direction",
            )
        for k in ("top1", "top5"):
            yield _row(
                f"{tag}: linear {k}, SINCERE − SupCon (points)",
                [
                    b["linear"][k]["accuracy"] - a["linear"][k]["accuracy"]
                    for a, b in _zip(sup, sin)
                ],
                "equivalence",
                ACCURACY_MARGIN,
                100,
            )
    # SupCon's problem grows with same-class partners: the between-class gap at 26 partners
    # (batch 128, 600 steps = 53 epochs) minus the gap at 7 (batch 32, 2,400 steps = 53 epochs).
    big = [
        a["similarity"]["projection"]["mean_between"]
        - b["similarity"]["projection"]["mean_between"]
        for a, b in _zip(
            _sincere_digits("digits_600steps", 128, "supcon"),
            _sincere_digits("digits_600steps", 128, "sincere"),
        )
    ]
    small = [
        a["similarity"]["projection"]["mean_between"]
        - b["similarity"]["projection"]["mean_between"]
        for a, b in _zip(
            _sincere_digits("digits_2400steps", 32, "supcon"),
            _sincere_digits("digits_2400steps", 32, "sincere"),
        )
    ]
    yield _row(
        "SINCERE digits 53 epochs: between-class gap at batch 128 − at batch 32",
        [a - b for a, b in _zip(big, small)],
        "direction",
    )

    def probe(method, s):
        return _load(f"cifar_proxy/runs/cifar_sincere_36ep/{method}/seed{s}.json")["probes"][-1]

    for key in ("mean_within", "mean_between"):
        yield _row(
            f"SINCERE CIFAR-10 proxy: {key[5:]}-class cosine, SupCon − SINCERE",
            [
                probe("supcon", s)["similarity"]["projection"][key]
                - probe("sincere", s)["similarity"]["projection"][key]
                for s in range(3)
            ],
            "direction",
        )
    for k in ("top1", "top5"):
        yield _row(
            f"SINCERE CIFAR-10 proxy: linear {k}, SINCERE − SupCon (points)",
            [
                probe("sincere", s)["linear"][k]["accuracy"]
                - probe("supcon", s)["linear"][k]["accuracy"]
                for s in range(3)
            ],
            "equivalence",
            ACCURACY_MARGIN,
            100,
        )


# ---------------------------------------------------------------- ProjNCE, synthetic and CIFAR-10


def _mi(setting: str, method: str) -> list[float]:
    return [_load(f"projnce/runs/{setting}/{method}/seed{s}.json")["mi_ksg"] for s in range(3)]


def _projnce_rows():
    for setting in ("binary", "gmm"):
        sup = _mi(setting, "supcon")
        for method in ("projnce", "soft_supcon", "soft_nce", "med_supcon", "med_nce"):
            yield _row(
                f"ProjNCE {setting}: MI, {method} − supcon (nats)",
                [a - b for a, b in _zip(_mi(setting, method), sup)],
                "direction",
            )

    def acc(p, method, s, probe):
        d = _load(f"cifar_label_noise/runs/cifar_labelnoise_p{p}_24ep/{method}/seed{s}.json")
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

    for p in ("0", "0.2", "0.4"):
        for method in ("projnce", "med_supcon"):
            yield _row(
                f"label noise p = {p}: {method} − supcon, clean probe",
                [acc(p, method, s, "clean") - acc(p, "supcon", s, "clean") for s in range(3)],
                "direction",
            )
    yield _row(
        "label noise p = 0.4: simclr − supcon, noisy probe",
        [simclr("0.4", s, "noisy") - acc("0.4", "supcon", s, "noisy") for s in range(3)],
        "direction",
    )

    def drop(method, s, probe):
        if method == "simclr":
            return simclr("0.4", s, probe) - simclr("0", s, probe)
        return acc("0.4", method, s, probe) - acc("0", method, s, probe)

    for method in ("supcon", "projnce", "med_supcon"):
        yield _row(
            f"label noise, drop p 0 → 0.4: simclr − {method} (noisy probes)",
            [drop("simclr", s, "noisy") - drop(method, s, "noisy") for s in range(3)],
            "direction",
        )
    for method in ("supcon", "projnce", "med_supcon"):
        yield _row(
            f"label noise, drop: {method} clean probe − CE own head",
            [drop(method, s, "clean") - drop("ce", s, "head") for s in range(3)],
            "direction",
        )
        yield _row(
            f"label noise, drop: {method} − CE, both noisy probes",
            [drop(method, s, "noisy") - drop("ce", s, "noisy") for s in range(3)],
            "direction",
        )


# ---------------------------------------------------------------- soft-target InfoNCE


def _toy_kl(construction: str, level: int, loss: str) -> list[float]:
    files = sorted(
        glob.glob(
            os.path.join(RESULTS, f"soft_target/runs/{construction}_{level:02d}/{loss}/seed*.json")
        ),
        key=lambda f: int(f.rsplit("seed", 1)[1][:-5]),
    )
    return [json.load(open(f, encoding="utf-8"))["kl"] for f in files]


def _soft_target_rows():
    for construction, levels in (("alt", (0, 40, 80)), ("spherical", (0, 40, 80))):
        for level in levels:
            nll, nce = _toy_kl(construction, level, "nll"), _toy_kl(construction, level, "infonce")
            yield _row(
                f"toy {construction} {level} %: KL, NLL − InfoNCE (×1e3)",
                [a - b for a, b in _zip(nll, nce)],
                "direction",
                None,
                1e3,
            )
        nll, nce = _toy_kl(construction, 0, "nll"), _toy_kl(construction, 0, "infonce")
        yield _row(
            f"toy {construction} 0 %: KL, NLL − InfoNCE (×1e3), margin 10 % of NLL's",
            [a - b for a, b in _zip(nll, nce)],
            "equivalence",
            0.1 * 1e3 * statistics.fmean(nll),
            1e3,
        )
        for loss in ("nll", "infonce"):
            rise = [
                a - b
                for a, b in _zip(_toy_kl(construction, 80, loss), _toy_kl(construction, 0, loss))
            ]
            yield _row(
                f"toy {construction}: KL at 80 % − at 0 %, {loss} (×1e3)",
                rise,
                "direction",
                None,
                1e3,
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

        yield _row(
            f"CIFAR soft targets {epochs} ep: top-1, STI − STCE",
            diff("sti", "stce"),
            "equivalence",
            ACCURACY_MARGIN,
        )
        yield _row(
            f"CIFAR soft targets {epochs} ep: top-1, InfoNCE − NLL",
            diff("infonce", "nll"),
            "equivalence",
            ACCURACY_MARGIN,
        )
        yield _row(
            f"CIFAR soft targets {epochs} ep: top-1, STI − NLL",
            diff("sti", "nll"),
            "noninferiority",
            ACCURACY_MARGIN,
        )
        yield _row(
            f"CIFAR soft targets {epochs} ep: top-1, STCE − NLL",
            diff("stce", "nll"),
            "noninferiority",
            ACCURACY_MARGIN,
        )
        yield _row(
            f"CIFAR soft targets {epochs} ep: ECE, STCE − STI (points)",
            diff("sti", "stce", "ece"),
            "direction",
        )


# ---------------------------------------------------------------- conditional uniformity, MIO


def _probes(path: str, method: str, s: int) -> list[dict]:
    return _load(f"{path}/{method}/seed{s}.json")["probes"]


def _conditional_rows():
    path = "conditional_uniformity/runs/digits_100ep_20probes"
    for key in ("full", "shot5"):
        for a, b in (
            ("conditional", "supcon"),
            ("supcon", "align_uniform"),
            ("align_uniform", "simclr"),
        ):
            yield _row(
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
    yield _row(
        "cond. uniformity digits: mean full-probe accuracy over the 20 probes, conditional − supcon (points)",
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

        yield _row(
            f"phantoms {epochs} ep: AUC (mean over N_train), conditional − y_aware",
            [auc("conditional", s) - auc("y_aware", s) for s in range(3)],
            "direction",
        )


def _mio_rows():
    def full(run, method, s):
        return 100 * _probes(f"mio/runs/digits_100ep/{run}", method, s)[-1]["full"]["accuracy"]

    for variant in "ABCD":
        yield _row(
            f"MIO digits: mio_{variant} − simclr (points)",
            [full("main", f"mio_{variant}", s) - full("main", "simclr", s) for s in range(3)],
            "equivalence",
            ACCURACY_MARGIN,
        )
    yield _row(
        "MIO digits lr: 1.5 − 0.3, mio_A (points)",
        [full("main", "mio_A", s) - full("lr0.3", "mio_A", s) for s in range(3)],
        "direction",
    )
    yield _row(
        "MIO digits lr: 1.5 − 2.0, mio_A (points)",
        [full("main", "mio_A", s) - full("lr2.0", "mio_A", s) for s in range(3)],
        "direction",
    )
    yield _row(
        "MIO digits tau: 0.5 − 0.3, mio_A (points)",
        [full("main", "mio_A", s) - full("tau0.3", "mio_A", s) for s in range(3)],
        "direction",
    )
    yield _row(
        "MIO digits tau: 0.5 − 0.7, mio_A (points)",
        [full("main", "mio_A", s) - full("tau0.7", "mio_A", s) for s in range(3)],
        "direction",
    )

    def cifar(method, s):
        return (
            100
            * _probes("cifar_proxy/runs/cifar_mio_adamw_36ep", method, s)[-1]["full"]["accuracy"]
        )

    for variant in "ABCD":
        yield _row(
            f"MIO CIFAR-10 proxy: mio_{variant} − simclr (points)",
            [cifar(f"mio_{variant}", s) - cifar("simclr", s) for s in range(3)],
            "equivalence",
            ACCURACY_MARGIN,
        )


def main() -> int:
    print(
        "| comparison (claim's side positive) | test | per seed | mean ± std | paired p | 90 % interval | grade |"
    )
    print("|---|---|---|---|---|---|---|")
    for rows in (_sincere_rows, _projnce_rows, _soft_target_rows, _conditional_rows, _mio_rows):
        for row in rows():
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
