"""Learning from the policy's own rollouts on multi-step MiniWoB++ kinds, on one CPU.

One run, all on 127.0.0.1, with the shipped ``miniwob-cpu`` recipe (`webgym_rl.loop.recipes`) and
its sizes changed here:

1. task files: multi-step MiniWoB++ kinds (default click-button-sequence, click-collapsible,
   click-option, choose-list: each needs at least two actions, in order), `--train-seeds`
   training seeds and `--heldout-seeds` held-out seeds (from 100000 on) per kind;
2. the observation: `--modes` (default ``elements``: the page's interactive elements as a numbered
   text list, no image) with the element actions it offers (click_element, type_element,
   select_element). Why this mode for a tiny model on a CPU: the screenshot asks a model trained
   from scratch to find a 10-pixel button in an image before it can learn what to do with it (the
   pixel path needed 1500 steps per round to click one of two targets, RESULTS.md); the numbered
   list states the same page in a few dozen tokens, so the rounds' compute goes into the decisions
   (which element, in which order) that the multi-step kinds are about. ``--modes screenshot`` runs
   the same benchmark on the screenshot and coordinates, for the comparison;
3. the baselines on the held-out seeds: the DOM-aware random policy (clicks element centres by
   coordinates on the screenshot) and the scripted policy the bootstrap imitates (the same random
   choices written as element actions where the observation numbers the elements);
4. the bootstrap: the scripted policy plays every training task once and the tiny model imitates
   every reply it wrote (`--bootstrap-steps` steps), so that it answers in the reply format with
   the scripted policy's spread of actions. Evaluated at temperature 0 on the held-out seeds;
5. from the bootstrap, one loop per objective (filtered_bc, grpo) on the policy's own rollouts only:
   each round `--tasks-per-round` training tasks x `--attempts` attempts at `--temperature`, the
   samples with their token ids and log-probabilities; filtered_bc imitates the successes of the
   last rounds (`--max-steps` steps a round), grpo takes one on-policy pass over the newest round
   with group-relative advantages, clipped passes and a KL penalty to the bootstrap. Each version is
   evaluated on the same held-out seeds at temperature 0 and paired against the bootstrap and the
   DOM-aware random policy (exact two-sided sign test, Wilson 95 % intervals);
6. prints the table, per-kind successes and the verdict on the target; writes
   OUT/learning_multistep.png (one panel per objective: held-out success per round with its
   interval, the bootstrap and the DOM-aware random policy as lines) and OUT/results.json.

Target (issue 39): after the own-rollout rounds, held-out success at least 25 points above the
bootstrap's and above the DOM-aware random policy's, sign test p < 0.01, in at most 45 minutes on
2 cores.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/learning_multistep.py --out out/multistep
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/learning_multistep.py --modes screenshot \\
        --out out/multistep-screenshot
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learning_miniwob import rollout, write_task_files  # benchmarks/
from objectives_miniwob import _kinds, _line, loop_curve, paired, per_kind, recipe, successes_by_task

OBJECTIVES = ("filtered_bc", "grpo")
COLOURS = {"filtered_bc": "#0969da", "grpo": "#8250df"}
TARGET_POINTS, TARGET_P = 25.0, 0.01


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  OMP_NUM_THREADS=1 python benchmarks/learning_multistep.py --out out/multistep\n"
               "  OMP_NUM_THREADS=1 python benchmarks/learning_multistep.py --modes screenshot "
               "--out out/multistep-screenshot\n  python benchmarks/learning_multistep.py --quick  "
               "# a few minutes: the path end to end, not the figure")
    parser.add_argument("--out", type=Path, default=Path("out/learning-multistep"))
    parser.add_argument("--kinds", default="click-button-sequence,click-collapsible,click-option,choose-list",
                        help="multi-step MiniWoB++ kinds, comma separated")
    parser.add_argument("--modes", default="elements",
                        help="observation modes (webgym_rollout.ObservationSettings), e.g. elements, "
                             "axtree, som,elements, screenshot")
    parser.add_argument("--train-seeds", type=int, default=100, help="training seeds per kind")
    parser.add_argument("--heldout-seeds", type=int, default=30, help="held-out seeds per kind")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES))
    parser.add_argument("--iterations", type=int, default=3, help="own-rollout rounds per objective")
    parser.add_argument("--tasks-per-round", type=int, default=24, help="training tasks each round rolls out")
    parser.add_argument("--attempts", type=int, default=4, help="attempts per task (grpo's group size)")
    parser.add_argument("--horizon", type=int, default=4, help="steps per episode")
    parser.add_argument("--bootstrap-steps", type=int, default=600, help="optimizer steps of the bootstrap")
    parser.add_argument("--max-steps", type=int, default=300, help="filtered_bc: optimizer steps per round")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="the bootstrap and filtered_bc")
    parser.add_argument("--batch-size", type=int, default=8, help="the bootstrap and filtered_bc")
    parser.add_argument("--grpo-learning-rate", type=float, default=3e-4)
    parser.add_argument("--grpo-batch-size", type=int, default=32)
    parser.add_argument("--ppo-epochs", type=int, default=2, help="grpo: clipped passes over each batch")
    parser.add_argument("--pg-epochs", type=float, default=2.0, help="grpo: passes over the newest round")
    parser.add_argument("--kl-coef", type=float, default=0.05, help="grpo: KL penalty to the bootstrap")
    parser.add_argument("--family", default="qwen3_vl", choices=("qwen2_vl", "qwen3_vl"))
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--vision-width", type=int, default=32)
    parser.add_argument("--min-pixels", type=int, default=56 * 56)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature of the own rollouts")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 6 held-out seeds, 1 round, short training (not the figure)")
    parser.add_argument("--progress", action="store_true", help="live progress bars")
    args = parser.parse_args(argv)
    if args.quick:
        args.train_seeds, args.heldout_seeds, args.iterations = 12, 6, 1
        args.tasks_per_round, args.bootstrap_steps, args.max_steps = 8, 40, 20
    return args


def _observation(args: argparse.Namespace) -> dict[str, Any]:
    return {"modes": _kinds(args.modes)}


def objective_recipe(args: argparse.Namespace, objective: str) -> dict[str, Any]:
    """How `objective` trains here (YAML keys; see the module docstring)."""
    if objective == "filtered_bc":
        return {"max_steps": args.max_steps}
    return {"max_steps": 0, "epochs": args.pg_epochs, "last_k_iterations": 1,
            "learning_rate": args.grpo_learning_rate, "per_device_batch_size": args.grpo_batch_size,
            "ppo_epochs": args.ppo_epochs, "kl_coef": args.kl_coef}


def baselines(args: argparse.Namespace, bootstrap: Any, services: Any, results: dict[str, Any]) -> None:
    """The DOM-aware random policy (screenshot, coordinates) and the scripted policy the bootstrap
    imitates (the same choices by element number, on this run's observation) on the held-out seeds."""
    from webgym_rollout.agent.policies import PolicySettings, RandomPolicySettings
    from webgym_rollout.settings import ObservationSettings

    heldout = args.out / "tasks" / "heldout.jsonl"
    screenshot = dataclasses.replace(bootstrap, env=dataclasses.replace(bootstrap.env,
                                                                        observation=ObservationSettings()))
    runs = {"dom_random": screenshot}
    if bootstrap.env.observation.needs_elements:
        runs["scripted"] = bootstrap
    for name, loop in runs.items():
        policy = PolicySettings(kind="random", agent=loop.policy.agent,
                                random=RandomPolicySettings(seed=args.seed))
        folder = args.out / "baselines" / name.replace("_", "-")
        results[name] = rollout(heldout, folder, policy, services, loop)
        results[name]["per_kind"] = per_kind(results[name]["out"])
        _line(name, results[name])


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    from webgym_rl.loop import LoopServices, run_loop
    from webgym_rl.tiny import TinyModelSettings, build_tiny_model

    started = time.perf_counter()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    kinds, objectives = _kinds(args.kinds), _kinds(args.objectives)
    write_task_files(out / "tasks", kinds, args.train_seeds, args.heldout_seeds)
    tiny = TinyModelSettings(family=args.family, seed=args.seed, hidden_size=args.hidden_size,
                             num_layers=args.num_layers, vision_width=args.vision_width,
                             min_pixels=args.min_pixels, max_pixels=max(args.min_pixels, 256 * 256),
                             image_mean=1.0)
    model_dir = out / "model"
    if not (model_dir / "config.json").is_file():
        build_tiny_model(model_dir, settings=tiny)
    results: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "kinds": kinds, "model": dataclasses.asdict(tiny), "objectives": {}}
    common = dict(horizons={"miniwob": args.horizon}, observation=_observation(args))

    # The bootstrap: the scripted policy plays every training task once; the model imitates every reply.
    bootstrap = recipe(args, model=str(model_dir), out=str(out / "bootstrap"), iterations=1,
                       bootstrap_policy="random", objective="filtered_bc", max_steps=args.bootstrap_steps,
                       success_threshold=0.0, sampler={"kind": "all"}, **common)
    with LoopServices(bootstrap) as services:
        baselines(args, bootstrap, services, results)
        began = time.perf_counter()
        result = run_loop(bootstrap, services=services)
    start = {**loop_curve(result)[0], "iteration": 0}
    start["per_kind"] = per_kind(start["eval_out"])
    results["bootstrap"] = {**start, "checkpoint": result.checkpoint, "seconds": time.perf_counter() - began,
                            "imitated": start["rollout"]}
    _line("bootstrap", start["eval"])

    base = successes_by_task(start["eval_out"])
    dom = successes_by_task(results["dom_random"]["out"])
    for objective in objectives:
        began = time.perf_counter()
        settings = recipe(args, model=result.checkpoint, out=str(out / objective), iterations=args.iterations,
                          bootstrap_policy="model", objective=objective, attempts=args.attempts,
                          sampler={"kind": "epoch", "batch_size": args.tasks_per_round},
                          **common, **objective_recipe(args, objective))
        with LoopServices(settings) as services:
            curve = loop_curve(run_loop(settings, services=services))
        for point in curve:
            found = successes_by_task(point["eval_out"]) if point["eval_out"] else None
            point["paired"] = paired(base, found) if found else None
            point["vs_dom_random"] = paired(dom, found) if found else None
            _line(f"{objective} it {point['iteration']}", point["eval"])
        curve[-1]["per_kind"] = per_kind(curve[-1]["eval_out"])
        results["objectives"][objective] = {"curve": curve, "seconds": time.perf_counter() - began,
                                            "recipe": objective_recipe(args, objective)}
    results["seconds"] = time.perf_counter() - started
    results["verdict"] = verdict(results)
    write_outputs(out, results)
    return results


