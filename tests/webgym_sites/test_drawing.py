"""The generators' shared draw loop and row builder."""

from __future__ import annotations

import json

import pytest

from webgym_sites.drawing import Draw, SiteRows, draw_tasks

ROWS = SiteRows(site="shop", benchmark="webgym-test", domain="testing")


def _template(rng, data):
    n = rng.randrange(data)
    return Draw("pick", f"Pick item {n}.", [("Pick", [(f"Item {n} was picked.", {"type": "cart_has",
                                                                                 "product_id": f"P{n}"})])],
                {"n": n}, answer="", start="/search")


def test_rows_carry_checks_truth_and_site_and_repeats_are_drawn_again():
    tasks = draw_tasks(ROWS, {"pick": _template}, 6, 6, seed=1, data_seed=2, base_url="http://127.0.0.1:9/",
                       subdomain=lambda draw: f"n{draw.params['n']}")
    assert sorted(t.task_name for t in tasks) == [f"Pick item {n}." for n in range(6)]  # all distinct
    task = tasks[0]
    meta = json.loads(task.source.metadata)
    assert (task.environment, task.website, task.start_url) == (
        "site:shop", "http://webgym-shop.test", "http://127.0.0.1:9/shop/search")
    assert meta["checks"] == [{"type": "cart_has", "product_id": f"P{meta['params']['n']}"}]
    assert meta["shop_seed"] == 2 and task.subdomain == f"n{meta['params']['n']}"
    assert [t.task_id for t in tasks] == [t.task_id for t in draw_tasks(
        ROWS, {"pick": _template}, 6, 6, seed=1, data_seed=2, base_url="http://127.0.0.1:9")]


def test_impossible_counts_are_refused():
    with pytest.raises(ValueError, match="count"):
        draw_tasks(ROWS, {"pick": _template}, 3, -1, seed=0, data_seed=0, base_url="http://h")
    with pytest.raises(RuntimeError, match="could not draw 4 distinct shop tasks"):
        draw_tasks(ROWS, {"pick": _template}, 3, 4, seed=0, data_seed=0, base_url="http://h")
