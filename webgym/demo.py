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
                 DOM-aware random policy, both on the plain screenshot             -> OUT/baselines
    4 sites      the built site tasks with the DOM-aware random policy and the scripted expert,
                 judged against the sites' ground truth; the expert's episodes recorded, then
                 replayed from the recording                                      -> OUT/sites
    5 bootstrap  round 0: the scripted element-random policy plays the training seeds, the tiny
                 model imitates every reply it wrote, the new weights are published and evaluated
                 on the held-out seeds at temperature 0                    -> OUT/loop/bootstrap
    6 rollout    round 1: the bootstrapped policy plays training seeds several times at temperature 1
                                                           -> OUT/loop/own/rollouts/round-0000
    7 train      filtered_bc on the successes of its own rollouts; the new weights are published to
                 the CPU policy server in memory (no restart, no disk)
    8 evaluate   the held-out seeds again at temperature 0          -> OUT/loop/own/evals/v-0001
    9 report     HTML reports (each titled by what it shows), the held-out comparison chart (the four
                 policies side by side) and a summary              -> OUT/report, OUT/summary.json

The MiniWoB++ part runs two multi-step kinds (click-button-sequence, click-collapsible: each needs
two clicks in order) in the observation mode ``elements``: the page's interactive elements as a
numbered text list, no image, with the element actions (click_element, ...). A tiny model trained
from scratch learns which element to act on, in which order, in minutes on a CPU from that list,
where the screenshot would first ask it to find a 10-pixel button in an image
(``benchmarks/learning_multistep.py`` measures both). The scripted policy of round 0 is the
DOM-aware random policy acting by element number; imitating all its replies teaches the model the
reply format and the spread of actions, not the order, and the model then learns the order from
the successes of its own rollouts in round 1. Both rounds are the online loop
(`webgym_rl.loop.run_loop`) with the shipped recipe ``miniwob-cpu`` sized for the demo (`RECIPE`):
round 0 with ``bootstrap_policy: random``, ``success_threshold: 0`` and ``sampler: {kind: all}``,
round 1 from its checkpoint with ``bootstrap_policy: model``. The summary compares both versions
with both baselines on the same held-out seeds (Wilson 95 % intervals) and pairs the own-rollout
version against the bootstrap seed by seed (exact sign test); it reports only what was measured
in this run. Everything the demo starts it stops, also on Ctrl-C.

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
BENCHMARK = "benchmarks/learning_multistep.py"
"""Where the longer run (more kinds, rounds and seeds, the screenshot for comparison) lives."""
SITE_VIEWPORT = "1280x720"
"""The viewport of the site tasks (the published recipes' own)."""
RECIPE = "miniwob-cpu"
"""The shipped loop recipe the demo runs, sized down (`webgym_rl.loop.recipes`)."""
MINIWOB_MODES = ("elements",)
"""The MiniWoB++ rounds' observation: the numbered list of the page's elements, no image."""


@dataclass(frozen=True)
class _Size:
    miniwob_tasks: tuple[str, ...]
    train_seeds: int
    """Training seeds per MiniWoB++ task (the scripted policy plays each once in round 0)."""
    heldout_seeds: int
    """Held-out seeds per MiniWoB++ task (evaluation episodes of each policy)."""
    horizon: int
    max_new_tokens: int
    """Longest reply of the tiny policy."""
    bootstrap_steps: int
    """Optimizer steps of round 0 (imitation of every reply of the scripted policy)."""
    max_steps: int
    """Optimizer steps of round 1 (filtered_bc on the successes of the policy's own rollouts)."""
    batch_size: int
    """Samples per optimizer step."""
    tasks_per_round: int
    """Training tasks the policy plays in round 1 ..."""
    attempts: int
    """... each this many times, at temperature 1."""
    hidden_size: int
    """Hidden size of the tiny Qwen3-VL (2 layers)."""
    test_size: int
    site_tasks: int
    """Generated tasks per local site (levels in turn: easy, medium, hard)."""


# Two-step kinds: the policy must click two elements in the order the page asks for.
_KINDS = ("click-button-sequence", "click-collapsible")
_SIZES: dict[str, _Size] = {
    "small": _Size(miniwob_tasks=_KINDS, train_seeds=60, heldout_seeds=12, horizon=4, max_new_tokens=64,
                   bootstrap_steps=400, max_steps=150, batch_size=8, tasks_per_round=24, attempts=4,
                   hidden_size=128, test_size=4, site_tasks=3),
    "tiny": _Size(miniwob_tasks=_KINDS, train_seeds=2, heldout_seeds=1, horizon=2, max_new_tokens=8,
                  bootstrap_steps=2, max_steps=2, batch_size=4, tasks_per_round=2, attempts=2,
                  hidden_size=64, test_size=2, site_tasks=1),
}


@dataclass
class DemoSettings:
    """Settings of ``webgym demo``."""

    out: Path = Path("out/demo")
    """Output folder (replaced if it holds an earlier demo; any other non-empty folder is refused)."""
    size: Literal["small", "tiny"] = "small"
    """small: 120 scripted and 96 own MiniWoB++ training episodes, 24 held-out episodes per policy, 9 site
    tasks (about 6 minutes on 2 cores); tiny: tests."""
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
        from rich.console import Console  # lazy: import time

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


