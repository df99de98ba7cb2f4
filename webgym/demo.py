"""``webgym demo``: the whole system on one CPU machine, offline, in a few minutes.

Stages (each announced on the terminal as it starts)::

    1 build      the project's sample web tasks (webgym/sample_tasks.jsonl), generated tasks of the
                 local sites (shop, travel, reference) and MiniWoB++ training seeds as task rows,
                 through the real `webgym_data.build` path (offline: template subtask
                 instructions, rule taxonomy)                                      -> OUT/tasks
    2 servers    site server (MiniWoB++ pages and the stateful sites), browser server (Chromium), a
                 tiny random Qwen3-VL (`webgym_rl.tiny.build_tiny_model`) for the CPU policy server
                                                                       -> OUT/models/tiny-qwen3vl
    3 baselines  the held-out seeds (never trained on) with the pixel-random policy and the
                 DOM-aware random policy                                       -> OUT/baselines
    4 sites      the built site tasks with the DOM-aware random policy and the scripted expert,
                 judged against the sites' ground truth; the expert's episodes recorded, then
                 replayed from the recording                                      -> OUT/sites
    5 rollout    the MiniWoB++ training seeds with the DOM-aware `random` bootstrap policy
                                                          -> OUT/loop/rollouts/round-0000
    6 train      filtered_bc on the successful episodes, by the loop's resident trainer
    7 publish    the new weights sent to the CPU policy server in memory (no restart, no disk)
    8 evaluate   the held-out seeds with the trained policy at temperature 0
                                              -> OUT/loop/evals/v-0001, OUT/loop/checkpoints/v-0001
    9 report     HTML reports, the learning curve and a summary   -> OUT/report, OUT/summary.json

Stages 5-8 are one round of the online loop (`webgym_rl.loop.run_loop`) with the shipped recipe
``miniwob-cpu`` sized for the demo (`RECIPE`), so the demo runs the same code and settings as
``webgym-rl loop --config miniwob-cpu``; the agent uses the compact prompt variant for small
models. The summary compares the trained policy with both baselines on the same held-out
seeds and reports only what was measured in this run; where the trained policy does not reach the
benchmark's target (3x the pixel-random success), one line says so and points to the benchmark
(``benchmarks/learning_miniwob.py``), which trains longer. Everything the demo starts it stops,
also on Ctrl-C.

Exceptions (defined in `webgym.errors`)::

    WebgymError
     └── DemoError (RuntimeError)   the output folder is not the demo's, or a stage failed (names it)
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import click

from webgym.errors import DemoError

__all__ = ["SAMPLE_TASKS", "DemoError", "DemoResult", "DemoSettings", "demo_command", "run_demo"]

log = logging.getLogger(__name__)

SAMPLE_TASKS = Path(__file__).resolve().parent / "sample_tasks.jsonl"
"""The project's own sample of web tasks with rubrics (published task-row format)."""
_MARKER = ".webgym-demo"
_OWN_ENTRIES = ("inputs", "tasks", "models", "baselines", "sites", "loop", "report", "summary.json", _MARKER)
HELDOUT_SEED_BASE = 100_000
"""Held-out MiniWoB++ seeds start here; training seeds count from 0 and never reach it."""
BENCHMARK = "benchmarks/learning_miniwob.py"
SITE_VIEWPORT = "1280x720"
"""The viewport of the site tasks (the published recipes' own)."""
RECIPE = "miniwob-cpu"
"""The shipped loop recipe the demo runs, sized down (`webgym_rl.loop.recipes`)."""
"""Where the longer run that shows learning lives (its plot is in the README)."""


@dataclass(frozen=True)
class _Size:
    miniwob_tasks: tuple[str, ...]
    train_seeds: int
    """Training seeds per MiniWoB++ task (bootstrap episodes)."""
    heldout_seeds: int
    """Held-out seeds per MiniWoB++ task (evaluation episodes of each policy)."""
    horizon: int
    max_new_tokens: int
    """Longest reply; the compact variant's tool call takes about 45 tokens of the tiny tokenizer."""
    max_steps: int
    """Optimizer steps of the training."""
    batch_size: int
    """Samples per optimizer step."""
    test_size: int
    site_tasks: int
    """Generated tasks per local site (levels in turn: easy, medium, hard)."""


