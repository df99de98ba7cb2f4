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
Shards are named after the run that wrote them. 1.3 (written now) adds, per step, the popups the
browser server closed (`Step.popups`) and, per episode, the task's `seed_difficulty_level` and
`rubric_source`. Schema 1.1 and 1.2 datasets are read unchanged: the new fields take their
defaults.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

from webgym_data.schema import Task
from webgym_rollout.errors import RolloutError

__all__ = [
    "READABLE_SCHEMA_VERSIONS",
    "TRAJECTORY_SCHEMA_VERSION",
    "Episode",
    "EpisodeStatus",
    "Latency",
    "Step",
    "TaskOutcome",
    "TokenUsage",
    "ShardSchemaError",
    "TrajectoryError",
    "TrajectorySet",
    "TrajectoryStats",
    "Verdict",
    "expand_messages",
    "read_episodes",
    "shard_schema_problem",
    "trajectory_features",
]

log = logging.getLogger(__name__)

TRAJECTORY_SCHEMA_VERSION = "1.3"
READABLE_SCHEMA_VERSIONS = ("1.1", "1.2", "1.3")
MANIFEST = "manifest.json"

# What each version added to the row (``steps.x``: a field of each step); a shard of an older
# version lacks these and only these.
_ADDED_IN = {
    "1.2": ("outcome", "steps.policy_version", "steps.logprobs"),
    "1.3": ("seed_difficulty_level", "rubric_source", "recording", "steps.popups"),
}

# The task fields a trajectory row carries (the rest of a task row, e.g. its provenance, stays in
# the task set): their features come from the task contract.
TASK_COLUMNS = ("task_id", "task_name", "website", "start_url", "benchmark_name", "domain", "subdomain",
                "difficulty", "difficulty_level", "seed_difficulty_level", "rubric_source",
                "evaluator_reference", "definite_answer", "parent_task_id", "environment", "env_seed")


class TrajectoryError(RolloutError):
    """A source that is not a trajectory dataset, or a row that does not fit the contract."""

    kind = "trajectory_error"


class ShardSchemaError(TrajectoryError):
    """A shard (or a Hub dataset) whose columns are not those of its trajectory schema version: one
    missing, one unknown, or one of another type. `path` is the shard (None for a Hub dataset)."""

    kind = "shard_schema_error"

    def __init__(self, message: str, *, path: Path | None = None, version: str = "") -> None:
        super().__init__(message)
        self.path, self.version = path, version


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
    # policy endpoint (webgym_rollout.policy)
    POLICY_ERROR = "error:policy_error"
    POLICY_UNAVAILABLE = "error:policy_unavailable"
    POLICY_TIMEOUT = "error:policy_timeout"
    POLICY_REJECTED = "error:policy_rejected"
    # judge endpoint (webgym_rollout.judge)
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


# ------------------------------------------------------------------------------------- the parts

