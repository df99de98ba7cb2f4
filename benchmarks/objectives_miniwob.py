"""The objectives compared on one CPU: filtered_bc, reinforce and grpo from one bootstrap checkpoint.

One run, all on 127.0.0.1, with the shipped ``miniwob-cpu`` recipe (`webgym_rl.loop.recipes`):

1. task files: easy MiniWoB++ kinds (one click or focus; default click-test, focus-text) and
   multi-step kinds a random policy rarely finishes (default click-checkboxes, click-tab-2,
   enter-text, login-user), `--train-seeds` training seeds and `--heldout-seeds` held-out seeds
   (from 100000 on) per kind: 120 held-out episodes by default, enough for a paired test;
2. on the held-out seeds: the pixel-random baseline and the DOM-aware random policy;
3. the shared bootstrap: one round of the loop (the DOM-aware random policy plays the training
   tasks once, and the tiny model imitates `--bootstrap-steps` steps of its replies: by default all
   of them, `--bootstrap-threshold 1` its successes only), evaluated on the held-out seeds at
   temperature 0 (iteration 0 of every curve below). Imitating every reply teaches the reply format
   on varied prompts: a bootstrap that writes well-formed replies is what the policy-gradient
   objectives need (from one that does not, their first rounds break the format: RESULTS.md);
4. from that checkpoint, one loop per objective (filtered_bc, reinforce, grpo) with the same task
   kinds and seeds, the same sampler seed (each round `--tasks-per-round` tasks x `--attempts`
   attempts, played by the policy being trained at temperature 1: its own samples, with their token
   ids and log-probabilities), each version evaluated on the held-out seeds at temperature 0. What
   each learns beyond the bootstrap it learns from its own rollouts. The training differs where the
   objectives need it to (measured on the known-answer bandit, tests/webgym_rl/test_learning.py):
   filtered_bc imitates with `--learning-rate` for `--max-steps` steps per round over the last four
   rounds; the policy-gradient objectives, which push replies down as well as up, train on their
   newest round only (on-policy) for `--pg-epochs` passes over it, reinforce with the smaller
   `--reinforce-learning-rate`, grpo with `--grpo-learning-rate`, PPO's clipped passes
   (`--ppo-epochs` over batches of `--grpo-batch-size`) and a KL penalty to the bootstrap
   (`--kl-coef`);
5. prints a table (held-out success per iteration with its 95 % Wilson interval, valid-action rate,
   and for each objective the exact two-sided paired sign test against the bootstrap on the same
   seeds: episodes won, lost, p), the on-policy check of every round (trainer against rollout
   log-probabilities of the sampled tokens, per version) and per-kind success; writes
   OUT/objectives_miniwob.png (both rates per iteration with intervals, one line per objective, the
   two baselines dashed) and OUT/results.json.

Target (issue 36): at least one policy-gradient objective beats the bootstrap at p < 0.05, and none
falls below it at p < 0.05. About 45 minutes on 2 cores.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/objectives_miniwob.py --out out/objectives
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learning_miniwob import RECIPE, _stats, rollout, write_task_files  # benchmarks/

OBJECTIVES = ("filtered_bc", "reinforce", "grpo")
COLOURS = {"filtered_bc": "#0969da", "reinforce": "#bf8700", "grpo": "#8250df"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="example:\n  OMP_NUM_THREADS=1 python "
                                            "benchmarks/objectives_miniwob.py --out out/objectives")
    parser.add_argument("--out", type=Path, default=Path("out/objectives-miniwob"))
    parser.add_argument("--easy-kinds", default="click-test,focus-text")
    parser.add_argument("--hard-kinds", default="click-checkboxes,click-tab-2,enter-text,login-user",
                        help="multi-step MiniWoB++ kinds a random policy rarely finishes")
    parser.add_argument("--train-seeds", type=int, default=60, help="training seeds per kind")
    parser.add_argument("--heldout-seeds", type=int, default=20, help="held-out seeds per kind")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES))
    parser.add_argument("--iterations", type=int, default=4, help="loop rounds per objective")
    parser.add_argument("--tasks-per-round", type=int, default=12, help="tasks each round rolls out")
    parser.add_argument("--attempts", type=int, default=4, help="attempts per task (grpo's group size)")
    parser.add_argument("--horizon", type=int, default=5, help="steps per MiniWoB episode")
    parser.add_argument("--bootstrap-steps", type=int, default=1000, help="optimizer steps of the bootstrap")
    parser.add_argument("--bootstrap-threshold", type=float, default=0.0,
                        help="the bootstrap imitates the random policy's episodes of at least this reward "
                             "(0: every step it took, so the bootstrap learns the reply format on varied "
                             "prompts; 1: its successes only)")
    parser.add_argument("--max-steps", type=int, default=250, help="filtered_bc: optimizer steps per round")
    parser.add_argument("--learning-rate", type=float, default=5e-4, help="the bootstrap and filtered_bc")
    parser.add_argument("--batch-size", type=int, default=8, help="the bootstrap, filtered_bc and reinforce")
    parser.add_argument("--pg-epochs", type=float, default=1.0,
                        help="reinforce, grpo: passes over the newest round's samples per round")
    parser.add_argument("--reinforce-learning-rate", type=float, default=1e-4)
    parser.add_argument("--grpo-learning-rate", type=float, default=2e-4)
    parser.add_argument("--grpo-batch-size", type=int, default=32)
    parser.add_argument("--ppo-epochs", type=int, default=4, help="grpo: clipped passes over each batch")
    parser.add_argument("--kl-coef", type=float, default=0.1, help="grpo: KL penalty to the bootstrap")
    parser.add_argument("--family", default="qwen3_vl", choices=("qwen2_vl", "qwen3_vl"))
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--vision-width", type=int, default=32)
    parser.add_argument("--min-pixels", type=int, default=56 * 56)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature of the training rollouts (the trainer scores at the same)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true", help="live progress bars")
    return parser.parse_args(argv)


def _kinds(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def recipe(args: argparse.Namespace, **changes: Any) -> Any:
    """The shipped CPU recipe with this run's sizes and `changes` (YAML keys) on top."""
    from webgym_rl.loop import load_recipe

    values = dict(
        eval_tasks=str(args.out / "tasks" / "heldout.jsonl"), seed=args.seed, progress=args.progress,
        concurrency=args.concurrency, pool={"contexts_per_browser": args.concurrency},
        horizons={"miniwob": args.horizon}, learning_rate=args.learning_rate,
        per_device_batch_size=args.batch_size, tasks=str(args.out / "tasks" / "train.jsonl"),
        policy={"model": "tiny-policy", "max_new_tokens": args.max_new_tokens,
                "max_tokens": args.max_new_tokens, "temperature": args.temperature, "variant": "compact"})
    return load_recipe(RECIPE, **{**values, **changes})


