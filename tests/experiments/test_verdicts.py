"""The verdict rule of experiments/RESULTS.md (``experiments/verdicts.py``)."""

from __future__ import annotations

import pytest

from experiments import verdicts


def test_direction_needs_significance_and_every_seed():
    assert verdicts.grade([1.0, 1.1, 0.9], "direction") == "reproduced"
    assert verdicts.grade([-1.0, -1.1, -0.9], "direction") == "not reproduced"
    assert verdicts.grade([1.0, 1.1, -0.2], "direction") == "inconclusive"  # one seed against
    assert verdicts.grade([0.1, 2.0, 0.3], "direction") == "inconclusive"  # p > 0.05
    ten = [1.0, 1.2, 0.9, 1.1, 1.0, 0.8, 1.3, 1.0, 0.9, -0.1]
    assert verdicts.grade(ten, "direction") == "reproduced"  # one of ten against is allowed


def test_equivalence_is_two_one_sided_tests_within_the_margin():
    assert verdicts.grade([0.1, -0.2, 0.0], "equivalence", 2.0) == "reproduced"
    assert verdicts.grade([1.4, 1.35, 2.2], "equivalence", 2.0) == "not reproduced"
    assert verdicts.grade([-1.15, 1.8, -0.4], "equivalence", 2.0) == "inconclusive"


def test_noninferiority():
    assert verdicts.grade([0.5, 0.2, 0.4], "noninferiority", 2.0) == "reproduced"
    assert verdicts.grade([-1.3, -1.95, -1.2], "noninferiority", 2.0) == "not reproduced"
    assert verdicts.grade([-2.0, 1.5, 0.25], "noninferiority", 2.0) == "inconclusive"
    with pytest.raises(ValueError, match="kind"):
        verdicts.grade([1.0, 2.0], "ordering")


def test_every_row_of_the_committed_records(capsys):
    assert verdicts.main() == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert len(rows) > 60
    # Rows RESULTS.md quotes: STI ≈ STCE at 72 epochs, SoftNCE on the GMM.
    sti = next(r for r in rows if r.startswith("| CIFAR soft targets 72 ep: top-1, STI − STCE"))
    assert "+1.65 ± 0.48 | 0.027" in sti and sti.endswith("| not reproduced |")
    soft_nce = next(r for r in rows if r.startswith("| ProjNCE gmm: MI, soft_nce − supcon"))
    assert soft_nce.endswith("| reproduced |")