# A click task and a focus task whose target moves with the seed: the policy must read the screenshot.
_SIZES: dict[str, _Size] = {
    "small": _Size(miniwob_tasks=("click-test", "focus-text"), train_seeds=200, heldout_seeds=12, horizon=2,
                   max_new_tokens=56, max_steps=1200, batch_size=8, test_size=4, site_tasks=3),
    "tiny": _Size(miniwob_tasks=("click-test", "focus-text"), train_seeds=2, heldout_seeds=1, horizon=2,
                  max_new_tokens=8, max_steps=2, batch_size=4, test_size=2, site_tasks=1),
}


@dataclass
class DemoSettings:
    """Settings of ``webgym demo``."""

    out: Path = Path("out/demo")
    """Output folder (replaced if it holds an earlier demo; any other non-empty folder is refused)."""
    size: Literal["small", "tiny"] = "small"
    """small: 400 bootstrap and 24 held-out MiniWoB++ episodes, 9 site tasks (about 6 minutes on 2 cores);
    tiny: tests."""
    seed: int = 0
    """Seed of the tiny model, the split, the random policies and the training order."""
    concurrency: int = 4
    """Episodes running at once."""
    learning_rate: float = 1e-3
    """Learning rate of the tiny policy's training (large: the model is tiny and the run short)."""
    progress: bool = True
    """Show each stage and the live progress of rollouts and training."""

    @property
    def preset(self) -> _Size:
        if self.size not in _SIZES:
            raise DemoError(f"size {self.size!r} is unknown; choose {' or '.join(_SIZES)}")
        return _SIZES[self.size]


@dataclass
class DemoResult:
    """What the demo measured and where it wrote it (also in OUT/summary.json)."""

    out: Path
    summary: dict[str, Any] = field(default_factory=dict)


class _Stages:
    """Announces the numbered stages on stderr (rich), with the time since the demo started."""

    TOTAL = 9

    def __init__(self, enabled: bool):
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.enabled = enabled
        self.started = time.perf_counter()

    def stage(self, number: int, text: str) -> None:
        if self.enabled:
            self.console.print(f"[bold cyan][{number}/{self.TOTAL}][/] {text} "
                               f"[dim]({time.perf_counter() - self.started:.0f} s)[/]")

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(f"      {text}")


def _prepare_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise DemoError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / _MARKER).exists():
            raise DemoError(f"{out} is not empty and was not written by `webgym demo`; choose another --out")
        for name in _OWN_ENTRIES:  # an earlier demo: start afresh (only our own entries go)
            path = out / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / _MARKER).write_text("written by `webgym demo`; rerunning the demo replaces this folder\n")


def _rate(stats: dict[str, Any], key: str, total: str) -> str:
    return f"{stats[key]}/{stats[total]} ({100 * stats[key] / stats[total]:.1f}%)" if stats[total] else "n/a"


_FIGURES = ("episodes", "successes", "steps", "valid_actions", "errors", "success_rate", "valid_action_rate",
            "steps_per_s")


def _internal_errors(out: str | Path) -> int:
    """Episodes of a trajectory folder with status ``error:internal``: bugs, not infrastructure."""
    from webgym_rollout.trajectory.reader import read_episodes

    return read_episodes(out).stats().internal_errors


def _figures(run: dict[str, Any], internal_errors: int) -> dict[str, Any]:
    """A rollout's figures for the summary. ``success_rate`` counts infrastructure failures as
    failures (successes / episodes); ``success_rate_evaluated`` leaves them out (successes /
    ``evaluated``); ``internal_errors`` counts the episodes that ended in a bug (``error:internal``,
    also in ``errors``)."""
    figures = {key: run[key] for key in _FIGURES}
    evaluated = run["episodes"] - run["errors"]
    return {**figures, "evaluated": evaluated,
            "success_rate_evaluated": run["successes"] / evaluated if evaluated else None,
            "internal_errors": internal_errors}


def _bug_note(summary: dict[str, Any]) -> str:
    """The loud line of a run with bugs ("" without)."""
    runs = {name: run["internal_errors"] for name, run in summary["rollouts"].items()
            if run["internal_errors"]}
    if not runs:
        return ""
    counts = ", ".join(f"{name} {count}" for name, count in runs.items())
    return (f"WARNING: {sum(runs.values())} episodes ended with error:internal ({counts}): this is a bug, "
            "please report it (the tracebacks are in the log). They are left out of the evaluated rates.")


