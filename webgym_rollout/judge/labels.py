"""The labels ``webgym-rollout judge-eval`` measures judges against: human labels, or the local
sites' ground truth of a run.

Each source gives an episode its label (`EpisodeLabel`: success or failure, and where it was read)
or the reason it has none, counted in the report: `HumanLabels` (`human_labels`: a label file or a
column of the trajectory dataset) and `TruthLabels` (the run's ``truth.jsonl``).

Human labels
------------
From a file (``--labels FILE``) or from a column of the trajectory dataset (``--label-column NAME``).
A file is one of

- JSONL: one record (JSON object) per line;
- JSON: a list of records (e.g. Online-Mind2Web's ``human_label.json``), or one object of
  ``id: label`` pairs;
- CSV with a header row (e.g. AgentRewardBench's expert annotations, ``annotations.csv``).

A record names its episode by ``episode_id``, its task by ``task_id``, or its task by the
instruction (a ``task_name``, ``confirmed_task``, ``instruction`` or ``intent`` field, matched against
the episode's ``task_name`` with whitespace and case ignored). ``--label-key`` picks one; ``auto``
(the default) tries them in that order and takes the first that matches an episode; the keys of an
``id: label`` object are tried as episode ids, then as task ids. A task id or an instruction must
name exactly one episode of the dataset (several attempts of a task need episode ids). Seed task
sets keep their own ids in the task's provenance, which trajectory rows do not carry:
Online-Mind2Web's ``task_id`` is not the toolkit's, and its records match through
``confirmed_task``, the instruction the importer made the task's ``task_name``.

The label is the field ``--label-field``; by default the first of ``label``, ``human_label``,
``success``, ``trajectory_success`` that the records have. Online-Mind2Web's file holds one field
per agent (``Operator_human_label``, ``Browser_Use_human_label``, ...): choose one with
``--label-field``. ``--label-where KEY=VALUE`` keeps only the records whose field KEY equals VALUE
(AgentRewardBench labels four agents in one file:
``--label-where model_name=GenericAgent-gpt-4o-2024-11-20``).

Label values: ``1``, ``true``, ``success``, ``successful``, ``yes``, ``pass`` are a success; ``0``,
``false``, ``failure``, ``unsuccessful``, ``no``, ``fail`` a failure (case and surrounding quotes do not
matter; numbers may be strings, as Online-Mind2Web writes them). Excluded from the measure, and
counted: ``2`` (Online-Mind2Web: the task was not executable), ``unsure`` (AgentRewardBench), ``n/a``,
an empty value and ``null``. Any other value is an error naming the file, the line or item, and the
field. The first record for an episode wins; later ones are counted as duplicates (in
AgentRewardBench's file a trajectory's first record is its primary annotator's).

In a label column, an empty cell (null) means the episode has no label.

A label that matches no episode is an error listing each (file and line) unless ``--allow-unmatched``;
an episode without a label is not judged and is counted.

The sites' ground truth
-----------------------
A run of generated site tasks made with a site server's truth source keeps, beside its episodes,
``truth.jsonl`` (`webgym_rollout.judge.truth`): the sites' facts of each finished episode. The
truth of an episode is the sites' own verdict on those stored facts and the stored final answer
(`site_verdicts`: every rubric fact's check holds, and the answer contains the task's definite
answer); computing it again needs no model, browser or site, only the tasks the run played (their
checks; matched by task id). Which episodes have no truth label, and are counted:

- an infrastructure failure (browser, policy endpoint, blocked site) says nothing about the agent
  (``infrastructure``); an episode whose run judge failed (``error:judge_*``) keeps its truth;
- an episode without a truth line (``without_truth``), or whose task is not among the tasks given,
  or has no checks (``unknown_task``).

Exceptions: `LabelError` (a `RolloutError`) for human labels that cannot be read or matched;
`TruthFileError` for a truth file that is missing, unreadable or does not match the run.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from webgym_data.schema import Task
from webgym_rollout.errors import LabelError, TruthFileError
from webgym_rollout.judge.site import site_verdicts
from webgym_rollout.judge.truth import TRUTH_FILE, read_truth
from webgym_rollout.trajectory.contract import Episode
from webgym_rollout.trajectory.reader import TrajectorySet
from webgym_sites.goals import task_checks

__all__ = [
    "LABEL_FIELDS",
    "EpisodeLabel",
    "HumanLabels",
    "Label",
    "LabelError",
    "LabelSettings",
    "TruthLabels",
    "human_labels",
    "parse_label",
    "read_labels",
]

log = logging.getLogger(__name__)

LABEL_FIELDS = ("label", "human_label", "success", "trajectory_success")
"""The label fields looked for, in order, when ``--label-field`` is not given."""
INSTRUCTION_FIELDS = ("task_name", "confirmed_task", "instruction", "intent")
"""The fields of a record that hold its task's instruction (matched against ``task_name``)."""
_SUCCESS = frozenset({"1", "true", "yes", "success", "successful", "pass", "passed"})
_FAILURE = frozenset({"0", "false", "no", "failure", "fail", "failed", "unsuccessful"})
_EXCLUDED = frozenset({"2", "unsure", "n/a", "na", "none", "null", "not executable", ""})
_SHOWN = 10
"""Most unmatched labels an error message lists one by one."""


