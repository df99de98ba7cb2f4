"""`webgym_core.cards.size_category`: the Hub's size tag, the one rule every card writer uses."""

from __future__ import annotations

import pytest

from webgym_core.cards import size_category


@pytest.mark.parametrize(("rows", "tag"), [
    (0, "n<1K"), (999, "n<1K"), (1_000, "1K<n<10K"), (99_999, "10K<n<100K"), (300_000, "100K<n<1M"),
    (1_000_000, "1M<n<10M"), (9_999_999, "1M<n<10M"), (10_000_000, "10M<n<100M"),
])
def test_each_size_gets_the_hubs_tag_of_its_range(rows, tag):
    assert size_category(rows) == tag
