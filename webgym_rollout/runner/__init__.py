"""The rollout runner: a scheduler of `WebEnv` episodes. It plays tasks with a policy against
browser servers, judges the episodes and writes the trajectory dataset.

``webgym-rollout run`` reads tasks, plays ``attempts`` episodes of each (one `WebEnv` per episode
slot), judges each ended episode and writes it (`webgym_rollout.trajectory.writer`). Two schedulers:

- asynchronous (the default): `concurrency` episodes run at once, each on its own; when one ends
  the next task starts at once. There is no barrier between steps or episodes, so a slow policy
  reply or a slow page holds back only its own episode. Episodes start longest expected first
  (``--start-order``, `webgym_rollout.runner.order`), so that the run ends on short ones. An
  `EpisodeGate` given to `run` may hold an episode back before it starts (the RL loop's
  asynchronous schedule admits episodes by staleness and shares its slots between several runs).
- ``--lockstep``: the naive baseline kept for comparison. A batch of `batch_size` episodes advances in
  lockstep: every live episode observes, then one batched policy call (all requests of the step
  gathered) decides for all, then all act; the next batch starts only when the whole batch is done.

An episode ends when the environment says so (`StepResult.terminated`: the agent answered, or the
task's own environment ended it) or its step budget runs out (``truncated``: status ``timeout``). A
`BrowserError` that a fresh session can cure (crash, timeout, lost session, unreachable server)
restarts the episode on a new session up to `RolloutSettings.session_retries` times; then the
episode is recorded with status ``error:<kind>``. Agent mistakes (unparseable replies, clicks on
nothing) are data on the step. Judging runs after the browser session is closed, concurrently with
the next episodes.

Resume: episodes are written in atomic shards listed in a manifest; with ``--resume`` the
(task_id, attempt) pairs already in the manifest are skipped, so an interrupted run finishes with
every episode exactly once.

Errors raised to the caller::

    webgym_core.SettingsError / ValueError   settings that contradict each other (names the field)
    webgym_data.schema.TaskValidationError   a task file/row is unreadable (names file, row, field)
    webgym_rollout.errors.RolloutError
     ├── BrowserError
     │    └── Unauthorized                   wrong or missing browser-server token: stops the run
     └── TrajectoryError                     (webgym_rollout.trajectory: contract, writer)
          └── DatasetExists                  --out holds a run and --resume was not given

Every other failure stays inside its episode and becomes its `EpisodeStatus`: ``error:<kind>`` for
a `BrowserError` after the retries, a `PolicyError` or a `JudgeError`; ``blocked`` for
`SiteBlocked`; ``error:internal`` for a bug (any other exception, while playing or judging). A bug
is never passed off as infrastructure: its traceback is logged when it happens, the live progress
shows a row for it, and the run ends with a WARNING that counts the ``error:internal`` episodes,
says they are a bug to report and names the first one's exception and where it was raised
(`RunReport.internal_errors`, `RunReport.first_internal_error`).

The package's modules, one concept each: `settings` (`RolloutSettings`, `RunSettings`), `episode`
(one episode as the schedules play it, the run's counters), `schedules` (asynchronous and
lockstep), `order` (the order the asynchronous schedule starts episodes in), `finisher` (judging,
the sites' ground truth, writing), `progress` (the live display), `report` (`RunReport`), `rollout`
(`run`) and `cli` (``webgym-rollout run``).
"""

from __future__ import annotations

from webgym_rollout.runner.cli import run_command
from webgym_rollout.runner.episode import episode_id
from webgym_rollout.runner.report import RunReport
from webgym_rollout.runner.rollout import run
from webgym_rollout.runner.schedules import EpisodeGate
from webgym_rollout.runner.settings import RolloutSettings, RunSettings

__all__ = ["EpisodeGate", "RolloutSettings", "RunReport", "RunSettings", "episode_id", "run", "run_command"]