# ------------------------------------------------------------------------------------ human labels

@dataclass(frozen=True)
class LabelSettings:
    """Where the human labels come from and how their records are read (the ``--label*`` flags)."""

    labels: Path | None = None
    """Label file: JSONL, JSON (a list of records, e.g. Online-Mind2Web's human_label.json, or an
    object of id: label) or CSV with a header (e.g. AgentRewardBench's annotations.csv)."""
    label_column: str = ""
    """Instead of a file: the column of the trajectory dataset that holds each episode's label."""
    label_field: str = ""
    """The field of a record that holds the label; default: the first of label, human_label,
    success, trajectory_success present (Online-Mind2Web: e.g. Operator_human_label)."""
    label_key: Literal["auto", "episode_id", "task_id", "task_name"] = "auto"
    """How a record names its episode: episode_id; task_id or task_name (the instruction, in a
    task_name, confirmed_task, instruction or intent field), each naming one episode; or auto (the
    first of these the record has that matches an episode)."""
    label_where: dict[str, str] = field(default_factory=dict)
    """Keep only the records whose field KEY equals VALUE (e.g. model_name=... for one agent)."""
    allow_unmatched: bool = False
    """Measure the labels that match an episode and count the others, instead of stopping."""

    def __post_init__(self) -> None:
        if self.labels is not None and self.label_column:
            raise ValueError("labels: give a label file or a label column, not both")



def parse_label(value: Any) -> bool | None:
    """True (success), False (failure) or None (excluded: 2 = not executable, unsure, n/a, empty).
    Raises ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if value in (0, 1):
            return bool(value)
        if value == 2:
            return None
        raise ValueError(f"{value!r} is not a label")
    if isinstance(value, str):
        text = value.strip().strip("'\"").strip().casefold()
        if text in _SUCCESS:
            return True
        if text in _FAILURE:
            return False
        if text in _EXCLUDED:
            return None
    raise ValueError(f"{value!r} is not a label")


_EXPECTED = ("expected 1/0 (or success/failure, true/false, yes/no), or 2 / unsure / n/a / empty "
             "to exclude the episode")


@dataclass(frozen=True)
class Label:
    """One human label, and where it was read."""

    ids: tuple[tuple[str, str], ...]
    """What the record names its episode by, tried in order: ``("episode_id", ...)``,
    ``("task_id", ...)``, ``("task_name", instruction)``."""
    success: bool | None
    """The human verdict; None: excluded (not executable, unsure)."""
    where: str
    """File and line (or item, or column and row) of the record, for messages."""

    def describe(self) -> str:
        return ", ".join(f"{kind} {_short(value)!r}" for kind, value in self.ids)


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _instruction(text: str) -> str:
    """An instruction as matched: whitespace collapsed, case folded."""
    return " ".join(str(text).split()).casefold()


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) of each record of a label file; a JSON object of ``id: label`` gives
    ``{"__key__": id, "__label__": label}`` records."""
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise LabelError(f"{path}: cannot read the label file: {exc}") from None
    if suffix == ".csv":
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames:
            raise LabelError(f"{path}: the CSV file has no header row")
        for record in reader:
            yield f"{path} line {reader.line_num}", record
        return
    if suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield f"{path} line {number}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise LabelError(f"{path} line {number}: not JSON: {exc.msg}") from None
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LabelError(f"{path} line {exc.lineno}: not JSON: {exc.msg} "
                         "(label files are .jsonl, .json or .csv)") from None
    if isinstance(data, list):
        for number, record in enumerate(data, start=1):
            yield f"{path} item {number}", record
    elif isinstance(data, dict):
        for key, value in data.items():
            yield f"{path} key {key!r}", {"__key__": str(key), "__label__": value}
    else:
        raise LabelError(f"{path}: expected a list of records or an object of id: label, "
                         f"got {type(data).__name__}")


