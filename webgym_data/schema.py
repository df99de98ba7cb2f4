"""The task contract: `Task`, `FactGroup` and the Hugging Face `Features` of a task row.

Field names follow the published WebGym task set (``benchmark_name, task_name, domain, subdomain,
website, definite_answer, task_id, difficulty, evaluator_reference``) so that its rows load
unchanged; the other fields are ours and all have defaults.

Difficulty. `Task.difficulty` is the rubric's fact count and `Task.difficulty_level` its bucket
(easy 1-3, medium 4-6, hard 7+), with two exceptions:

- a seed that labels its tasks easy / medium / hard (DeepShop, Online-Mind2Web, a generic file with
  such a column) gives `seed_difficulty_level`, which is the level as long as the rubric is not an
  LLM's (`rubric_source` is not ``"llm"``): a rubric read from the seed's own criteria says less
  about the effort than the seed's authors did;
- a task with neither facts nor a label has the level ``"unknown"`` (`UNKNOWN_DIFFICULTY`), never
  "easy": the rollout gives it the longest step budget of its split.

Instructions are at most `MAX_INSTRUCTION_CHARS` characters (see there for where the number comes
from); a longer one is refused by `Task.from_row` and skipped by the importers.

Exceptions (defined in `webgym_data.errors`, which draws the whole tree)::

    WebgymDataError                 the root of every error webgym_data raises
     ├── TaskValidationError        task input that cannot be used (names the file, row and field; a
     │    │                         ValueError)
     │    ├── InvalidTasksError     every invalid row of a task source at once (`webgym_data.loading`)
     │    └── TaskSourceError       the file or folder itself cannot be read (`webgym_data.loading`)
     │         └── NotATaskSetError a folder that is not a built task set (`webgym_data.loading`)
     └── RubricError                a malformed rubric value (a ValueError; `Task.from_row` reports it
                                    as a TaskValidationError naming the field)
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Any

from webgym_data.errors import RubricError, TaskValidationError, WebgymDataError
from webgym_data.features import arrow_of, feature_of

__all__ = [
    "SCHEMA_VERSION",
    "DIFFICULTY_LEVELS",
    "MAX_DIFFICULTY",
    "MAX_INSTRUCTION_CHARS",
    "RUBRIC_SOURCES",
    "TASK_DIFFICULTY_LEVELS",
    "UNKNOWN_DIFFICULTY",
    "FactGroup",
    "RubricError",
    "Task",
    "TaskSource",
    "TaskValidationError",
    "WebgymDataError",
    "difficulty_level",
    "instruction_too_long",
    "make_task_id",
    "normalise_evaluator_reference",
    "normalise_website",
    "seed_difficulty_label",
    "task_arrow_schema",
    "task_features",
    "text_fault",
    "unencodable_field",
]

SCHEMA_VERSION = "1.1"
"""1.1 added `seed_criteria`, `rubric_source` and `seed_difficulty_level`, and the level "unknown"."""

# Difficulty is the number of rubric facts; the levels are the published buckets.
DIFFICULTY_LEVELS = ("easy", "medium", "hard")
"""The levels a fact count (or a seed's label) gives, easiest first."""
UNKNOWN_DIFFICULTY = "unknown"
"""The level of a task with neither rubric facts nor a seed label."""
TASK_DIFFICULTY_LEVELS = (*DIFFICULTY_LEVELS, UNKNOWN_DIFFICULTY)
"""Every value `difficulty_level` can hold."""

RUBRIC_SOURCES = ("", "seed", "llm", "given")
"""Where a task's rubric comes from: ``""`` none; ``"seed"`` an importer's reading of the seed's own
criteria (InSTA-v3 criteria, Mind2Web-Live key nodes, Mind2Web-2 trees, DeepShop attributes), which
``webgym-data build --rubrics all`` replaces with an LLM's; ``"llm"`` written by an LLM; ``"given"``
carried by the row as a rubric (a published or user-made task file, a MiniWoB++ task), kept as is."""

MAX_INSTRUCTION_CHARS = 4_000
"""Longest accepted instruction (`task_name`), in characters. The longest instruction of the seed
sets we import is 930 characters (an AgentSynth-Web composite task; the medians are 67-443), so
this leaves over 4x headroom, while it keeps the instruction (about 1,000 tokens at most) a bounded
share of a policy prompt, which repeats it at every step."""

MAX_DIFFICULTY = 2**31 - 1
"""Largest `difficulty` a row can hold: the column is a 32-bit integer (`task_features`)."""
_INT64 = (-(2**63), 2**63 - 1)
# A lone UTF-16 surrogate: a Python string can hold one (JSON's "\ud800" escape decodes to it), but
# UTF-8 cannot encode it, so a row holding one could be read but never written (JSONL or parquet).
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_TEXT_FIELDS = ("task_id", "task_name", "website", "benchmark_name", "start_url", "domain", "subdomain",
                "definite_answer", "parent_task_id", "instruction_source", "environment", "rubric_source",
                "seed_difficulty_level")


def difficulty_level(difficulty: int) -> str:
    """Map a fact count to its level: easy 1-3, medium 4-6, hard >= 7; no facts (0) is "unknown"."""
    if difficulty <= 0:
        return UNKNOWN_DIFFICULTY
    if difficulty <= 3:
        return "easy"
    if difficulty <= 6:
        return "medium"
    return "hard"


def seed_difficulty_label(value: Any) -> str:
    """A seed's difficulty label as a level: "easy" / "medium" / "hard" in any case (surrounding
    blanks ignored), else ``""`` (not a label: numbers, "Level 2", empty)."""
    if not isinstance(value, str):
        return ""
    label = value.strip().lower()
    return label if label in DIFFICULTY_LEVELS else ""


def make_task_id(*parts: str) -> str:
    """A stable 16-hex-digit id from the given parts (order matters)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return digest[:16]


def normalise_website(website: str) -> str:
    """Return `website` as a URL: a bare host gets ``https://``; whitespace is stripped."""
    website = (website or "").strip()
    if not website:
        return ""
    if "://" not in website and not website.startswith(("miniwob:", "about:")):
        website = "https://" + website.lstrip("/")
    return website


@dataclass(frozen=True)
class FactGroup:
    """One rubric group: a description and the facts the judge must verify for it."""

    id: str
    description: str
    facts: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", str(self.id))
        object.__setattr__(self, "facts", tuple(self.facts))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "description": self.description, "facts": list(self.facts)}