def verdict(results: dict[str, Any]) -> dict[str, Any]:
    """Per objective: the last version's points above the bootstrap and the DOM-aware random
    policy, the sign tests, and whether the target holds (in time: at most 45 minutes)."""
    start, dom = results["bootstrap"]["eval"], results["dom_random"]
    found: dict[str, Any] = {}
    for objective, run in results["objectives"].items():
        last = run["curve"][-1]
        rate = last["eval"]["success_rate"]
        above_boot, above_dom = 100 * (rate - start["success_rate"]), 100 * (rate - dom["success_rate"])
        p_boot = last["paired"]["p"] if last.get("paired") else 1.0
        p_dom = last["vs_dom_random"]["p"] if last.get("vs_dom_random") else 1.0
        found[objective] = {
            "points_above_bootstrap": above_boot, "points_above_dom_random": above_dom,
            "p_vs_bootstrap": p_boot, "p_vs_dom_random": p_dom,
            "met": bool(above_boot >= TARGET_POINTS and above_dom > 0 and (p_boot or 1) < TARGET_P
                        and (p_dom or 1) < TARGET_P and results["seconds"] <= 45 * 60)}
    return found


def _interval(run: dict[str, Any]) -> str:
    from webgym_rollout.report.rates import wilson_interval

    low, high = wilson_interval(run["successes"], run["episodes"])
    rate = f"{run['successes']}/{run['episodes']} {run['success_rate']:.0%}"
    return f"{rate} [{100 * low:.0f}-{100 * high:.0f}]"


