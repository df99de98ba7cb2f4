"""The synchronous schedule (``--schedule sync``): each round rolls out, then trains, then evaluates.

Round ``r`` (of ``--iterations``), top to bottom, each phase recorded in ``OUT/loop_state.json`` as
soon as it is finished (`webgym_rl.loop.state`)::

    rollout   draw round r's task batch (``--sampler``) and play it with version r (round 0: the
              bootstrap policy) -> OUT/rollouts/round-XXXX
    train     the resident trainer trains on the last K rounds' rollouts (filtered_bc by default)
              and publishes version r + 1 to the endpoint (in memory or as a folder); a full
              checkpoint every --checkpoint-every rounds and after the last
    eval      every --eval-every versions: the evaluation tasks with version r + 1 at
              --eval-temperature -> OUT/evals/v-XXXX (report, learning curve)
    push      with --push-to: version r + 1 and its model card to the Hub

A rerun of the same command resumes at the first unfinished phase: an interrupted rollout goes on
in its folder (nothing redone, nothing lost); the trainer restores its newest full checkpoint and
trains the rounds after it again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from webgym_data.loading import load_tasks
from webgym_rl.loop.events import PhaseSkipped
from webgym_rl.loop.phases import (
    Loop,
    VersionedPolicy,
    bootstrap_policy,
    check_tasks,
    checkpoint_due,
    draw_tasks,
    evaluate,
    evaluation_due,
    history_of,
    play,
    publish,
    push,
    rollout_record,
    run_settings,
    running_trainer,
    supersede,
    train_points,
    train_round,
    write_checkpoint,
)
from webgym_rl.loop.state import BatchRecord, RolloutRecord

__all__ = ["run_sync"]


def run_sync(loop: Loop) -> None:
    """Run (or resume) rounds until ``settings.iterations`` versions are trained."""
    settings, state = loop.settings, loop.state
    supersede(loop)
    if not _left_to_do(loop):
        for r in range(settings.iterations):
            for phase in ("rollout", "train", "eval", "push"):
                if getattr(state.rounds[r], phase) is not None:
                    loop.emit(PhaseSkipped(r, phase))
        return
    with running_trainer(loop):
        for r in range(settings.iterations):
            record = state.round(r)
            last = r == settings.iterations - 1

            # 1. Roll out this round's batch with the version the endpoint serves.
            if record.rollout is None:
                record.rollout = loop.phase(r, "rollout", lambda r=r: _rollout(loop, r))
                played = record.rollout
                record.batch = BatchRecord(folder=played.out, successes_by_version={
                    str(played.version): [played.successes, played.episodes - played.errors]})
                loop.done(r, "rollout", record.rollout)
            else:
                loop.emit(PhaseSkipped(r, "rollout"))

            # 2. Train on the last K rounds' batches; publish version r + 1.
            if record.train is None:
                record.train = loop.phase(r, "train", lambda r=r: train_round(loop, r))
                loop.phase(r, "publish", lambda r=r: publish(loop, r))
                if checkpoint_due(loop, r, last):
                    write_checkpoint(loop, r)
                loop.done(r, "train", record.train)
            else:
                loop.emit(PhaseSkipped(r, "train"))

            # 3. Evaluate version r + 1.
            if evaluation_due(loop, r + 1):
                if record.eval is None:
                    policy = VersionedPolicy(loop, lambda: loop.state.version.version,
                                             temperature=settings.eval_temperature, pinned=r + 1)
                    record.eval = loop.phase(r, "eval", lambda r=r, policy=policy: asyncio.run(
                        evaluate(loop, r + 1, policy, train_points(state))))
                    loop.done(r, "eval", record.eval)
                else:
                    loop.emit(PhaseSkipped(r, "eval"))

            # 4. Push version r + 1 to the Hub.
            if settings.push_to:
                if record.push is None:
                    record.push = loop.phase(r, "push", lambda r=r: push(loop, r))
                    loop.done(r, "push", record.push)
                else:
                    loop.emit(PhaseSkipped(r, "push"))


def _left_to_do(loop: Loop) -> bool:
    settings = loop.settings
    for r in range(settings.iterations):
        record = loop.state.rounds.get(r)
        due = [record and record.rollout, record and record.train,
               record and record.eval if evaluation_due(loop, r + 1) else True,
               record and record.push if settings.push_to else True]
        if not all(due):
            return True
    return False


def _rollout(loop: Loop, r: int) -> RolloutRecord:
    """Round `r`'s rollout: its task batch drawn (by the outcomes of the rounds before it, for the
    success_aware sampler), played by the current version, or round 0 by the bootstrap policy."""
    settings, state = loop.settings, loop.state
    earlier = [(i, state.rounds[i].batch.folder) for i in range(r)
               if i in state.rounds and state.rounds[i].batch is not None]
    tasks = draw_tasks(source=settings.tasks, split=settings.split, sampler=settings.sampler, index=r,
                       target=loop.rollout_dir(r).with_name(f"round-{r:04d}-tasks.jsonl"),
                       history=lambda: history_of((i, Path(f)) for i, f in earlier))
    check_tasks(settings, load_tasks(tasks), f"round {r}'s task batch")
    run = run_settings(settings, loop.services, tasks=tasks, out=loop.rollout_dir(r), split=settings.split,
                       index=r)
    if r == 0 and settings.bootstrap_policy == "random":
        return rollout_record(run, play(run, bootstrap_policy(loop, settings.seed * 1000),
                                        truth=loop.services.site_truth()), "random", 0)
    version = state.version.version
    report = play(run, VersionedPolicy(loop, lambda: version), truth=loop.services.site_truth())
    loop.services.check_policy()  # episodes a dead server failed are kept, as failures with a reason
    return rollout_record(run, report, f"v{version}", version)
