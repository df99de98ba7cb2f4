"""The figures README.md quotes for `webgym demo`, from recorded runs, so that they cannot drift from
what the demo prints.

benchmarks/demo_runs.json holds the figures of each recorded run at the shipped size (read from the
run's OUT/summary.json); README.md quotes their ranges in the words `readme_text` writes, and
tests/test_demo_figures.py checks that it does::

    .venv/bin/python scripts/demo_figures.py                              # print the README text
    .venv/bin/python scripts/demo_figures.py --add out/demo/summary.json  # record a run, print the text
    .venv/bin/python scripts/demo_figures.py --check                      # exit 1 if README.md lacks it

After ``--add``, paste the printed text over the old one in README.md's demo paragraph.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "demo_runs.json"
README = ROOT / "README.md"
SHIPPED = "small"
"""The demo's shipped size (``--size small``): the only runs the README quotes."""


def record(summary: dict[str, Any], name: str) -> dict[str, Any]:
    """A run's entry of benchmarks/demo_runs.json from the demo's summary.json (`summary`)."""
    runs, sites = summary["rollouts"], summary["sites"]
    pair = summary["paired"]["trained_vs_bootstrap"]
    return {"name": name, "size": summary["settings"]["size"], "seed": summary["settings"]["seed"],
            "seconds": round(summary["seconds"]),
            "heldout": {"episodes": runs["trained"]["episodes"],
                        **{key: runs[key]["successes"]
                           for key in ("pixel_random", "dom_random", "bootstrap_eval", "trained")}},
            "trained_vs_bootstrap": {"won": pair["won"], "lost": pair["lost"], "p": pair["p"]},
            "sites": {"tasks": sites["tasks"], "expert": runs["site_expert"]["successes"],
                      "random": runs["site_random"]["successes"],
                      "replay_matched": sites["replay"]["matched"]}}


def _span(values: list[Any], unit: str = "") -> str:
    """``3-6`` (``3-6 s`` with a unit), or ``0`` when every run measured the same."""
    low, high = min(values), max(values)
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def readme_text(runs: list[dict[str, Any]]) -> str:
    """What README.md says of the recorded runs at the shipped size: every figure a range over them."""
    shipped = [run for run in runs if run["size"] == SHIPPED]
    if not shipped:
        raise ValueError(f"{RUNS}: no recorded run at the shipped size ({SHIPPED})")
    (episodes,) = {run["heldout"]["episodes"] for run in shipped}
    (tasks,) = {run["sites"]["tasks"] for run in shipped}

    def held(key: str) -> str:
        return f"{_span([run['heldout'][key] for run in shipped])}/{episodes}"

    def pairs(key: str) -> str:
        return _span([run["trained_vs_bootstrap"][key] for run in shipped])

    def sites(key: str) -> str:
        return f"{_span([run['sites'][key] for run in shipped])}/{tasks}"

    p_values = [p for run in shipped if (p := run["trained_vs_bootstrap"]["p"]) is not None]
    p = f"{min(p_values):.2g} to {max(p_values):.2g}" if p_values else "n/a"
    return (f"What to expect, from the {len(shipped)} recorded runs at the shipped size "
            f"(benchmarks/demo_runs.json; each run prints its own, which vary with the seed and the load): "
            f"{_span([run['seconds'] for run in shipped], ' s')} on 2 cores shared with a "
            f"benchmark; held-out successes: pixel-random {held('pixel_random')}, DOM-aware random "
            f"{held('dom_random')}, the bootstrap (round 0) {held('bootstrap_eval')}, after one round of its "
            f"own rollouts {held('trained')}, winning {pairs('won')} seeds against the bootstrap and losing "
            f"{pairs('lost')} (sign test p {p}); on {tasks} site tasks the expert {sites('expert')}, random "
            f"{sites('random')}, the expert's replay {sites('replay_matched')} identical.")


def normalised(text: str) -> str:
    """`text` with every run of white space one space (a markdown paragraph's line breaks)."""
    return re.sub(r"\s+", " ", text).strip()


def readme_is_current(readme: str, runs: list[dict[str, Any]]) -> bool:
    return normalised(readme_text(runs)) in normalised(readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--add", type=Path, metavar="SUMMARY_JSON",
                        help="record the run of this summary.json")
    parser.add_argument("--name", default="", help="the recorded run's name (default: the summary's path)")
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md does not quote the runs")
    args = parser.parse_args(argv)
    recorded = json.loads(RUNS.read_text(encoding="utf-8"))
    if args.add:
        summary = json.loads(args.add.read_text(encoding="utf-8"))
        recorded["runs"].append(record(summary, args.name or str(args.add)))
        RUNS.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")
    if args.check:
        current = readme_is_current(README.read_text(encoding="utf-8"), recorded["runs"])
        if not current:
            sys.stderr.write(f"README.md does not quote {RUNS.name}; its demo paragraph should say:\n")
            sys.stdout.write(readme_text(recorded["runs"]) + "\n")
        return 0 if current else 1
    sys.stdout.write(readme_text(recorded["runs"]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