def _pair(found: dict[str, Any] | None) -> str:
    return f"{found['won']}/{found['lost']} p {found['p'] or 1:.2g}" if found else ""


def write_outputs(out: Path, results: dict[str, Any]) -> None:
    kinds, start = results["kinds"], results["bootstrap"]
    print(f"\nheld-out, temperature 0, modes {results['args']['modes']} "
          f"({results['args']['heldout_seeds']} seeds x {len(kinds)} kinds)")
    print(f"{'':<30}{'success [Wilson 95 %]':>26}{'valid':>8}{'vs bootstrap':>18}{'vs DOM random':>18}")
    rows = [("DOM-aware random (baseline)", results["dom_random"], None)]
    if "scripted" in results:
        rows.append(("scripted (imitated)", results["scripted"], None))
    rows.append(("bootstrap (it 0)", start["eval"], None))
    for objective, run in results["objectives"].items():
        rows += [(f"{objective} it {p['iteration']}", p["eval"], p) for p in run["curve"]]
    for label, run, point in rows:
        pairs = (_pair(point.get("paired")), _pair(point.get("vs_dom_random"))) if point else ("", "")
        print(f"{label:<30}{_interval(run):>26}{run['valid_action_rate']:>8.0%}{pairs[0]:>18}{pairs[1]:>18}")
    print(f"\nper kind, held-out successes of {results['args']['heldout_seeds']}")
    print(f"{'':<30}" + "".join(f"{k[:21]:>22}" for k in kinds))
    per = [("DOM-aware random", results["dom_random"]), ("bootstrap", start)]
    if "scripted" in results:
        per.insert(1, ("scripted (imitated)", results["scripted"]))
    per += [(f"{objective}, last", run["curve"][-1]) for objective, run in results["objectives"].items()]
    for label, run in per:
        counts = run.get("per_kind", {})
        print(f"{label:<30}" + "".join(f"{counts.get(k, [0, 0])[0]:>22}" for k in kinds))
    imitated = start["imitated"]
    print(f"\nthe scripted policy on the {imitated['episodes']} training tasks the bootstrap imitates: "
          f"{imitated['successes']} successes ({imitated['success_rate']:.1%}); "
          f"bootstrap {start['seconds']:.0f} s")
    for objective, run in results["objectives"].items():
        for point in run["curve"]:
            train = point["train"]
            dropped = (f", {point['groups_dropped']} groups dropped"
                       if point["groups_dropped"] is not None else "")
            trained = (f"trained {train['steps']} steps on {train['samples']} samples{dropped}"
                       if not train.get("skipped") else f"skipped ({train['skipped']})")
            print(f"{objective} round {point['iteration'] - 1}: own rollouts "
                  f"{point['rollout']['successes']}/{point['rollout']['episodes']} "
                  f"({point['rollout']['success_rate']:.1%}) at T {results['args']['temperature']}; "
                  f"{trained}")
        print(f"{objective}: {run['seconds']:.0f} s")
    minutes = results["seconds"] / 60
    for objective, found in results["verdict"].items():
        print(f"{objective}, last version: {found['points_above_bootstrap']:+.1f} points against the "
              f"bootstrap (p {found['p_vs_bootstrap'] or 1:.2g}), {found['points_above_dom_random']:+.1f} "
              f"against the DOM-aware random policy (p {found['p_vs_dom_random'] or 1:.2g}), {minutes:.0f} "
              f"min: target {'met' if found['met'] else 'missed'} (+{TARGET_POINTS:.0f} points over both, "
              f"p < {TARGET_P}, 45 min)")
    _plot(out / "learning_multistep.png", results)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"total {results['seconds']:.0f} s; plot: {out / 'learning_multistep.png'}; "
          f"figures: {out / 'results.json'}")


