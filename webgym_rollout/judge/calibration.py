"""``webgym-rollout judge-eval``: measure a judge against human labels of stored episodes.

The episodes come from a trajectory dataset (`read_episodes`: a rollout folder or a Hub dataset id)
and are scored again by the judge that `JudgeSettings` describes (the ``--judge*`` flags of ``run``),
without a browser: the judge sees what it sees in a run (`JudgeRequest.from_episode`: the task, the
answer, the stored screenshots, URLs and titles). With ``--no-rescore`` the rewards stored in the
dataset (the judge that ran with the rollout) are measured instead, and no judge is called. The
judge's pass is compared with the human label of the same episode:

- accuracy, precision, recall and F1 of "the judge says success" against "the human says success"
  (precision and recall are undefined, ``null``, when nothing is predicted or labelled a success);
- the success-rate gap: the judge's success rate minus the humans', over the same episodes
  (positive: the judge is lenient);
- the same per benchmark (``benchmark_name``), the confusion counts, and each episode's two verdicts.

A table goes to the terminal and everything to the JSON file ``--out``.

Labels
------
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

Exceptions: `LabelError` (a `RolloutError`) for labels that cannot be read or matched; the judge's
own `JudgeError`s (endpoint down, after its retries) end the command. A reply without a valid verdict
is counted as a judge error and scored as the run would score it: a failure.
"""

from __future__ import annotations

import asyncio
import csv
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import click

from webgym_core.errors import SettingsError
from webgym_core.settings import flat, load_settings, settings_options, settings_to_dict
from webgym_rollout.errors import LabelError, RolloutError
from webgym_rollout.judge.judges import JudgeRequest, JudgeSettings, make_judge
from webgym_rollout.trajectory.contract import Episode, TrajectoryError
from webgym_rollout.trajectory.reader import TrajectorySet, read_episodes

__all__ = [
    "EpisodeVerdict",
    "JudgeEvalReport",
    "JudgeEvalSettings",
    "JudgeMetrics",
    "Label",
    "LabelError",
    "LabelSettings",
    "judge_eval",
    "judge_eval_command",
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


# ------------------------------------------------------------------------------------- settings

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


@dataclass(frozen=True)
class JudgeEvalSettings:
    """Settings of ``webgym-rollout judge-eval``."""

    trajectories: str = field(default="", metadata={"cli": False})
    """The labelled episodes: a rollout folder or a Hub dataset id (org/name[@revision])."""
    split: str | None = None
    """Only the episodes of this split (train, test); default: all."""
    out: Path | None = None
    """The JSON file to write: the metrics, the counts and each episode's human and judge verdict."""
    concurrency: int = 8
    """Episodes judged at once."""
    rescore: bool = True
    """Judge the episodes again with --judge; --no-rescore measures the rewards stored in the dataset."""
    progress: bool = True
    """Show a progress bar on stderr."""
    labels: LabelSettings = flat(LabelSettings)
    judge: JudgeSettings = field(default_factory=JudgeSettings)

    def __post_init__(self) -> None:
        if not self.trajectories:
            raise ValueError("trajectories: a rollout folder or Hub dataset id is required")
        if self.out is None:
            raise ValueError("out: the JSON file to write is required")
        if self.labels.labels is None and not self.labels.label_column:
            raise ValueError("labels: a label file (--labels) or a label column (--label-column) is required")
        if self.concurrency < 1:
            raise ValueError(f"concurrency: must be >= 1, got {self.concurrency}")


# --------------------------------------------------------------------------------------- labels

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


# -------------------------------------------------------------------------------------- metrics

def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


@dataclass(frozen=True)
class JudgeMetrics:
    """The judge's verdicts against the human labels over a set of episodes (success = positive)."""

    tp: int = 0
    """Both say success."""
    fp: int = 0
    """The judge says success, the human failure."""
    fn: int = 0
    """The judge says failure, the human success."""
    tn: int = 0
    """Both say failure."""

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[bool, bool]]) -> JudgeMetrics:
        """From (human, judge) verdicts."""
        counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
        for human, judge in pairs:
            counts[("t" if human == judge else "f") + ("p" if judge else "n")] += 1
        return cls(**counts)

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def accuracy(self) -> float | None:
        return _ratio(self.tp + self.tn, self.n)

    @property
    def precision(self) -> float | None:
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def f1(self) -> float | None:
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    @property
    def human_success_rate(self) -> float | None:
        return _ratio(self.tp + self.fn, self.n)

    @property
    def judge_success_rate(self) -> float | None:
        return _ratio(self.tp + self.fp, self.n)

    @property
    def success_rate_gap(self) -> float | None:
        """Judge minus human success rate (positive: the judge passes more than the humans do)."""
        return _ratio(self.fp - self.fn, self.n)

    def as_dict(self) -> dict[str, Any]:
        names = ("n", "accuracy", "precision", "recall", "f1", "human_success_rate", "judge_success_rate",
                 "success_rate_gap")
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn,
                **{name: getattr(self, name) for name in names}}


