"""The run: load and sample the tasks, open the browser servers (or a fleet's), play every job
not done yet on the chosen schedule, judge and write each episode, and report (`run`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from webgym_core.errors import SettingsError
from webgym_data.loading import load_tasks
from webgym_data.sampler import TaskSampler
from webgym_data.schema import Task
from webgym_rollout.agent.policies import SHORTCUT_MODEL_PREFIX, Policy, make_policy
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.errors import TrajectoryError
from webgym_rollout.fleet import FleetEndpoints
from webgym_rollout.judge.judges import Judge, make_judge
from webgym_rollout.judge.site import SiteJudge
from webgym_rollout.runner.episode import Job, RunContext, RunStats, episode_id
from webgym_rollout.runner.finisher import EpisodeFinisher
from webgym_rollout.runner.order import StartQueue, step_history
from webgym_rollout.runner.progress import watch
from webgym_rollout.runner.report import RunReport
from webgym_rollout.runner.schedules import EpisodeGate, run_async, run_lockstep
from webgym_rollout.runner.settings import RunSettings
from webgym_rollout.tasks.kind import task_kind
from webgym_rollout.trajectory.reader import read_episodes
from webgym_rollout.trajectory.recordings import RecordingStore, ReplayLibrary
from webgym_rollout.trajectory.writer import TrajectoryWriter
from webgym_sites.facts import SessionFacts

__all__ = ["run"]

log = logging.getLogger(__name__)


def _site_truth(settings: RunSettings, truth: Callable[[str], SessionFacts] | None,
                stack: contextlib.ExitStack) -> Callable[[str], SessionFacts] | None:
    """Where the run reads its site sessions' facts: `truth` (in-process), else --truth-url, else none."""
    if truth is not None:
        return truth
    client = settings.truth.client()
    if client is None:
        return None
    stack.callback(client.close)
    return client.facts


def _make_judge(settings: RunSettings, tasks: Sequence[Task],
                truth: Callable[[str], SessionFacts] | None) -> Judge:
    """The judge `settings` name; ``site`` judges by the sites' ground truth, so needs `truth`."""
    if settings.judge.kind != "site":
        return make_judge(settings.judge)
    if truth is None:
        raise SettingsError("judge: --judge site checks each episode against the sites' ground truth: give "
                            "--truth-url and its token (webgym-rollout serve-sites prints both)")
    return SiteJudge(truth, tasks)


@contextlib.asynccontextmanager
async def _browser_client(settings: RunSettings):
    """The client of the run's browser servers: --servers, or the live servers of a --fleet, asked
    again whenever one fails; yields (client, the callback for a failed server or None, the fleet's
    site truth or None)."""
    if not settings.fleet.enabled:
        async with BrowserClient(list(settings.servers), token=settings.browser_token) as client:
            yield client, None, None
        return
    async with FleetEndpoints(settings.fleet) as fleet, \
            BrowserClient(fleet.urls, token=settings.browser_token or fleet.token) as client:
        async def server_failed() -> None:
            await fleet.refresh(client)

        yield client, server_failed, fleet.facts if fleet.sites_urls else None


def _jobs(tasks: Sequence[Task], settings: RunSettings, is_done: Callable[[str, int], bool]
          ) -> tuple[list[Job], int]:
    """The (task, attempt) jobs not done yet, and how many were (resume)."""
    jobs, skipped = [], 0
    for task in tasks:
        for attempt in range(settings.rollout.attempts):
            if is_done(task.task_id, attempt):
                skipped += 1
                continue
            jobs.append(Job(task, attempt, episode_id(task.task_id, attempt, settings.iteration)))
    return jobs, skipped


def _start_queue(jobs: Sequence[Job], settings: RunSettings, resumed: int) -> StartQueue:
    """The order the asynchronous schedule starts `jobs` in; a resumed run's episodes in --out
    (`resumed` of them) tell how long the tasks' episodes were."""
    history = {}
    if resumed and settings.rollout.start_order == "longest":
        try:
            batches = read_episodes(settings.out).batches(  # type: ignore[arg-type]
                columns=["task_id", "num_steps"], batch_size=1024)
            history = step_history(row for batch in batches for row in batch.to_pylist())
        except TrajectoryError as exc:  # only a hint: start by step budget alone
            log.warning("resume: the earlier episodes' lengths could not be read (%s)", exc)
    return StartQueue(jobs, lambda task: task_kind(task).horizon(settings.env, settings.horizon_split),
                      order=settings.rollout.start_order, history=history)


async def run(settings: RunSettings, *, policy: Policy | None = None, judge: Judge | None = None,
              gate: EpisodeGate | None = None,
              truth: Callable[[str], SessionFacts] | None = None) -> RunReport:
    """Roll out every (task, attempt) of `settings` not yet in the output folder; write the episodes.

    `policy` / `judge` override the ones `settings` describes (benchmarks wrap a policy to add
    latency). `gate` admits each episode before it starts (not with ``lockstep``). A policy that
    reads the page's interactive elements says so with ``observes_elements = True`` (the random
    policy does): each step then reads them too. `truth` reads a local site session's facts (an
    in-process `SiteServer.facts`; default: --truth-url): each site-task episode's facts go to the
    run's truth.jsonl, and ``--judge site`` judges by them.
    """
    with contextlib.ExitStack() as stack:
        return await _run(settings, policy, judge, gate, _site_truth(settings, truth, stack))