def _label_field(path: Path, records: Sequence[tuple[str, Mapping[str, Any]]], wanted: str) -> str:
    if wanted:
        return wanted
    names: list[str] = []
    for _, record in records:
        names += [name for name in record if name not in names]
    for name in LABEL_FIELDS:
        if name in names:
            return name
    per_agent = [name for name in names if name.casefold().endswith("human_label")]
    if per_agent:
        raise LabelError(f"{path}: the records hold several label fields ({', '.join(per_agent)}): "
                         "choose one with --label-field")
    raise LabelError(f"{path}: no label field ({', '.join(LABEL_FIELDS)}) in the records, whose fields are "
                     f"{', '.join(names) or 'none'}: name it with --label-field")


def read_labels(path: str | Path, settings: LabelSettings) -> list[Label]:
    """The labels of a label file (JSONL, JSON or CSV; see the module docstring). Raises
    `LabelError` naming the file, the line or item, and the field of a bad record."""
    path = Path(path)
    records = list(_records(path))
    for where, record in records:
        if not isinstance(record, Mapping):
            raise LabelError(f"{where}: expected an object (a record), got {type(record).__name__}")
    if settings.label_where:
        for name in settings.label_where:
            if not any(name in record for _, record in records):
                raise LabelError(f"{path}: --label-where names the field {name!r}, which no record has")
        records = [(where, record) for where, record in records
                   if all(str(record.get(name)) == value for name, value in settings.label_where.items())]
    mapping = bool(records) and "__key__" in records[0][1]
    label_field = "__label__" if mapping else _label_field(path, records, settings.label_field)
    labels = []
    for where, record in records:
        if label_field not in record:
            raise LabelError(f"{where}: the record has no field {label_field!r}")
        try:
            success = parse_label(record[label_field])
        except ValueError:
            raise LabelError(f"{where}: field {label_field!r}: {record[label_field]!r} is not a label "
                             f"({_EXPECTED})") from None
        labels.append(Label(ids=_ids(where, record, settings.label_key), success=success, where=where))
    return labels


def _ids(where: str, record: Mapping[str, Any], wanted: str) -> tuple[tuple[str, str], ...]:
    """What a record names its episode by, in the order they are tried (see `Label.ids`)."""
    if "__key__" in record:  # an object of id: label
        kinds = ("episode_id", "task_id") if wanted == "auto" else (wanted,)
        return tuple((kind, record["__key__"]) for kind in kinds)
    kinds = ("episode_id", "task_id", "task_name") if wanted == "auto" else (wanted,)
    ids = []
    for kind in kinds:
        names = INSTRUCTION_FIELDS if kind == "task_name" else (kind,)
        value = next((record[name] for name in names if record.get(name) not in (None, "")), None)
        if value is not None:
            ids.append((kind, str(value)))
    if not ids:
        instruction = f"instruction ({', '.join(INSTRUCTION_FIELDS)})"
        fields = {"auto": f"episode_id, task_id or {instruction}",
                  "task_name": instruction}.get(wanted, wanted)
        raise LabelError(f"{where}: the record has no {fields} to name its episode")
    return tuple(ids)


