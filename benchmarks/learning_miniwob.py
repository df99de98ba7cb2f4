"""Learning on one CPU: a tiny Qwen-VL gets better at MiniWoB++ through the online loop.

One run, all on 127.0.0.1:

1. task files: each MiniWoB++ kind (default: click-test and focus-text, a click and a focus task
   whose target moves with the seed) with `--train-seeds` training seeds and `--heldout-seeds`
   other seeds (from 100000 on) for evaluation only;
2. a tiny Qwen-VL built here from a config (`webgym_rl.tiny.TinyModelSettings`: no download),
   whose processor maps white pixels to zero (``--image-mean 1.0``; with Qwen's usual 0.5 the
   random vision tower's image tokens are one large constant and the model never learns where
   to click: benchmarks/RESULTS.md);
3. on the held-out seeds: the pixel-random baseline (uniform clicks on the 0-1000 grid,
   well-formed replies), the DOM-aware random bootstrap policy and the untrained model (temperature 0);
4. `webgym_rl.loop.run_loop` with the shipped recipe ``miniwob-cpu`` (``webgym-rl loop --config
   miniwob-cpu``): round 0 rolls out the DOM-aware random policy, every round trains filtered_bc on
   the successes of the last rounds (the resident trainer) and evaluates the new version on the
   held-out seeds at temperature 0; later rounds roll out the model (temperature 1);
5. optionally the shuffled-screenshot control: the final checkpoint evaluated on the held-out seeds
   with each screenshot swapped for one from another episode (`--control`);
6. prints a table, writes OUT/learning_miniwob.png (success and valid-action rate per iteration
   against both baselines), OUT/report/report.html (every evaluation side by side, with the curve)
   and OUT/results.json.

Targets (issue 16), within 30 minutes on 2 cores: valid-action rate >= 95 % and held-out success
>= 3x the pixel-random baseline.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/learning_miniwob.py --out out/learning
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HELDOUT_SEED_BASE = 100_000
"""Held-out seeds start here: no training seed reaches it."""
RECIPE = "miniwob-cpu"
"""The shipped loop recipe this benchmark runs (`webgym_rl.loop.recipes`), with its own sizes."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path("out/learning-miniwob"))
    parser.add_argument("--kinds", default="click-test,focus-text", help="MiniWoB++ tasks, comma separated")
    parser.add_argument("--train-seeds", type=int, default=500, help="training seeds per kind")
    parser.add_argument("--heldout-seeds", type=int, default=15, help="held-out seeds per kind")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=2, help="steps per MiniWoB episode")
    parser.add_argument("--family", default="qwen3_vl", choices=("qwen2_vl", "qwen3_vl"))
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--vision-width", type=int, default=32)
    parser.add_argument("--min-pixels", type=int, default=56 * 56, help="image area after resizing, at least")
    parser.add_argument("--image-mean", type=float, default=1.0,
                        help="pixel value the processor maps to zero (1.0: white; 0.5: Qwen's usual)")
    parser.add_argument("--variant", default="compact", choices=("compact", "vanilla", "memory"))
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--max-steps", type=int, default=1500, help="optimizer steps per iteration")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--last-k", type=int, default=4, help="train on the last K iterations' rollouts")
    parser.add_argument("--temperature", type=float, default=1.0, help="of the model's train rollouts")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--control", action="store_true", help="also run the shuffled-screenshot control")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true", help="live progress bars")
    return parser.parse_args(argv)


def write_task_files(out: Path, kinds: list[str], train_seeds: int, heldout_seeds: int) -> tuple[Path, Path]:
    from webgym_data.importers.miniwob import miniwob_task
    from webgym_data.loading import write_tasks

    train = write_tasks([miniwob_task(k, s) for s in range(train_seeds) for k in kinds], out / "train.jsonl")
    heldout = write_tasks([miniwob_task(k, HELDOUT_SEED_BASE + s) for s in range(heldout_seeds)
                           for k in kinds], out / "heldout.jsonl")
    return train, heldout


class ShuffledScreenshots:
    """Wraps a policy: each observation's screenshot (and history screenshots) is replaced by a
    screenshot of another episode, drawn from `pool`; the action runs in the real episode."""

    def __init__(self, policy: Any, pool: list[bytes], seed: int = 0):
        self.policy, self.pool, self.seed = policy, pool, seed
        self.model_id = f"{policy.model_id}+shuffled"

    async def act(self, observation: Any) -> Any:
        rng = random.Random(f"{self.seed}|{observation.episode_id}|{observation.step}")
        others = [shot for shot in self.pool if shot != observation.screenshot]
        shot = rng.choice(others)
        history = tuple(dataclasses.replace(r, screenshot=rng.choice(others)) for r in observation.history)
        return await self.policy.act(dataclasses.replace(observation, screenshot=shot, history=history))


def screenshot_pool(trajectories: Path) -> list[bytes]:
    """The first screenshot of each episode of a trajectory dataset."""
    from webgym_rollout.trajectory.reader import read_episodes

    return [episode.steps[0].screenshot for episode in read_episodes(trajectories) if episode.steps]


