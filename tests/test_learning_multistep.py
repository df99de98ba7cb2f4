"""benchmarks/learning_multistep.py: its verdict on the target, its table and its plot, from the
figures of a run (the run itself takes 20-45 minutes; `--quick` runs the path in about two)."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "benchmarks" / "learning_multistep.py"


@functools.cache
def _script():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("benchmarks_learning_multistep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _eval(successes: int, episodes: int = 40) -> dict:
    return {"episodes": episodes, "successes": successes, "success_rate": successes / episodes,
            "valid_action_rate": 1.0, "steps": 2 * episodes, "valid_actions": 2 * episodes}


def _point(iteration: int, successes: int, won: int, lost: int, won_dom: int, lost_dom: int) -> dict:
    from webgym_rollout.report.rates import sign_test

    return {"iteration": iteration, "eval": _eval(successes), "rollout": _eval(10, 96),
            "train": {"steps": 300, "samples": 20, "skipped": None}, "groups_dropped": None,
            "paired": {"tasks": 40, "won": won, "lost": lost, "p": sign_test(won, lost)},
            "vs_dom_random": {"tasks": 40, "won": won_dom, "lost": lost_dom,
                              "p": sign_test(won_dom, lost_dom)},
            "per_kind": {"click-option": [successes, 40]}}


def _results(last: tuple[int, int, int, int, int], seconds: float = 1200.0) -> dict:
    return {"args": {"modes": "elements", "heldout_seeds": 10, "temperature": 1.0}, "kinds": ["click-option"],
            "dom_random": {**_eval(8), "per_kind": {"click-option": [8, 40]}},
            "scripted": {**_eval(7), "per_kind": {"click-option": [7, 40]}},
            "bootstrap": {"iteration": 0, "eval": _eval(3), "imitated": _eval(60, 400), "seconds": 200.0,
                          "per_kind": {"click-option": [3, 40]}},
            "objectives": {"filtered_bc": {"seconds": 300.0, "curve": [_point(1, 12, 9, 0, 6, 2),
                                                                      _point(2, *last)]}},
            "seconds": seconds}


@pytest.mark.parametrize(("last", "seconds", "met"), [
    ((22, 19, 0, 15, 1), 1200.0, True),  # +47.5 points, p 4e-6 and 5e-4
    ((22, 19, 0, 15, 1), 50 * 60.0, False),  # the same figures, over 45 minutes
    ((12, 9, 0, 6, 2), 1200.0, False),  # +22.5 points: short of 25
    ((22, 19, 0, 9, 4), 1200.0, False),  # above the DOM-aware random policy, but p 0.27
])
def test_the_verdict_needs_every_part_of_the_target(last, seconds, met):
    results = _results(last, seconds)
    found = _script().verdict(results)["filtered_bc"]
    assert found["met"] is met
    assert found["points_above_bootstrap"] == pytest.approx(100 * (last[0] - 3) / 40)
    assert found["points_above_dom_random"] == pytest.approx(100 * (last[0] - 8) / 40)


def test_the_table_and_the_plot_come_from_the_figures(tmp_path, capsys):
    script = _script()
    results = _results((22, 19, 0, 15, 1))
    results["verdict"] = script.verdict(results)
    script.write_outputs(tmp_path, results)
    printed = capsys.readouterr().out
    assert "filtered_bc it 2" in printed and "22/40 55% [40-69]" in printed
    assert "19/0 p 3.8e-06" in printed and "target met" in printed
    image = (tmp_path / "learning_multistep.png").read_bytes()
    assert image[:8] == b"\x89PNG\r\n\x1a\n" and len(image) > 10_000
    assert (tmp_path / "results.json").is_file()


def test_help_names_the_target_and_an_example():
    result = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", str(SCRIPT), "--help"],
                            capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert "--modes" in result.stdout and "--quick" in result.stdout
    assert "benchmarks/learning_multistep.py --out out/multistep" in result.stdout
