"""The automatic block size: a rule per platform (``blockwise.BLOCK_RULES``), each with its
provenance; the CPU's is the rule the losses always had."""

from __future__ import annotations

import jax
import pytest

from contrastive_jax.losses import blockwise


def test_cpu_rule_is_unchanged():
    for m in (1025, 2048, 8192, 65536, 262144, 1 << 22):
        assert blockwise.automatic_block(m, "cpu") == max(8, blockwise.BLOCK_ELEMENTS // m)
    assert blockwise.automatic_block(65536, "cpu") == 32
    assert blockwise.automatic_block(262144, "cpu") == 8


def test_choose_block_uses_the_default_backend_rule():
    m = 4 * blockwise.BLOCKWISE_THRESHOLD
    assert blockwise.choose_block(None, m) == blockwise.automatic_block(
        m, jax.default_backend())
    assert blockwise.choose_block(None, blockwise.BLOCKWISE_THRESHOLD) is None


def test_unlisted_platform_gets_the_cpu_rule():
    assert blockwise.automatic_block(8192, "metal") == blockwise.automatic_block(8192, "cpu")


def test_a_measured_rule_is_clipped_to_its_rows(monkeypatch):
    rule = blockwise.BlockRule(1 << 25, 128, 1024, "measured: a test")
    monkeypatch.setitem(blockwise.BLOCK_RULES, "gpu", rule)
    assert blockwise.automatic_block(65536, "gpu") == 512
    assert blockwise.automatic_block(1 << 20, "gpu") == 128  # 32 by elements: min_rows
    assert blockwise.automatic_block(2048, "gpu") == 1024  # 16,384 by elements: max_rows


@pytest.mark.parametrize("platform", sorted(blockwise.BLOCK_RULES))
def test_every_rule_says_where_it_comes_from(platform):
    provenance = blockwise.BLOCK_RULES[platform].provenance
    assert provenance.startswith(("measured: ", "to be measured: "))
    if platform == "cpu":
        assert provenance.startswith("measured: ")
