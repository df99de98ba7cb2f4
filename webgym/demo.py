"""``webgym demo``: the whole system on one CPU machine, offline, in a few minutes.

Stages (each announced on the terminal as it starts)::

    1 build      the project's sample web tasks (webgym/sample_tasks.jsonl) + MiniWoB++ tasks as task
                 rows, through the real `webgym_data.build` path (offline: template subtask
                 instructions, rule taxonomy)                                   -> OUT/tasks
    2 servers    MiniWoB site server, browser server (Chromium), CPU policy server with a tiny random
                 Qwen2-VL (`webgym_rl.tiny.build_tiny_model`)                   -> OUT/models/tiny-qwen2vl
    3 rollout    the MiniWoB train tasks with the `random` bootstrap policy
    4 dataset    the trajectory dataset of that rollout            -> OUT/loop/iter-0000/trajectories
    5 train      filtered_bc on the successful episodes            -> OUT/loop/iter-0000/checkpoint
    6 reload     POST /reload: the policy server swaps in the new checkpoint
    7 rollout    the same tasks again with the trained policy      -> OUT/loop/iter-0000/eval
    8 report     HTML reports of both rollouts and a summary table -> OUT/report, OUT/summary.json

Stages 3-7 are one iteration of the online loop (`webgym_rl.loop.run_loop` with an evaluation on
the rolled-out tasks), so the demo runs the same code as ``webgym-rl loop``. The summary reports
only what was measured in this run. Everything the demo starts it stops, also on Ctrl-C.

Exceptions::

    DemoError (RuntimeError)   the output folder is not the demo's, or a stage failed (names it)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import click

__all__ = ["SAMPLE_TASKS", "DemoError", "DemoResult", "DemoSettings", "demo_command", "run_demo"]

log = logging.getLogger(__name__)

SAMPLE_TASKS = Path(__file__).resolve().parent / "sample_tasks.jsonl"
"""The project's own sample of web tasks with rubrics (published task-row format)."""
_MARKER = ".webgym-demo"
_OWN_ENTRIES = ("inputs", "tasks", "models", "loop", "report", "summary.json", _MARKER)


class DemoError(RuntimeError):
    """The demo cannot run as asked, or one of its stages failed (the message names it)."""


@dataclass(frozen=True)
class _Size:
    miniwob_tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    horizon: int
    max_new_tokens: int
    epochs: float
    test_size: int


# MiniWoB++ tasks a random clicker solves now and then, so the bootstrap rollout has successes.
_SIZES: dict[str, _Size] = {
    "small": _Size(miniwob_tasks=("click-test", "click-test-2", "click-button", "click-link", "focus-text",
                                  "click-dialog"),
                   seeds=(0, 1, 2, 3), horizon=5, max_new_tokens=32, epochs=3.0, test_size=4),
    "tiny": _Size(miniwob_tasks=("click-test", "click-test-2"), seeds=(0, 1), horizon=3, max_new_tokens=8,
                  epochs=1.0, test_size=2),
}


@dataclass
class DemoSettings:
    """Settings of ``webgym demo``."""

    out: Path = Path("out/demo")
    """Output folder (replaced if it holds an earlier demo; any other non-empty folder is refused)."""
    size: Literal["small", "tiny"] = "small"
    """small: 24 MiniWoB episodes per rollout (a few minutes on 2 cores); tiny: 4 (tests)."""
    seed: int = 0
    """Seed of the tiny model, the split, the random policy and the training order."""
    concurrency: int = 4
    """Episodes running at once."""
    learning_rate: float = 5e-4
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

    TOTAL = 8

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