@dataclass(frozen=True)
class TokenUsage:
    """Tokens of one policy call, as the endpoint counted them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


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
    """The screenshot the policy was shown (PNG or JPEG bytes)."""
    screenshot_sha256: str = ""
    """SHA-256 of `screenshot` (equal for pixel-identical pages); filled in when left empty."""
    messages: str = "[]"
    """The chat messages as sent, as JSON, images as ``{"type": "image", "step": j}``."""
    response: str = ""
    """The policy's raw reply: the training target."""
    action: str = ""
    """The parsed action as JSON (`AgentAction.to_json`); "" when the reply held no valid action."""
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
    policy_version: str = ""
    """The policy checkpoint that produced the reply, as the endpoint named it (schema 1.2)."""
    logprobs: tuple[float, ...] = ()
    """Log-probability of each reply token as the endpoint returned it; empty if it returned none
    (schema 1.2)."""
    popups: tuple[str, ...] = ()
    """URLs of the pages (popups, new tabs) opened since the previous action, by this action or by
    the page on its own, that the browser server closed at once: a session has one page
    (`webgym_rollout.browser.protocol.ExecuteResult.popups`); empty in rows written before it."""

    def __post_init__(self) -> None:
        if self.screenshot and not self.screenshot_sha256:
            self.screenshot_sha256 = hashlib.sha256(self.screenshot).hexdigest()

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
    (``recordings/episodes/<episode_id>.json``, `webgym_rollout.recording`); "" when the run did not
    record (and in rows written before it)."""
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
        return self.reward >= 1.0

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
        """An episode from a stored row (schema 1.1 to 1.3; screenshots as bytes, ``{"bytes", "path"}``
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


# ------------------------------------------------------------------------------- rows and features

def _plain(value: Any) -> Any:
    """A dataclass / enum / tuple as the plain values a dataset row holds. Text UTF-8 cannot encode
    (a lone surrogate: a page title or a reply can hold one) gets U+FFFD in its place: it is data
    the agent saw, and the shard it goes to could not be written with it."""
    if isinstance(value, str):
        return value if value.isascii() else _SURROGATE.sub("\ufffd", value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {item.name: _plain(getattr(value, item.name)) for item in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


_SURROGATE = re.compile(r"[\ud800-\udfff]")


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


def _feature(kind: Any, metadata: Mapping[str, Any]) -> Any:
    from datasets import Image, List, Value

    if metadata.get("feature") == "image":
        return Image()
    if metadata.get("dtype"):
        return Value(metadata["dtype"])
    origin = typing.get_origin(kind)
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _feature(args[0], metadata)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return Value("string")
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return {item.name: _feature(hints[item.name], item.metadata) for item in fields(kind)}
    if origin in (list, tuple):
        return List(_feature(args[0], {}))
    simple = {bool: "bool", int: "int32", float: "float32", str: "string"}
    if kind in simple:
        return Value(simple[kind])
    raise TypeError(f"no dataset feature for type {kind!r}")


def trajectory_features():
    """The `datasets.Features` of an episode row, derived from `Episode` and `Step`."""
    from datasets import Features, Value

    from webgym_data.schema import task_features

    tasks = task_features()
    hints = typing.get_type_hints(Episode)
    columns: dict[str, Any] = {}
    for item in fields(Episode):
        if item.name == "task":
            columns.update({name: tasks[name] for name in TASK_COLUMNS})
        elif item.name == "steps":
            columns["num_steps"] = Value("int32")
            columns["steps"] = _feature(list[Step], {})
        else:
            columns[item.name] = _feature(hints[item.name], item.metadata)
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
    import pyarrow as pa

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(part) for part in v.split("."))

    later = [name for v, names in _ADDED_IN.items() if key(v) > key(version) for name in names]
    schema = trajectory_features().arrow_schema
    columns = [f for f in schema if f.name not in later]
    step_type = schema.field("steps").type.value_type
    dropped = {name.split(".", 1)[1] for name in later if name.startswith("steps.")}
    steps = pa.list_(pa.struct([f for f in step_type if f.name not in dropped]))
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
    import pyarrow as pa

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


def _version_of(columns: Sequence[str]) -> str:
    """The schema version a set of columns is (for rows without a manifest to say)."""
    return "1.3" if "rubric_source" in columns else "1.2" if "outcome" in columns else "1.1"


def _check_shard(path: Path, version: str) -> None:
    """Raise `TrajectoryError` naming `path` unless it is a readable parquet file of `version`
    (`ShardSchemaError` when it is readable but its columns do not fit). A shard without rows holds
    no episode, so its columns are not checked (a writer may leave out the schema of an empty file)."""
    import pyarrow.parquet as pq

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

@dataclass(frozen=True)
class TrajectoryStats:
    """Counts over a trajectory dataset, read from a few columns (no screenshot is loaded)."""

    episodes: int = 0
    successes: int = 0
    """Episodes with reward >= 1."""
    errors: int = 0
    """Episodes that ended in an infrastructure failure (`EpisodeStatus.is_error`)."""
    steps: int = 0
    valid_actions: int = 0
    """Steps whose reply parsed into an action (an unparsed reply is a no-op step)."""
    internal_errors: int = 0
    """Of `errors`, episodes with ``error:internal``: a bug of the toolkit, to report."""

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def valid_action_rate(self) -> float:
        return self.valid_actions / self.steps if self.steps else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "success_rate": self.success_rate,
                "valid_action_rate": self.valid_action_rate}


class TrajectorySet:
    """The episodes of one source, as `read_episodes` found them.

    Iterate it for `Episode` objects (read in small batches: screenshots never pile up), use
    `dataset` for a `datasets.Dataset` of the rows (the trainer reads it column-wise), or `stats`.
    """

    def __init__(self, source_id: str, version: str, schema_version: str, *, files: Sequence[Path] = (),
                 dataset: Any = None, cache_dir: str | None = None):
        self.id = source_id
        """The folder path or the Hub dataset id, as given."""
        self.version = version
        """A Hub dataset's commit; for a folder, a digest of its shard names and sizes."""
        self.schema_version = schema_version
        self.files = list(files)
        """The parquet shards (a local folder); empty for a Hub dataset."""
        self._dataset, self._cache_dir = dataset, cache_dir

    def __repr__(self) -> str:
        return f"TrajectorySet({self.id!r}, version={self.version!r}, schema {self.schema_version})"

    @cached_property
    def dataset(self) -> Any:
        """The rows as a `datasets.Dataset` (screenshots decode to PIL images on access)."""
        if self._dataset is not None:
            return self._dataset
        import datasets

        if not self.files:
            features = trajectory_features()
            return datasets.Dataset.from_dict({name: [] for name in features}, features=features)
        try:
            return datasets.load_dataset("parquet", data_files=[str(p) for p in self.files], split="train",
                                         cache_dir=self._cache_dir)
        except Exception as exc:  # datasets wraps the shard's own error; name the source
            cause = exc.__cause__ or exc
            raise TrajectoryError(f"{self.id}: its shards cannot be read as one dataset: "
                                  f"{type(cause).__name__}: {cause}") from exc

    def __len__(self) -> int:
        if self._dataset is None:
            import pyarrow.parquet as pq

            total = 0
            for path in self.files:
                try:
                    total += pq.read_metadata(path).num_rows
                except Exception as exc:  # changed on disk since `read_episodes` checked it
                    raise TrajectoryError(f"{path}: not a readable parquet shard: {exc}") from None
            return total
        return len(self.dataset)

    def batches(self, columns: Sequence[str] | None = None, batch_size: int = 16) -> Iterator[Any]:
        """Arrow record batches of the rows (only `columns` when given). A shard that turns out
        unreadable part way (corrupt pages, changed on disk) raises `TrajectoryError` naming it."""
        if self._dataset is None:
            import pyarrow.parquet as pq

            for path in self.files:
                try:
                    parquet = pq.ParquetFile(path)
                    present = [c for c in columns if c in parquet.schema_arrow.names] if columns else None
                    yield from parquet.iter_batches(batch_size=batch_size, columns=present)
                except TrajectoryError:
                    raise
                except (OSError, ValueError, TypeError, KeyError, IndexError) as exc:
                    # pyarrow's errors (ArrowInvalid, ArrowIOError) are ValueError / OSError kinds
                    raise TrajectoryError(f"{path}: not a readable parquet shard: {exc}") from None
            return
        table = self.dataset.with_format("arrow")
        if columns:
            table = table.select_columns([c for c in columns if c in self.dataset.column_names])
        for start in range(0, len(table), batch_size):
            yield from table[start:start + batch_size].to_batches()

    def __iter__(self) -> Iterator[Episode]:
        for batch in self.batches():
            for row in batch.to_pylist():
                yield Episode.from_row(row)

    def stats(self) -> TrajectoryStats:
        """Episode and step counts, read from the reward, status and action columns only."""
        import pyarrow.compute as pc

        counts = dict.fromkeys(
            ("episodes", "successes", "errors", "steps", "valid_actions", "internal_errors"), 0)
        for batch in self.batches(columns=["reward", "status", "steps"], batch_size=64):
            counts["episodes"] += batch.num_rows
            rewards, statuses = batch.column("reward").to_pylist(), batch.column("status").to_pylist()
            counts["successes"] += sum(1 for r in rewards if r is not None and r >= 1)
            try:
                counts["errors"] += sum(1 for s in statuses if s and EpisodeStatus(s).is_error)
                counts["internal_errors"] += sum(1 for s in statuses if s == EpisodeStatus.INTERNAL.value)
            except ValueError as exc:
                raise TrajectoryError(f"{self.id}: {exc} (a status is ok, timeout, blocked or "
                                      "error:<kind>)") from None
            actions = pc.struct_field(pc.list_flatten(batch.column("steps")), "action")
            counts["steps"] += len(actions)
            counts["valid_actions"] += int(pc.sum(pc.not_equal(actions, "")).as_py() or 0)
        return TrajectoryStats(**counts)


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of a trajectory folder; raises `TrajectoryError` naming the file when it is
    missing, unreadable or lists a shard that is not there."""
    folder = Path(folder)
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TrajectoryError(f"{path} does not exist: not a trajectory dataset folder") from None
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON
        raise TrajectoryError(f"{path} cannot be read: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list):
        raise TrajectoryError(f"{path} has no 'shards' list")
    for number, shard in enumerate(manifest["shards"]):
        problem = _shard_entry_problem(shard)
        if problem:
            raise TrajectoryError(f"{path}: shard entry {number}: {problem}")
        if not (folder / shard["path"]).is_file():
            raise TrajectoryError(f"{path} lists {shard['path']}, which is missing")
    version = manifest.get("schema_version", "1.1")
    if not isinstance(version, str):
        raise TrajectoryError(f"{path}: 'schema_version' must be a string such as "
                              f"{TRAJECTORY_SCHEMA_VERSION!r}, got {version!r}")
    if version not in READABLE_SCHEMA_VERSIONS:
        raise TrajectoryError(f"{path}: trajectory schema {version} is not one this version reads "
                              f"({', '.join(READABLE_SCHEMA_VERSIONS)}); upgrade webgym")
    return manifest


def _shard_entry_problem(shard: Any) -> str:
    """What is wrong with one entry of a manifest's ``shards`` ("" when nothing): a ``path`` inside
    the folder, a ``split``, and ``episodes`` as ``[task_id, attempt, episode_id]`` triples."""
    if not isinstance(shard, dict) or not isinstance(shard.get("path"), str) or not shard["path"]:
        return "has no 'path'"
    if shard["path"].startswith("/") or ".." in re.split(r"[\\/]", shard["path"]):
        return f"path {shard['path']!r} is not inside the folder"
    if "split" in shard and not isinstance(shard["split"], str):
        return f"'split' must be a string, got {shard['split']!r}"
    episodes = shard.get("episodes", [])
    if not isinstance(episodes, list) or not all(
            isinstance(key, list) and len(key) == 3 and isinstance(key[0], str) and isinstance(key[2], str)
            and isinstance(key[1], int) and not isinstance(key[1], bool) for key in episodes):
        return "'episodes' must be a list of [task_id, attempt, episode_id]"
    return ""


def _folder_files(folder: Path, split: str | None) -> tuple[list[Path], str]:
    """The shards of a rollout folder and its schema version: those the manifest lists when there is
    one (a shard a crash left unlisted may repeat episodes), else every non-hidden parquet file."""
    if (folder / MANIFEST).is_file():
        manifest = read_manifest(folder)
        shards = [s for s in manifest["shards"] if split is None or s.get("split") == split]
        return [folder / s["path"] for s in shards], str(manifest.get("schema_version", "1.1"))
    files = sorted(p for p in folder.rglob("*.parquet")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if split is not None:
        files = [p for p in files if p.name.startswith(f"{split}-")]
    if not files:
        return files, TRAJECTORY_SCHEMA_VERSION
    import pyarrow.parquet as pq

    try:
        columns = pq.read_schema(files[0]).names
    except Exception:  # reported, naming the file, by the check of each shard
        columns = []
    return files, _version_of(columns)


def read_episodes(source: str | Path, *, split: str | None = None,
                  cache_dir: str | Path | None = None) -> TrajectorySet:
    """The episodes of a rollout folder (the shards its manifest lists) or of a Hub dataset
    (``org/name`` or ``org/name@revision``; default revision ``main``), optionally of one split.

    Raises `TrajectoryError` naming the source when it is neither, or its manifest is broken."""
    path = Path(source)
    cache = str(cache_dir) if cache_dir else None
    if path.exists():
        if not path.is_dir():
            raise TrajectoryError(f"{path}: expected a rollout folder, got a file")
        files, schema = _folder_files(path, split)
        for file in files:
            _check_shard(file, schema)
        digest = hashlib.sha256()
        for file in files:
            digest.update(f"{file.relative_to(path)}:{file.stat().st_size}\n".encode())
        return TrajectorySet(str(path), digest.hexdigest()[:16], schema, files=files, cache_dir=cache)
    repo_id, _, revision = str(source).partition("@")
    revision = revision or "main"
    if repo_id.count("/") != 1:
        raise TrajectoryError(f"{source}: no such folder, and not a Hub dataset id (org/name[@revision])")
    import datasets
    from huggingface_hub import HfApi

    try:
        loaded = datasets.load_dataset(repo_id, revision=revision, cache_dir=cache)
    except Exception as exc:  # the Hub raises many kinds; the user needs the id
        raise TrajectoryError(f"cannot load trajectory dataset '{repo_id}' at revision '{revision}' "
                              f"(not a local folder either): {exc}") from exc
    if isinstance(loaded, datasets.DatasetDict):
        parts = [loaded[name] for name in loaded if split is None or name == split]
        dataset = datasets.concatenate_datasets(parts) if len(parts) > 1 else (parts[0] if parts else None)
    else:
        dataset = loaded
    if dataset is None:
        raise TrajectoryError(f"Hub dataset {repo_id}@{revision} has no split {split!r}")
    try:
        version = HfApi().dataset_info(repo_id, revision=revision).sha or revision
    except Exception:  # the version is informative only; the data did load
        version = revision
    schema = _version_of(dataset.column_names)
    problem = shard_schema_problem(dataset.features.arrow_schema, schema)
    if problem:
        raise ShardSchemaError(f"Hub dataset {repo_id}@{revision}: not a trajectory schema {schema} "
                               f"dataset: {problem}", version=schema)
    return TrajectorySet(repo_id, version, schema, dataset=dataset)