def rollout(tasks: Path, out: Path, policy_settings: Any, services: Any, loop: Any, *,
            policy: Any = None, split: str = "test") -> dict[str, Any]:
    """Roll out `tasks` into `out` as `split` episodes (held-out: test), with the loop's own rollout
    settings (`webgym_rl.loop.phases.run_settings`); the stats of the dataset."""
    from webgym_rl.loop.phases import run_settings
    from webgym_rollout.runner import run
    from webgym_rollout.trajectory.reader import read_episodes

    settings = dataclasses.replace(
        run_settings(loop, services, tasks=tasks, out=out, split=split, index=0, horizon_table=split),
        policy=policy_settings)
    began = time.perf_counter()
    asyncio.run(run(settings, policy=policy))
    stats = read_episodes(out).stats().as_dict()
    return {"out": str(out), "seconds": time.perf_counter() - began, **stats}


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    from webgym_core.endpoint import Endpoint
    from webgym_rl.loop import LoopServices, load_recipe, run_loop
    from webgym_rl.tiny import TinyModelSettings, build_tiny_model
    from webgym_rollout.agent.policies import (
        OpenAIPolicy,
        PolicySettings,
        RandomPolicySettings,
        SamplingSettings,
    )

    started = time.perf_counter()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    train_tasks, heldout_tasks = write_task_files(out / "tasks", kinds, args.train_seeds, args.heldout_seeds)
    tiny = TinyModelSettings(family=args.family, seed=args.seed, hidden_size=args.hidden_size,
                             num_layers=args.num_layers, vision_width=args.vision_width,
                             min_pixels=args.min_pixels, max_pixels=max(args.min_pixels, 256 * 256),
                             image_mean=args.image_mean)
    model_dir = out / "model"
    if not (model_dir / "config.json").is_file():
        build_tiny_model(model_dir, settings=tiny)
    # The shipped CPU recipe, with this run's sizes.
    loop = load_recipe(
        RECIPE, tasks=str(train_tasks), model=str(model_dir), out=str(out / "loop"),
        iterations=args.iterations, eval_tasks=str(heldout_tasks), seed=args.seed, progress=args.progress,
        concurrency=args.concurrency, pool={"contexts_per_browser": args.concurrency},
        horizons={"miniwob": args.horizon}, learning_rate=args.learning_rate, max_steps=args.max_steps,
        per_device_batch_size=args.batch_size, last_k_iterations=args.last_k,
        policy={"model": "tiny-policy", "max_new_tokens": args.max_new_tokens,
                "max_tokens": args.max_new_tokens, "temperature": args.temperature, "variant": args.variant})
    agent = loop.policy.agent
    results: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "kinds": kinds, "model": dataclasses.asdict(tiny), "recipe": RECIPE}
    baselines = out / "baselines"
    with LoopServices(loop) as services:
        results["pixel_random"] = rollout(heldout_tasks, baselines / "pixel-random",
                                          PolicySettings(kind="pixel_random", agent=agent,
                                                         random=RandomPolicySettings(seed=args.seed)),
                                          services, loop)
        results["dom_random"] = rollout(heldout_tasks, baselines / "dom-random",
                                        PolicySettings(kind="random", agent=agent,
                                                       random=RandomPolicySettings(seed=args.seed)),
                                        services, loop)
        greedy = SamplingSettings(temperature=0.0, max_tokens=args.max_new_tokens)
        # The loop's policy endpoint, started here with the untrained model (version 0); the loop
        # then publishes each trained version to it, and it serves the last one when the loop ends.
        served = PolicySettings(kind="openai", sampling=greedy, agent=agent, endpoint=Endpoint(
            base_url=services.start_policy(str(model_dir)), model=loop.policy.served_name))
        results["untrained"] = rollout(heldout_tasks, baselines / "untrained", served, services, loop)
        log_line(results)
        loop_began = time.perf_counter()
        loop_result = run_loop(loop, services=services)
        results["loop_seconds"] = time.perf_counter() - loop_began
        results["iterations"] = []
        for i, record in enumerate(loop_result.rounds):
            evaluation = record.eval.model_dump() if record.eval else {}
            train = record.train.model_dump() if record.train else {}
            results["iterations"].append({
                "iteration": i, "eval": _stats(evaluation),
                "rollout": _stats(record.rollout.model_dump() if record.rollout else {}),
                "train": {k: train.get(k) for k in ("steps", "first_loss", "last_loss", "seconds", "skipped",
                                                    "samples")},
                "eval_out": evaluation.get("out")})
        if args.control:
            pool = screenshot_pool(Path(results["iterations"][-1]["eval_out"]))
            wrapped = ShuffledScreenshots(OpenAIPolicy(served.endpoint, sampling=greedy, agent=agent), pool,
                                          seed=args.seed)
            results["shuffled"] = rollout(heldout_tasks, baselines / "shuffled", served, services, loop,
                                          policy=wrapped)
    results["seconds"] = time.perf_counter() - started
    write_outputs(out, results)
    return results


