"""Generated shop tasks: the published schema, deterministic by seed, levels from the fact count."""

from __future__ import annotations

from collections import Counter

from webgym_data.schema import Task
from webgym_sites.catalogue import catalogue
from webgym_sites.goals import task_checks
from webgym_sites.shop_tasks import TEMPLATES, shop_tasks


def test_tasks_are_deterministic_rows_of_every_level():
    tasks = shop_tasks(180)
    assert [t.to_row() for t in tasks] == [t.to_row() for t in shop_tasks(180)]
    assert [t.task_name for t in shop_tasks(20, seed=1)] != [t.task_name for t in tasks[:20]]
    assert len({t.task_id for t in tasks}) == 180
    levels = Counter(t.difficulty_level for t in tasks)
    assert set(levels) == {"easy", "medium", "hard"} and min(levels.values()) >= 40, levels
    assert {Task.from_row(t.to_row()).source.metadata_dict()["template"] for t in tasks} == set(TEMPLATES)
    for task in tasks:
        assert Task.from_row(task.to_row()) == task
        assert len(task_checks(task)) == task.num_facts == task.difficulty
        assert task.start_url.startswith("http://127.0.0.1:8400/shop/")
    price = next(t for t in tasks if t.source.metadata_dict()["template"] == "price")
    product = catalogue(0).by_id[price.source.metadata_dict()["params"]["product_id"]]
    assert price.definite_answer == product.price and product.name in price.task_name