def per_kind(folder: str | Path) -> dict[str, list[int]]:
    """MiniWoB kind -> [successes, episodes] of a trajectory folder."""
    from webgym_rollout.trajectory.reader import read_episodes

    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for episode in read_episodes(folder):
        kind = episode.task.environment.partition(":")[2]
        counts[kind][0] += int(episode.success)
        counts[kind][1] += 1
    return dict(sorted(counts.items()))


def loop_curve(result: Any) -> list[dict[str, Any]]:
    """Per round of a finished loop: the evaluation of the version it trained and what trained it."""
    points = []
    for i, record in enumerate(result.rounds):
        evaluation = record.eval.model_dump() if record.eval else {}
        train = record.train.model_dump() if record.train else {}
        counts = train.get("counts") or {}
        points.append({
            "iteration": i + 1, "eval": _stats(evaluation), "eval_out": evaluation.get("out"),
            "rollout": _stats(record.rollout.model_dump() if record.rollout else {}),
            "train": {k: train.get(k)
                      for k in ("steps", "first_loss", "last_loss", "seconds", "skipped", "samples")},
            "on_policy": train.get("on_policy") or {},
            "groups_dropped": counts.get("groups_dropped"), "group_sizes": counts.get("group_sizes")})
    return points


def objective_recipe(args: argparse.Namespace, objective: str) -> dict[str, Any]:
    """How `objective` trains in this benchmark (YAML keys; see the module docstring)."""
    if objective == "filtered_bc":
        return {"max_steps": args.max_steps}
    on_policy = {"max_steps": 0, "epochs": args.pg_epochs, "last_k_iterations": 1}
    if objective == "reinforce":
        return {**on_policy, "learning_rate": args.reinforce_learning_rate}
    return {**on_policy, "learning_rate": args.grpo_learning_rate,
            "per_device_batch_size": args.grpo_batch_size, "ppo_epochs": args.ppo_epochs,
            "kl_coef": args.kl_coef}


def successes_by_task(folder: str | Path) -> dict[str, bool]:
    """task_id -> success of each held-out episode of an evaluation (one attempt per task)."""
    from webgym_rollout.trajectory.reader import read_episodes

    return {episode.task.task_id: episode.success for episode in read_episodes(folder)}


