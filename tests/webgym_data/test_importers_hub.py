"""webgym_data.importers through the Hub protocol: a real local Hub-compatible server (`olah` in
offline mode serving git repos from a mirrors folder) and ``webgym-data import ORG/NAME``.

Hub rows differ from file rows (``datasets`` fills missing struct keys with None, configs are
loaded one by one), so these tests compare a Hub import with the local import of the same file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.local_hub import LocalHub, run_local_hub
from webgym_data.importers import import_seed

# Mind2Web-Live-shaped rows: key nodes whose `content` objects have different keys, as in the seed.
LIVE_ROWS = [
    {"index": 0, "task": "Find the opening hours of the Main St store", "reference_task_length": 4,
     "evaluation": [
        {"match_function_name": "url_included_match",
         "content": {"key": "", "reference_answer": "shop.", "url": "https://www.shop.example.com/"}},
        {"match_function_name": "url_exactly_match",
         "content": {"key": "store", "reference_answer": "12", "url": "https://www.shop.example.com/s?store=12"}},
        {"match_function_name": "element_value_exactly_match",
         "content": {"reference_answer": "9am-5pm", "netloc": "shop", "path": "#hours",
                     "url": "https://www.shop.example.com/s?store=12"}}]},
    {"index": "abc", "task": "Search for red boots", "reference_task_length": 2, "evaluation": [
        {"match_function_name": "url_semantic_match", "method": "llm",
         "content": {"key": "q", "reference_answer": "Decide whether searching for red boots",
                     "url": "https://boots.example.org/search?q=red+boots"}},
        {"match_function_name": "element_path_exactly_match", "method": "selector",
         "content": {"reference_answer": ".result:nth-child(1)", "netloc": "boots",
                     "url": "https://boots.example.org/search?q=red+boots"}}]},
]


def _card(configs: dict[str, str]) -> str:
    lines = ["---", "configs:"]
    for name, path in configs.items():
        lines += [f"- config_name: {name}", "  data_files:", "  - split: test", f"    path: {path}"]
    return "\n".join([*lines, "---", "# test dataset", ""])


@pytest.fixture
def seed_hub(tmp_path: Path) -> Iterator[LocalHub]:
    """An offline `olah` on 127.0.0.1 serving two seed-shaped dataset repos under ``testorg/``."""
    with run_local_hub(tmp_path / "hub") as hub:
        hub.publish("dataset", "testorg/live", files={
            "live.json": json.dumps(LIVE_ROWS), "README.md": _card({"default": "live.json"})})
        queries = {}
        for split, count in (("train", 2), ("validation", 3), ("test", 1)):
            rows = [{"idx": i, "query": f"Plan a {i + 2}-day trip ({split})", "days": i + 2}
                    for i in range(count)]
            queries[split] = "".join(json.dumps(row) + "\n" for row in rows)
        hub.publish("dataset", "testorg/travel", files={
            **{f"{split}.jsonl": text for split, text in queries.items()},
            "README.md": _card({split: f"{split}.jsonl" for split in queries})})
        yield hub


def _import_via_hub(hub: LocalHub, tmp_path: Path, name: str, repo: str) -> list[dict]:
    out = tmp_path / f"{name}.jsonl"
    env = hub.env(tmp_path / "hf-home")
    exe = Path(sys.executable).with_name("webgym-data")
    result = subprocess.run([str(exe), "import", name, repo, "--revision", "main", "--out", str(out)],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_hub_rows_import_like_the_local_file(seed_hub, tmp_path):
    rows = _import_via_hub(seed_hub, tmp_path, "mind2web_live", "testorg/live")
    local_file = tmp_path / "live.json"
    local_file.write_text(json.dumps(LIVE_ROWS))
    local = import_seed("mind2web_live", local_file).tasks
    assert [r["task_id"] for r in rows] == [t.task_id for t in local]
    assert [r["website"] for r in rows] == ["https://www.shop.example.com/", "https://boots.example.org/"]
    assert [r["evaluator_reference"][0]["facts"] for r in rows] == [list(t.evaluator_reference[0].facts)
                                                                    for t in local]
    assert rows[0]["source"]["file"].startswith("hf://datasets/testorg/live/")


def test_hub_configs_are_each_loaded(seed_hub, tmp_path, monkeypatch):
    from webgym_data.importers import get_importer

    # TravelPlanner's Hub configs are train/validation/test: all three are read.
    assert get_importer("travelplanner").hub_configs == ("train", "validation", "test")
    rows = _import_via_hub(seed_hub, tmp_path, "travelplanner", "testorg/travel")
    splits = [json.loads(r["source"]["metadata"])["split"] for r in rows]
    assert splits == ["train"] * 2 + ["validation"] * 3 + ["test"]
    assert json.loads(rows[0]["source"]["metadata"])["days"] == 2