_LEVELS = ("easy", "medium", "hard", "unknown")
_COLUMNS = (("pixel_random", "pixel-random"), ("dom_random", "DOM-aware random"),
            ("trained", "trained tiny policy"))


def _summary_table(summary: dict[str, Any]):
    from rich.table import Table

    runs = summary["rollouts"]
    table = Table(title=f"webgym demo: the same {runs['trained']['episodes']} held-out MiniWoB++ episodes",
                  show_lines=False)
    table.add_column("")
    for _, label in _COLUMNS:
        table.add_column(label, justify="right")
    table.add_row("success rate (reward 1), failures left out",
                  *(_rate(runs[key], "successes", "evaluated") for key, _ in _COLUMNS))
    table.add_row("success rate, infrastructure failures counted",
                  *(_rate(runs[key], "successes", "episodes") for key, _ in _COLUMNS))
    if summary["internal_errors"]:
        table.add_row("[bold red]episodes ended by a bug (error:internal)[/]",
                      *(f"[bold red]{runs[key]['internal_errors']}[/]" for key, _ in _COLUMNS))
    table.add_row("valid-action rate (reply parsed)",
                  *(_rate(runs[key], "valid_actions", "steps") for key, _ in _COLUMNS))
    table.add_row("steps/s", *(f"{runs[key]['steps_per_s']:.2f}" for key, _ in _COLUMNS))
    tasks, bootstrap = summary["tasks"], runs["bootstrap"]
    table.add_section()
    table.add_row("tasks built", f"{tasks['train'] + tasks['test']} ({tasks['train']} train, "
                                 f"{tasks['test']} test)", "", "")
    kinds = " / ".join(str(tasks.get(key, 0)) for key in ("sample_web", "sites", "subtasks", "miniwob"))
    table.add_row("  web / local sites / subtasks / MiniWoB", kinds, "", "")
    table.add_row("bootstrap rollout (training seeds)", "", _rate(bootstrap, "successes", "episodes"), "")
    sites = summary.get("sites")
    if sites:
        table.add_section()
        table.add_row(f"site tasks ({sites['tasks']}), judged by the sites' truth", "",
                      _rate(runs["site_random"], "successes", "episodes"), "")
        table.add_row("  scripted expert (demonstrations)", "", "",
                      _rate(runs["site_expert"], "successes", "episodes"))
        for level, counts in sorted(sites["levels"].items(), key=lambda item: _LEVELS.index(item[0])):
            table.add_row(f"  {level}", "", "{}/{}".format(*counts.get("random", (0, 0))),
                          "{}/{}".format(*counts.get("expert", (0, 0))))
        table.add_row("  replay of the expert's recording", "", "",
                      f"{sites['replay']['matched']}/{sites['replay']['episodes']} identical")
    train = summary["training"]
    if train.get("skipped"):
        table.add_row("training", "", "", f"skipped: {train['skipped'][:60]}")
    else:
        table.add_row("training (filtered_bc)", "", f"{train['steps']} steps, {train['steps_kept']} samples",
                      f"loss {train['first_loss']:.3f} -> {train['last_loss']:.3f}")
    return table


def _times(run: dict[str, Any], baseline: dict[str, Any]) -> str:
    if not baseline["success_rate"]:
        return "pixel-random solved none"
    return f"{run['success_rate'] / baseline['success_rate']:.1f}x pixel-random"