def _plot(path: Path, results: dict[str, Any]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    from webgym_rollout.report.rates import wilson_interval

    start, objectives = results["bootstrap"], results["objectives"]
    figure = Figure(figsize=(max(7.0, 5.0 * len(objectives)), 4.4), dpi=100)
    FigureCanvasAgg(figure)
    for index, (objective, run) in enumerate(objectives.items()):
        axes = figure.add_subplot(1, max(1, len(objectives)), index + 1)
        points = [start] + run["curve"]
        xs = [p["iteration"] for p in points]
        ys = [100 * p["eval"]["success_rate"] for p in points]
        bounds = [wilson_interval(p["eval"]["successes"], p["eval"]["episodes"]) for p in points]
        colour = COLOURS.get(objective, "#0969da")
        axes.plot(xs, ys, marker="o", color=colour, label=f"{objective} (held-out)")
        axes.fill_between(xs, [100 * b[0] for b in bounds], [100 * b[1] for b in bounds], color=colour,
                          alpha=0.15, linewidth=0, label="95 % Wilson interval")
        axes.axhline(100 * start["eval"]["success_rate"], color="#57606a", linestyle=":", label="bootstrap")
        axes.axhline(100 * results["dom_random"]["success_rate"], color="#1a7f37", linestyle="--",
                     label="DOM-aware random")
        axes.set_ylim(0, 100)
        axes.yaxis.set_major_formatter(PercentFormatter())
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel("own-rollout round (0 = bootstrap)")
        axes.set_title(objective)
        axes.grid(alpha=0.3)
        axes.legend(loc="upper left", fontsize=8)
    episodes = start["eval"]["episodes"]
    figure.suptitle(f"Multi-step MiniWoB++ ({len(results['kinds'])} kinds, observation "
                    f"{results['args']['modes']}):\n{episodes} held-out episodes at temperature 0",
                    fontsize=11)
    figure.tight_layout()
    figure.savefig(path, format="png")


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING)
    run_benchmark(parse_args(argv))


if __name__ == "__main__":
    main()
