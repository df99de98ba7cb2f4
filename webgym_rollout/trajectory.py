"""The trajectory contract: one dataset row per episode, its steps nested in the row.

This module is the public boundary between the rollout side (which writes trajectory shards) and
`webgym_rl` (which reads them). It depends only on `datasets`.

How prompts are stored
----------------------
``steps[i].messages`` is the JSON text of the chat messages exactly as sent to the policy at step
``i`` (OpenAI chat format), with one substitution: each image part is stored as
``{"type": "image", "step": j}`` meaning "the screenshot of step j of this episode" instead of an
inline base64 data URL, so every screenshot is stored once. `expand_messages` puts the images
back. ``steps[i].response`` is the raw text the policy returned, the training target.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = [
    "TRAJECTORY_SCHEMA_VERSION",
    "EPISODE_STATUSES",
    "expand_messages",
    "trajectory_features",
]

TRAJECTORY_SCHEMA_VERSION = "1.1"

# ``ok``: ended by an answer or by the environment; ``timeout``: the horizon was reached without one;
# ``blocked``: the site was refused or on the blocklist; ``error:<kind>`` carries the kind of the
# infrastructure failure (browser, policy or judge), e.g. "error:browser_crashed".
EPISODE_STATUSES = ("ok", "blocked", "timeout", "error:<kind>")


def trajectory_features():
    """The `datasets.Features` of an episode row."""
    from datasets import Features, Image, List, Value

    step = {
        "index": Value("int32"),
        "screenshot": Image(),
        "screenshot_sha256": Value("string"),
        "messages": Value("string"),
        "response": Value("string"),
        "action": Value("string"),
        "action_error": Value("string"),
        "memory": Value("string"),
        "url": Value("string"),
        "title": Value("string"),
        "same_as_next": Value("bool"),
        "finish_reason": Value("string"),
        "usage": {
            "prompt_tokens": Value("int32"),
            "completion_tokens": Value("int32"),
        },
        "latency": {
            "policy_s": Value("float32"),
            "execute_s": Value("float32"),
            "screenshot_s": Value("float32"),
        },
    }
    return Features({
        "episode_id": Value("string"),
        "iteration": Value("int32"),
        "attempt": Value("int32"),
        "split": Value("string"),
        # task fields, as in webgym_data.schema
        "task_id": Value("string"),
        "task_name": Value("string"),
        "website": Value("string"),
        "start_url": Value("string"),
        "benchmark_name": Value("string"),
        "domain": Value("string"),
        "subdomain": Value("string"),
        "difficulty": Value("int32"),
        "difficulty_level": Value("string"),
        "evaluator_reference": List({
            "id": Value("string"),
            "description": Value("string"),
            "facts": List(Value("string")),
        }),
        "definite_answer": Value("string"),
        "parent_task_id": Value("string"),
        "environment": Value("string"),
        "env_seed": Value("int64"),
        # the instruction the agent was given: `task_name`, or the environment's own sentence
        # (MiniWoB's utterance, where `task_name` is only the row's name)
        "instruction": Value("string"),
        # episode outcome
        "policy_model": Value("string"),
        "judge_model": Value("string"),
        "reward": Value("float32"),
        "status": Value("string"),
        "answer": Value("string"),
        "verdicts": List({
            "criterion": Value("string"),
            "passed": Value("bool"),
            "reason": Value("string"),
        }),
        "num_steps": Value("int32"),
        "started_at": Value("float64"),
        "duration_s": Value("float32"),
        "judge_s": Value("float32"),
        "steps": List(step),
    })


def expand_messages(messages_json: str, image_for_step: Callable[[int], Any]) -> list[dict[str, Any]]:
    """Decode ``steps[i].messages`` and replace each ``{"type": "image", "step": j}`` part by
    ``{"type": "image", "image": image_for_step(j)}`` (for example a PIL image)."""
    messages = json.loads(messages_json) if messages_json else []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            message["content"] = [
                {"type": "image", "image": image_for_step(int(part["step"]))}
                if isinstance(part, dict) and part.get("type") == "image" and "step" in part
                else part
                for part in content
            ]
    return messages