@dataclass(frozen=True)
class TaskSource:
    """Provenance of a task: which importer read it from which file and row, plus raw metadata
    from the seed (for example Online-Mind2Web's ``level``) as a JSON object string."""

    importer: str = ""
    file: str = ""
    row: int = field(default=-1, metadata={"dtype": "int64"})
    metadata: str = "{}"

    def metadata_dict(self) -> dict[str, Any]:
        return json.loads(self.metadata or "{}")


@dataclass(frozen=True)
class Task:
    """One web task. `difficulty` is derived from the rubric when it has facts (a task without one
    keeps the difficulty it was given: 0 when unknown); `difficulty_level` follows the rules in the
    module docstring."""

    task_id: str
    task_name: str
    website: str
    benchmark_name: str
    start_url: str = ""
    domain: str = ""
    subdomain: str = ""
    evaluator_reference: tuple[FactGroup, ...] = ()
    definite_answer: str = ""
    difficulty: int = 0
    parent_task_id: str = ""
    instruction_source: str = "seed"
    environment: str = "web"
    env_seed: int = field(default=0, metadata={"dtype": "int64"})
    source: TaskSource = field(default_factory=TaskSource)
    seed_criteria: tuple[str, ...] = ()
    """The seed's own success criteria as text, one per item (InSTA-v3 criteria, Mind2Web-Live key
    nodes, Mind2Web-2 rubric leaves, DeepShop's attribute / filter / sort): what an LLM writing the
    rubric is shown as reference material; empty when the seed has none, and in subtasks."""
    rubric_source: str = ""
    """Where `evaluator_reference` comes from, one of `RUBRIC_SOURCES`; set from the rubric when
    empty (no rubric: ``""``, a rubric: ``"given"``)."""
    seed_difficulty_level: str = ""
    """The seed's own label, easy / medium / hard, or ``""``: the level while the rubric is not an
    LLM's (the label also stays in ``source.metadata``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "evaluator_reference", tuple(self.evaluator_reference))
        if type(self.seed_criteria) is not tuple:
            object.__setattr__(self, "seed_criteria", tuple(self.seed_criteria))
        facts = self.num_facts
        if facts:
            object.__setattr__(self, "difficulty", facts)
        if not self.start_url:
            object.__setattr__(self, "start_url", self.website)
        if not self.evaluator_reference:
            object.__setattr__(self, "rubric_source", "")
        elif not self.rubric_source:
            object.__setattr__(self, "rubric_source", "given")

    @property
    def num_facts(self) -> int:
        return sum(len(g.facts) for g in self.evaluator_reference)

    @property
    def environment_kind(self) -> str:
        """The name of the task kind that plays this task: what precedes ``:`` in `environment`
        (``web``, ``miniwob``); the kind classes themselves are `webgym_rollout.tasks`."""
        return (self.environment or "web").partition(":")[0]

    @property
    def difficulty_level(self) -> str:
        """easy / medium / hard, or "unknown" (see the module docstring)."""
        if self.seed_difficulty_level and self.rubric_source != "llm":
            return self.seed_difficulty_level
        return difficulty_level(self.difficulty)

    @property
    def needs_rubric(self) -> bool:
        """The task has no fact groups yet, so an LLM must write its rubric. Every task that is
        judged another way carries its rubric from its importer (a MiniWoB++ row: the one fact
        "the environment reports success"), so this never looks at the task's kind."""
        return not self.evaluator_reference

    @property
    def fact_group_ids(self) -> list[str]:
        return [g.id for g in self.evaluator_reference]

    def to_row(self) -> dict[str, Any]:
        """The row as stored in the dataset (see `task_features`)."""
        row = asdict(self)
        row["evaluator_reference"] = [g.to_dict() for g in self.evaluator_reference]
        row["seed_criteria"] = list(self.seed_criteria)
        row["difficulty_level"] = self.difficulty_level
        row["fact_group_ids"] = self.fact_group_ids
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any], *, file: str | None = None,
                 row_index: int | None = None) -> Task:
        """Build a task from a stored or published row, validating every field.

        Accepts the published format unchanged (missing fields of ours take their defaults) and the
        legacy `evaluator_reference` forms. Raises `TaskValidationError` naming file, row and field.

        A row without a `seed_difficulty_level` field (a trajectory row, a row of another tool)
        keeps a stored `difficulty_level` that its fact count does not explain as the seed's label,
        so the level survives a round trip through rows that carry only the level. Not the "easy"
        of a row without facts: builds before schema 1.1 wrote that for every task without a rubric.
        """

        def fail(name: str, message: str) -> TaskValidationError:
            return TaskValidationError(message, file=file, row=row_index, field=name)

        if not isinstance(row, Mapping):
            raise TaskValidationError(f"expected an object, got {type(row).__name__}",
                                      file=file, row=row_index)
        task_name, strings = _row_texts(row, fail)
        try:
            groups = normalise_evaluator_reference(row.get("evaluator_reference"))
        except ValueError as exc:
            raise fail("evaluator_reference", str(exc)) from None
        difficulty, label = _row_difficulty(row, strings, groups, fail)
        try:
            criteria = _strings(row.get("seed_criteria"))
        except ValueError as exc:
            raise fail("seed_criteria", str(exc)) from None
        env_seed = row.get("env_seed") or 0
        if (isinstance(env_seed, bool) or not isinstance(env_seed, int)
                or not _INT64[0] <= env_seed <= _INT64[1]):
            raise fail("env_seed", f"must be a 64-bit integer, got {_shown(env_seed)}")
        website = normalise_website(row["website"])
        benchmark = strings["benchmark_name"]
        # The id hashes text; text UTF-8 cannot encode is refused below, naming its field.
        task_id = strings["task_id"] or (make_task_id(benchmark, website, task_name)
                                         if _encodable(benchmark, website, task_name) else "")
        task = cls(
            task_id=task_id,
            task_name=task_name,
            website=website,
            benchmark_name=benchmark,
            start_url=normalise_website(strings["start_url"]) or website,
            domain=strings["domain"],
            subdomain=strings["subdomain"],
            evaluator_reference=groups,
            definite_answer=strings["definite_answer"],
            difficulty=difficulty,
            parent_task_id=strings["parent_task_id"],
            instruction_source=strings["instruction_source"] or "seed",
            environment=strings["environment"] or "web",
            env_seed=env_seed,
            source=_row_source(row, fail),
            seed_criteria=criteria,
            rubric_source=strings["rubric_source"],
            seed_difficulty_level=seed_difficulty_label(label),
        )
        fault = unencodable_field(task)
        if fault is not None:
            raise fail(*fault)
        return task