async def _run(settings: RunSettings, policy: Policy | None, judge: Judge | None, gate: EpisodeGate | None,
               truth: Callable[[str], SessionFacts] | None) -> RunReport:
    loaded, sampler, tasks = _tasks(settings)
    policy = policy if policy is not None else _make_policy(settings, sampler.tasks)
    observes_elements = bool(getattr(policy, "observes_elements", False))
    env_settings = dataclasses.replace(settings.env, elements=observes_elements)
    stats = RunStats()
    replay = (ReplayLibrary.open(settings.traffic.replay, live_fallback=settings.traffic.replay_live_fallback)
              if settings.traffic.replay else None)
    async with _browser_client(settings) as (client, server_failed, fleet_truth):
        truth = truth or fleet_truth
        judge = judge if judge is not None else _make_judge(settings, sampler.tasks, truth)
        run_info = _run_info(settings, policy, judge, tasks, loaded.invalid)
        with TrajectoryWriter(settings.out, resume=settings.resume,  # type: ignore[arg-type]
                              max_shard_episodes=settings.rollout.shard_episodes,
                              run_info=run_info) as writer:
            jobs, skipped = _jobs(tasks, settings, writer.is_done)
            stats.total = len(jobs)
            if skipped:
                log.info("resume: %d episodes are already in %s; %d to go", skipped, settings.out, len(jobs))
            ctx = RunContext(settings, env_settings, client, policy, stats, server_failed, replay=replay,
                             recordings=RecordingStore(settings.out) if settings.traffic.record else None)
            finisher = EpisodeFinisher(settings, judge, writer, stats, getattr(policy, "model_id", ""), truth)
            stats.started = time.monotonic()  # steps/s counts from here, not from loading the tasks
            watcher = asyncio.create_task(watch(stats, settings, client))
            try:
                if settings.rollout.lockstep:
                    await run_lockstep(jobs, ctx, finisher)
                else:
                    await run_async(_start_queue(jobs, settings, skipped), ctx, finisher, gate)
                await finisher.drain()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
                for closeable in (policy, judge):
                    close = getattr(closeable, "close", None)
                    if close is not None:
                        await close()
    if stats.internal_errors:
        log.warning("%d of %d episodes ended with error:internal: this is a bug, please report it (their "
                    "tracebacks are logged above; the first: %s)", stats.internal_errors, stats.done,
                    stats.first_bug)
    return RunReport(out=settings.out, episodes=stats.done, skipped=skipped,  # type: ignore[arg-type]
                     invalid_rows=len(loaded.invalid),
                     steps=stats.steps, successes=stats.successes, errors=dict(stats.errors),
                     elapsed_s=stats.elapsed, session_retries=stats.session_retries,
                     parse_errors=stats.parse_errors, internal_errors=stats.internal_errors,
                     first_internal_error=stats.first_bug)


def _tasks(settings: RunSettings) -> tuple[Any, TaskSampler, list[Task]]:
    """The task source as loaded (with its invalid rows), its sampler, and this run's batch, each
    task checked against the environment settings."""
    loaded = load_tasks(settings.tasks, split=settings.split, skip_invalid=settings.skip_invalid)  # type: ignore[arg-type]
    for error in loaded.invalid:
        log.warning("skipping an invalid task row: %s", error)
    sampler = TaskSampler(loaded, settings.sampler)
    tasks = sampler.batch(settings.iteration)
    log.info("%d of %d tasks this run (%s sampler)", len(tasks), len(sampler.tasks), settings.sampler.kind)
    for task in tasks:
        try:
            task_kind(task).check(settings.env)
        except ValueError as exc:
            raise SettingsError(f"{settings.tasks}: {exc}") from None
    return loaded, sampler, tasks


def _make_policy(settings: RunSettings, tasks: Sequence[Task]) -> Policy:
    """The policy `settings` name; the scripted expert (or one of its shortcuts) plays `tasks`."""
    if settings.policy.kind == "expert":
        # lazy: the scripted expert and the local sites' plans, for --policy expert alone
        from webgym_rollout.agent.expert import EXPERT_MODEL_ID, ExpertPolicy
        from webgym_sites.generate import expert_plan
        from webgym_sites.shortcuts import SHORTCUTS

        name = settings.policy.shortcut  # validated by PolicySettings
        return ExpertPolicy(tasks, agent=settings.policy.agent,
                            plan=SHORTCUTS[name] if name else expert_plan,
                            model_id=SHORTCUT_MODEL_PREFIX + name if name else EXPERT_MODEL_ID)
    return make_policy(settings.policy)


def _run_info(settings: RunSettings, policy: Policy, judge: Judge, tasks: Sequence[Task],
              invalid: Sequence[Any]) -> dict[str, Any]:
    """What the run's manifest records of how it ran."""
    return {"policy": getattr(policy, "model_id", ""), "judge": getattr(judge, "model_id", ""),
            "mode": settings.rollout.scheduler, "start_order": settings.rollout.start_order,
            "tasks": str(settings.tasks), "split": settings.split,
            "attempts": settings.rollout.attempts, "iteration": settings.iteration,
            "seed": settings.policy.random.seed, "tasks_played": len(tasks),
            "invalid_task_rows": [error.to_dict() for error in invalid],
            "record": settings.traffic.record, "replay": settings.traffic.replay or ""}
