"""webgym_data.importers.local_sites: the local sites' generated task rows, read back as a seed."""

from __future__ import annotations

import json

import pytest

from webgym_data.importers import discover_seeds, import_seed
from webgym_data.schema import TaskValidationError


def _row(**changes) -> dict:
    row = {"task_name": "Add the Lamp in blue to my cart.", "website": "http://127.0.0.1:8400/shop/",
           "start_url": "http://127.0.0.1:8400/shop/", "environment": "site:shop",
           "evaluator_reference": [{"id": "1", "description": "Cart", "facts": ["The cart has the lamp.",
                                                                               "It is blue."]}],
           "source": {"importer": "shop_tasks", "file": "", "row": 0,
                      "metadata": json.dumps({"site": "shop", "params": {},
                                              "checks": [{"type": "cart_has"}, {"type": "cart_option"}]})}}
    return row | changes


def test_rows_are_read_back_as_they_were_written(tmp_path):
    seeds = tmp_path / "seeds" / "local_sites"
    seeds.mkdir(parents=True)
    (seeds / "tasks.jsonl").write_text(json.dumps(_row()) + "\n")
    assert discover_seeds(tmp_path / "seeds") == [("local_sites", seeds)]
    [task] = import_seed("local_sites", seeds).tasks
    assert task.environment == "site:shop" and task.num_facts == 2
    assert json.loads(task.source.metadata)["checks"][1] == {"type": "cart_option"}


@pytest.mark.parametrize(("changes", "field"), [
    ({"environment": "web"}, "environment"),
    ({"source": {"importer": "x", "metadata": "{not json"}}, "source.metadata"),
    ({"source": {"importer": "x", "metadata": json.dumps({"site": "travel", "checks": [{}, {}]})}},
     "source.metadata.site"),
    ({"source": {"importer": "x", "metadata": json.dumps({"site": "shop", "checks": [{}]})}},
     "source.metadata.checks"),
])
def test_a_row_the_rollout_side_cannot_judge_names_its_field(tmp_path, changes, field):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(_row()) + "\n" + json.dumps(_row(task_name="Another task", **changes)) + "\n")
    with pytest.raises(TaskValidationError) as info:
        import_seed("local_sites", path)
    assert (info.value.row, info.value.field) == (1, field) and "tasks.jsonl" in str(info.value)