_Fail = Callable[[str, str], TaskValidationError]
"""Makes the error for a field of the row being read: (field, message) -> TaskValidationError."""


def _row_texts(row: Mapping[str, Any], fail: _Fail) -> tuple[str, dict[str, str]]:
    """The row's instruction (whitespace collapsed) and its other text fields, stripped; the
    instruction and the website are required."""
    for name in ("task_name", "website"):
        value = row.get(name)
        if not isinstance(value, str) or not value.strip():
            found = "missing" if name not in row else f"got {_shown(value)}"
            raise fail(name, f"is required and must be a non-empty string ({found})")
    task_name = " ".join(row["task_name"].split())
    if len(task_name) > MAX_INSTRUCTION_CHARS:
        raise fail("task_name", instruction_too_long(task_name))
    strings = {}
    for name in ("task_id", "benchmark_name", "start_url", "domain", "subdomain",
                 "definite_answer", "parent_task_id", "instruction_source", "environment",
                 "rubric_source", "seed_difficulty_level"):
        try:
            strings[name] = _text(row.get(name)).strip()
        except ValueError as exc:
            raise fail(name, str(exc)) from None
    return task_name, strings


def _row_difficulty(row: Mapping[str, Any], strings: dict[str, str], groups: tuple[FactGroup, ...],
                    fail: _Fail) -> tuple[int, str]:
    """The row's difficulty (a fact count) and the seed's label (see `Task.from_row`); checks the
    rubric's source on the way (in the order the fields were always checked)."""
    difficulty = row.get("difficulty") or 0
    try:
        difficulty = _integer(difficulty, 0, MAX_DIFFICULTY)
    except ValueError as exc:
        hint = (f"; a seed's label goes in seed_difficulty_level ({'/'.join(DIFFICULTY_LEVELS)})"
                if seed_difficulty_label(difficulty) else "")
        raise fail("difficulty", f"must be a non-negative integer (a fact count): {exc}" + hint) from None
    if strings["rubric_source"] not in RUBRIC_SOURCES:
        raise fail("rubric_source", f"must be one of {', '.join(map(repr, RUBRIC_SOURCES))}, "
                                    f"got {strings['rubric_source']!r}")
    label = strings["seed_difficulty_level"]
    if label and not seed_difficulty_label(label):
        raise fail("seed_difficulty_level", f"must be one of {', '.join(DIFFICULTY_LEVELS)} or empty, "
                                            f"got {label!r}")
    if "seed_difficulty_level" not in row:
        label = _stored_label(row.get("difficulty_level"), groups, difficulty)
    return difficulty, label


