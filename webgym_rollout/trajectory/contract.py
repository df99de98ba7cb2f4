"""The trajectory contract: `Episode`, `Step` and `EpisodeStatus`, one dataset row per episode.

Everything that writes or reads trajectory rows goes through these types: the runner builds an
`Episode` from the `Step`s a `WebEnv` recorded, the writer stores ``episode.to_row()``, and the
trainer, the viewer, the statistics and the demo read ``read_episodes(source)``. The Hugging Face
`Features` of a row (`trajectory_features`) are derived from the dataclasses below, and the task
columns from the task contract (`webgym_data.schema.task_features`), so a column is declared once.

How prompts are stored
----------------------
``Step.messages`` is the JSON text of the chat messages exactly as sent to the policy at that step
(OpenAI chat format), with one substitution: each image part is ``{"type": "image", "step": j}``,
"the screenshot of step j of this episode", instead of an inline base64 data URL, so that every
screenshot is stored once. `expand_messages` puts the images back. ``Step.response`` is the raw
text the policy returned: the training target.

Schema versions
---------------
1.2 adds, per step, the policy version that produced it and the response's token log-probabilities
as the endpoint returned them, and per episode the environment's own outcome (`TaskOutcome`).
Shards are named after the run that wrote them. 1.3 adds, per step, the popups the browser
server closed (`Step.popups`) and, per episode, the task's `seed_difficulty_level` and
`rubric_source`. 1.4 adds, per step, the token ids the policy sampled
(`Step.token_ids`, one per log-probability), a digest of the prompt's token ids as the endpoint
tokenised it (`Step.prompt_token_hash`; `prompt_token_digest` computes it) and the sampling settings
of the request (`Step.sampling`): the trainer trains on exactly those tokens
(`webgym_rl.collate`). 1.5 stores `Step.policy_version` as the integer version
(null: unknown) where 1.2 to 1.4 stored the endpoint's name for it (``"v3"``,
``"webgym-policy-v3"``, ``""``). 1.6 (written now) adds, per step, the text observation the policy
was shown (`Step.observation_text`: the accessibility tree and/or the element list; "" in the
screenshot mode); in the set-of-marks mode the step's screenshot is the marked image, the one the
policy saw. Schema 1.1 to 1.5 datasets are read unchanged: the new fields take
their defaults (no token ids: the trainer re-tokenises the reply text, and says so; no text
observation: ""), and a stored version name becomes its number on reading (`policy_version_number`).

Success and trainability
------------------------
Each rule is written here once and every user calls it: `succeeded(reward)` (an episode succeeded
when its judge passed it: reward >= `SUCCESS_REWARD`; `Episode.success`) and
`untrainable(split, status, reward)` (why an episode is never trained on: a test-split episode, an
infrastructure failure, `EpisodeStatus.is_error`, or a row without a reward; `Episode.trainable`).
Both take plain column values too, so code that reads a few Arrow columns applies the same rules.

Column names
------------
`EpisodeColumn` and `StepField` are the names of a row's columns and of a step's fields, derived
from the dataclasses below (``EpisodeColumn.REWARD == "reward"``): code that reads a few columns at
the Arrow level (the trainer, the statistics) names them through these, never by a literal.

Reading checks before it reads: every shard is a readable parquet file whose columns are those of
its schema version (`shard_schema_problem`): no column missing (a missing ``reward`` would read as
0 everywhere), none unknown, each of its declared type. A row read is checked field by field
(`Episode.from_row`).

Exceptions: `TrajectoryError` (a `RolloutError`) for a source that is not a trajectory dataset, a
shard that is truncated or empty, or a row that does not fit the contract, and its subclass
`ShardSchemaError` for a readable shard whose columns are not its version's; the message names the
source, shard (and column, and schema version) or episode (and field).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import logging
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any

from webgym_core.completion import clean_text
from webgym_data.features import feature_of
from webgym_data.schema import Task, task_features
from webgym_rollout.actions import AgentAction
from webgym_rollout.errors import ShardSchemaError, TrajectoryError

__all__ = [
    "READABLE_SCHEMA_VERSIONS",
    "SUCCESS_REWARD",
    "TRAJECTORY_SCHEMA_VERSION",
    "Episode",
    "EpisodeColumn",
    "EpisodeStatus",
    "Latency",
    "Sampling",
    "Step",
    "StepField",
    "TaskOutcome",
    "TokenUsage",
    "ShardSchemaError",
    "TrajectoryError",
    "Untrainable",
    "Verdict",
    "expand_messages",
    "check_shard",
    "policy_version_number",
    "prompt_token_digest",
    "shard_schema_problem",
    "schema_version_of",
    "step_field_names",
    "succeeded",
    "untrainable",
    "version_number",
    "version_of",
    "trajectory_features",
]

log = logging.getLogger(__name__)

TRAJECTORY_SCHEMA_VERSION = "1.6"
READABLE_SCHEMA_VERSIONS = ("1.1", "1.2", "1.3", "1.4", "1.5", "1.6")
MANIFEST = "manifest.json"

# What each version added to the row (``steps.x``: a field of each step); a shard of an older
# version lacks these and only these.
_ADDED_IN = {
    "1.2": ("outcome", "steps.policy_version", "steps.logprobs"),
    "1.3": ("seed_difficulty_level", "rubric_source", "recording", "steps.popups"),
    "1.4": ("steps.token_ids", "steps.prompt_token_hash", "steps.sampling"),
    "1.6": ("steps.observation_text",),
}
# What each version changed the type of: a shard of an older version has the type given here.
_RETYPED_IN = {
    "1.5": {"steps.policy_version": "string"},
}

# The task fields a trajectory row carries (the rest of a task row, e.g. its provenance, stays in
# the task set): their features come from the task contract.
TASK_COLUMNS = ("task_id", "task_name", "website", "start_url", "benchmark_name", "domain", "subdomain",
                "difficulty", "difficulty_level", "seed_difficulty_level", "rubric_source",
                "evaluator_reference", "definite_answer", "parent_task_id", "environment", "env_seed")


class EpisodeStatus(StrEnum):
    """How an episode ended. ``ok``: by the agent's answer or the environment's own end;
    ``timeout``: the horizon was reached; ``blocked``: the site was refused or on the blocklist;
    ``error:<kind>``: an infrastructure failure of that kind (the browser, the policy endpoint, the
    judge, or a bug: ``error:internal``). Only ``ok`` and ``timeout`` say anything about the agent."""

    OK = "ok"
    TIMEOUT = "timeout"
    BLOCKED = "blocked"
    # browser environment (webgym_rollout.errors)
    BROWSER_ERROR = "error:browser_error"
    SESSION_NOT_FOUND = "error:session_not_found"
    BROWSER_CRASHED = "error:browser_crashed"
    OPERATION_TIMEOUT = "error:operation_timeout"
    NAVIGATION_REFUSED = "error:navigation_refused"
    SERVER_BUSY = "error:server_busy"
    SERVER_UNAVAILABLE = "error:server_unavailable"
    UNAUTHORIZED = "error:unauthorized"
    INVALID_REQUEST = "error:invalid_request"
    # policy endpoint (webgym_rollout.agent.policies)
    POLICY_ERROR = "error:policy_error"
    POLICY_UNAVAILABLE = "error:policy_unavailable"
    POLICY_TIMEOUT = "error:policy_timeout"
    POLICY_REJECTED = "error:policy_rejected"
    # judge endpoint (webgym_rollout.judge.judges)
    JUDGE_ERROR = "error:judge_error"
    JUDGE_UNAVAILABLE = "error:judge_unavailable"
    JUDGE_TIMEOUT = "error:judge_timeout"
    JUDGE_REJECTED = "error:judge_rejected"
    JUDGE_REPLY_INVALID = "error:judge_reply_invalid"
    # anything else: a bug, logged with its traceback
    INTERNAL = "error:internal"

    @property
    def is_error(self) -> bool:
        """An infrastructure failure (``error:<kind>`` or ``blocked``): says nothing about the agent."""
        return self is EpisodeStatus.BLOCKED or self.value.startswith("error:")

    @property
    def error_kind(self) -> str:
        """``browser_crashed`` for ``error:browser_crashed``, ``blocked`` for blocked, "" otherwise."""
        return self.value.removeprefix("error:") if self.is_error else ""

    @classmethod
    def for_error(cls, kind: str) -> EpisodeStatus:
        """The status of an episode that failed with an error of `kind` (`RolloutError.kind`);
        an unknown kind (a bug) is ``error:internal``."""
        if kind == "site_blocked":
            return cls.BLOCKED
        try:
            return cls(f"error:{kind}")
        except ValueError:
            return cls.INTERNAL

    @classmethod
    def _missing_(cls, value: object) -> EpisodeStatus | None:
        # A status written by a newer version with an error kind this one does not know.
        if isinstance(value, str) and value.startswith("error:"):
            log.warning("unknown episode status %r read as %r", value, cls.INTERNAL.value)
            return cls.INTERNAL
        return None


# ------------------------------------------------------------------------------------- the rules

SUCCESS_REWARD = 1.0
"""The reward of a judged success: a judge gives 1.0 when every criterion passed, else 0.0."""


def succeeded(reward: float | None) -> bool:
    """The success rule: an episode succeeded when its reward is at least `SUCCESS_REWARD`; a row
    without a reward (None: nobody judged it) did not. `Episode.success` and every success count
    (the statistics, the card, the report, the loop's history) call this."""
    return reward is not None and reward >= SUCCESS_REWARD


class Untrainable(StrEnum):
    """Why an episode is never trained on, whatever the objective (`untrainable`); the values are
    how the trainer counts the episodes it skipped."""

    TEST_SPLIT = "test-split episodes"
    """A test-split episode: held out for evaluation."""
    INFRASTRUCTURE = "infrastructure failures"
    """`EpisodeStatus.is_error` (blocked, ``error:<kind>``): says nothing about the agent."""
    NO_REWARD = "episodes without reward"
    """A row without a reward (None): nobody judged it."""


def untrainable(split: str | None, status: EpisodeStatus | str | None,
                reward: float | None) -> Untrainable | None:
    """The trainability rule: why an episode of `split`, `status` and `reward` (an `Episode`'s, or
    a row's column values: None or "" where a column is empty) is never trained on; None when it
    may be (each objective then selects among these). A status outside `EpisodeStatus` raises
    ValueError."""
    if split == "test":
        return Untrainable.TEST_SPLIT
    if status and EpisodeStatus(status).is_error:
        return Untrainable.INFRASTRUCTURE
    if reward is None:
        return Untrainable.NO_REWARD
    return None


# ------------------------------------------------------------------------------------- the parts

@dataclass(frozen=True)
class TokenUsage:
    """Tokens of one policy call, as the endpoint counted them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class Sampling:
    """How a reply was sampled: the settings its request sent (schema 1.4). The endpoint samples
    from ``softmax(logits / temperature)`` restricted to the `top_k` most likely tokens and then to
    the smallest set holding `top_p` of the mass, renormalised, and returns the log-probabilities
    of that distribution (`webgym_rl.policy_server`; vLLM with ``--logprobs-mode
    processed_logprobs``). ``temperature == 0`` is greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0: no limit."""

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    @property
    def full_distribution(self) -> bool:
        """Sampled from the model's whole distribution at this temperature: no top-k or top-p cut, so
        the trainer's ``log_softmax(logits / temperature)`` is the sampling distribution exactly."""
        return not self.greedy and self.top_p >= 1.0 and self.top_k <= 0


_VERSION = re.compile(r"(?:^|[-@_])v(\d+)$")


def version_number(name: str) -> int | None:
    """The integer version an endpoint's name for its weights says (``v3``, ``webgym-policy-v3``: the
    CPU policy server's fingerprint, a vLLM adapter's name), or None when it names none (a served
    model without versions). Read once, where a reply arrives (`webgym_rollout.agent.policies`), and
    where a row of schema 1.2 to 1.4 stored the name (`policy_version_number`)."""
    match = _VERSION.search(name or "")
    return int(match.group(1)) if match else None


def policy_version_number(stored: int | str | None) -> int | None:
    """A stored ``policy_version`` of any schema as `Step.policy_version`: an integer (1.5) as it is,
    a name (1.2 to 1.4: ``"v3"``, ``""``) through `version_number`, null as None. Code that reads the
    column at the Arrow level calls this, as `Step.from_row` does."""
    if stored is None or isinstance(stored, bool):
        return None
    if isinstance(stored, int):
        return stored
    if isinstance(stored, str):
        return version_number(stored)
    raise ValueError(f"policy_version: expected an integer or a version name, got {type(stored).__name__}")


def prompt_token_digest(token_ids: Sequence[int]) -> str:
    """The digest `Step.prompt_token_hash` stores: SHA-256 of the ids written as decimal numbers
    joined by commas (``"151644,872,198"``), so any language can recompute it."""
    return hashlib.sha256(",".join(str(int(i)) for i in token_ids).encode()).hexdigest()


@dataclass(frozen=True)
class Latency:
    """Seconds spent in each phase of a step."""

    policy_s: float = 0.0
    """Waiting for the policy's reply."""
    execute_s: float = 0.0
    """Carrying out the action in the browser (and waiting for a navigation it started)."""
    screenshot_s: float = 0.0
    """Taking the screenshot the policy was shown."""


@dataclass(frozen=True)
class Verdict:
    """One judged criterion: its name, whether it passed, and why."""

    criterion: str
    passed: bool
    reason: str = ""


@dataclass(frozen=True)
class TaskOutcome:
    """What the environment itself says about the episode, where it says anything (MiniWoB++ pages
    do; a website does not, and its reward comes from the judge)."""

    done: bool = False
    """The environment ended the episode."""
    raw_reward: float | None = None
    """The environment's own reward (MiniWoB++: 1 success, -1 failure); None if it gives none."""
    reason: str = ""
    """The environment's explanation, if any."""


@dataclass
class Step:
    """One step: what the policy saw and said, what the browser did, and how long each part took."""

    index: int
    """Position in the episode, from 0."""
    screenshot: bytes = field(default=b"", metadata={"feature": "image"})
    """The screenshot the policy was shown (PNG or JPEG bytes): in the set-of-marks observation mode,
    the marked one."""
    screenshot_sha256: str = ""
    """SHA-256 of `screenshot` (equal for pixel-identical pages); filled in when left empty."""
    messages: str = "[]"
    """The chat messages as sent, as JSON, images as ``{"type": "image", "step": j}``."""
    response: str = ""
    """The policy's raw reply: the training target."""
    action: str = ""
    """The parsed action as JSON (`AgentAction.to_json`); "" when the reply held no valid action.
    Read it typed through `parsed_action`."""
    action_error: str = ""
    """Why the reply did not parse, or why the action failed ("" when it went fine)."""
    memory: str = ""
    """The reply's Memory section."""
    url: str = ""
    """The page's URL when the screenshot was taken."""
    title: str = ""
    """The page's title when the screenshot was taken."""
    same_as_next: bool = False
    """The next screenshot equals this one: the action changed nothing (dropped from training)."""
    finish_reason: str = ""
    """The endpoint's finish reason (``stop``, ``length``)."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    """Tokens of the policy call."""
    latency: Latency = field(default_factory=Latency)
    """Seconds per phase of the step."""
    policy_version: int | None = None
    """The version of the policy's weights that produced the reply (the RL loop's version: 0 the
    model it started from, N after N updates); None when unknown: a policy without a model (random,
    scripted, expert) or an endpoint whose replies name no version (schema 1.2; an integer since 1.5,
    an endpoint's name for it before)."""
    logprobs: tuple[float, ...] = ()
    """Log-probability of each reply token as the endpoint returned it; empty if it returned none
    (schema 1.2)."""
    token_ids: tuple[int, ...] = ()
    """The reply's token ids as the policy sampled them, one per entry of `logprobs` (an end-of-turn
    token included when the reply stopped on it; none invented when it was cut at max_tokens);
    empty when the endpoint returned none (schema 1.4). The trainer trains on these ids."""
    prompt_token_hash: str = ""
    """`prompt_token_digest` of the prompt's token ids as the endpoint tokenised them (image tokens
    included); the trainer checks that its own tokenisation of `messages` gives the same ids ("":
    unknown; schema 1.4)."""
    sampling: Sampling | None = None
    """The sampling settings the request sent; None for a policy without a model (random, scripted,
    expert) and in rows written before schema 1.4."""
    popups: tuple[str, ...] = ()
    """URLs of the pages (popups, new tabs) opened since the previous action, by this action or by
    the page on its own, that the browser server closed at once: a session has one page
    (`webgym_rollout.browser.protocol.ExecuteResult.popups`); empty in rows written before it."""
    observation_text: str = ""
    """The text observation the policy was shown at this step (`Observation.text`: the accessibility
    tree and/or the element list, with their headers); "" in the screenshot mode and in rows written
    before schema 1.6."""

    def __post_init__(self) -> None:
        if self.screenshot and not self.screenshot_sha256:
            self.screenshot_sha256 = hashlib.sha256(self.screenshot).hexdigest()

    @property
    def parsed_action(self) -> AgentAction | None:
        """The step's action, typed; None when the reply held no valid action (``action == ""``).
        An `action` this version's action space does not read raises `ActionParseError`."""
        return AgentAction.from_json(self.action) if self.action else None

    @property
    def page_changed(self) -> bool:
        """The action changed the page: the next screenshot differs (``not same_as_next``)."""
        return not self.same_as_next

    def to_row(self) -> dict[str, Any]:
        row = _plain(self)
        row["screenshot"] = {"bytes": self.screenshot or None, "path": None}
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any], *, where: str = "step") -> Step:
        """A step from its stored row; raises ValueError naming `where` and the field that does not
        fit (`Episode.from_row` reports it as a `TrajectoryError`)."""
        if not isinstance(row, Mapping):
            raise ValueError(f"{where}: expected an object, got {type(row).__name__}")
        if isinstance(row.get("policy_version"), str):  # schema 1.2 to 1.4: the endpoint's name
            row = {**row, "policy_version": policy_version_number(row["policy_version"])}
        values = _from_plain(cls, row, where=where)
        values["screenshot"] = _image_bytes(row.get("screenshot"), f"{where}.screenshot")
        return cls(**values)


