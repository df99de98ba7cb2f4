"""scripts/demo_figures.py: README.md quotes the demo's figures as ranges over the recorded runs of
benchmarks/demo_runs.json, so that it cannot say 17/24 where a run printed 16/24."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "demo_figures.py"


@functools.cache
def figures():
    spec = importlib.util.spec_from_file_location("scripts_demo_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def recorded() -> list[dict]:
    return json.loads((REPO_ROOT / "benchmarks" / "demo_runs.json").read_text())["runs"]


def test_readme_quotes_the_recorded_runs():
    readme = (REPO_ROOT / "README.md").read_text()
    assert figures().readme_is_current(readme, recorded()), (
        "README.md's demo paragraph does not quote benchmarks/demo_runs.json; it should say:\n"
        + figures().readme_text(recorded()))


def test_every_figure_of_the_demo_paragraph_is_a_recorded_range():
    # No single-run figure (such as 17/24) is left in the paragraph beside the ranges.
    readme = figures().normalised((REPO_ROOT / "README.md").read_text())
    paragraph = readme[readme.index("The main job is `webgym demo`"):readme.index("## What it is")]
    quoted = set(re.findall(r"\b\d+(?:-\d+)?/\d+\b", paragraph))
    assert quoted == set(re.findall(r"\b\d+(?:-\d+)?/\d+\b", figures().readme_text(recorded())))


def test_the_text_is_ranges_over_the_shipped_runs_only():
    runs = recorded()
    text = figures().readme_text(runs)
    trained = [run["heldout"]["trained"] for run in runs if run["size"] == "small"]
    assert f"own rollouts {min(trained)}-{max(trained)}/24" in text
    larger = {**runs[0], "size": "larger", "seconds": 9999,
              "heldout": {**runs[0]["heldout"], "trained": 24}}
    assert figures().readme_text([*runs, larger]) == text  # another size is not quoted
    one = figures().readme_text(runs[:1])  # one run: its figures, no ranges
    assert f"own rollouts {runs[0]['heldout']['trained']}/24" in one and "from the 1 recorded runs" in one
    assert not figures().readme_is_current(text.replace("11-23/24", "17/24"), runs)
    with pytest.raises(ValueError, match="shipped size"):
        figures().readme_text([larger])


def summary_json(seconds: float, trained: int) -> dict:
    """The fields of a demo's summary.json that a record reads, as `webgym.demo` writes them."""
    rollouts = {key: {"successes": won, "episodes": 24} for key, won in (
        ("pixel_random", 0), ("dom_random", 4), ("bootstrap_eval", 0), ("trained", trained))}
    rollouts |= {"site_expert": {"successes": 9, "episodes": 9},
                 "site_random": {"successes": 1, "episodes": 9}}
    pair = {"tasks": 24, "won": trained, "lost": 0, "p": 0.5 ** (trained - 1)}
    return {"settings": {"size": "small", "seed": 2}, "seconds": seconds, "rollouts": rollouts,
            "paired": {"trained_vs_bootstrap": pair},
            "sites": {"tasks": 9, "replay": {"episodes": 9, "matched": 9}}}


def test_add_records_a_run_from_its_summary_and_the_text_follows(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "demo_runs.json"
    runs.write_text(json.dumps({"runs": recorded()}))
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(summary_json(1234.4, 16)))
    monkeypatch.setattr(figures(), "RUNS", runs)
    assert figures().main(["--add", str(summary), "--name", "a new run"]) == 0
    entry = json.loads(runs.read_text())["runs"][-1]
    assert entry["name"] == "a new run" and entry["seconds"] == 1234 and entry["seed"] == 2
    assert entry["heldout"] == {"episodes": 24, "pixel_random": 0, "dom_random": 4, "bootstrap_eval": 0,
                                "trained": 16}
    assert entry["sites"] == {"tasks": 9, "expert": 9, "random": 1, "replay_matched": 9}
    printed = capsys.readouterr().out
    assert "318-1234 s" in printed and "random 0-1/9" in printed
    assert f"from the {len(recorded()) + 1} recorded runs" in printed
    # The README still quotes the 4 runs: the check fails and prints the text to paste.
    assert figures().main(["--check"]) == 1
    assert "318-1234 s" in capsys.readouterr().out
