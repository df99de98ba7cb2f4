"""Trajectories: the dataset an episode becomes.

`contract` is the trajectory contract (`Episode`, `Step`, `EpisodeStatus`, one dataset row per
episode, the HF `Features` derived from the dataclasses) and its reader (`read_episodes`,
`TrajectorySet`); `writer` writes datasets (atomic parquet shards, a manifest, a card) and pushes
them to the Hub; `recordings` keeps episodes' network traffic beside a dataset for replay. May
import `webgym_data`, `webgym_rollout.errors` and `webgym_rollout.browser.protocol`.

The names of `contract` and `reader` are re-exported here, so imports written for the former module
`webgym_rollout.trajectory` keep working.
"""

from webgym_rollout.trajectory.contract import (
    READABLE_SCHEMA_VERSIONS,
    SUCCESS_REWARD,
    TRAJECTORY_SCHEMA_VERSION,
    Episode,
    EpisodeColumn,
    EpisodeStatus,
    Latency,
    Sampling,
    ShardSchemaError,
    Step,
    StepField,
    TaskOutcome,
    TokenUsage,
    TrajectoryError,
    Untrainable,
    Verdict,
    check_shard,
    expand_messages,
    policy_version_number,
    prompt_token_digest,
    schema_version_of,
    shard_schema_problem,
    succeeded,
    trajectory_features,
    untrainable,
    version_of,
)
from webgym_rollout.trajectory.reader import (
    TrajectorySet,
    TrajectoryStats,
    read_episodes,
    read_manifest,
)

__all__ = [
    "Episode",
    "EpisodeColumn",
    "EpisodeStatus",
    "Latency",
    "READABLE_SCHEMA_VERSIONS",
    "SUCCESS_REWARD",
    "Sampling",
    "ShardSchemaError",
    "Step",
    "StepField",
    "TRAJECTORY_SCHEMA_VERSION",
    "TaskOutcome",
    "TokenUsage",
    "TrajectoryError",
    "TrajectorySet",
    "TrajectoryStats",
    "Untrainable",
    "Verdict",
    "check_shard",
    "expand_messages",
    "policy_version_number",
    "prompt_token_digest",
    "read_episodes",
    "read_manifest",
    "schema_version_of",
    "shard_schema_problem",
    "succeeded",
    "trajectory_features",
    "untrainable",
    "version_of",
]