@dataclass
class Episode:
    """One episode of one task: its steps, how it ended, and the judge's verdicts."""

    task: Task
    """The task (its columns are stored beside the episode's: task_id, task_name, website, ...)."""
    episode_id: str
    """Stable id: the same (task, attempt, iteration) always gets the same id."""
    iteration: int = 0
    """RL iteration that rolled it out."""
    attempt: int = 0
    """Attempt number of this task in this iteration (several for RL)."""
    split: str = "train"
    """Task split the episode belongs to."""
    instruction: str = ""
    """The instruction the agent was given: `task_name`, or the environment's own sentence
    (MiniWoB's utterance, where `task_name` is only the row's name)."""
    policy_model: str = ""
    """The policy (model name at its endpoint, or ``random``)."""
    judge_model: str = ""
    """The judge (model name, or ``programmatic``)."""
    reward: float = 0.0
    """1.0 when the judge passed the episode, else 0.0."""
    status: EpisodeStatus = EpisodeStatus.OK
    """How the episode ended (`EpisodeStatus`)."""
    answer: str = ""
    """The agent's final answer ("" if it never answered)."""
    verdicts: list[Verdict] = field(default_factory=list)
    """The judge's verdict on each criterion."""
    outcome: TaskOutcome = field(default_factory=TaskOutcome)
    """The environment's own report (schema 1.2)."""
    started_at: float = field(default=0.0, metadata={"dtype": "float64"})
    """Unix time the episode started."""
    duration_s: float = 0.0
    """Seconds from the start to the end of the episode (judging not included)."""
    judge_s: float = 0.0
    """Seconds the judge took."""
    recording: str = ""
    """Where the episode's recorded network traffic is, relative to the dataset folder
    (``recordings/episodes/<episode_id>.json``, `webgym_rollout.trajectory.recordings`); "" when the
    run did not record (and in rows written before it)."""
    steps: list[Step] = field(default_factory=list)
    """The steps, in order."""

    def __post_init__(self) -> None:
        if not isinstance(self.status, EpisodeStatus):
            self.status = EpisodeStatus(self.status)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def success(self) -> bool:
        """The episode succeeded (`succeeded`: its reward is at least `SUCCESS_REWARD`)."""
        return succeeded(self.reward)

    @property
    def trainable(self) -> bool:
        """Some objective may train on the episode (`untrainable` gives no reason against it)."""
        return untrainable(self.split, self.status, self.reward) is None

    def to_row(self) -> dict[str, Any]:
        """The dataset row (`trajectory_features`)."""
        task_row = self.task.to_row()
        row: dict[str, Any] = {}
        for item in fields(self):
            if item.name == "task":
                row.update({name: task_row[name] for name in TASK_COLUMNS})
            elif item.name == "steps":
                row["num_steps"] = self.num_steps
                row["steps"] = [step.to_row() for step in self.steps]
            else:
                row[item.name] = _plain(getattr(self, item.name))
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Episode:
        """An episode from a stored row (schema 1.1 to 1.6; screenshots as bytes, ``{"bytes", "path"}``
        or PIL images). Raises `TrajectoryError` naming the episode when the row does not fit."""
        if not isinstance(row, Mapping):
            raise TrajectoryError(f"a trajectory row must be an object, got {type(row).__name__}")
        episode = row.get("episode_id") or "(no episode_id)"
        try:
            task = Task.from_row({name: row.get(name) for name in TASK_COLUMNS if name in row})
            values = _from_plain(cls, row, skip=("task", "steps"))
            steps = row.get("steps") or ()
            if not isinstance(steps, list | tuple):
                raise ValueError(f"steps: expected a list of steps, got {type(steps).__name__}")
            parsed = [Step.from_row(step, where=f"steps[{i}]") for i, step in enumerate(steps)]
            return cls(task=task, steps=parsed, **values)
        except (TypeError, ValueError, KeyError, OSError) as exc:
            raise TrajectoryError(f"episode {episode}: the row does not fit the trajectory contract: "
                                  f"{exc}") from exc


