"""webgym_rollout: real Chromium browsers behind an HTTP server, the environment, policies, judges,
the rollout runner and the trajectory contract.

The core API, in the order an episode meets it::

    task (webgym_data.schema.Task) -> WebEnv.reset / step / close (over a BrowserClient session)
        -> Policy.act (RandomPolicy, OpenAIPolicy) -> Step ... -> Episode -> Judge.score
        -> TrajectoryWriter / read_episodes

The runner (`webgym_rollout.runner.run`, ``webgym-rollout run``) schedules many `WebEnv` episodes;
`webgym_rollout.errors` draws the exception tree (root: `RolloutError`); `webgym_rollout.interop`
holds other RL stacks' interfaces over `WebEnv` (a Gymnasium environment: the ``interop`` extra).
"""

from webgym_rollout.agent.policies import OpenAIPolicy, RandomPolicy
from webgym_rollout.browser.client import BrowserClient, BrowserSession
from webgym_rollout.env import StepResult, WebEnv
from webgym_rollout.errors import RolloutError
from webgym_rollout.judge.judges import ProgrammaticJudge, RubricJudge
from webgym_rollout.settings import EnvSettings, ObservationSettings
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Step
from webgym_rollout.trajectory.reader import read_episodes

__version__ = "0.2.0"

__all__ = [
    "BrowserClient",
    "BrowserSession",
    "EnvSettings",
    "Episode",
    "EpisodeStatus",
    "ObservationSettings",
    "OpenAIPolicy",
    "ProgrammaticJudge",
    "RandomPolicy",
    "RolloutError",
    "RubricJudge",
    "Step",
    "StepResult",
    "WebEnv",
    "read_episodes",
]
