"""``webgym-data stats``: the figures of a built folder, checked against the rows themselves."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from webgym_data.build import BuildSettings, build
from webgym_data.loading import read_task_set
from webgym_data.split import SplitSettings, registrable_domain
from webgym_data.stats import (
    NO_FACTS,
    NotATaskSetError,
    compute_stats,
    markdown_tables,
    read_columns,
    stats_command,
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stats")
    rows = []
    for s in range(20):
        for i in range(1 + s % 3):
            facts = 1 + (s * 3 + i) % 9
            rubric = [{"id": "1", "description": "Item", "facts": [f"fact {k}" for k in range(facts)]},
                      {"id": "2", "description": "Other", "facts": ["x"]}]
            rows.append({
                "task_name": f"look up item {s}-{i} on the site",
                "benchmark_name": "alpha" if s % 2 else "beta",
                "website": f"https://{'www' if i % 2 else 'shop'}.site{s}.org",
                "evaluator_reference": rubric,
            })
    rows += [{"task_name": f"no rubric {i}", "website": f"https://norubric{i}.net"} for i in range(5)]
    seed = root / "seed.jsonl"
    seed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = root / "tasks"
    build(BuildSettings(out=out, importers=(("generic", str(seed)),), split=SplitSettings(test_size=8),
                        progress=False))
    return out


def test_stats_match_the_rows(folder):
    train, test, manifest = read_task_set(folder)
    stats = compute_stats(read_columns(folder))
    assert stats == manifest["stats"]
    assert stats["splits"] == {"train": len(train), "test": len(test)}
    assert stats["subtasks"] == {"train": sum(bool(t.parent_task_id) for t in train),
                                 "test": sum(bool(t.parent_task_id) for t in test)}
    assert stats["subtasks"]["train"] > 0
    for split, tasks in (("train", train), ("test", test)):
        assert stats["websites"][split] == len({t.website for t in tasks})
        assert stats["sites"][split] == len({registrable_domain(t.website) for t in tasks})
        for benchmark, n in Counter(t.benchmark_name for t in tasks).items():
            assert stats["seeds"][benchmark][split] == n
        for level, n in Counter(t.difficulty_level if t.difficulty else NO_FACTS for t in tasks).items():
            assert stats["difficulty"][level][split] == n
    assert set(stats["difficulty"]) == {"easy", "medium", "hard", NO_FACTS}
    assert sum(stats["difficulty"][NO_FACTS].values()) == 5
    # www.siteN.org and shop.siteN.org are one site: fewer sites than websites.
    assert stats["sites"]["total"] < stats["websites"]["total"]
    assert f"| alpha | {stats['seeds']['alpha']['train']:,} |" in markdown_tables(stats)


def test_cli_prints_tables_and_json(folder):
    result = CliRunner().invoke(stats_command, [str(folder)])
    assert result.exit_code == 0, result.output
    for title in ("Overview", "Tasks per seed set", "Tasks per domain", "Tasks per difficulty level"):
        assert title in result.output
    as_json = CliRunner().invoke(stats_command, [str(folder), "--json"])
    assert json.loads(as_json.output) == compute_stats(read_columns(folder))


def test_not_a_task_set_is_one_error_line(tmp_path):
    (tmp_path / "data").mkdir()
    result = CliRunner().invoke(stats_command, [str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: {tmp_path}: not a built task set (no data/train-*.parquet or data/test-*.parquet)"]
    (tmp_path / "data" / "train-seeds-00000-of-00001.parquet").write_text("not parquet")
    with pytest.raises(NotATaskSetError, match="train-seeds-00000-of-00001.parquet"):
        read_columns(tmp_path)