def _summary_table(summary: dict[str, Any]):
    from rich.table import Table

    random_run, trained_run = summary["rollouts"]["random"], summary["rollouts"]["trained"]
    table = Table(title="webgym demo: what this run measured", show_lines=False)
    table.add_column("")
    table.add_column("random bootstrap policy", justify="right")
    table.add_column("trained tiny policy", justify="right")
    table.add_row("episodes", str(random_run["episodes"]), str(trained_run["episodes"]))
    table.add_row("success rate (reward 1)", _rate(random_run, "successes", "episodes"),
                  _rate(trained_run, "successes", "episodes"))
    table.add_row("valid-action rate (reply parsed)", _rate(random_run, "valid_actions", "steps"),
                  _rate(trained_run, "valid_actions", "steps"))
    table.add_row("steps/s", f"{random_run['steps_per_s']:.2f}", f"{trained_run['steps_per_s']:.2f}")
    tasks = summary["tasks"]
    table.add_section()
    table.add_row("tasks built", f"{tasks['train'] + tasks['test']} ({tasks['train']} train, "
                                 f"{tasks['test']} test)", "")
    table.add_row("  web / subtasks / MiniWoB", f"{tasks['sample_web']} / {tasks['subtasks']} / "
                                                f"{tasks['miniwob']}", "")
    train = summary["training"]
    if train.get("skipped"):
        table.add_row("training", "skipped", train["skipped"][:60])
    else:
        table.add_row("training (filtered_bc)", f"{train['steps']} steps, {train['steps_kept']} samples",
                      f"loss {train['first_loss']:.3f} -> {train['last_loss']:.3f}")
    return table