@dataclass(frozen=True)
class EpisodeVerdict:
    """One labelled episode: what the human and the judge said."""

    episode_id: str
    task_id: str
    benchmark: str
    human: bool
    judge: bool
    label: str
    """Where the human label was read."""
    judge_error: str = ""
    """The judge's error ("kind: message") when it could not decide (scored as a failure)."""
    verdicts: dict[str, bool] = field(default_factory=dict)
    """The judge's verdict per criterion (empty with --no-rescore)."""


@dataclass
class JudgeEvalReport:
    """What ``judge-eval`` measured, and what it could not."""

    trajectories: str
    version: str
    judge_model: str
    episodes: list[EpisodeVerdict] = field(default_factory=list)
    labels: int = 0
    """Label records read (after --label-where)."""
    excluded: int = 0
    """Labels excluded from the measure: 2 (not executable), unsure, n/a, empty."""
    duplicates: int = 0
    """Labels for an episode that an earlier label already named."""
    unmatched: list[str] = field(default_factory=list)
    """Labels that match no episode (where each was read)."""
    unlabelled_episodes: int = 0
    """Episodes of the dataset without a label (not judged)."""

    @property
    def metrics(self) -> JudgeMetrics:
        return JudgeMetrics.from_pairs((e.human, e.judge) for e in self.episodes)

    def by_benchmark(self) -> dict[str, JudgeMetrics]:
        pairs: dict[str, list[tuple[bool, bool]]] = {}
        for e in self.episodes:
            pairs.setdefault(e.benchmark, []).append((e.human, e.judge))
        return {name: JudgeMetrics.from_pairs(pairs[name]) for name in sorted(pairs)}

    @property
    def judge_errors(self) -> int:
        return sum(1 for e in self.episodes if e.judge_error)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectories": self.trajectories, "version": self.version, "judge_model": self.judge_model,
            "metrics": self.metrics.as_dict(),
            "by_benchmark": {name: m.as_dict() for name, m in self.by_benchmark().items()},
            "counts": {"labels": self.labels, "measured": len(self.episodes), "excluded": self.excluded,
                       "duplicates": self.duplicates, "unmatched": len(self.unmatched),
                       "unlabelled_episodes": self.unlabelled_episodes, "judge_errors": self.judge_errors},
            "unmatched": list(self.unmatched),
            "episodes": [{"episode_id": e.episode_id, "task_id": e.task_id, "benchmark": e.benchmark,
                          "human": e.human, "judge": e.judge, "agree": e.human == e.judge, "label": e.label,
                          "judge_error": e.judge_error, "verdicts": e.verdicts} for e in self.episodes],
        }


# ------------------------------------------------------------------------------------- matching

def _match(labels: Sequence[Label], trajectories: TrajectorySet,
           report: JudgeEvalReport) -> dict[str, Label]:
    """The label of each labelled episode (by episode id); fills the report's counts."""
    index: dict[str, dict[str, list[str]]] = {"episode_id": {}, "task_id": {}, "task_name": {}}
    for batch in trajectories.batches(columns=["episode_id", "task_id", "task_name"], batch_size=1024):
        for row in batch.to_pylist():
            episode_id = row["episode_id"]
            index["episode_id"][episode_id] = [episode_id]
            index["task_id"].setdefault(row["task_id"], []).append(episode_id)
            index["task_name"].setdefault(_instruction(row["task_name"]), []).append(episode_id)
    matched: dict[str, Label] = {}
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
            report.unmatched.append(f"{label.where} ({label.describe()})")
        elif found in matched:
            report.duplicates += 1
        else:
            matched[found] = label
    report.labels = len(labels)
    report.excluded = sum(1 for label in matched.values() if label.success is None)
    report.unlabelled_episodes = len(index["episode_id"]) - len(matched)
    return matched


