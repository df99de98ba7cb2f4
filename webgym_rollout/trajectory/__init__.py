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
    TRAJECTORY_SCHEMA_VERSION,
    Episode,
    EpisodeStatus,
    Latency,
    ShardSchemaError,
    Step,
    TaskOutcome,
    TokenUsage,
    TrajectoryError,
    Verdict,
    check_shard,
    expand_messages,
    shard_schema_problem,
    trajectory_features,
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
    "EpisodeStatus",
    "Latency",
    "READABLE_SCHEMA_VERSIONS",
    "ShardSchemaError",
    "Step",
    "TRAJECTORY_SCHEMA_VERSION",
    "TaskOutcome",
    "TokenUsage",
    "TrajectoryError",
    "TrajectorySet",
    "TrajectoryStats",
    "Verdict",
    "check_shard",
    "expand_messages",
    "read_episodes",
    "read_manifest",
    "shard_schema_problem",
    "trajectory_features",
    "version_of",
]