def _row_source(row: Mapping[str, Any], fail: _Fail) -> TaskSource:
    """The row's provenance (importer, file, row, metadata), each part checked."""
    source = row.get("source") or {}
    if isinstance(source, TaskSource):
        source = asdict(source)
    if not isinstance(source, Mapping):
        raise fail("source", f"must be an object (importer, file, row, metadata), got {_shown(source)}")
    provenance = {}
    for name in ("importer", "file"):
        value = source.get(name)
        if value is not None and not isinstance(value, str):
            raise fail(f"source.{name}", f"must be a string, got {_shown(value)}")
        provenance[name] = value or ""
    try:
        source_row = -1 if source.get("row") is None else _integer(source["row"], -1, _INT64[1])
    except ValueError as exc:
        raise fail("source.row", f"must be a row number (an integer >= -1): {exc}") from None
    try:
        metadata = _metadata_text(source.get("metadata"))
    except ValueError as exc:
        raise fail("source.metadata", str(exc)) from None
    return TaskSource(importer=provenance["importer"], file=provenance["file"], row=source_row,
                      metadata=metadata)


def instruction_too_long(text: str) -> str:
    """The reason an instruction over `MAX_INSTRUCTION_CHARS` is refused."""
    return (f"is {len(text):,} characters long; instructions are limited to {MAX_INSTRUCTION_CHARS:,} "
            "(webgym_data.schema.MAX_INSTRUCTION_CHARS)")


