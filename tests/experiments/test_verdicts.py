"""The verdict rule of experiments/RESULTS.md (``experiments/verdicts.py``)."""

from __future__ import annotations

import shutil

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
    with pytest.raises(ValueError, match="delta"):
        verdicts.grade([1.0, 2.0], "equivalence")


def test_a_large_effect_needs_its_size_as_well_as_its_direction():
    assert verdicts.grade([0.95, 0.96, 0.97], "large", 0.47) == "reproduced"
    assert verdicts.grade([0.10, 0.11, 0.12], "large", 0.47) == "not reproduced"  # small
    assert verdicts.grade([0.27, -0.06, 0.21], "large", 0.47) == "not reproduced"  # below size
    assert verdicts.grade([0.5, 0.2, 0.9], "large", 0.47) == "inconclusive"  # interval spans it
    assert verdicts.grade([-0.9, -1.0, -1.1], "large", 0.47) == "not reproduced"


def test_parts_combine_into_one_verdict():
    assert verdicts.combine(["reproduced", "reproduced"]) == "reproduced"
    assert verdicts.combine(["reproduced", "inconclusive"]) == "partly"
    assert verdicts.combine(["reproduced", "not reproduced"]) == "partly"
    assert verdicts.combine(["not reproduced", "inconclusive"]) == "not reproduced"
    assert verdicts.combine(["inconclusive", "inconclusive"]) == "inconclusive"
    with pytest.raises(ValueError, match="part verdicts"):
        verdicts.combine(["partly"])


def test_a_note_caps_the_grade_at_inconclusive():
    plain = verdicts.Comparison("x", (1.0, 1.1, 0.9), "direction")
    noted = verdicts.Comparison("x", (1.0, 1.1, 0.9), "direction", note="saturated: both ≥ 98 %")
    assert plain.grade == "reproduced" and noted.grade == "inconclusive"
    assert noted.row().endswith("| inconclusive (saturated: both ≥ 98 %) |")


def test_every_row_of_the_committed_records(capsys):
    assert verdicts.main([]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert len(rows) > 60
    # Rows RESULTS.md quotes: STI ≈ STCE at 72 epochs, SoftNCE on the GMM.
    sti = next(r for r in rows if r.startswith("| CIFAR soft targets 72 ep: top-1, STI − STCE"))
    assert "+1.65 ± 0.48 | 0.027" in sti and sti.endswith("| not reproduced |")
    soft_nce = next(r for r in rows if r.startswith("| ProjNCE gmm: MI, soft_nce − supcon"))
    assert soft_nce.endswith("| reproduced |")


def test_the_records_give_the_graded_notes():
    found = verdicts.comparisons()
    spherical = found["toy spherical 80 %: KL, NLL − InfoNCE (×1e3)"]
    assert spherical.test_grade == "reproduced" and spherical.grade == "inconclusive"
    assert spherical.note.startswith("under-trained: 20 of 20 runs")
    supcon = found["label noise p = 0.4: simclr − supcon, noisy probe"]
    assert supcon.grade == "inconclusive" and "SupCon at p = 0.4" in supcon.note
    assert "saturated" in found["ProjNCE binary: MI, soft_nce − supcon (nats)"].note
    assert found["SINCERE digits 600 steps: final loss, (SupCon − SINCERE) / SupCon"].grade \
        == "reproduced"


def test_check_passes_on_the_committed_page():
    assert verdicts.check() == []
    assert verdicts.main(["--check"]) == 0


def _edited(tmp_path, old: str, new: str):
    page = tmp_path / "RESULTS.md"
    shutil.copy(verdicts.RESULTS_PAGE, page)
    text = page.read_text(encoding="utf-8")
    assert text.count(old) == 1
    page.write_text(text.replace(old, new), encoding="utf-8")
    return page


def test_check_fails_naming_the_row_when_a_headline_verdict_is_edited(tmp_path, capsys):
    row = "| MIO | the best model, (D), outperforms SimCLR on CIFAR-10 (Table 4) |"
    text = open(verdicts.RESULTS_PAGE, encoding="utf-8").read()
    line = next(x for x in text.splitlines() if x.startswith(row))
    assert line.endswith("| inconclusive (every estimate on the other side) |")
    page = _edited(tmp_path, line, line.replace("| inconclusive (every", "| reproduced (every"))
    assert verdicts.main(["--check", "--results", str(page)]) == 1
    err = capsys.readouterr().err
    assert "MIO | the best model, (D), outperforms SimCLR on CIFAR-10 (Table 4)" in err
    assert "says 'reproduced', the rule gives 'inconclusive'" in err


def test_check_fails_on_an_unknown_row_or_an_unreadable_verdict(tmp_path):
    page = _edited(tmp_path, "| SINCERE | Fig. 2 cosine gaps on CIFAR-10 |",
                   "| SINCERE | Fig. 2 cosine gaps on CIFAR-10, renamed |")
    problems = verdicts.check(str(page))
    assert any("renamed': no rule" in p for p in problems)
    assert any("Fig. 2 cosine gaps on CIFAR-10': in HEADLINE but not" in p for p in problems)
    page = _edited(tmp_path, "| reproduced |\n| SINCERE | final loss",
                   "| mostly fine |\n| SINCERE | final loss")
    assert any("does not start with one of" in p for p in verdicts.check(str(page)))