def _column_labels(trajectories: TrajectorySet, column: str) -> list[Label]:
    labels = []
    row = 0
    for batch in trajectories.batches(columns=["episode_id", column], batch_size=256):
        if column not in batch.schema.names:
            raise LabelError(f"{trajectories.id}: the trajectory dataset has no column {column!r} "
                             f"(--label-column)")
        for episode_id, value in zip(batch.column("episode_id").to_pylist(),
                                     batch.column(column).to_pylist(), strict=True):
            row += 1
            if value is None:  # an empty cell: this episode has no label
                continue
            where = f"{trajectories.id} column {column!r} row {row} (episode {episode_id})"
            try:
                success = parse_label(value)
            except ValueError:
                raise LabelError(f"{where}: {value!r} is not a label ({_EXPECTED})") from None
            labels.append(Label(ids=(("episode_id", str(episode_id)),), success=success, where=where))
    return labels


def _match(labels: Sequence[Label], trajectories: TrajectorySet) -> tuple[dict[str, Label], list[str], int]:
    """(the label of each labelled episode by episode id, the labels that match no episode, the
    duplicate labels of an episode)."""
    index: dict[str, dict[str, list[str]]] = {"episode_id": {}, "task_id": {}, "task_name": {}}
    for batch in trajectories.batches(columns=["episode_id", "task_id", "task_name"], batch_size=1024):
        for row in batch.to_pylist():
            episode_id = row["episode_id"]
            index["episode_id"][episode_id] = [episode_id]
            index["task_id"].setdefault(row["task_id"], []).append(episode_id)
            index["task_name"].setdefault(_instruction(row["task_name"]), []).append(episode_id)
    matched: dict[str, Label] = {}
    unmatched: list[str] = []
    duplicates = 0
    for label in labels:
        found = None
        for kind, value in label.ids:
            episodes = index[kind].get(_instruction(value) if kind == "task_name" else value)
            if episodes:
                if len(episodes) > 1:
                    raise LabelError(f"{label.where}: {kind.replace('_', ' ')} {_short(value)!r} has "
                                     f"{len(episodes)} episodes in {trajectories.id}: label them by "
                                     "episode_id")
                found = episodes[0]
                break
        if found is None:
            unmatched.append(f"{label.where} ({label.describe()})")
        elif found in matched:
            duplicates += 1
        else:
            matched[found] = label
    return matched, unmatched, duplicates


# ------------------------------------------------------------------------------------ the sources

@dataclass(frozen=True)
class EpisodeLabel:
    """The label of one episode."""

    success: bool
    source: str
    """Where it was read: the label file and line (or item, or column and row), or the truth file."""
    failed: tuple[str, ...] = ()
    """The truth's failed criteria (``fact:<group>:<n>``, ``definite_answer``); empty otherwise."""
    level: str = ""
    """The difficulty level of the episode's task as the tasks given say (truth); "": the episode's own."""


@dataclass
class HumanLabels:
    """Human labels matched to the episodes of a trajectory dataset (`human_labels`)."""

    by_episode: dict[str, Label]
    """The label of each labelled episode, by episode id (the first label that names it)."""
    read: int = 0
    """Label records read (after --label-where)."""
    duplicates: int = 0
    """Labels for an episode that an earlier label already named."""
    unmatched: list[str] = field(default_factory=list)
    """Labels that match no episode (where each was read, and what it names)."""
    description: str = "human labels"

    SKIPPED = ("excluded", "unlabelled")
    """Why an episode has no label: its label is 2 (not executable), unsure, n/a or empty; it has none."""

    def label(self, episode: Episode) -> EpisodeLabel | str:
        """The episode's label, or the reason (of `SKIPPED`) it has none."""
        found = self.by_episode.get(episode.episode_id)
        if found is None:
            return "unlabelled"
        if found.success is None:
            return "excluded"
        return EpisodeLabel(success=found.success, source=found.where)