def unencodable_field(task: Task) -> tuple[str, str] | None:
    """``(field, reason)`` for the first text of `task` that UTF-8 cannot encode (a lone surrogate,
    which a broken ``\\ud800`` escape in a JSON file decodes to), or None when all of it is valid
    text. Such a task could be read but never written back, so readers refuse it up front."""
    source = task.source
    every = "\n".join([*(getattr(task, name) for name in _TEXT_FIELDS), *task.seed_criteria,
                        source.importer, source.file, source.metadata,
                        *(text for group in task.evaluator_reference
                          for text in (group.id, group.description, *group.facts))])
    if not text_fault(every):  # the common case, told with one scan
        return None
    for name in _TEXT_FIELDS:
        reason = text_fault(getattr(task, name))
        if reason:
            return name, reason
    for g, group in enumerate(task.evaluator_reference):
        for part, text in (("id", group.id), ("description", group.description),
                           *((f"fact {f}", fact) for f, fact in enumerate(group.facts))):
            reason = text_fault(text)
            if reason:
                return "evaluator_reference", f"group {g} {part} {reason}"
    for c, criterion in enumerate(task.seed_criteria):
        reason = text_fault(criterion)
        if reason:
            return "seed_criteria", f"item {c} {reason}"
    for name in ("importer", "file", "metadata"):
        reason = text_fault(getattr(task.source, name))
        if reason:
            return f"source.{name}", reason
    return None


def text_fault(text: str) -> str:
    """Why UTF-8 cannot encode `text` (it holds a lone surrogate), or "" when it can. Cheap: ASCII
    text is told apart in constant time."""
    if text.isascii():
        return ""
    match = _SURROGATE.search(text)
    if match is None:
        return ""
    return (f"holds a lone surrogate (U+{ord(match.group()):04X}) at character {match.start()}: not valid "
            "Unicode text (a broken \\u escape in the source file?)")


def _encodable(*texts: str) -> bool:
    return not any(text_fault(text) for text in texts)


def _shown(value: Any, limit: int = 60) -> str:
    """`value` for an error message: its repr, cut to `limit` characters."""
    try:
        text = repr(value)
    except ValueError:  # an integer of more digits than Python writes out
        return f"an integer of {value.bit_length()} bits" if isinstance(value, int) else type(value).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _text(value: Any) -> str:
    """A string field's value: a string, a number as its text (ids are often numbers), None as ""."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(value)
    raise ValueError(f"must be a string, got {type(value).__name__} {_shown(value)}")


def _integer(value: Any, low: int, high: int) -> int:
    """`value` as an integer in ``[low, high]`` (a float with an integral value counts: JSON and
    pandas write ``3.0``); raises ValueError saying what it got."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"got {_shown(value)}")
    if not low <= value <= high:
        raise ValueError(f"got {_shown(value)}, outside {low}..{high}")
    return value