def _notes(summary: dict[str, Any]) -> list[str]:
    """Plain statements of what the numbers mean; every figure is one measured in this run."""
    random_run, trained_run = summary["rollouts"]["random"], summary["rollouts"]["trained"]
    train = summary["training"]
    notes = [f"Both rollouts played the same {trained_run['episodes']} MiniWoB++ episodes (same tasks and "
             "seeds), judged by the pages' own success signal."]
    if train.get("skipped"):
        notes.append(f"Training was skipped ({train['skipped']}); the second rollout used the untrained "
                     "model.")
    else:
        notes.append(
            f"The trained policy is a tiny randomly initialised Qwen2-VL (2 layers) trained for "
            f"{train['steps']} steps on {train['steps_kept']} steps of {train['trajectories_kept']} "
            f"successful random-policy episodes; its replies parsed into a valid action in "
            f"{100 * trained_run['valid_action_rate']:.1f}% of {trained_run['steps']} steps and it solved "
            f"{trained_run['successes']}/{trained_run['episodes']} episodes.")
    notes.append(f"The random policy writes well-formed replies by construction (valid-action rate "
                 f"{100 * random_run['valid_action_rate']:.1f}%); it solved {random_run['successes']}/"
                 f"{random_run['episodes']} episodes.")
    notes.append("This shows the pipeline end to end on CPU; a policy that learns needs a real "
                 "Qwen-VL checkpoint on GPUs (see README, 'Scaling up').")
    return notes


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
    stages.stage(1, f"Building the task dataset: {SAMPLE_TASKS.name} + {len(preset.miniwob_tasks)} MiniWoB++ "
                    f"tasks x {len(preset.seeds)} seeds")
    from webgym_data.build import BuildSettings, build
    from webgym_data.importers import miniwob
    from webgym_data.split import SplitSettings

    spec = miniwob.write_miniwob_spec(out / "inputs" / "miniwob_tasks.jsonl", preset.miniwob_tasks,
                                      preset.seeds)
    tasks_dir = out / "tasks"
    report = build(BuildSettings(
        out=tasks_dir, importers=(("generic", str(SAMPLE_TASKS)), ("miniwob", str(spec))),
        split=SplitSettings(test_size=preset.test_size, seed=settings.seed), progress=settings.progress))
    from webgym_rollout.tasks import task_kind

    every = [*report.train, *report.test]
    task_counts = {"train": len(report.train), "test": len(report.test),
                   "sample_web": sum(1 for t in every if task_kind(t).name == "web" and not t.parent_task_id),
                   "subtasks": sum(1 for t in every if t.parent_task_id),
                   "miniwob": sum(1 for t in every if task_kind(t).name == "miniwob"),
                   "miniwob_train": sum(1 for t in report.train if task_kind(t).name == "miniwob")}
    stages.note(f"{task_counts['train']} train + {task_counts['test']} test tasks -> {tasks_dir}")
    if not task_counts["miniwob_train"]:
        raise DemoError(f"the build put no MiniWoB task in the train split of {tasks_dir}; "
                        "nothing to roll out")

    # 2. Servers: sites and browsers, and the policy server with a tiny random model.
    stages.stage(2, "Starting the MiniWoB site server, the browser server and the CPU policy server")
    from webgym_core.endpoint import Endpoint
    from webgym_rl.loop import LoopServices, LoopSettings, PolicyEndpointSettings, run_loop
    from webgym_rl.samples import Objective
    from webgym_rl.tiny import build_tiny_model
    from webgym_rl.train import TrainingSettings
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.env import EnvSettings
    from webgym_rollout.runner import RolloutSettings

    model_dir = build_tiny_model(out / "models" / "tiny-qwen2vl", seed=settings.seed)
    loop_settings = LoopSettings(
        tasks=str(tasks_dir), model=str(model_dir), out=str(out / "loop"), iterations=1, split="train",
        only_environment="miniwob", bootstrap_policy="random", eval_every=1, eval_split="train",
        seed=settings.seed, progress=settings.progress,
        rollout=RolloutSettings(concurrency=settings.concurrency),
        env=EnvSettings(viewport="320x240", miniwob_horizon=preset.horizon),
        pool=PoolSettings(browsers=1, contexts_per_browser=max(1, settings.concurrency)),
        policy=PolicyEndpointSettings(endpoint=Endpoint(model="tiny-qwen2vl"),
                                      max_new_tokens=preset.max_new_tokens),
        training=TrainingSettings(objective=Objective.FILTERED_BC, learning_rate=settings.learning_rate,
                                  epochs=preset.epochs, per_device_batch_size=2, log_with="none"))

    def on_event(kind: str, detail: dict[str, Any]) -> None:
        phase = detail.get("phase")
        if kind == "sites_started":
            stages.note(f"site server {detail['url']}")
        elif kind == "browser_started":
            stages.note(f"browser server {detail['url']} (Chromium, {detail['seconds']:.1f} s to start)")
        elif kind == "policy_started":
            stages.note(f"policy server {detail['url']} serving {detail['checkpoint']}")
        elif kind == "policy_reloaded":
            stages.note(f"reloaded {detail['checkpoint']} in {detail['seconds']:.2f} s")
            stages.stage(7, "Rolling out the same tasks again with the trained policy")
        elif kind == "phase_started" and phase == "rollout":
            stages.stage(3, f"Rolling out {task_counts['miniwob_train']} MiniWoB++ tasks with the random "
                            "bootstrap policy")
        elif kind == "phase_done" and phase == "rollout":
            result = detail["result"]
            stages.stage(4, f"Trajectory dataset written: {result['episodes']} episodes, "
                            f"{result['successes']} successes -> {result['out']}")
        elif kind == "phase_started" and phase == "train":
            stages.stage(5, "Training the tiny policy with filtered_bc on the successful episodes")
        elif kind == "phase_done" and phase == "train":
            result = detail["result"]
            stages.note(f"skipped: {result['skipped']}" if result.get("skipped") else
                        f"{result['steps']} steps, loss {result['first_loss']:.3f} -> "
                        f"{result['last_loss']:.3f} -> {result['checkpoint']}")
        elif kind == "phase_started" and phase == "eval":
            stages.stage(6, "Reloading the policy server with the new checkpoint")

    with LoopServices(loop_settings, on_event=on_event) as services:
        services.sites_url()
        services.browser_urls()
        services.serve(str(model_dir))
        # 3-7. One loop iteration: rollout (random) -> train -> eval (reload + rollout).
        result = run_loop(loop_settings, services=services, on_event=on_event)
    record = result.iterations[0]
    rollout, train, evaluation = record["rollout"], record["train"], record["eval"]

    # 8. Reports and summary.
    stages.stage(8, "Writing the HTML reports and the summary")
    from webgym_rollout.viewer import render_report

    report_dir = out / "report"
    random_html = render_report(rollout["out"], report_dir / "random.html")
    trained_html = render_report(evaluation["out"], report_dir / "trained.html")
    counts = train.get("counts") or {}
    keys = ("episodes", "successes", "steps", "valid_actions", "errors", "success_rate", "valid_action_rate",
            "steps_per_s")
    summary: dict[str, Any] = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()},
        "tasks": task_counts,
        "rollouts": {"random": {k: rollout[k] for k in keys}, "trained": {k: evaluation[k] for k in keys}},
        "training": ({"skipped": train["skipped"]} if train.get("skipped") else {
            "steps": train["steps"], "first_loss": train["first_loss"], "last_loss": train["last_loss"],
            "trajectories_kept": counts.get("trajectories_kept"), "steps_kept": counts.get("steps_kept"),
            "objective": counts.get("objective")}),
        "folders": {"task dataset": tasks_dir, "trajectories (random)": Path(rollout["out"]),
                    "checkpoint (trained)": Path(train["checkpoint"]),
                    "trajectories (trained)": Path(evaluation["out"]),
                    "report (random)": random_html, "report (trained)": trained_html,
                    "loop state": out / "loop" / "loop_state.json"},
        "seconds": time.perf_counter() - stages.started,
    }
    summary["notes"] = _notes(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    if settings.progress:
        stages.console.print(_summary_table(summary))
        stages.console.print("Outputs:")
        for name, path in summary["folders"].items():
            stages.console.print(f"  {name + ':':<24} {path}", soft_wrap=True)
        for note in summary["notes"]:
            stages.console.print(f"- {note}")
        stages.console.print(f"Done in {summary['seconds']:.0f} s. Summary: {out / 'summary.json'}")
    return DemoResult(out=out, summary=summary)


@click.command("demo", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/demo"),
              show_default=True, help="Output folder (an earlier demo there is replaced).")
@click.option("--size", type=click.Choice(list(_SIZES)), default="small", show_default=True,
              help="small: 24 MiniWoB episodes per rollout (a few minutes on 2 cores); tiny: 4.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the model, split and policy.")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
              help="Episodes running at once.")
