"""Benchmark: build a WebGym-sized task set offline and load it back.

Generates synthetic seed tasks in the published row format (instruction, website, rubric of 1-4
fact groups of 1-6 facts), spread over about as many websites as the published set (127,645 for
292k tasks: a few sites with thousands of tasks, a long tail with one or two), writes them as one
JSONL seed file, then runs the real ``webgym-data build`` command on it in a child process
(generic importer, no LLM: template instructions and rule taxonomy) and ``datasets.load_dataset``
on the result in another child process with an empty cache. Prints the whole-build seconds (wall
and CPU: the CPU seconds stay meaningful when other work shares the cores, and the load average is
printed beside them), the build's peak memory (ru_maxrss of the child), the load seconds, each
against its target, and the seconds of every build step. Beside the build, as its floor, a columnar
baselines: polars and pyarrow read the same JSONL and write its rows as parquet (each in a child
process, timed inside it); the build's ratio to each and the import step's share of the build are printed.

Fact groups per task: 1-4 with relative weights 85:10:4:1 by default (most seed tasks carry one
group; ``--group-weights 1,1,1,1`` is the uniform spread and yields about 3 subtasks per task), each
group 1-6 facts uniformly.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/data_build.py              # 300,000 tasks
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/data_build.py --tasks 20000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_BUILD_S = 60.0
TARGET_PEAK_GB = 3.0
TARGET_LOAD_S = 5.0
PUBLISHED_TASKS, PUBLISHED_WEBSITES = 292_092, 127_645


def _words(text: str) -> list[str]:
    return text.split()


VERBS = _words("find search compare book buy locate check list show add open read get track filter")
THINGS = _words("laptop headphones flight hotel recipe ticket apartment jacket camera phone course loan "
                "insurance restaurant museum concert train car bike sofa watch book movie album game "
                "vitamin stroller tent printer monitor")
QUALIFIERS = _words("cheapest newest best-rated closest largest smallest fastest most-reviewed refurbished "
                    "discounted vegan organic wireless waterproof second-hand family-size")
PLACES = _words("Paris Berlin Tokyo Seattle Denver Lagos Lima Oslo Austin Dublin Madrid Seoul Boston Rome "
                "Cairo Delhi Perth Quito Vienna Prague")
TLDS = ["com", "org", "net", "co.uk", "de", "io", "com.au", "fr", "jp", "edu"]


def synthetic_rows(n_tasks: int, n_websites: int, weights: list[float], seed: int):
    """Yield `n_tasks` task rows in the published format (deterministic for `seed`).

    45% of the tasks are on 13 large sites (several hosts each, like PAE-WebVoyager); the rest
    cover the long tail, every tail website at least once. About 1% repeat an earlier task on the
    same site exactly (up to case and punctuation) and 1% with one word changed, so the dedupe
    step has real work.
    """
    rng = random.Random(seed)
    big_sites = [f"www.bigshop{i}.com" for i in range(13)]
    n_tail = max(1, n_websites - len(big_sites))
    tail_used = 0
    earlier: list[tuple[str, str]] = []
    for _ in range(n_tasks):
        roll = rng.random()
        if earlier and roll < 0.02:
            name, host = rng.choice(earlier)
            name = name.upper() + "!" if roll < 0.01 else name.replace(" and report", " then report")
        else:
            if rng.random() < 0.45:
                host = rng.choice(big_sites)
                if rng.random() > 0.8:
                    host = host.replace("www.", rng.choice(["m.", "smile.", "shop."]))
            else:
                site = tail_used if tail_used < n_tail else rng.randrange(n_tail)
                tail_used += 1
                host = f"www.site{site}.{TLDS[site % len(TLDS)]}"
            verb, thing, qualifier, place = (rng.choice(VERBS), rng.choice(THINGS), rng.choice(QUALIFIERS),
                                             rng.choice(PLACES))
            # A unique detail (like a product code) keeps generated instructions apart.
            name = (f"{verb.capitalize()} the {qualifier} {thing} near {place} with code "
                    f"{rng.getrandbits(40):x} and report its price, rating and availability")
            earlier.append((name, host))
        thing = name.split()[3] if len(name.split()) > 3 else "item"
        n_groups = rng.choices(range(1, len(weights) + 1), weights=weights)[0]
        groups = [{"id": str(g + 1), "description": f"{thing} {aspect}",
                   "facts": [f"{aspect} fact {f + 1} about the {thing}" for f in range(rng.randint(1, 6))]}
                  for g, aspect in enumerate(rng.sample(["price", "rating", "availability", "location"],
                                                        n_groups))]
        yield {"task_name": name, "website": f"https://{host}/", "benchmark_name": "synthetic",
               "evaluator_reference": groups, "definite_answer": ""}


_TIMED = ("t = time.perf_counter(); c = time.process_time(); {}; "
          "print(time.perf_counter() - t, time.process_time() - c)")
BASELINES = {
    "polars read_ndjson + write_parquet": "import sys, time; import polars as pl; " + _TIMED.format(
        "pl.read_ndjson(sys.argv[1]).write_parquet(sys.argv[2])"),
    "pyarrow read_json + write_table": "import sys, time; import pyarrow.json as pj, pyarrow.parquet as pq; "
    + _TIMED.format("pq.write_table(pj.read_json(sys.argv[1]), sys.argv[2])"),
}
"""The columnar floors: the seed rows read and written as parquet, timed in a child process, by
polars (the issue's yardstick) and by pyarrow (the build's own JSONL reader)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300_000, help="synthetic seed tasks (default 300,000)")
    parser.add_argument("--websites", type=int, default=None,
                        help="distinct websites (default: the published tasks/websites ratio)")
    parser.add_argument("--group-weights", default="85,10,4,1",
                        help="relative frequency of tasks with 1,2,3,4 fact groups (default 85,10,4,1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="build into this folder and keep it")
    args = parser.parse_args()
    websites = args.websites or max(1, round(args.tasks * PUBLISHED_WEBSITES / PUBLISHED_TASKS))
    weights = [float(w) for w in args.group_weights.split(",")]
    repo = Path(__file__).resolve().parents[1]

    with tempfile.TemporaryDirectory(prefix="webgym-bench-") as work_dir:
        work = Path(work_dir)
        seed_file = work / "synthetic.jsonl"
        started = time.perf_counter()
        with seed_file.open("w", encoding="utf-8") as handle:
            for row in synthetic_rows(args.tasks, websites, weights, args.seed):
                handle.write(json.dumps(row) + "\n")
        print(f"generated {args.tasks:,} seed tasks on up to {websites:,} websites "
              f"({seed_file.stat().st_size / 1e6:.0f} MB JSONL) in {time.perf_counter() - started:.1f} s")

        out = args.keep or work / "tasks"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        # The command's module from this checkout (cwd=repo), not the installed console script's.
        command = [sys.executable, "-c", "from webgym_data.cli import main; main()", "-v", "build",
                   "--importer", f"generic={seed_file}", "--out", str(out), "--no-progress"]
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, check=False)
        build_s = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        build_peak_gb = usage.ru_maxrss * 1024 / 1e9
        build_cpu_s = usage.ru_utime + usage.ru_stime
        if result.returncode != 0:
            sys.exit(f"build failed:\n{result.stderr[-3000:]}")
        steps = [line.split("step ", 1)[1] for line in result.stderr.splitlines() if "build: step " in line]
        manifest = json.loads((out / "manifest.json").read_text())

        load_code = ("import datasets, sys, time; t = time.perf_counter(); "
                     "d = datasets.load_dataset(sys.argv[1], cache_dir=sys.argv[2]); "
                     "print(time.perf_counter() - t, d['train'].num_rows, d['test'].num_rows)")
        load = subprocess.run([sys.executable, "-c", load_code, str(out), str(work / "hf-cache")], env=env,
                              capture_output=True, text=True, check=False)
        if load.returncode != 0:
            sys.exit(f"load_dataset failed:\n{load.stderr[-3000:]}")
        load_s, n_train, n_test = load.stdout.split()[-3:]
        load_s = float(load_s)
        floors = {}
        for name, code in BASELINES.items():
            baseline = subprocess.run([sys.executable, "-c", code, str(seed_file),
                                       str(work / "base.parquet")],
                                      env=env, capture_output=True, text=True, check=False)
            if baseline.returncode != 0:
                sys.exit(f"baseline {name} failed:\n{baseline.stderr[-3000:]}")
            floors[name] = tuple(map(float, baseline.stdout.split()[-2:]))

    counts, stats = manifest["counts"], manifest["stats"]
    print(f"build steps: {', '.join(steps)}")
    print(f"imported {counts['normalise']['imported']:,}; removed {counts['dedupe']['exact']:,} exact + "
          f"{counts['dedupe']['near']:,} near duplicates; {counts['decompose']['subtasks']:,} subtasks from "
          f"{counts['decompose']['parents']:,} tasks; {int(n_train):,} train + {int(n_test):,} test rows on "
          f"{stats['websites']['total']:,} websites ({stats['sites']['total']:,} sites)")
    # The machine may be shared: CPU seconds show the build's own cost, the load how busy it was.
    print(f"load average before/after the build: {load_before:.1f} / {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    print(f"{'measure':<26}{'value':>10}{'target':>10}{'value/target':>14}")
    for label, value, target in (("whole build (s)", build_s, TARGET_BUILD_S),
                                 ("whole build, CPU (s)", build_cpu_s, TARGET_BUILD_S),
                                 ("build peak memory (GB)", build_peak_gb, TARGET_PEAK_GB),
                                 ("load_dataset (s)", load_s, TARGET_LOAD_S)):
        print(f"{label:<26}{value:>10.2f}{target:>10.1f}{value / target:>14.2f}")
    import_s = next((float(step.split(": ", 1)[1].split(" s")[0]) for step in steps
                     if step.startswith("import:")), float("nan"))
    print(f"import step: {import_s:.2f} s, {import_s / build_s:.0%} of the build")
    for name, (baseline_s, baseline_cpu_s) in floors.items():
        print(f"columnar baseline ({name} of the seed rows): {baseline_s:.2f} s "
              f"(cpu {baseline_cpu_s:.2f} s); "
              f"whole build / baseline: {build_s / baseline_s:.1f}x wall, "
              f"{build_cpu_s / baseline_cpu_s:.1f}x CPU (target <= 3x against polars)")


if __name__ == "__main__":
    main()