# ---------------------------------------------------------------------------------- column names

def _row_columns() -> list[str]:
    """The columns of an episode row, in `Episode.to_row`'s order: the episode's fields, its task's
    `TASK_COLUMNS` in place of ``task``, and ``num_steps`` before ``steps``."""
    names: list[str] = []
    for item in fields(Episode):
        if item.name == "task":
            names.extend(TASK_COLUMNS)
        elif item.name == "steps":
            names.extend(("num_steps", "steps"))
        else:
            names.append(item.name)
    return names


EpisodeColumn = StrEnum("EpisodeColumn", [(name.upper(), name) for name in _row_columns()],
                        module=__name__)
EpisodeColumn.__doc__ = """The columns of an episode row, derived from `Episode` (and its task's
`TASK_COLUMNS`): ``EpisodeColumn.REWARD == "reward"``; a name the contract does not have is an
AttributeError where it is written."""

StepField = StrEnum("StepField", [(item.name.upper(), item.name) for item in fields(Step)], module=__name__)
StepField.__doc__ = """The fields of a step in the ``steps`` column, derived from `Step`:
``StepField.SAME_AS_NEXT == "same_as_next"``."""


# ------------------------------------------------------------------------------- rows and features

def _plain(value: Any) -> Any:
    """A dataclass / enum / tuple as the plain values a dataset row holds. Text UTF-8 cannot encode
    (a lone surrogate: a page title or a reply can hold one) gets U+FFFD in its place: it is data
    the agent saw, and the shard it goes to could not be written with it."""
    if isinstance(value, str):
        return clean_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {item.name: _plain(getattr(value, item.name)) for item in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _from_plain(cls: type, row: Mapping[str, Any], skip: Sequence[str] = (),
                where: str = "") -> dict[str, Any]:
    """Constructor arguments of dataclass `cls` from a row; fields the row lacks keep their defaults
    (a schema 1.1 row has no `policy_version`), nested dataclasses and tuples are rebuilt. A value of
    the wrong type raises ValueError naming its field (``steps[2].latency.policy_s``)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for item in fields(cls):
        if item.name in skip or item.name not in row or row[item.name] is None:
            continue
        value, kind = row[item.name], hints[item.name]
        name = f"{where}.{item.name}" if where else item.name
        if item.metadata.get("feature") == "image":
            continue  # read by the caller (bytes, {"bytes", "path"} or an image)
        values[item.name] = _typed(value, kind, name)
    return values


_SCALARS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _scalar_fits(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, str)


def _wrong(name: str, expected: str, value: Any) -> ValueError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return ValueError(f"{name}: expected {expected}, got {type(value).__name__} {shown}")


def _typed(value: Any, kind: Any, name: str) -> Any:
    """`value` as a value of field type `kind`, or ValueError naming the field `name`."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1:
        kind = args[0]
    origin = typing.get_origin(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(value, Mapping):
            raise _wrong(name, "an object", value)
        return kind(**_from_plain(kind, value, where=name))
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise _wrong(name, "a list", value)
        inner = typing.get_args(kind)[0]
        if inner in _SCALARS:  # a long list (log-probabilities): checked without a name per item
            for i, item in enumerate(value):
                if not _scalar_fits(item, inner):
                    raise _wrong(f"{name}[{i}]", _SCALARS[inner], item)
            items = [float(v) for v in value] if inner is float else list(value)
        else:
            items = [_typed(v, inner, f"{name}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if isinstance(kind, type) and issubclass(kind, Enum):
        if not isinstance(value, str | Enum):
            raise _wrong(name, "a string", value)
        return value
    if kind in _SCALARS:
        if not _scalar_fits(value, kind):
            raise _wrong(name, _SCALARS[kind], value)
        return float(value) if kind is float else value
    return value


def _image_bytes(value: Any, name: str = "screenshot") -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, Mapping):
        data = value.get("bytes")
        if data is not None:
            if not isinstance(data, bytes | bytearray | memoryview):
                raise ValueError(f"{name}: 'bytes' must be bytes, got {type(data).__name__}")
            return bytes(data)
        if value.get("path"):
            if not isinstance(value["path"], str):
                raise ValueError(f"{name}: 'path' must be a string, got {type(value['path']).__name__}")
            return Path(value["path"]).read_bytes()
        return b""
    if hasattr(value, "save"):  # a PIL image (a dataset read with decoding on)
        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        return buffer.getvalue()
    raise TypeError(f"{name}: a screenshot must be bytes, {{'bytes', 'path'}} or an image, "
                    f"got {type(value).__name__}")


def trajectory_features():
    """The `datasets.Features` of an episode row, derived from `Episode` and `Step`."""
    from datasets import Features, Value  # lazy: datasets takes about a second to import


    tasks = task_features()
    hints = typing.get_type_hints(Episode)
    columns: dict[str, Any] = {}
    for item in fields(Episode):
        if item.name == "task":
            columns.update({name: tasks[name] for name in TASK_COLUMNS})
        elif item.name == "steps":
            columns["num_steps"] = Value("int32")
            columns["steps"] = feature_of(list[Step])
        else:
            columns[item.name] = feature_of(hints[item.name], item.metadata)
    return Features(columns)


def expand_messages(messages_json: str, image_for_step: Callable[[int], Any]) -> list[dict[str, Any]]:
    """Decode ``Step.messages`` and replace each ``{"type": "image", "step": j}`` part by
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


# ---------------------------------------------------------------------------------- shard layout

@functools.cache
def _expected_schema(version: str) -> Any:
    """The Arrow schema of a row of trajectory schema `version` (today's, less what came later)."""
    import pyarrow as pa  # lazy: reading a row needs no Arrow

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(part) for part in v.split("."))

    later = [name for v, names in _ADDED_IN.items() if key(v) > key(version) for name in names]
    retyped = {name.split(".", 1)[1]: getattr(pa, kind)() for v, changes in _RETYPED_IN.items()
               if key(v) > key(version) for name, kind in changes.items()}
    schema = trajectory_features().arrow_schema
    columns = [f for f in schema if f.name not in later]
    step_type = schema.field("steps").type.value_type
    dropped = {name.split(".", 1)[1] for name in later if name.startswith("steps.")}
    steps = pa.list_(pa.struct([f.with_type(retyped[f.name]) if f.name in retyped else f
                                for f in step_type if f.name not in dropped]))
    return pa.schema([pa.field("steps", steps) if f.name == "steps" else f for f in columns])


def shard_schema_problem(schema: Any, version: str) -> str | None:
    """What keeps an Arrow `schema` (a shard's) from being a row of trajectory schema `version`: a
    column missing or one of another type (named with its path, ``steps.latency.policy_s``); None
    when it fits. Integer widths, string and binary sizes may differ, and an all-null column fits
    any type. Columns the version does not have are a user's own (labels, notes): they fit."""
    expected = _expected_schema(version)
    present = set(schema.names)
    missing = [name for name in expected.names if name not in present]
    if missing:
        return f"missing column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
    for field_ in expected:
        problem = _type_problem(schema.field(field_.name).type, field_.type, field_.name)
        if problem:
            return problem
    return None


def _type_problem(actual: Any, expected: Any, name: str) -> str | None:
    import pyarrow as pa  # lazy: reading a row needs no Arrow

    types_ = pa.types
    if types_.is_null(actual):
        return None
    kinds = ((types_.is_integer, "an integer"), (types_.is_boolean, "a boolean"),
             (lambda t: types_.is_string(t) or types_.is_large_string(t), "a string"),
             (lambda t: types_.is_binary(t) or types_.is_large_binary(t), "bytes"))
    for test, words in kinds:
        if test(expected):
            return None if test(actual) else f"column '{name}' is {actual}, expected {words}"
    if types_.is_floating(expected):
        fits = types_.is_floating(actual) or types_.is_integer(actual)
        return None if fits else f"column '{name}' is {actual}, expected a number"
    if types_.is_list(expected):
        if not (types_.is_list(actual) or types_.is_large_list(actual)):
            return f"column '{name}' is {actual}, expected a list"
        return _type_problem(actual.value_type, expected.value_type, name)
    if types_.is_struct(expected):
        if not types_.is_struct(actual):
            return f"column '{name}' is {actual}, expected a struct of {', '.join(f.name for f in expected)}"
        names = {f.name for f in actual}
        for child in expected:
            if child.name not in names:
                return f"column '{name}' has no field '{child.name}'"
            problem = _type_problem(actual.field(child.name).type, child.type, f"{name}.{child.name}")
            if problem:
                return problem
        extra = sorted(names - {f.name for f in expected})
        if extra:
            return f"column '{name}' has unknown field{'s' if len(extra) > 1 else ''} {', '.join(extra)}"
        return None
    return None if actual == expected else f"column '{name}' is {actual}, expected {expected}"


def version_of(columns: Sequence[str], step_fields: Sequence[str] = (),
               integer_versions: bool = False) -> str:
    """The schema version of rows with these columns and these fields in each step (for rows
    without a manifest to say); `integer_versions`: their ``steps.policy_version`` is an integer
    (`schema_version_of` reads all three from an Arrow schema)."""
    if "observation_text" in step_fields:
        return "1.6"
    if "token_ids" in step_fields:
        return "1.5" if integer_versions else "1.4"
    return "1.3" if "rubric_source" in columns else "1.2" if "outcome" in columns else "1.1"


def schema_version_of(schema: Any) -> str:
    """The schema version of an Arrow `schema` (a shard's, a Hub dataset's) that has no manifest to
    say: read from its columns, its steps' fields and the type of ``steps.policy_version``."""
    import pyarrow as pa  # lazy: reading a row needs no Arrow

    names = step_field_names(schema)
    integer = False
    if "policy_version" in names:
        integer = pa.types.is_integer(schema.field("steps").type.value_type.field("policy_version").type)
    return version_of(schema.names, names, integer)


def step_field_names(schema: Any) -> list[str]:
    """The field names of a step in an Arrow `schema`'s ``steps`` column ([] when it has none)."""
    import pyarrow as pa  # lazy: reading a row needs no Arrow

    if "steps" not in schema.names:
        return []
    steps = schema.field("steps").type
    if (pa.types.is_list(steps) or pa.types.is_large_list(steps)) and pa.types.is_struct(steps.value_type):
        return [field_.name for field_ in steps.value_type]
    return []


def check_shard(path: Path, version: str) -> None:
    """Raise `TrajectoryError` naming `path` unless it is a readable parquet file of `version`
    (`ShardSchemaError` when it is readable but its columns do not fit). A shard without rows holds
    no episode, so its columns are not checked (a writer may leave out the schema of an empty file)."""
    import pyarrow.parquet as pq  # lazy: reading a row needs no Arrow

    try:
        metadata = pq.read_metadata(path)
        schema = metadata.schema.to_arrow_schema()
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        size = path.stat().st_size if path.is_file() else 0
        state = "it is empty (0 bytes)" if size == 0 else "truncated or not parquet"
        raise TrajectoryError(f"{path}: not a readable parquet shard, {state}: {exc}") from None
    problem = shard_schema_problem(schema, version) if metadata.num_rows else None
    if problem:
        raise ShardSchemaError(f"{path}: not a trajectory schema {version} shard: {problem}", path=path,
                               version=version)


# ---------------------------------------------------------------------------------------- reading