def _interval(stats: dict[str, Any]) -> str:
    """The Wilson 95 % interval of successes / episodes, in percent."""
    low, high = stats["wilson_95"]
    return f"[{100 * low:.0f}-{100 * high:.0f}%]"


_FIGURES = ("episodes", "successes", "steps", "valid_actions", "errors", "success_rate", "valid_action_rate",
            "steps_per_s")


def _internal_errors(out: str | Path) -> int:
    """Episodes of a trajectory folder with status ``error:internal``: bugs, not infrastructure."""
    # lazy: torch, playwright and datasets load when a stage needs them
    from webgym_rollout.trajectory.reader import read_episodes

    return read_episodes(out).stats().internal_errors


def _figures(run: dict[str, Any], internal_errors: int) -> dict[str, Any]:
    """A rollout's figures for the summary. ``success_rate`` counts infrastructure failures as
    failures (successes / episodes); ``success_rate_evaluated`` leaves them out (successes /
    ``evaluated``); ``wilson_95`` is the Wilson 95 % interval of successes / episodes;
    ``internal_errors`` counts the episodes that ended in a bug (``error:internal``, also in
    ``errors``)."""
    from webgym_rollout.report.rates import wilson_interval  # lazy: import time

    figures = {key: run[key] for key in _FIGURES}
    evaluated = run["episodes"] - run["errors"]
    return {**figures, "evaluated": evaluated,
            "success_rate_evaluated": run["successes"] / evaluated if evaluated else None,
            "wilson_95": list(wilson_interval(run["successes"], run["episodes"])),
            "internal_errors": internal_errors}


def _paired(base: str | Path, other: str | Path) -> dict[str, Any]:
    """The evaluation in folder `other` against the one in `base`, seed by seed on the tasks both
    played: won (other solved it, base did not), lost (the reverse) and the exact two-sided sign test's
    p (None when neither won nor lost)."""
    # lazy: torch, playwright and datasets load when a stage needs them
    from webgym_rollout.report.rates import sign_test
    from webgym_rollout.trajectory.reader import read_episodes

    first, second = ({e.task.task_id: e.success for e in read_episodes(folder)} for folder in (base, other))
    common = sorted(set(first) & set(second))
    won = sum(1 for t in common if second[t] and not first[t])
    lost = sum(1 for t in common if first[t] and not second[t])
    return {"tasks": len(common), "won": won, "lost": lost, "p": sign_test(won, lost)}


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
            ("bootstrap_eval", "round 0 (bootstrap)"), ("trained", "round 1 (own rollouts)"))
"""The held-out comparison: summary["rollouts"] key and label, in the table's, report's and chart's order."""


def _pair_text(found: dict[str, Any] | None) -> str:
    if not found:
        return ""
    return f"won {found['won']}, lost {found['lost']}, p {found['p'] if found['p'] is not None else 1:.2g}"


def _summary_table(summary: dict[str, Any]):
    from rich.table import Table  # lazy: import time

    runs = summary["rollouts"]
    table = Table(title=f"webgym demo: the same {runs['trained']['episodes']} held-out MiniWoB++ episodes",
                  show_lines=False)
    table.add_column("")
    for _, label in _COLUMNS:
        table.add_column(label, justify="right")
    blank = ("",) * (len(_COLUMNS) - 1)
    table.add_row("success rate (reward 1), failures left out",
                  *(_rate(runs[key], "successes", "evaluated") for key, _ in _COLUMNS))
    table.add_row("success rate, infrastructure failures counted",
                  *(_rate(runs[key], "successes", "episodes") for key, _ in _COLUMNS))
    table.add_row("  Wilson 95 % interval", *(_interval(runs[key]) for key, _ in _COLUMNS))
    if summary.get("paired"):
        table.add_row("  paired with the bootstrap (sign test)", "", "", "",
                      _pair_text(summary["paired"].get("trained_vs_bootstrap")))
    if summary["internal_errors"]:
        table.add_row("[bold red]episodes ended by a bug (error:internal)[/]",
                      *(f"[bold red]{runs[key]['internal_errors']}[/]" for key, _ in _COLUMNS))
    table.add_row("valid-action rate (reply parsed)",
                  *(_rate(runs[key], "valid_actions", "steps") for key, _ in _COLUMNS))
    table.add_row("steps/s", *(f"{runs[key]['steps_per_s']:.2f}" for key, _ in _COLUMNS))
    tasks = summary["tasks"]
    table.add_section()
    table.add_row("tasks built", f"{tasks['train'] + tasks['test']} ({tasks['train']} train, "
                                 f"{tasks['test']} test)", *blank)
    kinds = " / ".join(str(tasks.get(key, 0)) for key in ("sample_web", "sites", "subtasks", "miniwob"))
    table.add_row("  web / local sites / subtasks / MiniWoB", kinds, *blank)
    if "own_rollouts" in runs:
        table.add_row("training episodes (success)", "", "",
                      f"scripted: {_rate(runs['bootstrap'], 'successes', 'episodes')}",
                      f"own, T 1: {_rate(runs['own_rollouts'], 'successes', 'episodes')}")
    _training_rows(table, summary)
    _site_rows(table, summary.get("sites"), runs)
    return table