def paired(base: dict[str, bool], other: dict[str, bool]) -> dict[str, Any]:
    """`other` against `base` on the tasks both evaluated: won (other succeeded, base failed), lost,
    and the exact two-sided sign test's p."""
    from webgym_rollout.report.rates import sign_test

    common = sorted(set(base) & set(other))
    won = sum(other[t] and not base[t] for t in common)
    lost = sum(base[t] and not other[t] for t in common)
    return {"tasks": len(common), "won": won, "lost": lost, "p": sign_test(won, lost)}


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    from webgym_rl.loop import LoopServices, run_loop
    from webgym_rl.tiny import TinyModelSettings, build_tiny_model
    from webgym_rollout.agent.policies import PolicySettings, RandomPolicySettings

    started = time.perf_counter()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    kinds = _kinds(args.easy_kinds) + _kinds(args.hard_kinds)
    objectives = _kinds(args.objectives)
    write_task_files(out / "tasks", kinds, args.train_seeds, args.heldout_seeds)
    heldout = out / "tasks" / "heldout.jsonl"
    tiny = TinyModelSettings(family=args.family, seed=args.seed, hidden_size=args.hidden_size,
                             num_layers=args.num_layers, vision_width=args.vision_width,
                             min_pixels=args.min_pixels, max_pixels=max(args.min_pixels, 256 * 256),
                             image_mean=1.0)
    model_dir = out / "model"
    if not (model_dir / "config.json").is_file():
        build_tiny_model(model_dir, settings=tiny)
    results: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "kinds": kinds, "model": dataclasses.asdict(tiny), "recipe": RECIPE, "objectives": {}}

    # The shared bootstrap: the DOM-aware random policy plays every training task once; filtered_bc.
    bootstrap = recipe(args, model=str(model_dir), out=str(out / "bootstrap"), iterations=1,
                       bootstrap_policy="random", objective="filtered_bc", max_steps=args.bootstrap_steps,
                       success_threshold=args.bootstrap_threshold, sampler={"kind": "all"})
    agent = bootstrap.policy.agent
    with LoopServices(bootstrap) as services:
        for name, kind in (("pixel_random", "pixel_random"), ("dom_random", "random")):
            results[name] = rollout(heldout, out / "baselines" / name.replace("_", "-"),
                                    PolicySettings(kind=kind, agent=agent,
                                                   random=RandomPolicySettings(seed=args.seed)),
                                    services, bootstrap)
            results[name]["per_kind"] = per_kind(results[name]["out"])
            _line(name, results[name])
        began = time.perf_counter()
        result = run_loop(bootstrap, services=services)
    start = {**loop_curve(result)[0], "iteration": 0}
    start["per_kind"] = per_kind(start["eval_out"])
    results["bootstrap"] = {**start, "checkpoint": result.checkpoint, "seconds": time.perf_counter() - began}
    _line("bootstrap", start["eval"])

    for objective in objectives:
        began = time.perf_counter()
        settings = recipe(args, model=result.checkpoint, out=str(out / objective), iterations=args.iterations,
                          bootstrap_policy="model", objective=objective, attempts=args.attempts,
                          sampler={"kind": "epoch", "batch_size": args.tasks_per_round},
                          **objective_recipe(args, objective))
        with LoopServices(settings) as services:
            curve = loop_curve(run_loop(settings, services=services))
        curve[-1]["per_kind"] = per_kind(curve[-1]["eval_out"])
        base = successes_by_task(start["eval_out"])
        for point in curve:
            found = point["eval_out"]
            point["paired"] = paired(base, successes_by_task(found)) if found else None
        results["objectives"][objective] = {"curve": curve, "seconds": time.perf_counter() - began,
                                            "recipe": objective_recipe(args, objective)}
        for point in curve:
            _line(f"{objective} it {point['iteration']}", point["eval"])
    results["seconds"] = time.perf_counter() - started
    write_outputs(out, results)
    return results


def _line(label: str, run: dict[str, Any]) -> None:
    print(f"{label:>18}: success {run['successes']}/{run['episodes']} ({run['success_rate']:.1%}), "
          f"valid actions {run['valid_action_rate']:.1%}", flush=True)


def _wilson(run: dict[str, Any]) -> str:
    from webgym_rollout.report.rates import wilson_interval

    low, high = wilson_interval(run["successes"], run["episodes"])
    return f"[{100 * low:.0f}-{100 * high:.0f}]"


