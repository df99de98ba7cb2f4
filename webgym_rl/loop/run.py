"""`run_loop`: run (or resume) the online loop under the schedule the settings name.

    settings -> load_state (OUT/loop_state.json) -> check the recipe against the task set
             -> LoopServices (browsers, sites, policy endpoint) -> run_sync | run_async -> LoopResult

Both schedules run the same recipe through the same phases (`webgym_rl.loop.phases`); rerunning
the same command resumes where the last run stopped.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from webgym_data.loading import load_tasks
from webgym_data.sampler import TaskSampler
from webgym_rl.errors import LoopSettingsError
from webgym_rl.loop.asynchronous import run_async
from webgym_rl.loop.events import OnEvent
from webgym_rl.loop.phases import Loop, check_tasks
from webgym_rl.loop.services import LoopServices
from webgym_rl.loop.settings import LoopSettings
from webgym_rl.loop.state import LoopState, RoundRecord, load_state, save_state
from webgym_rl.loop.sync import run_sync

__all__ = ["LoopResult", "check_recipe", "run_loop"]


@dataclass
class LoopResult:
    """What the loop folder holds when `run_loop` returns."""

    out: Path
    checkpoint: str
    """The newest version's checkpoint folder (the starting model if no round trained)."""
    state: LoopState

    @property
    def rounds(self) -> list[RoundRecord]:
        """The record of each round, in order."""
        return [self.state.rounds[r] for r in sorted(self.state.rounds)]


def check_recipe(settings: LoopSettings) -> None:
    """Refuse, before anything starts, what cannot work: missing task sources, and a judge that
    cannot score the tasks the samplers may draw (`webgym_rl.loop.phases.check_tasks`)."""
    if not Path(settings.tasks).exists():
        raise LoopSettingsError(f"--tasks {settings.tasks}: no such file or folder")
    if settings.eval_tasks and not Path(settings.eval_tasks).exists():
        raise LoopSettingsError(f"--eval-tasks {settings.eval_tasks}: no such file or folder")
    train = TaskSampler(load_tasks(settings.tasks, split=settings.split), settings.sampler).tasks
    if not train:
        raise LoopSettingsError(f"--tasks {settings.tasks}: no '{settings.split}' task passes the sampler's "
                                "filters")
    check_tasks(settings, train, f"--tasks {settings.tasks} (split {settings.split})")
    if settings.eval_every:
        source = settings.eval_tasks or settings.tasks
        evaluated = TaskSampler(load_tasks(source, split=settings.eval_split), settings.eval_sampler).tasks
        check_tasks(settings, evaluated, f"the evaluation tasks {source} (split {settings.eval_split})")


def site_judge_problem(settings: LoopSettings) -> str:
    """Why ``--judge site`` has no truth to read with these settings ("" when it has): it reads the
    site server the loop runs itself, so not one at ``--sites-url`` (a fleet's are its own). The
    run refuses it, the dry run warns of it."""
    if settings.judge.kind != "site" or not settings.env.sites_url or settings.fleet.enabled:
        return ""
    return (f"site checks each episode against the ground truth of the site server the loop runs itself; "
            f"with --sites-url {settings.env.sites_url} it has none to read. Leave out --sites-url, or "
            "judge with --judge rubric")


def run_loop(settings: LoopSettings, *, services: LoopServices | None = None,
             on_event: OnEvent | None = None) -> LoopResult:
    """Run (or resume) the loop until ``settings.iterations`` versions are trained.

    `services`: endpoints to use (the caller starts and stops them); by default the loop makes its
    own and stops them before returning. `on_event(event)` is told what happens
    (`webgym_rl.loop.events`).
    """
    check_recipe(settings)
    problem = site_judge_problem(settings)  # the dry run warns of it; the run would stop at its first rollout
    if problem:
        raise LoopSettingsError(f"judge.kind (--judge): {problem}")
    emit = on_event or (lambda event: None)
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    state = load_state(settings)
    save_state(settings, state)
    with contextlib.ExitStack() as stack:
        if services is None:
            services = stack.enter_context(LoopServices(settings, on_event=emit))
        loop = Loop(settings, services, state, emit)
        (run_sync if settings.schedule == "sync" else run_async)(loop)
    checkpoint = state.version.checkpoint or settings.model
    return LoopResult(out=settings.out_dir, checkpoint=checkpoint, state=state)