def _training_text(train: dict[str, Any]) -> str:
    if train.get("skipped"):
        return f"skipped: {train['skipped'][:40]}"
    return (f"{train['steps']} steps on {train['steps_kept']} steps of {train['trajectories_kept']} "
            f"episodes, loss {train['first_loss']:.3f} -> {train['last_loss']:.3f}")


def _training_rows(table: Any, summary: dict[str, Any]) -> None:
    if "bootstrap_training" in summary:
        table.add_row("training", "", "", f"imitation: {_training_text(summary['bootstrap_training'])}",
                      f"filtered_bc: {_training_text(summary['training'])}")
    else:
        table.add_row("training", "", "", "", _training_text(summary["training"]))


def _site_rows(table: Any, sites: dict[str, Any] | None, runs: dict[str, Any]) -> None:
    if not sites:
        return
    table.add_section()
    table.add_row(f"site tasks ({sites['tasks']}), judged by the sites' truth", "",
                  _rate(runs["site_random"], "successes", "episodes"), "", "")
    table.add_row("  scripted expert (demonstrations)", "", "", "",
                  _rate(runs["site_expert"], "successes", "episodes"))
    for level, counts in sorted(sites["levels"].items(), key=lambda item: _LEVELS.index(item[0])):
        table.add_row(f"  {level}", "", "{}/{}".format(*counts.get("random", (0, 0))), "",
                      "{}/{}".format(*counts.get("expert", (0, 0))))
    table.add_row("  replay of the expert's recording", "", "", "",
                  f"{sites['replay']['matched']}/{sites['replay']['episodes']} identical")


def _times(run: dict[str, Any], baseline: dict[str, Any]) -> str:
    if not baseline["success_rate"]:
        return "pixel-random solved none"
    return f"{run['success_rate'] / baseline['success_rate']:.1f}x pixel-random"


def _solved(run: dict[str, Any]) -> str:
    return f"{run['successes']}/{run['episodes']} {_interval(run)}"


def _notes(summary: dict[str, Any]) -> list[str]:
    """Plain statements of what the numbers mean; every figure is one measured in this run."""
    runs, heldout = summary["rollouts"], summary["heldout"]
    pixel, dom, trained = runs["pixel_random"], runs["dom_random"], runs["trained"]
    notes = [note] if (note := _bug_note(summary)) else []
    notes.append(f"All four columns played the same {trained['episodes']} held-out MiniWoB++ episodes "
                 f"({', '.join(heldout['tasks'])}; seeds from {HELDOUT_SEED_BASE}, never trained on), judged "
                 "by the pages' own success signal; the intervals are Wilson 95 % intervals.")
    modes = ", ".join(heldout.get("modes", MINIWOB_MODES))
    notes.append(f"Why these: both kinds need two clicks in the right order, and the model sees the page as "
                 f"its numbered list of elements (observation {modes}, no image), so that one round of its "
                 "own rollouts can show learning on a CPU in minutes; from the screenshot a model trained "
                 f"from scratch first has to find the buttons ({BENCHMARK} runs both).")
    notes.extend(_learning_notes(summary))
    notes.append(f"Baselines, on the plain screenshot: pixel-random (uniform clicks, well-formed replies) "
                 f"solved {_solved(pixel)}; the DOM-aware random policy, which clicks the page's elements, "
                 f"solved {_solved(dom)} ({_times(dom, pixel)}).")
    if "sites" in summary:
        sites, expert, random = summary["sites"], runs["site_expert"], runs["site_random"]
        notes.append(f"On {sites['tasks']} generated tasks of the local sites ({', '.join(sites['names'])}), "
                     "judged against the sites' ground truth: the scripted expert (a demonstration source "
                     f"that reads the tasks' truth) solved {expert['successes']}/{expert['episodes']}, the "
                     f"DOM-aware random policy {random['successes']}/{random['episodes']}. Replayed from its "
                     f"recording, {sites['replay']['matched']}/{sites['replay']['episodes']} of the expert's "
                     "episodes gave the same screenshots and the same verdict.")
    return notes