def write_outputs(out: Path, results: dict[str, Any]) -> None:
    kinds, start = results["kinds"], results["bootstrap"]
    width = 22
    print(f"\n{'held-out, temperature 0':<28}" + "".join(f"{'it ' + str(i):>{width}}" for i in
                                                    range(results["args"]["iterations"] + 1)))
    for objective, run in results["objectives"].items():
        points = [start] + run["curve"]
        print(f"{objective + ' success':<28}" + "".join(
            f"{p['eval']['successes']:>5}/{p['eval']['episodes']:<3} {p['eval']['success_rate']:>4.0%} "
            f"{_wilson(p['eval']):>8}" for p in points))
        print(f"{'  valid actions':<28}"
              + "".join(f"{p['eval']['valid_action_rate']:>{width}.1%}" for p in points))
        print(f"{'  vs bootstrap: won/lost p':<28}{'':>{width}}" + "".join(
            f"{point['paired']['won']:>8}/{point['paired']['lost']:<3} p {point['paired']['p'] or 1:<7.3g}"
            if point.get("paired") else f"{'':>{width}}" for point in run["curve"]))
    for name in ("pixel_random", "dom_random"):
        print(f"{name + ' (baseline)':<28}{results[name]['success_rate']:>16.1%}")
    print(f"\nper kind, held-out successes ({results['args']['heldout_seeds']} seeds each)")
    print(f"{'':<28}" + "".join(f"{k[:15]:>16}" for k in kinds))
    rows = [("pixel-random", results["pixel_random"]), ("DOM-aware random", results["dom_random"]),
            ("bootstrap", start)]
    rows += [(f"{objective}, last", run["curve"][-1]) for objective, run in results["objectives"].items()]
    for label, run in rows:
        counts = run.get("per_kind", {})
        print(f"{label:<28}" + "".join(f"{counts.get(k, [0, 0])[0]:>16}" for k in kinds))
    for objective, run in results["objectives"].items():
        for point in run["curve"]:
            train = point["train"]
            dropped = (f", {point['groups_dropped']} groups dropped"
                       if point["groups_dropped"] is not None else "")
            trained = (f"trained {train['steps']} steps on {train['samples']} samples{dropped}"
                       if not train.get("skipped") else f"skipped ({train['skipped']})")
            check = "; ".join(
                f"{v} mean {c['mean_abs']:.1e} max {c['max_abs']:.1e} ({int(c['tokens'])} tokens)"
                for v, c in point.get("on_policy", {}).items()) or "nothing to compare"
            print(f"{objective} round {point['iteration'] - 1}: own rollouts "
                  f"{point['rollout']['success_rate']:.1%} success; {trained}; on-policy check: {check}")
        print(f"{objective}: {run['seconds']:.0f} s")
    for objective, run in results["objectives"].items():
        final = run["curve"][-1].get("paired")
        if final:
            better = "beats" if final["won"] > final["lost"] else "falls below"
            verdict = better if (final["p"] or 1) < 0.05 else "does not differ significantly from"
            print(f"{objective}, last version: {verdict} the bootstrap (won {final['won']}, lost "
                  f"{final['lost']} of {final['tasks']} paired held-out episodes, sign test p = "
                  f"{final['p'] or 1:.3g})")
    print(f"total {results['seconds']:.0f} s (bootstrap {start['seconds']:.0f} s)")
    _plot(out / "objectives_miniwob.png", results)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"plot: {out / 'objectives_miniwob.png'}; figures: {out / 'results.json'}")


def _plot(path: Path, results: dict[str, Any]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    start = results["bootstrap"]
    figure = Figure(figsize=(10, 4), dpi=100)
    FigureCanvasAgg(figure)
    for index, (key, title) in enumerate((("success_rate", "held-out success (temperature 0)"),
                                          ("valid_action_rate", "valid-action rate"))):
        axes = figure.add_subplot(1, 2, index + 1)
        for objective, run in results["objectives"].items():
            points = [start] + run["curve"]
            xs, ys = [p["iteration"] for p in points], [100 * p["eval"][key] for p in points]
            axes.plot(xs, ys, marker="o", color=COLOURS.get(objective), label=objective)
            if key == "success_rate":  # the 95 % Wilson interval of each evaluation
                from webgym_rollout.report.rates import wilson_interval

                bounds = [wilson_interval(p["eval"]["successes"], p["eval"]["episodes"]) for p in points]
                axes.fill_between(xs, [100 * b[0] for b in bounds], [100 * b[1] for b in bounds],
                                  color=COLOURS.get(objective), alpha=0.12, linewidth=0)
        for name, label, colour in (("pixel_random", "pixel-random", "#cf222e"),
                                    ("dom_random", "DOM-aware random", "#1a7f37")):
            axes.axhline(100 * results[name][key], color=colour, linestyle="--", label=label)
        axes.set_ylim(0, 100)
        axes.yaxis.set_major_formatter(PercentFormatter())
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel("loop iteration (0 = the shared bootstrap)")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        if index == 0:
            axes.legend(loc="best", fontsize=8)
    episodes = results["bootstrap"]["eval"]["episodes"]
    figure.suptitle(f"Objectives on MiniWoB++ ({len(results['kinds'])} kinds), {episodes} held-out episodes "
                    "(shaded: 95 % Wilson intervals)")
    figure.tight_layout()
    figure.savefig(path, format="png")


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING)
    run_benchmark(parse_args(argv))


if __name__ == "__main__":
    main()