def _notes(summary: dict[str, Any]) -> list[str]:
    """Plain statements of what the numbers mean; every figure is one measured in this run."""
    runs, train, heldout = summary["rollouts"], summary["training"], summary["heldout"]
    pixel, dom, trained = runs["pixel_random"], runs["dom_random"], runs["trained"]
    notes = [note] if (note := _bug_note(summary)) else []
    notes.append(f"All three policies played the same {trained['episodes']} held-out MiniWoB++ episodes "
                 f"({', '.join(heldout['tasks'])}; seeds from {HELDOUT_SEED_BASE}, never trained on), judged "
                 "by the pages' own success signal.")
    model = summary["model"]
    if train.get("skipped"):
        notes.append(f"Training was skipped ({train['skipped']}); the trained column is the untrained model.")
    else:
        notes.append(
            f"The trained policy is a tiny randomly initialised Qwen3-VL ({model['num_layers']} layers, "
            f"hidden size {model['hidden_size']}) trained for {train['steps']} steps on "
            f"{train['steps_kept']} steps of {train['trajectories_kept']} successful bootstrap episodes; at "
            f"temperature 0 its replies parsed into a valid action in "
            f"{100 * trained['valid_action_rate']:.1f}% of {trained['steps']} steps and it solved "
            f"{trained['successes']}/{trained['episodes']} episodes ({_times(trained, pixel)}).")
    notes.append(f"Baselines: pixel-random (uniform clicks, well-formed replies) solved "
                 f"{pixel['successes']}/{pixel['episodes']}; the DOM-aware random policy, which clicks the "
                 f"page's elements, solved {dom['successes']}/{dom['episodes']} ({_times(dom, pixel)}).")
    if "sites" in summary:
        sites, expert, random = summary["sites"], runs["site_expert"], runs["site_random"]
        notes.append(f"On {sites['tasks']} generated tasks of the local sites ({', '.join(sites['names'])}), "
                     "judged against the sites' ground truth: the scripted expert (a demonstration source "
                     f"that reads the tasks' truth) solved {expert['successes']}/{expert['episodes']}, the "
                     f"DOM-aware random policy {random['successes']}/{random['episodes']}. Replayed from its "
                     f"recording, {sites['replay']['matched']}/{sites['replay']['episodes']} of the expert's "
                     "episodes gave the same screenshots and the same verdict.")
    if not pixel["success_rate"] or trained["success_rate"] < 3 * pixel["success_rate"]:
        notes.append(f"Learning to read the screenshot takes longer than this demo: see the plot of "
                     f"{BENCHMARK} (README, 'Learning on one CPU').")
    return notes


def _heldout_rollout(run: Any, truth: Any = None) -> dict[str, Any]:
    """Roll out the tasks as `run` (`RunSettings`) says (`truth`: the sites' ground truth); the stats
    of its folder."""
    from webgym_rollout.runner import run as run_rollout
    from webgym_rollout.trajectory.reader import read_episodes

    report = asyncio.run(run_rollout(run, truth=truth))
    stats = read_episodes(run.out).stats().as_dict()
    return {"out": str(run.out), "steps_per_s": report.steps_per_s, **stats}


def _site_rollouts(loop_settings: Any, services: Any, tasks: Path, out: Path, agent: Any,
                   seed: int) -> dict[str, Any]:
    """The site tasks with the DOM-aware random policy and the scripted expert (recorded), judged by
    the site judge against the site server's truth; then the expert's recording replayed by the
    expert, compared episode by episode (every screenshot and the verdict)."""
    from webgym_rl.loop.phases import run_settings
    from webgym_rollout.agent.policies import PolicySettings, RandomPolicySettings
    from webgym_rollout.judge.judges import JudgeSettings
    from webgym_rollout.trajectory.reader import read_episodes
    from webgym_rollout.trajectory.recordings import RecordSettings

    truth = services.site_truth()
    # The train budgets (10/20/30 steps by level) fit the expert's plans and end the random episodes sooner.
    base = run_settings(loop_settings, services, tasks=tasks, split="test", index=0, out=out,
                        horizon_table="train")
    # The sites are laid out for a desktop window, not MiniWoB++'s 320x240 of the recipe.
    base = dataclasses.replace(base, judge=JudgeSettings(kind="site"),
                               env=dataclasses.replace(base.env, viewport=SITE_VIEWPORT))
    measured: dict[str, Any] = {}
    for key, kind, traffic in (("random", "random", RecordSettings()),
                               ("expert", "expert", RecordSettings(record=True)),
                               ("replay", "expert", RecordSettings(replay=str(out / "expert")))):
        policy = PolicySettings(kind=kind, agent=agent, random=RandomPolicySettings(seed=seed))
        run = dataclasses.replace(base, out=out / key, policy=policy, traffic=traffic)
        measured[key] = _heldout_rollout(run, truth)
    recorded = {e.episode_id: e for e in read_episodes(out / "expert")}
    replayed = list(read_episodes(out / "replay"))

    def same(episode: Any) -> bool:
        original = recorded.get(episode.episode_id)
        return original is not None and episode.reward == original.reward and (
            [s.screenshot_sha256 for s in episode.steps] == [s.screenshot_sha256 for s in original.steps])

    matched = sum(1 for episode in replayed if same(episode))
    levels: dict[str, dict[str, list[int]]] = {}
    for key in ("random", "expert"):
        for episode in read_episodes(out / key):
            counts = levels.setdefault(episode.task.difficulty_level, {}).setdefault(key, [0, 0])
            counts[0] += episode.success
            counts[1] += 1
    return {"random": measured["random"], "expert": measured["expert"],
            "replay": {"out": measured["replay"]["out"], "episodes": len(replayed), "matched": matched},
            "levels": levels}