def _metadata_text(value: Any) -> str:
    """`source.metadata` as JSON object text, from that text or from an object."""
    if value is None or value == "" or value == "{}":
        return "{}"
    if isinstance(value, Mapping):
        return json.dumps(dict(value), sort_keys=True, ensure_ascii=False, default=str)
    if not isinstance(value, str):
        raise ValueError(f"must be a JSON object (or its text), got {type(value).__name__} {_shown(value)}")
    try:
        parsed = json.loads(value)
    except RecursionError:
        raise ValueError("is JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not JSON ({exc.msg} at character {exc.pos}): {_shown(value)}") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ValueError(f"is JSON Python cannot read: {str(exc).split(';')[0]}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"must be the text of a JSON object, got {type(parsed).__name__} {_shown(value)}")
    return value


def _stored_label(stored: Any, groups: tuple[FactGroup, ...], difficulty: int) -> str:
    """A stored `difficulty_level` that the fact count does not explain, read as a seed label."""
    label = seed_difficulty_label(stored)
    facts = sum(len(g.facts) for g in groups) or difficulty
    if not label or label == difficulty_level(facts) or (not facts and label == "easy"):
        return ""
    return label


def _strings(value: Any) -> tuple[str, ...]:
    """`seed_criteria` from a list of strings, a JSON list, or one string (one criterion)."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except RecursionError:
                raise ValueError("is JSON nested too deeply") from None
            except json.JSONDecodeError:
                return (" ".join(text.split()),)
        else:
            return (" ".join(text.split()),)
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"must be a list of strings, got {type(value).__name__} {_shown(value)}")
    for position, item in enumerate(value):
        if not isinstance(item, str):
            raise ValueError(f"must be a list of strings: item {position} is {type(item).__name__} "
                             f"{_shown(item)}")
    return tuple(" ".join(v.split()) for v in value if v.strip())


def normalise_evaluator_reference(value: Any) -> tuple[FactGroup, ...]:
    """Normalise every accepted form of `evaluator_reference` to fact groups.

    Accepted: ``None``/empty (no rubric); a list of ``{id, description, facts}`` groups; a JSON
    string of such a list; a plain string (one group with that one fact); a list of strings (one
    group per string, the string being its one fact); a list of ``{description, difficulty}``
    (one group per item, the description being its one fact). Raises `RubricError` (a ValueError) otherwise.
    """
    if value is None or value == "" or value == []:
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("[", "{")):
            try:
                return normalise_evaluator_reference(json.loads(text))
            except RecursionError:
                raise RubricError("is JSON nested too deeply") from None
            except json.JSONDecodeError:
                pass  # text that starts with a bracket: one fact
            except RubricError:
                raise
            except ValueError as exc:  # an integer of more digits than Python converts
                raise RubricError(f"is JSON Python cannot read: {str(exc).split(';')[0]}") from None
        return (FactGroup(id="1", description=text, facts=(text,)),)
    if isinstance(value, Mapping):
        value = [value]
    # An unordered or byte sequence is not a list of groups (iterating bytes gives ints).
    if isinstance(value, (bytes, bytearray, set, frozenset)) or not isinstance(value, Iterable):
        raise RubricError(f"must be a list of fact groups, got {type(value).__name__} {_shown(value)}")
    groups: list[FactGroup] = []
    for position, item in enumerate(value):
        default_id = str(position + 1)
        if isinstance(item, str):
            if not item.strip():
                raise RubricError(f"item {position} is an empty string")
            groups.append(FactGroup(id=default_id, description=item.strip(), facts=(item.strip(),)))
            continue
        if not isinstance(item, Mapping):
            raise RubricError(f"item {position} must be an object or a string, got {type(item).__name__} "
                              f"{_shown(item)}")
        description = item.get("description") or ""
        if not isinstance(description, str):
            raise RubricError(f"item {position}: 'description' must be a string, got {_shown(description)}")
        facts = item.get("facts")
        if facts is None:
            if not description.strip():
                raise RubricError(f"item {position} has neither 'facts' nor 'description'")
            facts = [description]
        if isinstance(facts, str):
            facts = [facts]
        if not isinstance(facts, (list, tuple)) or not all(isinstance(f, str) for f in facts):
            raise RubricError(f"item {position}: 'facts' must be a list of strings, got {_shown(facts)}")
        facts = [f.strip() for f in facts if f.strip()]
        if not facts:
            raise RubricError(f"item {position}: 'facts' is empty")
        group_id = item.get("id")
        if group_id is not None and (isinstance(group_id, bool) or not isinstance(group_id, (str, int))):
            raise RubricError(f"item {position}: 'id' must be a string or an integer, got {_shown(group_id)}")
        groups.append(FactGroup(id=default_id if group_id in (None, "") else str(group_id),
                                description=description.strip(), facts=tuple(facts)))
    ids = [g.id for g in groups]
    if len(set(ids)) != len(ids):
        raise RubricError(f"fact group ids are not unique: {ids}")
    return tuple(groups)


_ROW_COLUMNS = (
    "task_id", "task_name", "website", "start_url", "benchmark_name", "domain", "subdomain", "difficulty",
    "difficulty_level", "evaluator_reference", "definite_answer", "parent_task_id", "fact_group_ids",
    "instruction_source", "environment", "env_seed", "source", "seed_criteria", "rubric_source",
    "seed_difficulty_level",
)
"""The columns of a stored task row in their order in the dataset (its Arrow schema, which built
datasets keep): every field of `Task`, and the two properties `Task.to_row` adds."""
_DERIVED_COLUMNS = ("difficulty_level", "fact_group_ids")


def _row_kinds() -> dict[str, tuple[Any, Mapping[str, Any]]]:
    """``column -> (type, field metadata)`` of a task row, in the order of `_ROW_COLUMNS`: each
    field's, each derived column's from its property's return type."""
    expected = {item.name for item in fields(Task)} | set(_DERIVED_COLUMNS)
    if set(_ROW_COLUMNS) != expected:  # a field added to Task and not to the row's columns, or gone
        raise TypeError(f"_ROW_COLUMNS differs from Task's fields and {list(_DERIVED_COLUMNS)} in "
                        f"{sorted(set(_ROW_COLUMNS) ^ expected)}")
    hints = typing.get_type_hints(Task)
    metadata = {item.name: item.metadata for item in fields(Task)}
    return {name: (typing.get_type_hints(getattr(Task, name).fget)["return"], {}) if name in _DERIVED_COLUMNS
            else (hints[name], metadata[name]) for name in _ROW_COLUMNS}


def task_features():
    """The `datasets.Features` of a task row, derived from `Task`: each field's feature from its
    type (`webgym_data.features.feature_of`), each derived column's from its property's, in the
    order of `_ROW_COLUMNS`."""
    from datasets import Features  # optional: datasets

    return Features({name: feature_of(kind, metadata) for name, (kind, metadata) in _row_kinds().items()})


@lru_cache(maxsize=1)
def task_arrow_schema():
    """The Arrow schema of a task row with the `task_features` in its metadata, as
    ``task_features().arrow_schema`` gives it (what ``load_dataset`` restores the features from),
    made without importing ``datasets`` (`webgym_data.features.arrow_of`): the build writes with it."""
    import pyarrow as pa  # optional: pyarrow

    columns = {name: arrow_of(kind, metadata) for name, (kind, metadata) in _row_kinds().items()}
    info = {"info": {"features": {name: feature for name, (_, feature) in columns.items()}}}
    return pa.schema([pa.field(name, arrow) for name, (arrow, _) in columns.items()],
                     metadata={"huggingface": json.dumps(info)})