# ------------------------------------------------------------------------------------- judging

async def judge_eval(settings: JudgeEvalSettings, *, judge: Any = None,
                     on_progress: Callable[[int, int], None] | None = None) -> JudgeEvalReport:
    """Score the labelled episodes of `settings.trajectories` with the judge (`judge`, else the one
    `settings.judge` describes; none with ``rescore=False``) and compare with the labels.
    `on_progress(done, total)` is called after each episode. Raises `LabelError`,
    `TrajectoryError`, or the judge's `JudgeError` when its endpoint fails."""
    trajectories = read_episodes(settings.trajectories, split=settings.split)
    if settings.labels.label_column:
        labels = _column_labels(trajectories, settings.labels.label_column)
    else:
        labels = read_labels(settings.labels.labels, settings.labels)  # type: ignore[arg-type]
    if settings.rescore and judge is None:
        judge = make_judge(settings.judge)
    model = getattr(judge, "model_id", "") if settings.rescore else "stored rewards"
    report = JudgeEvalReport(trajectories=trajectories.id, version=trajectories.version, judge_model=model)
    matched = _match(labels, trajectories, report)
    if report.unmatched and not settings.labels.allow_unmatched:
        shown = "; ".join(report.unmatched[:_SHOWN])
        more = f" and {len(report.unmatched) - _SHOWN} more" if len(report.unmatched) > _SHOWN else ""
        raise LabelError(f"{len(report.unmatched)} labels match no episode of {trajectories.id}: "
                         f"{shown}{more} (--allow-unmatched measures the matched ones only)")
    wanted = {episode_id: label for episode_id, label in matched.items() if label.success is not None}
    if not wanted:
        raise LabelError(f"no episode of {trajectories.id} has a success or failure label "
                         f"({len(labels)} labels read, {report.excluded} excluded)")
    try:
        verdicts = await _score_all(trajectories, wanted, judge if settings.rescore else None,
                                    settings.concurrency, on_progress)
    finally:
        if settings.rescore and hasattr(judge, "close"):
            await judge.close()
    order = {episode_id: n for n, episode_id in enumerate(matched)}
    report.episodes = sorted(verdicts, key=lambda v: order[v.episode_id])
    return report


async def _score_all(trajectories: TrajectorySet, wanted: Mapping[str, Label], judge: Any, concurrency: int,
                     on_progress: Callable[[int, int], None] | None) -> list[EpisodeVerdict]:
    results: list[EpisodeVerdict] = []
    pending: set[asyncio.Task] = set()

    async def score(episode: Episode) -> None:
        label = wanted[episode.episode_id]
        if judge is None:
            passed, error, verdicts = episode.success, "", {}
        else:
            result = await judge.score(JudgeRequest.from_episode(episode))
            passed, error = result.passed, result.error
            verdicts = {v.criterion: v.passed for v in result.verdicts}
            if error:
                log.warning("episode %s: the judge could not decide: %s", episode.episode_id, error)
        results.append(EpisodeVerdict(episode_id=episode.episode_id, task_id=episode.task.task_id,
                                      benchmark=episode.task.benchmark_name or "(none)",
                                      human=bool(label.success), judge=passed, label=label.where,
                                      judge_error=error, verdicts=verdicts))
        if on_progress is not None:
            on_progress(len(results), len(wanted))

    try:
        for episode in trajectories:  # read in small batches: screenshots never pile up
            if episode.episode_id not in wanted:
                continue
            if len(pending) >= concurrency:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # a JudgeError ends the evaluation
            pending.add(asyncio.create_task(score(episode), name=f"judge-{episode.episode_id}"))
        for task in asyncio.as_completed(list(pending)):
            await task
    except BaseException:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise
    return results


# ------------------------------------------------------------------------------------------ CLI

