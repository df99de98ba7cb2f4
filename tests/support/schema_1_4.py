"""A schema 1.4 trajectory folder, as the toolkit wrote it before schema 1.5.

`features_1_4()` is a frozen copy of the 1.4 row layout: the 1.1 layout (`tests.support.schema_1_1`)
plus what 1.2 to 1.4 added, with ``steps.policy_version`` the endpoint's name for the weights as a
string (``"v3"``, ``"webgym-policy-v3"``, ``""``), which 1.5 stores as an integer.
`write_1_4(out, episodes, versions)` writes `Episode`s in that layout with those names as each step's
``policy_version``, and a manifest with ``schema_version: "1.4"``. Nothing is committed as a binary
fixture: the folder is made in the test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.schema_1_1 import features_1_1
from webgym_rollout.trajectory.contract import Episode


def features_1_4():
    """The `datasets.Features` of a schema 1.4 episode row (frozen; never derived from today's code)."""
    from datasets import Features, List, Value

    features = dict(features_1_1())
    step = dict(features.pop("steps").feature)
    step.update({
        "policy_version": Value("string"),
        "logprobs": List(Value("float32")),
        "token_ids": List(Value("int32")),
        "prompt_token_hash": Value("string"),
        "sampling": {"temperature": Value("float32"), "top_p": Value("float32"), "top_k": Value("int32")},
        "popups": List(Value("string")),
    })
    features.update({
        "seed_difficulty_level": Value("string"),
        "rubric_source": Value("string"),
        "outcome": {"done": Value("bool"), "raw_reward": Value("float32"), "reason": Value("string")},
        "recording": Value("string"),
        "steps": List(step),
    })
    return Features(features)


def write_1_4(out: Path, episodes: Sequence[Episode], versions: Sequence[Sequence[str]]) -> Path:
    """A schema 1.4 rollout folder holding `episodes` (one train shard), step j of episode i naming
    its policy version ``versions[i][j]``; returns `out`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    (out / "data").mkdir(parents=True, exist_ok=True)
    features = features_1_4()
    step_fields = set(features["steps"].feature)
    encoded = []
    for episode, names in zip(episodes, versions, strict=True):
        row = episode.to_row()
        row["steps"] = [{**{k: v for k, v in step.items() if k in step_fields}, "policy_version": name}
                        for step, name in zip(row["steps"], names, strict=True)]
        encoded.append(features.encode_example({name: row[name] for name in features}))
    shard = "data/train-00000.parquet"
    pq.write_table(pa.Table.from_pylist(encoded, schema=features.arrow_schema), out / shard)
    now = time.time()
    manifest = {"format": "webgym-trajectories", "schema_version": "1.4", "created_at": now,
                "updated_at": now, "run": {},
                "shards": [{"path": shard, "split": "train", "num_rows": len(episodes),
                            "episodes": [[e.task.task_id, e.attempt, e.episode_id] for e in episodes]}]}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out
