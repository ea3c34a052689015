"""Parametrisations that run an all-pairs subset in `make test` and the rest in `make test-all`.

A test over the cartesian product of several parameters (loss kind x block size x mesh x
exchange ...) compiles once per combination. :func:`all_pairs` returns every combination as
a ``pytest.param``; a subset in which every pair of values of any two parameters occurs at
least once runs unmarked, the other combinations are marked ``slow``. So `make test` still
sees each value next to each value of every other parameter, and `make test-all` the whole
product. :func:`only_in_make_test` keeps chosen values of a single parameter.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest


def _pairs(combination: tuple) -> set[tuple]:
    return {(i, combination[i], j, combination[j])
            for i, j in itertools.combinations(range(len(combination)), 2)}


def covering_subset(*values: Sequence) -> list[tuple]:
    """A greedy all-pairs subset of ``itertools.product(*values)``, in product order.

    Examples:
      >>> len(covering_subset([0, 1], [0, 1], [0, 1]))
      4
    """
    return pair_cover(list(itertools.product(*values)))


def pair_cover(combinations: Sequence[tuple]) -> list[tuple]:
    """A subset of ``combinations`` holding every pair of values (of two positions) that
    some combination holds, in the given order.

    Deterministic: each round takes the first combination that covers the most pairs not yet
    covered, until none is left.
    """
    combinations = list(combinations)
    uncovered = set().union(set(), *(_pairs(c) for c in combinations))
    chosen: set[tuple] = set()
    while uncovered:
        best = max(combinations, key=lambda c: len(_pairs(c) & uncovered))
        chosen.add(best)
        uncovered -= _pairs(best)
    return [c for c in combinations if c in chosen or len(c) < 2]


def _id(value) -> str:
    return value if isinstance(value, str) else repr(value)


def all_pairs(*values: Sequence) -> list:
    """Every combination of ``values`` as a ``pytest.param``; those outside
    :func:`covering_subset` are marked ``slow``.

    Use with ``@pytest.mark.parametrize((name, ...), all_pairs(values, ...))``.
    """
    fast = set(covering_subset(*values))
    return [
        pytest.param(*c, marks=() if c in fast else (pytest.mark.slow,),
                     id="-".join(_id(v) for v in c))
        for c in itertools.product(*values)
    ]


def only_in_make_test(values: Sequence, fast: Sequence) -> list:
    """``values`` for ``parametrize``, those not in ``fast`` marked ``slow``.

    For one parameter whose values share most of their code path (variants of a loss family):
    ``fast`` names one value of each path; `make test-all` runs them all.
    """
    missing = set(fast) - set(values)
    if missing:
        raise ValueError(f"`fast` names values not in `values`: {sorted(missing)}")
    return [v if v in fast else pytest.param(v, marks=pytest.mark.slow) for v in values]