def _learning_curve(summary: dict[str, Any], rounds: list[Any], path: Path,
                    colours: dict[str, str]) -> tuple[Path, list[Any]]:
    """Held-out success of each evaluated version of the trained policy, beside both baselines (flat
    lines; bars while one version is evaluated), each in its colour of the comparison report
    (`colours`). Returns the PNG's path and the points."""
    from webgym_rollout.report.charts import CurvePoint, write_learning_curve

    runs, points = summary["rollouts"], []
    for record in rounds:
        if record.eval is None:
            continue
        evaluation = record.eval.model_dump()
        for label, run in (("pixel-random", runs["pixel_random"]), ("DOM-aware random", runs["dom_random"]),
                           ("trained tiny policy", evaluation)):  # the comparison report's order
            judged = run["episodes"] - run["errors"]
            points.append(CurvePoint.from_counts(record.eval.version, label, run["successes"], judged, 0.95))
    png = write_learning_curve(points, path, title="Held-out MiniWoB++ success by policy version",
                               x_label="policy version", colours=colours)
    return png, points


def run_demo(settings: DemoSettings) -> DemoResult:
    """Run every stage; returns the measured summary (also written to OUT/summary.json)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    preset = settings.preset
    out = Path(settings.out)
    stages = _Stages(settings.progress)
    _prepare_out(out)

    # 1. Tasks, through the real build path (offline).
    stages.stage(1, f"Building the task dataset: {SAMPLE_TASKS.name} + {preset.site_tasks} tasks of each "
                    f"local site + {len(preset.miniwob_tasks)} MiniWoB++ tasks x {preset.train_seeds} "
                    "training seeds")
    from webgym_data.build import BuildSettings, build
    from webgym_data.importers import miniwob
    from webgym_data.loading import load_tasks, write_tasks
    from webgym_data.split import SplitSettings
    from webgym_sites.generate import site_tasks

    spec = miniwob.write_miniwob_spec(out / "inputs" / "miniwob_tasks.jsonl", preset.miniwob_tasks,
                                      range(preset.train_seeds))
    sites_spec = write_tasks(site_tasks(preset.site_tasks, seed=settings.seed),
                             out / "inputs" / "site_tasks.jsonl")
    tasks_dir = out / "tasks"
    report = build(BuildSettings(
        out=tasks_dir, importers=(("generic", str(SAMPLE_TASKS)), ("local_sites", str(sites_spec)),
                                  ("miniwob", str(spec))),
        split=SplitSettings(test_size=preset.test_size, seed=settings.seed), progress=settings.progress))
    from webgym_rollout.tasks.kind import task_kind

    every = [*report.train, *report.test]
    task_counts = {"train": len(report.train), "test": len(report.test),
                   "sample_web": sum(1 for t in every if task_kind(t).name == "web" and not t.parent_task_id),
                   "subtasks": sum(1 for t in every if t.parent_task_id),
                   "miniwob": sum(1 for t in every if task_kind(t).name == "miniwob"),
                   "sites": sum(1 for t in every if task_kind(t).name == "site" and not t.parent_task_id)}
    # The dataset's split is by website (no test website in train), so all seeds of one MiniWoB++ task
    # land in one split: the loop trains on the MiniWoB++ rows of both, and evaluates on other seeds.
    built_miniwob = [t for t in load_tasks(tasks_dir, split=None) if task_kind(t).name == "miniwob"]
    train_tasks = write_tasks(built_miniwob, out / "inputs" / "miniwob_train.jsonl")
    heldout_tasks = write_tasks([miniwob.miniwob_task(name, HELDOUT_SEED_BASE + seed)
                                 for seed in range(preset.heldout_seeds) for name in preset.miniwob_tasks],
                                out / "inputs" / "miniwob_heldout.jsonl")
    # The site tasks as built (both splits; their subtasks are left to `webgym-rollout run`).
    built_sites = [t for t in load_tasks(tasks_dir, split=None)
                   if task_kind(t).name == "site" and not t.parent_task_id]
    site_file = write_tasks(built_sites, out / "inputs" / "site_tasks_built.jsonl")
    task_counts["miniwob_train"] = len(load_tasks(train_tasks))
    task_counts["miniwob_heldout"] = len(load_tasks(heldout_tasks))
    stages.note(f"{task_counts['train']} train + {task_counts['test']} test tasks -> {tasks_dir}; "
                f"{task_counts['miniwob_heldout']} held-out MiniWoB++ episodes -> {heldout_tasks}")
    if not task_counts["miniwob_train"]:
        raise DemoError(f"the build put no MiniWoB task in {tasks_dir}; nothing to roll out")

    # 2. The recipe (the shipped CPU MiniWoB++ recipe, sized for the demo) and the servers.
    stages.stage(2, "Starting the site server and the browser server; building a tiny Qwen3-VL")
    from webgym_rl.loop import LoopServices, load_recipe, run_loop
    from webgym_rl.loop.events import (
        EvalStarted,
        PhaseDone,
        PhaseStarted,
        PolicyServing,
        ServiceStarted,
    )
    from webgym_rl.loop.phases import run_settings
    from webgym_rl.tiny import TinyModelSettings, build_tiny_model
    from webgym_rollout.agent.policies import PolicySettings, RandomPolicySettings

    tiny = TinyModelSettings(family="qwen3_vl", seed=settings.seed)
    model_dir = build_tiny_model(out / "models" / "tiny-qwen3vl", settings=tiny)
    loop_settings = load_recipe(
        RECIPE, tasks=str(train_tasks), model=str(model_dir), out=str(out / "loop"), iterations=1,
        eval_tasks=str(heldout_tasks), seed=settings.seed, progress=settings.progress,
        concurrency=settings.concurrency, pool={"contexts_per_browser": max(1, settings.concurrency)},
        horizons={"miniwob": preset.horizon}, learning_rate=settings.learning_rate,
        max_steps=preset.max_steps,
        per_device_batch_size=preset.batch_size,
        policy={"model": "tiny-qwen3vl", "max_new_tokens": preset.max_new_tokens,
                "max_tokens": preset.max_new_tokens})
    agent = loop_settings.policy.agent

    def on_event(event: Any) -> None:
        if isinstance(event, ServiceStarted):
            what = f" serving {event.checkpoint}" if event.checkpoint else ""
            stages.note(f"{event.service} server {event.url}{what} ({event.seconds:.1f} s to start)")
        elif isinstance(event, PhaseStarted) and event.phase == "rollout":
            stages.stage(5, f"Rolling out {task_counts['miniwob_train']} MiniWoB++ training episodes with "
                            "the DOM-aware random bootstrap policy")
        elif isinstance(event, PhaseStarted) and event.phase == "train":
            stages.stage(6, "Training the tiny policy with filtered_bc on the successful episodes")
        elif isinstance(event, PhaseStarted) and event.phase == "publish":
            stages.stage(7, "Publishing the new weights to the policy server (in memory, no restart)")
        elif isinstance(event, PolicyServing) and event.version > 0:
            stages.note(f"the policy server serves v{event.version} ({event.path}, {event.seconds:.2f} s)")
        elif isinstance(event, PhaseStarted) and event.phase == "eval":
            stages.stage(8, f"Evaluating the trained policy on the {task_counts['miniwob_heldout']} held-out "
                            "episodes (temperature 0)")
        elif isinstance(event, EvalStarted):
            pass
        elif isinstance(event, PhaseDone) and event.phase in ("rollout", "train"):
            stages.note(f"{event.record.summary()}")

    baselines = out / "baselines"
    with LoopServices(loop_settings, on_event=on_event) as services:
        # 3. Both baselines on the held-out seeds.
        stages.stage(3, f"Baselines on the {task_counts['miniwob_heldout']} held-out episodes: pixel-random "
                        "and DOM-aware random")
        measured: dict[str, dict[str, Any]] = {}
        for key, kind in (("pixel_random", "pixel_random"), ("dom_random", "random")):
            policy = PolicySettings(kind=kind, agent=agent, random=RandomPolicySettings(seed=settings.seed))
            run = run_settings(loop_settings, services, tasks=heldout_tasks, split="test", index=0,
                               out=baselines / key.replace("_", "-"), horizon_table="test")
            measured[key] = _heldout_rollout(dataclasses.replace(run, policy=policy))
            stages.note(f"{key.replace('_', '-')}: {measured[key]['successes']}/{measured[key]['episodes']} "
                        "successes")
        # 4. The local sites' tasks: DOM-aware random and the scripted expert, judged by the truth.
        stages.stage(4, f"Site tasks: the DOM-aware random policy and the scripted expert on "
                        f"{len(built_sites)} tasks of the local sites, judged against their ground truth; "
                        "the expert's episodes recorded, then replayed")
        sites = _site_rollouts(loop_settings, services, site_file, out / "sites", agent, settings.seed)
        for key in ("random", "expert"):
            stages.note(f"{key}: {sites[key]['successes']}/{sites[key]['episodes']} successes")
        replay = sites["replay"]
        stages.note(f"replay of the expert's recording: {replay['matched']}/{replay['episodes']} episodes "
                    "with the same screenshots and verdict")
        # 5-8. One round of the loop: rollout (DOM-aware random) -> train -> publish -> evaluate.
        result = run_loop(loop_settings, services=services, on_event=on_event)
    record = result.rounds[0]
    rollout, train, evaluation = (r.model_dump() for r in (record.rollout, record.train, record.eval))
    train["checkpoint"] = result.checkpoint

    # 8. Reports, learning curve and summary.
    stages.stage(9, "Writing the HTML reports, the learning curve and the summary")
    from webgym_rollout.report.charts import run_colours
    from webgym_rollout.report.html import build_report, write_report
    from webgym_rollout.report.viewer import render_report

    report_dir = out / "report"
    counts = train.get("counts") or {}
    summary: dict[str, Any] = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()},
        "tasks": task_counts,
        "heldout": {"tasks": list(preset.miniwob_tasks),
                    "seeds": [HELDOUT_SEED_BASE + s for s in range(preset.heldout_seeds)]},
        "model": asdict(tiny),
        "rollouts": {key: _figures(run, _internal_errors(run["out"])) for key, run in (
            ("pixel_random", measured["pixel_random"]), ("dom_random", measured["dom_random"]),
            ("trained", evaluation), ("bootstrap", rollout), ("site_random", sites["random"]),
            ("site_expert", sites["expert"]))},
        "sites": {"tasks": len(built_sites), "replay": sites["replay"], "levels": sites["levels"],
                  "names": sorted({t.environment.partition(":")[2] for t in built_sites})},
        "training": ({"skipped": train["skipped"]} if train.get("skipped") else {
            "steps": train["steps"], "first_loss": train["first_loss"], "last_loss": train["last_loss"],
            "trajectories_kept": counts.get("trajectories_kept"), "steps_kept": counts.get("steps_kept"),
            "objective": counts.get("objective")}),
    }
    summary["internal_errors"] = sum(run["internal_errors"] for run in summary["rollouts"].values())
    if summary["internal_errors"]:
        log.warning("%s", _bug_note(summary))
    comparison = build_report(
        [measured["pixel_random"]["out"], measured["dom_random"]["out"], evaluation["out"]],
        labels=["pixel-random", "DOM-aware random", "trained tiny policy"])
    colours = run_colours(run.label for run in comparison.runs)  # one colour per run, PNG and page
    curve, points = _learning_curve(summary, result.rounds, report_dir / "learning_curve.png", colours)
    summary["folders"] = {
        "task dataset": tasks_dir, "held-out tasks": heldout_tasks,
        "trajectories (bootstrap)": Path(rollout["out"]), "checkpoint (trained)": Path(train["checkpoint"]),
        "trajectories (pixel-random)": Path(measured["pixel_random"]["out"]),
        "trajectories (DOM-aware random)": Path(measured["dom_random"]["out"]),
        "trajectories (trained)": Path(evaluation["out"]),
        "report (held-out comparison)": write_report(comparison, report_dir / "heldout",
                                                     learning_curve=points or None, x_label="policy version",
                                                     colours=colours),
        "report (bootstrap)": render_report(rollout["out"], report_dir / "bootstrap.html"),
        "report (trained)": render_report(evaluation["out"], report_dir / "trained.html"),
        "trajectories (site tasks, expert)": Path(sites["expert"]["out"]),
        "trajectories (site tasks, random)": Path(sites["random"]["out"]),
        **{f"report (site tasks, {key})": render_report(sites[key]["out"], report_dir / f"sites-{key}.html")
           for key in ("expert", "random")},
        "learning curve": curve, "loop state": out / "loop" / "loop_state.json"}
    summary["seconds"] = time.perf_counter() - stages.started
    summary["notes"] = _notes(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    if settings.progress:
        stages.console.print(_summary_table(summary))
        stages.console.print("Outputs:")
        for name, path in summary["folders"].items():
            stages.console.print(f"  {name + ':':<30} {path}", soft_wrap=True)
        for note in summary["notes"]:
            stages.console.print(f"- {note}", style="bold red" if note.startswith("WARNING") else None,
                                 markup=False)
        stages.console.print(f"Done in {summary['seconds']:.0f} s. Summary: {out / 'summary.json'}")
    return DemoResult(out=out, summary=summary)


@click.command("demo", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/demo"),
              show_default=True, help="Output folder (an earlier demo there is replaced).")
@click.option("--size", type=click.Choice(list(_SIZES)), default="small", show_default=True,
              help="small: 400 bootstrap and 24 held-out MiniWoB episodes, 9 site tasks (about 6 minutes "
                   "on 2 cores); tiny: 4 and 2 (tests).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the model, split and policy.")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
              help="Episodes running at once.")
@click.option("--quiet", is_flag=True, help="No stage lines or live progress (the summary is still printed).")
def demo_command(out: Path, size: str, seed: int, concurrency: int, quiet: bool) -> None:
    """Build tasks, roll out, train a tiny policy, evaluate it against two baselines (CPU, offline).

    Runs the whole system on this machine: builds a task dataset from the project's sample tasks
    and MiniWoB++ tasks, starts the MiniWoB site server, a Chromium browser server and a CPU policy
    server with a tiny random Qwen3-VL, measures the pixel-random and DOM-aware random policies on
    held-out seeds, rolls out the training seeds with the DOM-aware random bootstrap policy, trains
    the tiny policy with filtered_bc on the successes, publishes it to the policy server in memory,
    evaluates it on the same held-out
    seeds at temperature 0, and writes HTML reports, a learning curve and a summary of what was
    measured. Everything it starts it stops, also on Ctrl-C.

    \b
    Example:
      webgym demo --out out/demo
      webgym demo --out /tmp/demo --size tiny
      python -c "import datasets; print(datasets.load_dataset('out/demo/tasks'))"
    """
    from webgym_data.errors import WebgymDataError
    from webgym_rl.errors import WebgymRLError

    try:
        result = run_demo(DemoSettings(out=out, size=size, seed=seed, concurrency=concurrency,  # type: ignore[arg-type]
                                       progress=not quiet))
    except (DemoError, WebgymRLError, WebgymDataError) as exc:
        raise click.ClickException(str(exc)) from exc
    if quiet:
        summary = result.summary
        for name, run in summary["rollouts"].items():
            click.echo(f"{name}: {run['successes']}/{run['evaluated']} successes of evaluated episodes, "
                       f"{run['successes']}/{run['episodes']} with infrastructure failures counted, valid "
                       f"actions {100 * run['valid_action_rate']:.1f}%, {run['steps_per_s']:.2f} steps/s")
        if summary["internal_errors"]:
            click.secho(_bug_note(summary), err=True, fg="red", bold=True)
        click.echo(f"summary: {result.out / 'summary.json'}")