def _learning_notes(summary: dict[str, Any]) -> list[str]:
    """What the two rounds trained on and whether the own-rollout round improved on the bootstrap."""
    runs, train, model = summary["rollouts"], summary["training"], summary["model"]
    trained, boot = runs["trained"], runs.get("bootstrap_eval")
    notes = []
    if boot is not None and "bootstrap_training" in summary:
        scripted, imitation = runs["bootstrap"], summary["bootstrap_training"]
        what = ("skipped" if imitation.get("skipped") else
                f"{imitation['steps']} steps imitating the replies of all {imitation['trajectories_kept']} "
                f"episodes ({imitation['steps_kept']} steps), successful or not")
        notes.append(
            f"Round 0 (bootstrap): the scripted element-random policy played {scripted['episodes']} training "
            f"episodes ({scripted['successes']} successes) and a tiny randomly initialised Qwen3-VL "
            f"({model['num_layers']} layers, hidden size {model['hidden_size']}) was trained {what}; at "
            f"temperature 0 it solved {_solved(boot)} held-out episodes.")
    own = runs.get("own_rollouts")
    played = (f"played {own['episodes']} training episodes at temperature 1 ({own['successes']} successes); "
              if own else "")
    if train.get("skipped"):
        trained_on = f"{played}it trained nothing ({train['skipped']}), so it kept the bootstrap's weights"
    else:
        trained_on = (f"{played}filtered_bc trained {train['steps']} steps on its "
                      f"{train['trajectories_kept']} successful episodes")
    notes.append(f"Round 1 (its own rollouts): the bootstrapped policy {trained_on}; at temperature 0 its "
                 f"replies parsed into a valid action in {100 * trained['valid_action_rate']:.1f}% of "
                 f"{trained['steps']} steps and it solved {_solved(trained)} held-out episodes.")
    pair = (summary.get("paired") or {}).get("trained_vs_bootstrap")
    if boot is not None and pair:
        verdict = ("improved on" if trained["successes"] > boot["successes"] else
                   "did not improve on")
        notes.append(f"In this run the own-rollout round {verdict} the bootstrap: {boot['successes']} -> "
                     f"{trained['successes']} of {trained['episodes']} held-out episodes; seed by seed it "
                     f"won {pair['won']} and lost {pair['lost']} (exact sign test p "
                     f"{pair['p'] if pair['p'] is not None else 1:.2g}).")
    dom = (summary.get("paired") or {}).get("trained_vs_dom_random")
    if dom:
        notes.append(f"Against the DOM-aware random policy on the same seeds the round-1 version won "
                     f"{dom['won']} and lost {dom['lost']} (exact sign test p "
                     f"{dom['p'] if dom['p'] is not None else 1:.2g}).")
    return notes


def _heldout_rollout(run: Any, truth: Any = None) -> dict[str, Any]:
    """Roll out the tasks as `run` (`RunSettings`) says (`truth`: the sites' ground truth); the stats
    of its folder."""
    # lazy: torch, playwright and datasets load when a stage needs them
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
    # lazy: torch, playwright and datasets load when a stage needs them
    from webgym_rl.loop.phases import run_settings
    from webgym_rollout.agent.policies import PolicySettings, RandomPolicySettings
    from webgym_rollout.judge.judges import JudgeSettings
    from webgym_rollout.settings import ObservationSettings
    from webgym_rollout.trajectory.reader import read_episodes
    from webgym_rollout.trajectory.recordings import RecordSettings

    truth = services.site_truth()
    # The train budgets (10/20/30 steps by level) fit the expert's plans and end the random episodes sooner.
    base = run_settings(loop_settings, services, tasks=tasks, split="test", index=0, out=out,
                        horizon_table="train")
    # The sites are laid out for a desktop window, not MiniWoB++'s 320x240 of the recipe.
    base = dataclasses.replace(base, judge=JudgeSettings(kind="site"), env=dataclasses.replace(
        base.env, viewport=SITE_VIEWPORT, observation=ObservationSettings()))
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