def _stats(record: dict[str, Any]) -> dict[str, Any]:
    keys = ("episodes", "successes", "steps", "valid_actions", "success_rate", "valid_action_rate", "seconds")
    return {k: record.get(k) for k in keys}


def log_line(results: dict[str, Any]) -> None:
    for name in ("pixel_random", "dom_random", "untrained"):
        run = results[name]
        print(f"{name:>14}: success {run['successes']}/{run['episodes']} ({run['success_rate']:.1%}), "
              f"valid actions {run['valid_action_rate']:.1%} ({run['seconds']:.0f} s)", flush=True)


def write_outputs(out: Path, results: dict[str, Any]) -> None:
    from webgym_rollout.report.charts import CurvePoint
    from webgym_rollout.report.html import build_report, write_report

    iterations = results["iterations"]
    pixel, dom = results["pixel_random"], results["dom_random"]
    rows = [("pixel-random", pixel), ("DOM-aware random", dom), ("untrained model", results["untrained"])]
    rows += [(f"trained, iteration {it['iteration']}", it["eval"]) for it in iterations]
    if "shuffled" in results:
        rows.append(("final, shuffled screenshots", results["shuffled"]))
    print(f"\n{'held-out evaluation':<30} {'success':>14} {'valid actions':>14} {'vs pixel-random':>16}")
    for label, run in rows:
        ratio = run["success_rate"] / pixel["success_rate"] if pixel["success_rate"] else float("inf")
        print(f"{label:<30} {run['successes']:>4}/{run['episodes']:<4} {run['success_rate']:>5.1%} "
              f"{run['valid_action_rate']:>13.1%} {ratio:>15.2f}x")
    for it in iterations:
        train = it["train"]
        if train.get("skipped"):
            print(f"iteration {it['iteration']}: training skipped ({train['skipped']})")
        else:
            print(f"iteration {it['iteration']}: rollout success {it['rollout']['success_rate']:.1%}; "
                  f"trained {train['steps']} steps on {train['samples']} samples, loss "
                  f"{train['first_loss']:.3f} -> {train['last_loss']:.3f} ({train['seconds']:.0f} s)")
    final = iterations[-1]["eval"] if iterations else results["untrained"]
    results["final"] = {"success_rate": final["success_rate"],
                        "valid_action_rate": final["valid_action_rate"],
                        "vs_pixel_random": (final["success_rate"] / pixel["success_rate"]
                                            if pixel["success_rate"] else None),
                        "vs_dom_random": (final["success_rate"] / dom["success_rate"]
                                          if dom["success_rate"] else None)}
    print(f"total {results['seconds']:.0f} s (loop {results.get('loop_seconds', 0):.0f} s)")

    _plot(out / "learning_miniwob.png", results)
    confidence = 0.95
    points = []
    for it in iterations:
        for label, run in (("trained (held-out)", it["eval"]), ("pixel-random", pixel),
                           ("DOM-aware random", dom)):
            points.append(CurvePoint.from_counts(it["iteration"], label, run["successes"], run["episodes"],
                                                 confidence))
    sources = [run["out"] for _, run in rows[:3]] + [it["eval_out"] for it in iterations]
    labels = [label for label, _ in rows[:3 + len(iterations)]]
    if "shuffled" in results:
        sources.append(results["shuffled"]["out"])
        labels.append(rows[-1][0])
    report = build_report(sources, labels=labels)
    results["report"] = str(write_report(report, out / "report", learning_curve=points))
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"plot: {out / 'learning_miniwob.png'}; report: {results['report']}; "
          f"figures: {out / 'results.json'}")


def _plot(path: Path, results: dict[str, Any]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    iterations = results["iterations"]
    xs = [it["iteration"] for it in iterations]
    figure = Figure(figsize=(10, 4), dpi=100)
    FigureCanvasAgg(figure)
    for index, (key, title) in enumerate((("success_rate", "held-out success"),
                                          ("valid_action_rate", "valid-action rate"))):
        axes = figure.add_subplot(1, 2, index + 1)
        axes.plot(xs, [100 * it["eval"][key] for it in iterations], marker="o", color="#0969da",
                  label="trained tiny policy (temperature 0)")
        for name, label, colour in (("pixel_random", "pixel-random", "#cf222e"),
                                    ("dom_random", "DOM-aware random", "#1a7f37"),
                                    ("untrained", "untrained model", "#6e7781"),
                                    ("shuffled", "final, shuffled screenshots", "#8250df")):
            if name in results:
                axes.axhline(100 * results[name][key], color=colour, linestyle="--", label=label)
        axes.set_ylim(0, 100)
        axes.yaxis.set_major_formatter(PercentFormatter())
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel("loop iteration")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        if index == 0:
            axes.legend(loc="center right", fontsize=8)
    figure.suptitle(f"MiniWoB++ ({', '.join(results['kinds'])}), held-out seeds")
    figure.tight_layout()
    figure.savefig(path, format="png")


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING)
    run_benchmark(parse_args(argv))


if __name__ == "__main__":
    main()