def human_labels(trajectories: TrajectorySet, settings: LabelSettings) -> HumanLabels:
    """The labels of `settings` (a label file or a column of `trajectories`) matched to its
    episodes. Raises `LabelError` for a label that cannot be read, one that matches no episode
    (unless ``allow_unmatched``), and when no episode has a success or failure label."""
    if settings.label_column:
        labels = _column_labels(trajectories, settings.label_column)
        description = f"human labels (column {settings.label_column})"
    elif settings.labels is not None:
        labels = read_labels(settings.labels, settings)
        description = f"human labels ({settings.labels})"
    else:
        raise LabelError("labels: give a label file (--labels) or a label column (--label-column)")
    matched, unmatched, duplicates = _match(labels, trajectories)
    if unmatched and not settings.allow_unmatched:
        shown = "; ".join(unmatched[:_SHOWN])
        more = f" and {len(unmatched) - _SHOWN} more" if len(unmatched) > _SHOWN else ""
        raise LabelError(f"{len(unmatched)} labels match no episode of {trajectories.id}: "
                         f"{shown}{more} (--allow-unmatched measures the matched ones only)")
    if not any(label.success is not None for label in matched.values()):
        excluded = sum(1 for label in matched.values() if label.success is None)
        raise LabelError(f"no episode of {trajectories.id} has a success or failure label "
                         f"({len(labels)} labels read, {excluded} excluded)")
    return HumanLabels(by_episode=matched, read=len(labels), duplicates=duplicates, unmatched=unmatched,
                       description=description)


class TruthLabels:
    """The local sites' ground truth of a run (its ``truth.jsonl``) as labels; `tasks` are the
    generated site tasks it played (their checks; matched by task id). Reads the truth file at
    once: raises `TruthFileError` for a missing file or a bad line."""

    SKIPPED = ("without_truth", "unknown_task", "infrastructure")
    """Why an episode has no truth label (see the module docstring)."""

    def __init__(self, run_dir: str | Path, tasks: Iterable[Task]) -> None:
        self.path = Path(run_dir) / TRUTH_FILE
        self.truth = read_truth(run_dir)
        self.tasks = {task.task_id: task for task in tasks}
        self.seen: set[str] = set()
        self.description = "the sites' ground truth"

    def label(self, episode: Episode) -> EpisodeLabel | str:
        """The episode's truth, or the reason (of `SKIPPED`) it has none. Raises `TruthFileError`
        when its truth line names another task than the run does."""
        self.seen.add(episode.episode_id)
        if episode.status.is_error and not episode.status.error_kind.startswith("judge_"):
            return "infrastructure"
        if episode.episode_id not in self.truth:
            return "without_truth"
        task_id, facts = self.truth[episode.episode_id]
        if task_id != episode.task.task_id:
            raise TruthFileError(f"{self.path}: episode {episode.episode_id} is of task {task_id} there, "
                                 f"but of task {episode.task.task_id} in the run")
        task = self.tasks.get(task_id)
        parent = self.tasks.get(task.parent_task_id) if task is not None else None
        if task is None or not _has_checks(task, parent):
            return "unknown_task"
        verdicts = site_verdicts(task, facts, episode.answer, parent)
        return EpisodeLabel(success=bool(verdicts) and all(v.passed for v in verdicts), source=str(self.path),
                            failed=tuple(v.criterion for v in verdicts if not v.passed),
                            level=task.difficulty_level)

    @property
    def without_episode(self) -> int:
        """Truth lines whose episode was not read (a run cut before its shard was written, or of
        another split)."""
        return len(set(self.truth) - self.seen)


def _has_checks(task: Task, parent: Task | None) -> bool:
    try:
        return bool(task_checks(task, parent))
    except ValueError:
        return False