def _percent(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def _table(report: JudgeEvalReport):
    from rich import box
    from rich.table import Table

    table = Table(title=f"judge {report.judge_model} against human labels ({report.trajectories})",
                  box=box.SIMPLE_HEAD, caption="%: of the episodes measured; SR: success rate; "
                  "gap: judge SR minus human SR, in points")
    for name in ("episodes", "n", "TP", "FP", "FN", "TN", "accuracy %", "precision %", "recall %",
                 "F1 %", "human SR %", "judge SR %", "gap"):
        table.add_column(name, justify="left" if name == "episodes" else "right", no_wrap=True)
    rows = [("all", report.metrics)]
    benchmarks = report.by_benchmark()
    if len(benchmarks) > 1:
        rows += sorted(benchmarks.items())
    for name, m in rows:
        table.add_row(name, str(m.n), str(m.tp), str(m.fp), str(m.fn), str(m.tn), _percent(m.accuracy),
                      _percent(m.precision), _percent(m.recall), _percent(m.f1),
                      _percent(m.human_success_rate), _percent(m.judge_success_rate),
                      _percent(m.success_rate_gap, signed=True))
    return table


class _Bar:
    """A rich progress bar on stderr (or nothing); ``update(done, total)``."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self._progress, self._task = enabled, None, None

    def __enter__(self) -> _Bar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("judging"), BarColumn(), MofNCompleteColumn(),
                                      TimeRemainingColumn(), console=Console(stderr=True))
            self._progress.start()
        return self

    def update(self, done: int, total: int) -> None:
        if self._progress is None:
            return
        if self._task is None:
            self._task = self._progress.add_task("judging", total=total)
        self._progress.update(self._task, completed=done, total=total)

    def __exit__(self, *exc_info: Any) -> None:
        if self._progress is not None:
            self._progress.stop()


@click.command("judge-eval")
@click.argument("trajectories")
@settings_options(JudgeEvalSettings)
def judge_eval_command(trajectories: str, config: str | None, **flags: Any) -> None:
    """Measure a judge against human labels of the episodes in TRAJECTORIES (a rollout folder or a
    Hub dataset id): accuracy, precision, recall, F1 and the success-rate gap (judge minus human).

    The judge (the --judge* flags, as for `run`) scores the stored episodes again, without
    browsers; --no-rescore measures the rewards already in the dataset. Labels come from a JSONL,
    JSON or CSV file (--labels) keyed by episode_id or task_id, or from a column of the dataset
    (--label-column). Label 2 (Online-Mind2Web: not executable) and "Unsure" (AgentRewardBench) are
    excluded. A table is printed and everything goes to --out (JSON).

    \b
    Example:
      # Online-Mind2Web's human labels of one agent, keyed by task id, judged by GPT-4o:
      webgym-rollout judge-eval out/eval --labels human_label.json \\
          --label-field Operator_human_label --judge rubric \\
          --judge-base-url https://api.openai.com/v1 --judge-model gpt-4o --out judge-eval.json
      # AgentRewardBench's expert annotations of one agent, a judge served by vLLM:
      webgym-rollout judge-eval org/arb-trajectories --labels annotations.csv \\
          --label-where model_name=GenericAgent-gpt-4o-2024-11-20 --judge rubric \\
          --judge-base-url http://127.0.0.1:8001/v1 --judge-model Qwen/Qwen2.5-VL-72B-Instruct \\
          --out arb.json
    """
    try:
        settings = load_settings(JudgeEvalSettings, config, flags, trajectories=trajectories)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        with _Bar(settings.progress) as bar:
            report = asyncio.run(judge_eval(settings, on_progress=bar.update))
    except (LabelError, TrajectoryError, RolloutError) as exc:
        raise click.ClickException(str(exc)) from exc
    import sys

    from rich.console import Console

    # a pipe or a file gets the whole table; a terminal gets its own width
    Console(width=None if sys.stdout.isatty() else 160).print(_table(report))
    out = settings.out
    assert out is not None  # checked by the settings
    out.parent.mkdir(parents=True, exist_ok=True)
    recorded = settings_to_dict(settings)
    recorded["judge"].pop("api_key", None)  # never write a secret into a results file
    out.write_text(json.dumps({**report.to_dict(), "settings": recorded}, indent=2) + "\n", encoding="utf-8")
    click.echo(f"{len(report.episodes)} episodes measured; excluded {report.excluded} (not executable / "
               f"unsure), unmatched labels {len(report.unmatched)}, duplicate labels {report.duplicates}, "
               f"unlabelled episodes {report.unlabelled_episodes}, judge errors {report.judge_errors} "
               f"-> {out}")