def run_demo(settings: DemoSettings) -> DemoResult:
    """Run every stage; returns the measured summary (also written to OUT/summary.json)."""
    _offline()
    out = Path(settings.out)
    stages = _Stages(settings.progress)
    _prepare_out(out)
    tasks = _build_tasks(settings, out, stages)  # 1
    # 2. The recipe (the shipped CPU MiniWoB++ recipe, sized for the demo) and the servers.
    stages.stage(2, "Starting the site server and the browser server; building a tiny Qwen3-VL")
    # lazy: torch, playwright and datasets load when a stage needs them
    from webgym_rl.loop import LoopServices, run_loop

    loop_settings, tiny = _bootstrap_settings(settings, tasks, out)
    on_event = _event_printer(stages, tasks.counts, own=False)
    with LoopServices(loop_settings, on_event=on_event) as services:
        baselines = _baselines(settings, loop_settings, services, tasks, out / "baselines", stages)  # 3
        sites = _site_stage(settings, loop_settings, services, tasks, out / "sites", stages)  # 4
        # 5. Round 0: the scripted policy's rollout -> imitation -> publish -> evaluate.
        boot = run_loop(loop_settings, services=services, on_event=on_event)
    # 6-8. Round 1 from the bootstrap's checkpoint: own rollouts -> filtered_bc -> publish -> evaluate.
    own = run_loop(_own_settings(settings, tasks, out, boot.checkpoint),
                   on_event=_event_printer(stages, tasks.counts, own=True))
    # 9. Reports, the held-out comparison chart and summary.
    stages.stage(9, "Writing the HTML reports, the held-out comparison chart and the summary")
    summary = _summary(settings, tasks, tiny, baselines, sites, boot, own)
    summary["folders"] = _reports(summary, tasks, baselines, sites, boot, own, out)
    summary["seconds"] = time.perf_counter() - stages.started
    summary["notes"] = _notes(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    if settings.progress:
        _print_summary(stages, summary, out)
    return DemoResult(out=out, summary=summary)


def _offline() -> None:
    """No call to the Hub, no telemetry, no tokenizer threads: the demo runs offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass
class _Tasks:
    """What stage 1 built: the task dataset, and the task files the later stages run."""

    counts: dict[str, int]
    folder: Path
    """The built task dataset."""
    train: Path
    """The MiniWoB++ rows of both splits: the loop trains on them."""
    heldout: Path
    """The held-out MiniWoB++ seeds (never trained on)."""
    sites: list[Any]
    """The site tasks as built (both splits; their subtasks are left to `webgym-rollout run`)."""
    site_file: Path


def _build_tasks(settings: DemoSettings, out: Path, stages: _Stages) -> _Tasks:
    """Stage 1: the tasks, through the real build path (offline)."""
    preset = settings.preset
    stages.stage(1, f"Building the task dataset: {SAMPLE_TASKS.name} + {preset.site_tasks} tasks of each "
                    f"local site + {len(preset.miniwob_tasks)} MiniWoB++ tasks x {preset.train_seeds} "
                    "training seeds")
    # lazy: torch, playwright and datasets load when a stage needs them
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
    # lazy: torch, playwright and datasets load when a stage needs them
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
    return _Tasks(counts=task_counts, folder=tasks_dir, train=train_tasks, heldout=heldout_tasks,
                  sites=built_sites, site_file=site_file)


def _loop_settings(settings: DemoSettings, tasks: _Tasks, **changes: Any) -> Any:
    """The shipped CPU MiniWoB++ recipe sized for the demo, in the observation mode `MINIWOB_MODES`,
    with `changes` (YAML keys) on top."""
    from webgym_rl.loop import load_recipe  # lazy: torch, playwright and datasets load when needed

    preset = settings.preset
    values = dict(
        tasks=str(tasks.train), eval_tasks=str(tasks.heldout), seed=settings.seed, progress=settings.progress,
        concurrency=settings.concurrency, pool={"contexts_per_browser": max(1, settings.concurrency)},
        horizons={"miniwob": preset.horizon}, learning_rate=settings.learning_rate,
        per_device_batch_size=preset.batch_size, observation={"modes": list(MINIWOB_MODES)},
        policy={"model": "tiny-qwen3vl", "max_new_tokens": preset.max_new_tokens,
                "max_tokens": preset.max_new_tokens, "temperature": 1.0, "variant": "compact"})
    return load_recipe(RECIPE, **{**values, **changes})


def _bootstrap_settings(settings: DemoSettings, tasks: _Tasks, out: Path) -> tuple[Any, Any]:
    """Round 0 around a tiny Qwen3-VL built here: the scripted element-random policy plays every
    training task once and the model imitates every reply (success threshold 0); returns (the loop's
    settings, the tiny model's)."""
    from webgym_rl.tiny import TinyModelSettings, build_tiny_model  # lazy: torch

    preset = settings.preset
    tiny = TinyModelSettings(family="qwen3_vl", seed=settings.seed, hidden_size=preset.hidden_size,
                             num_layers=2)
    model_dir = build_tiny_model(out / "models" / "tiny-qwen3vl", settings=tiny)
    loop_settings = _loop_settings(
        settings, tasks, model=str(model_dir), out=str(out / "loop" / "bootstrap"), iterations=1,
        bootstrap_policy="random", objective="filtered_bc", success_threshold=0.0, sampler={"kind": "all"},
        max_steps=preset.bootstrap_steps)
    return loop_settings, tiny


def _own_settings(settings: DemoSettings, tasks: _Tasks, out: Path, checkpoint: str) -> Any:
    """Round 1 from the bootstrap's checkpoint: the policy plays `tasks_per_round` training tasks
    `attempts` times at temperature 1 and filtered_bc imitates its successes."""
    preset = settings.preset
    return _loop_settings(
        settings, tasks, model=checkpoint, out=str(out / "loop" / "own"), iterations=1,
        bootstrap_policy="model", objective="filtered_bc", attempts=preset.attempts,
        sampler={"kind": "epoch", "batch_size": preset.tasks_per_round}, max_steps=preset.max_steps)


def _event_printer(stages: _Stages, task_counts: dict[str, int], own: bool) -> Any:
    """A loop's events as the demo's stage lines and notes: round 0 (`own` False) is stage 5, round 1
    stages 6-8."""
    # lazy: torch, playwright and datasets load when a stage needs them
    from webgym_rl.loop.events import PhaseDone, PhaseStarted, PolicyServing, ServiceStarted

    heldout = task_counts["miniwob_heldout"]

    def on_event(event: Any) -> None:
        if isinstance(event, ServiceStarted):
            what = f" serving {event.checkpoint}" if event.checkpoint else ""
            stages.note(f"{event.service} server {event.url}{what} ({event.seconds:.1f} s to start)")
        elif isinstance(event, PhaseStarted) and event.phase == "rollout" and not own:
            stages.stage(5, f"Round 0 (bootstrap): the scripted element-random policy plays the "
                            f"{task_counts['miniwob_train']} MiniWoB++ training tasks; the tiny model "
                            "imitates every reply")
        elif isinstance(event, PhaseStarted) and event.phase == "rollout":
            stages.stage(6, "Round 1: the bootstrapped policy plays training tasks at temperature 1")
        elif isinstance(event, PhaseStarted) and event.phase == "train" and own:
            stages.stage(7, "Training with filtered_bc on the successes of its own rollouts")
        elif isinstance(event, PhaseStarted) and event.phase == "train":
            stages.note("training: imitation of every reply of the scripted policy")
        elif isinstance(event, PolicyServing) and event.version > 0:
            stages.note(f"the policy server serves v{event.version} ({event.path}, {event.seconds:.2f} s)")
        elif isinstance(event, PhaseStarted) and event.phase == "eval" and own:
            stages.stage(8, f"Evaluating the round-1 policy on the {heldout} held-out episodes "
                            "(temperature 0)")
        elif isinstance(event, PhaseStarted) and event.phase == "eval":
            stages.note(f"evaluating the bootstrap on the {heldout} held-out episodes (temperature 0)")
        elif isinstance(event, PhaseDone) and event.phase in ("rollout", "train", "eval"):
            stages.note(f"{event.record.summary()}")

    return on_event


def _baselines(settings: DemoSettings, loop_settings: Any, services: Any, tasks: _Tasks, baselines: Path,
               stages: _Stages) -> dict[str, dict[str, Any]]:
    """Stage 3: both baselines (pixel-random, DOM-aware random) on the held-out seeds."""
    # lazy: torch, playwright and datasets load when a stage needs them
    from webgym_rl.loop.phases import run_settings
    from webgym_rollout.agent.policies import PolicySettings, RandomPolicySettings
    from webgym_rollout.settings import ObservationSettings

    stages.stage(3, f"Baselines on the {tasks.counts['miniwob_heldout']} held-out episodes: pixel-random "
                    "and DOM-aware random (on the plain screenshot)")
    measured: dict[str, dict[str, Any]] = {}
    for key, kind in (("pixel_random", "pixel_random"), ("dom_random", "random")):
        policy = PolicySettings(kind=kind, agent=loop_settings.policy.agent,
                                random=RandomPolicySettings(seed=settings.seed))
        run = run_settings(loop_settings, services, tasks=tasks.heldout, split="test", index=0,
                           out=baselines / key.replace("_", "-"), horizon_table="test")
        screenshot = dataclasses.replace(run.env, observation=ObservationSettings())
        measured[key] = _heldout_rollout(dataclasses.replace(run, policy=policy, env=screenshot))
        stages.note(f"{key.replace('_', '-')}: {measured[key]['successes']}/{measured[key]['episodes']} "
                    "successes")
    return measured


def _site_stage(settings: DemoSettings, loop_settings: Any, services: Any, tasks: _Tasks, out: Path,
                stages: _Stages) -> dict[str, Any]:
    """Stage 4: the local sites' tasks with DOM-aware random and the scripted expert, judged by the
    truth; the expert's episodes recorded, then replayed."""
    stages.stage(4, f"Site tasks: the DOM-aware random policy and the scripted expert on "
                    f"{len(tasks.sites)} tasks of the local sites, judged against their ground truth; "
                    "the expert's episodes recorded, then replayed")
    sites = _site_rollouts(loop_settings, services, tasks.site_file, out, loop_settings.policy.agent,
                           settings.seed)
    for key in ("random", "expert"):
        stages.note(f"{key}: {sites[key]['successes']}/{sites[key]['episodes']} successes")
    replay = sites["replay"]
    stages.note(f"replay of the expert's recording: {replay['matched']}/{replay['episodes']} episodes "
                "with the same screenshots and verdict")
    return sites


def _round_figures(result: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(rollout, train, eval) of a loop's one round, as dicts; train names the checkpoint."""
    record = result.rounds[0]
    rollout, train, evaluation = (r.model_dump() for r in (record.rollout, record.train, record.eval))
    train["checkpoint"] = result.checkpoint
    return rollout, train, evaluation


def _training(train: dict[str, Any]) -> dict[str, Any]:
    if train.get("skipped"):
        return {"skipped": train["skipped"]}
    counts = train.get("counts") or {}
    return {"steps": train["steps"], "first_loss": train["first_loss"], "last_loss": train["last_loss"],
            "trajectories_kept": counts.get("trajectories_kept"), "steps_kept": counts.get("steps_kept"),
            "objective": counts.get("objective")}


def _summary(settings: DemoSettings, tasks: _Tasks, tiny: Any, measured: dict[str, dict[str, Any]],
             sites: dict[str, Any], boot: Any, own: Any) -> dict[str, Any]:
    """What was measured: tasks, held-out seeds, model, every rollout's figures, both rounds' training
    and the paired tests. `boot` and `own` are the two loops' results (round 0, round 1)."""
    preset = settings.preset
    scripted, boot_train, boot_eval = _round_figures(boot)
    own_rollout, own_train, own_eval = _round_figures(own)
    summary: dict[str, Any] = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()},
        "tasks": tasks.counts,
        "heldout": {"tasks": list(preset.miniwob_tasks), "modes": list(MINIWOB_MODES),
                    "seeds": [HELDOUT_SEED_BASE + s for s in range(preset.heldout_seeds)]},
        "model": asdict(tiny),
        "rollouts": {key: _figures(run, _internal_errors(run["out"])) for key, run in (
            ("pixel_random", measured["pixel_random"]), ("dom_random", measured["dom_random"]),
            ("bootstrap_eval", boot_eval), ("trained", own_eval), ("bootstrap", scripted),
            ("own_rollouts", own_rollout), ("site_random", sites["random"]),
            ("site_expert", sites["expert"]))},
        "sites": {"tasks": len(tasks.sites), "replay": sites["replay"], "levels": sites["levels"],
                  "names": sorted({t.environment.partition(":")[2] for t in tasks.sites})},
        "bootstrap_training": _training(boot_train),
        "training": _training(own_train),
        "rounds": [
            {"round": 0, "policy": "scripted element-random, imitated (success threshold 0)",
             "rollout": "bootstrap", "eval": "bootstrap_eval", "checkpoint": boot_train["checkpoint"]},
            {"round": 1, "policy": f"its own rollouts ({preset.tasks_per_round} tasks x {preset.attempts} "
                                   "attempts, temperature 1), filtered_bc on the successes",
             "rollout": "own_rollouts", "eval": "trained", "checkpoint": own_train["checkpoint"]}],
        "paired": {"trained_vs_bootstrap": _paired(boot_eval["out"], own_eval["out"]),
                   "trained_vs_dom_random": _paired(measured["dom_random"]["out"], own_eval["out"]),
                   "bootstrap_vs_dom_random": _paired(measured["dom_random"]["out"], boot_eval["out"])},
    }
    summary["improved"] = summary["rollouts"]["trained"]["successes"] > \
        summary["rollouts"]["bootstrap_eval"]["successes"]
    summary["internal_errors"] = sum(run["internal_errors"] for run in summary["rollouts"].values())
    if summary["internal_errors"]:
        log.warning("%s", _bug_note(summary))
    return summary


def _heldout_title(summary: dict[str, Any]) -> str:
    """What the held-out comparison is, for its page and chart."""
    kinds = " + ".join(summary["heldout"]["tasks"])
    return (f"Held-out evaluation: {summary['rollouts']['trained']['episodes']} {kinds} tasks, "
            f"{len(_COLUMNS)} policies side by side")


def _heldout_chart(summary: dict[str, Any], path: Path, colours: dict[str, str]) -> Path:
    """The four policies' held-out success side by side (successes of the evaluated episodes, Wilson 95 %
    intervals), each in its colour of the comparison report (`colours`): different policies on the same
    seeds, not versions of one, so bars, not a curve."""
    from webgym_rollout.report.charts import write_rate_bars  # lazy: matplotlib
    from webgym_rollout.report.rates import SuccessRate  # lazy: import time

    runs = summary["rollouts"]
    rates = [(label, SuccessRate.of(runs[key]["successes"], runs[key]["episodes"] - runs[key]["errors"]))
             for key, label in _COLUMNS]
    return write_rate_bars(rates, path, title=_heldout_title(summary), colours=colours,
                           x_label=f"policy (the same held-out seeds from {HELDOUT_SEED_BASE}; "
                                   "the tiny model at temperature 0)")


def _viewer_titles(summary: dict[str, Any]) -> dict[str, str]:
    """The title of each trajectory page: what its episodes are."""
    runs, sites = summary["rollouts"], summary["sites"]
    where = f"{sites['tasks']} tasks of the local sites ({', '.join(sites['names'])})"
    return {
        "bootstrap": f"Round 0 (bootstrap): the scripted element-random policy on "
                     f"{runs['bootstrap']['episodes']} training episodes (imitated by the tiny model)",
        "own_rollouts": f"Round 1: the bootstrapped policy's own {runs['own_rollouts']['episodes']} training "
                        "episodes at temperature 1 (its successes trained on)",
        "trained": f"Round 1 policy: {runs['trained']['episodes']} held-out episodes at temperature 0",
        "site_expert": f"Site tasks: the scripted expert on {where}, judged by the sites' truth",
        "site_random": f"Site tasks: the DOM-aware random policy on {where}, judged by the sites' truth"}


def _reports(summary: dict[str, Any], tasks: _Tasks, measured: dict[str, dict[str, Any]],
             sites: dict[str, Any], boot: Any, own: Any, out: Path) -> dict[str, Path]:
    """Write the HTML reports and the held-out comparison chart; returns every output folder and file by
    name."""
    # lazy: torch, playwright and datasets load when a stage needs them
    from webgym_rollout.report.charts import run_colours
    from webgym_rollout.report.html import build_report, write_report
    from webgym_rollout.report.viewer import render_report

    scripted, boot_train, boot_eval = _round_figures(boot)
    own_rollout, own_train, own_eval = _round_figures(own)
    report_dir = out / "report"
    folders = {"pixel_random": measured["pixel_random"]["out"], "dom_random": measured["dom_random"]["out"],
               "bootstrap_eval": boot_eval["out"], "trained": own_eval["out"]}
    labels = [label for _, label in _COLUMNS]
    comparison = build_report([folders[key] for key, _ in _COLUMNS], labels=labels)
    colours = run_colours(labels)
    chart = _heldout_chart(summary, report_dir / "heldout.png", colours)
    titles = _viewer_titles(summary)
    return {
        "task dataset": tasks.folder, "held-out tasks": tasks.heldout,
        "trajectories (bootstrap)": Path(scripted["out"]),
        "checkpoint (bootstrap)": Path(boot_train["checkpoint"]),
        "trajectories (bootstrap, held-out)": Path(boot_eval["out"]),
        "trajectories (own rollouts)": Path(own_rollout["out"]),
        "checkpoint (trained)": Path(own_train["checkpoint"]),
        "trajectories (pixel-random)": Path(measured["pixel_random"]["out"]),
        "trajectories (DOM-aware random)": Path(measured["dom_random"]["out"]),
        "trajectories (trained)": Path(own_eval["out"]),
        "report (held-out comparison)": write_report(comparison, report_dir / "heldout", colours=colours,
                                                     title=_heldout_title(summary)),
        "report (bootstrap)": render_report(scripted["out"], report_dir / "bootstrap.html",
                                            title=titles["bootstrap"]),
        "report (own rollouts)": render_report(own_rollout["out"], report_dir / "own-rollouts.html",
                                               title=titles["own_rollouts"]),
        "report (trained)": render_report(own_eval["out"], report_dir / "trained.html",
                                          title=titles["trained"]),
        "trajectories (site tasks, expert)": Path(sites["expert"]["out"]),
        "trajectories (site tasks, random)": Path(sites["random"]["out"]),
        **{f"report (site tasks, {key})": render_report(sites[key]["out"], report_dir / f"sites-{key}.html",
                                                        title=titles[f"site_{key}"])
           for key in ("expert", "random")},
        "held-out comparison (chart)": chart,
        "loop state (bootstrap)": out / "loop" / "bootstrap" / "loop_state.json",
        "loop state": out / "loop" / "own" / "loop_state.json"}


def _print_summary(stages: _Stages, summary: dict[str, Any], out: Path) -> None:
    """The summary table, the outputs and the notes, on the terminal."""
    stages.console.print(_summary_table(summary))
    stages.console.print("Outputs:")
    for name, path in summary["folders"].items():
        stages.console.print(f"  {name + ':':<30} {path}", soft_wrap=True)
    for note in summary["notes"]:
        stages.console.print(f"- {note}", style="bold red" if note.startswith("WARNING") else None,
                             markup=False)
    stages.console.print(f"Done in {summary['seconds']:.0f} s. Summary: {out / 'summary.json'}")


@click.command("demo", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/demo"),
              show_default=True, help="Output folder (an earlier demo there is replaced).")
@click.option("--size", type=click.Choice(list(_SIZES)), default="small", show_default=True,
              help="small: 120 scripted and 96 own training episodes of two-step MiniWoB kinds, 24 held-out "
                   "episodes per policy, 9 site tasks (about 6 minutes on 2 cores); tiny: tests.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the model, split and policy.")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
              help="Episodes running at once.")