@click.option("--quiet", is_flag=True, help="No stage lines or live progress (the summary is still printed).")
def demo_command(out: Path, size: str, seed: int, concurrency: int, quiet: bool) -> None:
    """Build tasks, roll out, train a tiny policy, roll out again, report (CPU only, offline).

    Runs the whole system on this machine: builds a task dataset from the project's sample tasks
    and MiniWoB++ tasks, starts the MiniWoB site server, a Chromium browser server and a CPU policy
    server with a tiny random Qwen2-VL, rolls out with the random bootstrap policy, trains the tiny
    policy with filtered_bc on the successes, reloads it, rolls out again, and writes HTML reports
    and a summary of what was measured. Everything it starts it stops, also on Ctrl-C.

    \b
    Example:
      webgym demo --out out/demo
      webgym demo --out /tmp/demo --size tiny
      python -c "import datasets; print(datasets.load_dataset('out/demo/tasks'))"
    """
    from webgym_data.schema import WebgymDataError
    from webgym_rl.errors import WebgymRLError

    try:
        result = run_demo(DemoSettings(out=out, size=size, seed=seed, concurrency=concurrency,  # type: ignore[arg-type]
                                       progress=not quiet))
    except (DemoError, WebgymRLError, WebgymDataError) as exc:
        raise click.ClickException(str(exc)) from exc
    if quiet:
        summary = result.summary
        for name, run in summary["rollouts"].items():
            click.echo(f"{name}: {run['successes']}/{run['episodes']} successes, valid actions "
                       f"{100 * run['valid_action_rate']:.1f}%, {run['steps_per_s']:.2f} steps/s")
        click.echo(f"summary: {result.out / 'summary.json'}")