@click.option("--quiet", is_flag=True, help="No stage lines or live progress (the summary is still printed).")
def demo_command(out: Path, size: str, seed: int, concurrency: int, quiet: bool) -> None:
    """Build tasks; bootstrap a tiny policy, train it on its own rollouts, evaluate it (CPU, offline).

    Runs the whole system on this machine: builds a task dataset from the project's sample tasks
    and MiniWoB++ tasks, starts the MiniWoB site server, a Chromium browser server and a CPU policy
    server with a tiny random Qwen3-VL, measures the pixel-random and DOM-aware random policies on
    held-out seeds, then runs two rounds of the online loop on two-step MiniWoB kinds seen as a
    numbered list of elements: round 0 imitates every reply of the scripted element-random policy,
    round 1 trains with filtered_bc on the successes of the policy's own rollouts. Each round's
    weights reach the policy server in memory and are evaluated on the same held-out seeds at
    temperature 0 (Wilson intervals, a paired sign test of round 1 against round 0). Writes HTML
    reports, a chart of the four policies side by side and a summary of what was measured.
    Everything it starts it stops, also on Ctrl-C.

    \b
    Example:
      webgym demo --out out/demo
      webgym demo --out /tmp/demo --size tiny
      python -c "import datasets; print(datasets.load_dataset('out/demo/tasks'))"
    """
    # lazy: the command starts fast (--help)
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
