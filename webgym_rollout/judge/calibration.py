"""``webgym-rollout judge-eval``: measure judges against labels of stored episodes.

The episodes come from a trajectory dataset (`read_episodes`: a rollout folder or a Hub dataset id).
Each judge named by ``--judges`` scores them again, without a browser, seeing what it sees in a run
(`Judge.score(episode)`: the task, the answer, the stored screenshots, URLs and titles):

- ``stored``: the rewards stored in the dataset (`StoredReward`: the judge that ran with the rollout,
  or a ``rejudge``); no judge is called. ``--no-rescore`` is another name for ``--judges stored``;
- ``programmatic``: `ProgrammaticJudge`, the environment's own reward (the local sites report none:
  there it fails every episode, the floor any judge should beat);
- ``rubric``: `RubricJudge` through the OpenAI endpoint of the ``--judge-*`` flags.

Without ``--judges`` the judge ``--judge`` names is measured (programmatic by default; ``--judge
rubric`` with its endpoint). Several judges score each episode at once.

The labels (`webgym_rollout.judge.labels`) are human labels (``--labels FILE`` or ``--label-column
NAME``) or the local sites' ground truth of the run (its ``truth.jsonl``; ``--truth``, and the default
when the run folder holds one and no human labels are given; its tasks come from ``--tasks`` or the
path the run's manifest records). An episode without a label is not judged, and is counted by reason.

Each judge's pass is compared with the label of the same episode (`JudgeMetrics`: tp, fp, tn, fn,
agreement, precision, recall, F1, specificity, Cohen's kappa, the success-rate gap), per difficulty
level (easy, medium, hard, unknown), per benchmark and over all. A table goes to the terminal (or
GitHub markdown with ``--markdown``) and everything, with each episode's verdicts, to the JSON file
``--out`` (and the tables as a page, ``--html``).

Per policy. Each judge's pass rate is also given per policy of the episodes (their ``policy_model``:
a dataset may pool several runs). The episodes of a shortcut (``shortcut:NAME``, played by
``webgym-rollout run --policy expert --policy-shortcut NAME``: an answer listing every candidate, a
spray of numbers, every candidate acted on) try to earn the reward without doing the task; a judge
that passes one of them that the labels fail is **flagged** (`JudgeEvalReport.shortcut_passes`): an
RL policy trained on its rewards would learn the shortcut. The flag is in the printed summary, the
markdown, the page and the JSON (``flagged``, ``shortcut_passes``).

Judge errors. A judge that cannot decide an episode (a reply without a valid verdict, a run judge
that failed: ``error:judge_*`` for ``stored``) has an error on it, counted and listed. By default
the episode counts as that judge's failure, as a run scores it, and a judge that raises (its
endpoint down after its retries) ends the command. With ``--exclude-errors`` the episode is left out
of that judge's figures (its n is smaller), and a judge that raises has an error on that episode
only; the others go on.

Exceptions: `LabelError` and `TruthFileError` (`RolloutError`s) for labels that cannot be read or
matched; `TrajectoryError` for a dataset that cannot be read; the judges' own `JudgeError`s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import click

from webgym_core.errors import SettingsError
from webgym_core.settings import SettingsCommand, flat, load_settings, settings_options, settings_to_dict
from webgym_data.loading import TaskSourceError, load_tasks
from webgym_data.schema import TASK_DIFFICULTY_LEVELS, Task
from webgym_rollout.agent.policies import SHORTCUT_MODEL_PREFIX
from webgym_rollout.errors import LabelError, RolloutError, TruthFileError
from webgym_rollout.judge.judges import JudgeSettings, ProgrammaticJudge, make_judge
from webgym_rollout.judge.labels import (
    EpisodeLabel,
    HumanLabels,
    LabelSettings,
    TruthLabels,
    human_labels,
    parse_label,
    read_labels,
)
from webgym_rollout.judge.metrics import JudgeMetrics
from webgym_rollout.judge.truth import TRUTH_FILE, read_truth
from webgym_rollout.trajectory.contract import Episode, TrajectoryError
from webgym_rollout.trajectory.reader import TrajectorySet, read_episodes, read_manifest

__all__ = [
    "ALL",
    "JUDGE_NAMES",
    "JudgeEvalReport",
    "JudgeEvalSettings",
    "JudgeMetrics",
    "JudgedEpisode",
    "LabelError",
    "LabelSettings",
    "StoredReward",
    "judge_eval",
    "judge_eval_command",
    "make_judges",
    "parse_label",
    "read_labels",
]

log = logging.getLogger(__name__)

JUDGE_NAMES = ("stored", "programmatic", "rubric")
"""The judges ``--judges`` may name."""
ALL = "all"
"""The group of every measured episode, beside the difficulty levels and benchmarks."""


# ------------------------------------------------------------------------------------- settings

@dataclass(frozen=True)
class JudgeEvalSettings:
    """Settings of ``webgym-rollout judge-eval``."""

    trajectories: str = field(default="", metadata={"cli": False})
    """The labelled episodes: a rollout folder or a Hub dataset id (org/name[@revision])."""
    split: str | None = None
    """Only the episodes of this split (train, test); default: all."""
    judges: tuple[str, ...] = ()
    """The judges to measure, comma- or space-separated: stored (the rewards in the dataset),
    programmatic (the environment's reward), rubric (the LLM judge of the --judge-* endpoint flags);
    default: the one --judge names."""
    rescore: bool = True
    """--no-rescore: the same as --judges stored (the rewards stored in the dataset)."""
    exclude_errors: bool = False
    """Leave an episode a judge could not decide out of that judge's figures, and go on when a judge
    raises; default: it counts as the judge's failure (as a run scores it) and a judge endpoint that
    fails after its retries ends the command."""
    truth: bool = False
    """Measure against the sites' ground truth kept in the run folder (truth.jsonl); the default when
    it is there and no human labels are given."""
    tasks: Path | None = None
    """With the sites' ground truth: the site tasks the run played (a task file or folder, with their
    checks); default: the --tasks its manifest records."""
    out: Path | None = None
    """Write the JSON report here: every figure, the counts and each episode's label and verdicts."""
    html: Path | None = None
    """Write the tables (per group and per policy, with any judge flagged for passing a shortcut) as an
    HTML page here."""
    markdown: bool = False
    """Print the table as GitHub markdown instead of a terminal table."""
    concurrency: int = 8
    """Episodes judged at once."""
    progress: bool = True
    """Show a progress bar on stderr."""
    labels: LabelSettings = flat(LabelSettings)
    judge: JudgeSettings = field(default_factory=JudgeSettings)

    def __post_init__(self) -> None:
        if not self.trajectories:
            raise ValueError("trajectories: a rollout folder or Hub dataset id is required")
        if self.concurrency < 1:
            raise ValueError(f"concurrency: must be >= 1, got {self.concurrency}")
        if self.truth and (self.labels.labels is not None or self.labels.label_column):
            raise ValueError("truth: measure against the sites' ground truth (--truth) or human labels "
                             "(--labels, --label-column), not both")
        given = self._given_names
        if not self.rescore and given not in ((), ("stored",)):
            raise ValueError(f"rescore: --no-rescore measures the stored rewards only (--judges stored), "
                             f"but --judges names {', '.join(given)}")
        for name in given:
            if name not in JUDGE_NAMES:
                raise ValueError(f"judges: unknown judge {name!r}; expected one of {', '.join(JUDGE_NAMES)}")
        if len(set(given)) != len(given):
            raise ValueError(f"judges: a judge is named twice in {', '.join(given)}")
        if given and self.judge.kind == "rubric" and "rubric" not in given:
            raise ValueError("judges: --judge rubric is not among --judges; name it there "
                             "(--judges stored,rubric)")
        if not given and self.rescore and self.judge.kind == "site":
            raise ValueError("judges: the site judge needs a live site server; a run judged with --judge "
                             "site stored its verdicts: measure them with --judges stored")
        if "rubric" in self.judge_names and not self.judge.endpoint.configured:
            raise ValueError("judges: the rubric judge needs its endpoint (--judge-base-url and "
                             "--judge-model)")

    @property
    def _given_names(self) -> tuple[str, ...]:
        return tuple(part.strip() for value in self.judges for part in value.split(",") if part.strip())

    @property
    def judge_names(self) -> tuple[str, ...]:
        """The judges measured: `judges` with comma-separated values split (``stored,rubric`` ->
        ("stored", "rubric")); else ("stored",) with --no-rescore; else the kind --judge names."""
        given = self._given_names
        if given:
            return given
        return ("stored",) if not self.rescore else (self.judge.kind,)


# --------------------------------------------------------------------------------------- judges

class StoredReward:
    """The judge ``stored``: the verdict stored in the dataset (its reward), not a judge called
    again. An episode whose run judge failed (``error:judge_*``) is an error of this judge."""

    model_id = "stored"

    def __init__(self, run_judge: str = "") -> None:
        if run_judge:
            self.model_id = f"stored ({run_judge})"

    @staticmethod
    def verdict(episode: Episode) -> tuple[bool, str]:
        """(passed, error) of the stored reward."""
        if episode.status.error_kind.startswith("judge_"):
            return False, f"{episode.status.error_kind}: the run's judge failed on this episode"
        return episode.success, ""


def make_judges(names: Sequence[str], settings: JudgeSettings, *, run_judge: str = "") -> dict[str, Any]:
    """The judges `names` (of `JUDGE_NAMES`), by name; ``rubric`` is the LLM judge of `settings`'
    endpoint (their ``kind`` is not read). `run_judge` names the dataset's own judge."""
    judges: dict[str, Any] = {}
    for name in names:
        if name == "stored":
            judges[name] = StoredReward(run_judge)
        elif name == "programmatic":
            judges[name] = ProgrammaticJudge()
        elif name == "rubric":
            judges[name] = make_judge(dataclasses.replace(settings, kind="rubric"))
        else:
            raise ValueError(f"judges: unknown judge {name!r}; expected one of {', '.join(JUDGE_NAMES)}")
    return judges


# --------------------------------------------------------------------------------------- report

@dataclass(frozen=True)
class JudgedEpisode:
    """One measured episode: its label and what each judge said."""

    episode_id: str
    task_id: str
    benchmark: str
    level: str
    """The task's difficulty level (easy, medium, hard, unknown)."""
    label: bool
    source: str
    """Where the label was read (the label file and line, or the truth file)."""
    failed_facts: tuple[str, ...] = ()
    """The truth's failed criteria (``fact:<group>:<n>``, ``definite_answer``); empty otherwise."""
    judged: dict[str, bool] = field(default_factory=dict)
    """Each judge's pass, by judge name; with --exclude-errors a judge with an error is not here."""
    errors: dict[str, str] = field(default_factory=dict)
    """Each judge's error on the episode ("kind: message"), by judge name."""
    verdicts: dict[str, dict[str, bool]] = field(default_factory=dict)
    """Each judge's verdict per criterion, by judge name (none for stored)."""
    policy: str = ""
    """The policy that played the episode (its ``policy_model``; ``shortcut:NAME`` for a shortcut)."""

    @property
    def shortcut(self) -> bool:
        """Played by a shortcut: an episode that tries to earn the reward without doing the task."""
        return self.policy.startswith(SHORTCUT_MODEL_PREFIX)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class JudgeEvalReport:
    """What ``judge-eval`` measured, and what it left out."""

    trajectories: str
    version: str
    labels: str
    """The labels, in words: "human labels (FILE)", "human labels (column NAME)" or "the sites'
    ground truth"."""
    judges: dict[str, str]
    """The judges measured, by name: their model id (``stored``: the dataset's judge)."""
    episodes: list[JudgedEpisode] = field(default_factory=list)
    """The measured episodes, in the dataset's order."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Episodes not measured, by reason: excluded (a label 2, unsure, n/a) and unlabelled; or, with the
    sites' ground truth, without_truth, unknown_task and infrastructure."""
    labels_read: int = 0
    """Human label records read (after --label-where)."""
    duplicates: int = 0
    """Human labels for an episode that an earlier label already named."""
    unmatched: list[str] = field(default_factory=list)
    """Human labels that match no episode (where each was read)."""
    truth: bool = False
    """The labels are the sites' ground truth."""
    truth_without_episode: int = 0
    """Truth lines whose episode was not read (a run cut before its shard was written, or another --split)."""

    def levels(self) -> list[str]:
        """The difficulty levels present, easiest first."""
        present = {e.level for e in self.episodes}
        return [level for level in TASK_DIFFICULTY_LEVELS if level in present] + sorted(
            present - set(TASK_DIFFICULTY_LEVELS))

    def metrics(self, judge: str) -> dict[str, JudgeMetrics]:
        """`judge`'s figures per difficulty level and over `ALL` measured episodes."""
        return {level: JudgeMetrics.from_pairs((e.label, e.judged[judge]) for e in self.episodes
                                               if judge in e.judged and level in (ALL, e.level))
                for level in [*self.levels(), ALL]}

    def by_benchmark(self, judge: str) -> dict[str, JudgeMetrics]:
        """`judge`'s figures per benchmark (``benchmark_name``)."""
        names = sorted({e.benchmark for e in self.episodes})
        return {name: JudgeMetrics.from_pairs((e.label, e.judged[judge]) for e in self.episodes
                                              if judge in e.judged and e.benchmark == name)
                for name in names}

    def policies(self) -> list[str]:
        """The policies of the measured episodes, sorted ("(none)" for an episode that names none)."""
        return sorted({e.policy or "(none)" for e in self.episodes})

    def by_policy(self, judge: str) -> dict[str, JudgeMetrics]:
        """`judge`'s figures per policy of the episodes: its pass rate is ``judge_success_rate``."""
        return {name: JudgeMetrics.from_pairs((e.label, e.judged[judge]) for e in self.episodes
                                              if judge in e.judged and (e.policy or "(none)") == name)
                for name in self.policies()}

    def shortcut_passes(self, judge: str) -> list[JudgedEpisode]:
        """The episodes of a shortcut policy that `judge` passes and the labels fail: any flags the judge."""
        return [e for e in self.episodes if e.shortcut and not e.label and e.judged.get(judge)]

    def flagged(self) -> list[str]:
        """The judges that pass an episode of a shortcut policy that the labels fail."""
        return [name for name in self.judges if self.shortcut_passes(name)]

    def policy_lines(self) -> list[str]:
        """Each judge's pass rate per policy, one line per judge, and a line per flagged judge; none
        when every episode is of one policy that is not a shortcut."""
        policies = self.policies()
        if len(policies) < 2 and not any(e.shortcut for e in self.episodes):
            return []
        lines = []
        for name in self.judges:
            cells = [f"{policy} {m.tp + m.fp}/{m.n} ({_percent(m.judge_success_rate)} %; labels "
                     f"{m.tp + m.fn})" for policy, m in self.by_policy(name).items()]
            lines.append(f"{name} passes per policy: " + ", ".join(cells))
        for name in self.flagged():
            passes = self.shortcut_passes(name)
            shown = ", ".join(f"{e.episode_id} ({e.policy}, task {e.task_id})" for e in passes[:5])
            lines.append(f"FLAGGED {name}: passes {len(passes)} shortcut episode(s) the labels fail: {shown}"
                         + (", ..." if len(passes) > 5 else ""))
        return lines

    def errors(self, judge: str) -> int:
        """Episodes on which `judge` could not decide (or raised, with --exclude-errors)."""
        return sum(1 for e in self.episodes if judge in e.errors)

    def label_successes(self) -> dict[str, int]:
        """Episodes labelled a success, per level and over all."""
        return {level: sum(1 for e in self.episodes if e.label and level in (ALL, e.level))
                for level in [*self.levels(), ALL]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectories": self.trajectories, "version": self.version, "labels": self.labels,
            "judges": dict(self.judges), "measured": len(self.episodes),
            "label_successes": self.label_successes(), "skipped": dict(self.skipped),
            "labels_read": self.labels_read, "duplicates": self.duplicates, "unmatched": list(self.unmatched),
            "truth_without_episode": self.truth_without_episode,
            "metrics": {name: {level: m.to_dict() for level, m in self.metrics(name).items()}
                        for name in self.judges},
            "by_benchmark": {name: {bench: m.to_dict() for bench, m in self.by_benchmark(name).items()}
                             for name in self.judges},
            "errors": {name: self.errors(name) for name in self.judges},
            "by_policy": {name: {policy: m.to_dict() for policy, m in self.by_policy(name).items()}
                          for name in self.judges},
            "shortcut_passes": {name: [e.episode_id for e in self.shortcut_passes(name)]
                                for name in self.judges},
            "flagged": self.flagged(),
            "episodes": [{**e.to_dict(), "shortcut": e.shortcut} for e in self.episodes],
        }

    def _rows(self) -> list[tuple[str, str, list[str]]]:
        """(judge, group, cells) for the tables: per judge its levels (unless every task's level is
        unknown), its benchmarks (when there are several), then all."""
        levels = self.levels()
        show_levels = levels != ["unknown"]
        rows = []
        for name in self.judges:
            groups = self.metrics(name)
            overall = groups.pop(ALL)
            if not show_levels:
                groups = {}
            by_benchmark = self.by_benchmark(name)
            if len(by_benchmark) > 1:
                groups.update(by_benchmark)
            groups[ALL] = overall
            for group, m in groups.items():
                errors = sum(1 for e in self.episodes if name in e.errors
                             and group in (ALL, e.level, e.benchmark))
                rows.append((name, group, [str(m.n), str(m.tp), str(m.fp), str(m.tn), str(m.fn),
                                           _percent(m.agreement), _percent(m.precision), _percent(m.recall),
                                           _percent(m.f1), _percent(m.specificity), _fixed(m.kappa),
                                           _percent(m.label_success_rate), _percent(m.success_rate_gap,
                                                                                    signed=True),
                                           str(errors)]))
        return rows

    def table(self) -> Any:
        """A rich table: one block per judge, a row per group and one for all."""
        from rich import box  # lazy: import time
        from rich.table import Table  # lazy: import time

        table = Table(title=f"judges against {self.labels} ({self.trajectories})", box=box.SIMPLE_HEAD,
                      caption=_CAPTION)
        for name in _COLUMNS:
            table.add_column(name, justify="left" if name in ("judge", "group") else "right", no_wrap=True)
        previous = None
        for judge, group, cells in self._rows():
            if previous is not None and judge != previous:
                table.add_section()
            table.add_row(judge if judge != previous else "", group, *cells,
                          style="bold" if group == ALL else None)
            previous = judge
        return table

    def markdown(self) -> str:
        """The table as GitHub markdown, with the counts of what was left out below it."""
        lines = ["| " + " | ".join(_COLUMNS) + " |",
                 "|" + "|".join(":---" if n in ("judge", "group") else "---:" for n in _COLUMNS) + "|"]
        for judge, group, cells in self._rows():
            lines.append("| " + " | ".join([judge, f"**{group}**" if group == ALL else group, *cells]) + " |")
        policies = [f"- {'**' + line + '**' if line.startswith('FLAGGED') else line}"
                    for line in self.policy_lines()]
        tail = ["", *policies] if policies else []
        return "\n".join([*lines, "", _CAPTION, "", self.summary(), *tail]) + "\n"

    def html(self) -> str:
        """A page of the table, each judge's pass rate per policy, and a banner per flagged judge."""
        head = "".join(f"<th>{escape(name)}</th>" for name in _COLUMNS)
        body = "".join(
            f"<tr{' class=all' if group == ALL else ''}>"
            + "".join(f"<td>{escape(cell)}</td>" for cell in (judge, group, *cells)) + "</tr>"
            for judge, group, cells in self._rows())
        policies = self.policies()
        policy_rows = "".join(
            f"<tr{' class=flag' if any(e.policy == policy for e in passes) else ''}>"
            f"<td>{escape(name)}</td><td>{escape(policy)}</td><td>{m.n}</td><td>{m.tp + m.fp}</td>"
            f"<td>{_percent(m.judge_success_rate)}</td><td>{m.tp + m.fn}</td></tr>"
            for name in self.judges for passes in [self.shortcut_passes(name)]
            for policy, m in self.by_policy(name).items())
        flags = "".join(
            f"<p class=banner>FLAGGED: judge <b>{escape(name)}</b> ({escape(self.judges[name])}) passes "
            f"{len(self.shortcut_passes(name))} episode(s) of a shortcut policy that the labels fail: "
            + escape(", ".join(f"{e.episode_id} ({e.policy}, task {e.task_id})"
                               for e in self.shortcut_passes(name)[:20])) + "</p>"
            for name in self.flagged())
        style = ("body{font:14px sans-serif;margin:1.5em}table{border-collapse:collapse;margin:1em 0}"
                 "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
                 "td:nth-child(-n+2){text-align:left}"
                 "tr.all{font-weight:bold}tr.flag{background:#fdd}"
                 ".banner{background:#c00;color:#fff;padding:.6em;font-weight:bold}")
        return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>judge-eval</title>"
                f"<style>{style}</style></head><body><h1>judges against {escape(self.labels)}</h1>"
                f"<p>{escape(self.trajectories)}</p>{flags}<table><tr>{head}</tr>{body}</table>"
                f"<p>{escape(_CAPTION)}</p><p>{escape(self.summary())}</p>"
                f"<h2>pass rate per policy ({len(policies)})</h2><table><tr><th>judge</th><th>policy</th>"
                f"<th>n</th><th>passed</th><th>pass %</th><th>label successes</th></tr>{policy_rows}</table>"
                "<p>A shortcut policy (shortcut:NAME) tries to earn the reward without doing the task; a "
                "judge that passes one of its episodes that the labels fail is flagged.</p></body></html>\n")

    def summary(self) -> str:
        """One line: what was measured and what was left out."""
        skipped = ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in self.skipped.items())
        kind = "true" if self.truth else "labelled"
        line = (f"{len(self.episodes)} episodes measured ({self.label_successes()[ALL]} {kind} successes); "
                f"skipped: {skipped}")
        if self.truth:
            return f"{line}; truth lines without an episode: {self.truth_without_episode}"
        return (f"{line}; labels read: {self.labels_read}, unmatched: {len(self.unmatched)}, "
                f"duplicates: {self.duplicates}")


_COLUMNS = ("judge", "group", "n", "TP", "FP", "TN", "FN", "agree %", "precision %", "recall %", "F1 %",
            "specificity %", "kappa", "label SR %", "gap", "errors")
_CAPTION = ("group: a difficulty level, a benchmark, or all; %: of the episodes each judge decided (n); "
            "TP: judge and label pass; FP: the judge passes a labelled failure; FN: it fails a labelled "
            "success; kappa: Cohen's; SR: success rate; gap: judge SR minus label SR, in points; "
            "-: undefined (nothing to divide by)")


def _percent(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def _fixed(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# -------------------------------------------------------------------------------------- judging

def _truth_labels(settings: JudgeEvalSettings, tasks: Iterable[Task] | None) -> TruthLabels:
    """The run's ground truth as labels (--truth, or no human labels given and truth.jsonl there);
    raises `LabelError` when neither kind of label is to be had."""
    run_dir = Path(settings.trajectories)
    if not settings.truth and not (run_dir / TRUTH_FILE).is_file():
        raise LabelError(f"{settings.trajectories}: no labels to measure the judges against: give human "
                         "labels (--labels FILE or --label-column NAME), or a run folder holding the sites' "
                         f"ground truth ({TRUTH_FILE}, written when a run of site tasks used a site server "
                         "truth source: webgym-rollout run ... --truth-url URL)")
    if not run_dir.is_dir():
        raise TruthFileError(f"{run_dir}: no such run folder (the sites' ground truth is kept in a run "
                             f"folder's {TRUTH_FILE})")
    if not (run_dir / TRUTH_FILE).is_file():  # first: without it nothing else matters
        read_truth(run_dir)  # raises, saying how a run gets one
    return TruthLabels(run_dir, _tasks_of(settings) if tasks is None else tasks)


def _tasks_of(settings: JudgeEvalSettings) -> list[Task]:
    """The tasks of --tasks, or of the path the run's manifest records."""
    source = settings.tasks
    if source is None:
        run_dir = settings.trajectories
        recorded = read_manifest(run_dir).get("run", {}).get("tasks")
        if not recorded:
            raise LabelError(f"{run_dir}: the run's manifest records no task source: give --tasks")
        source = Path(recorded)
        if not source.exists():
            raise LabelError(f"{run_dir}: the run's manifest names the tasks {source}, which is not there "
                             "(relative to where the run was started?): give --tasks")
    try:
        return list(load_tasks(source, split=None, skip_invalid=True))
    except TaskSourceError as exc:
        raise LabelError(f"--tasks: {exc}") from exc


def _run_judge(trajectories: TrajectorySet) -> str:
    """The judge the run's manifest records (a local folder), else ""."""
    if not Path(trajectories.id).is_dir():
        return ""
    try:
        return str(read_manifest(trajectories.id).get("run", {}).get("judge", ""))
    except TrajectoryError:
        return ""


async def judge_eval(settings: JudgeEvalSettings, *, judges: Mapping[str, Any] | None = None,
                     tasks: Iterable[Task] | None = None,
                     on_progress: Callable[[int, int], None] | None = None) -> JudgeEvalReport:
    """Measure the judges of `settings` (or `judges`, by name: a `Judge` or a `StoredReward`, left
    open) against the labels of `settings.trajectories`: human labels, or the run's ground truth
    with `tasks` (default: ``settings.tasks`` or the run's manifest). At most ``settings.concurrency``
    episodes are judged at once; `on_progress(done, total)` follows the dataset's episodes. Raises
    `LabelError`, `TruthFileError`, `TrajectoryError`, or a judge's `JudgeError` (unless
    ``settings.exclude_errors``)."""
    human = settings.labels.labels is not None or bool(settings.labels.label_column)
    if human and settings.tasks is not None:
        raise LabelError("tasks: --tasks is read with the sites' ground truth only, not with human labels")
    source: HumanLabels | TruthLabels | None = None if human else _truth_labels(settings, tasks)
    trajectories = read_episodes(settings.trajectories, split=settings.split)
    if source is None:
        source = human_labels(trajectories, settings.labels)
    own = judges is None
    if judges is None:
        judges = make_judges(settings.judge_names, settings.judge, run_judge=_run_judge(trajectories))
    report = JudgeEvalReport(
        trajectories=trajectories.id, version=trajectories.version, labels=source.description,
        judges={name: str(getattr(judge, "model_id", name)) for name, judge in judges.items()},
        skipped=dict.fromkeys(source.SKIPPED, 0), truth=isinstance(source, TruthLabels))
    if isinstance(source, HumanLabels):
        report.labels_read, report.duplicates = source.read, source.duplicates
        report.unmatched = source.unmatched
    try:
        report.episodes = await _judge_all(trajectories, source, judges, settings, report.skipped,
                                           on_progress)
    finally:
        if own:
            for judge in judges.values():
                close = getattr(judge, "close", None)
                if close is not None:
                    await close()
    if isinstance(source, TruthLabels):
        report.truth_without_episode = source.without_episode
        if not report.episodes:
            skipped = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in report.skipped.items())
            raise TruthFileError(f"{settings.trajectories}: no episode could be measured "
                                 f"({len(trajectories)} episodes; skipped: {skipped}); are the tasks the "
                                 "ones the run played (--tasks)?")
    return report


async def _judge_all(trajectories: TrajectorySet, source: HumanLabels | TruthLabels,
                     judges: Mapping[str, Any], settings: JudgeEvalSettings, skipped: dict[str, int],
                     on_progress: Callable[[int, int], None] | None) -> list[JudgedEpisode]:
    """Each labelled episode judged by every judge, in the dataset's order; counts the others in `skipped`."""
    results: dict[int, JudgedEpisode] = {}
    total, done = len(trajectories), 0
    pending: set[asyncio.Task] = set()

    def advance() -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, total)

    async def measure(position: int, episode: Episode, label: EpisodeLabel) -> None:
        scored = await asyncio.gather(*(_judge_one(name, judge, episode, settings.exclude_errors)
                                        for name, judge in judges.items()))
        keep = [(name, passed, error, verdicts) for name, passed, error, verdicts in scored
                if not (error and settings.exclude_errors)]
        results[position] = JudgedEpisode(
            episode_id=episode.episode_id, task_id=episode.task.task_id,
            benchmark=episode.task.benchmark_name or "(none)",
            level=label.level or episode.task.difficulty_level,
            label=label.success, source=label.source, failed_facts=label.failed, policy=episode.policy_model,
            judged={name: passed for name, passed, _, _ in keep},
            errors={name: error for name, _, error, _ in scored if error},
            verdicts={name: verdicts for name, _, _, verdicts in scored if verdicts})
        advance()

    try:
        for position, episode in enumerate(trajectories):  # read in small batches: screenshots never pile up
            label = source.label(episode)
            if isinstance(label, str):
                skipped[label] += 1
                advance()
                continue
            while len(pending) >= settings.concurrency:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for future in finished:
                    future.result()  # a judge's error ends the evaluation (not with --exclude-errors)
            pending.add(asyncio.create_task(measure(position, episode, label),
                                            name=f"judge-{episode.episode_id}"))
        for future in asyncio.as_completed(list(pending)):
            await future
    except BaseException:
        for future in pending:
            future.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise
    return [results[position] for position in sorted(results)]


async def _judge_one(name: str, judge: Any, episode: Episode,
                     keep_going: bool) -> tuple[str, bool, str, dict[str, bool]]:
    """(name, passed, error, verdict per criterion) of one judge on one episode. An exception is
    raised, or with `keep_going` an error of the judge on this episode."""
    if isinstance(judge, StoredReward):
        return (name, *judge.verdict(episode), {})
    try:
        result = await judge.score(episode)
    except Exception as exc:  # a judge endpoint down after its retries, or a bug
        if not keep_going:
            raise
        kind = exc.kind if isinstance(exc, RolloutError) else type(exc).__name__
        log.warning("judge %s failed on episode %s: %s", name, episode.episode_id, exc)
        return name, False, f"{kind}: {exc}", {}
    if result.error:
        log.warning("judge %s could not decide episode %s: %s", name, episode.episode_id, result.error)
    return name, result.passed, result.error, {v.criterion: v.passed for v in result.verdicts}


# ------------------------------------------------------------------------------------------ CLI

class _Bar:
    """A rich progress bar on stderr (or nothing); ``update(done, total)``."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self._progress, self._task = enabled, None, None

    def __enter__(self) -> _Bar:
        if self.enabled:
            # lazy: import time
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


@click.command("judge-eval", cls=SettingsCommand)
@click.argument("trajectories")
@settings_options(JudgeEvalSettings)
def judge_eval_command(trajectories: str, config: str | None, **flags: Any) -> None:
    """Measure judges against labels of the episodes in TRAJECTORIES (a rollout folder or a Hub
    dataset id): agreement, precision, recall, F1, specificity, Cohen's kappa and the success-rate
    gap (judge minus label), per difficulty level and overall.

    The judges named by --judges (stored: the rewards in the dataset; programmatic; rubric: the LLM
    judge of the --judge-* endpoint flags; default: the one --judge names) score the stored episodes
    again, without browsers. The labels are human labels from a JSONL, JSON or CSV file (--labels)
    keyed by episode_id, task_id or instruction, or from a column of the dataset (--label-column);
    label 2 (Online-Mind2Web: not executable) and "Unsure" (AgentRewardBench) are excluded. Or,
    for a run of the local sites' tasks that kept truth.jsonl, the sites' ground truth (--truth, the
    default there; --tasks: the tasks it played, default: its manifest's). A table is printed
    (--markdown: as GitHub markdown) and everything goes to --out (JSON).

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
      # a run on the local sites: its stored verdicts, the programmatic and an LLM judge
      # against the sites' ground truth
      webgym-rollout judge-eval out/shop-run --judges stored,programmatic,rubric \\
          --judge-base-url http://127.0.0.1:8001/v1 --judge-model Qwen/Qwen2.5-VL-7B-Instruct \\
          --out judges.json --markdown
    """
    try:
        settings = load_settings(JudgeEvalSettings, config, flags, trajectories=trajectories)
    except (SettingsError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        with _Bar(settings.progress) as bar:
            report = asyncio.run(judge_eval(settings, on_progress=bar.update))
    except (TrajectoryError, RolloutError) as exc:
        raise click.ClickException(str(exc)) from exc
    if settings.markdown:
        click.echo(report.markdown(), nl=False)
    else:
        from rich.console import Console  # lazy: import time

        # a pipe or a file gets the whole table; a terminal its own width
        Console(width=None if sys.stdout.isatty() else 200).print(report.table())
        click.echo(report.summary())
        for line in report.policy_lines():
            flag = line.startswith("FLAGGED")
            click.secho(line, fg="red" if flag else None, bold=flag)
    for name in report.judges:
        if report.errors(name):
            how = "left out of its figures" if settings.exclude_errors else "counted as its failures"
            click.secho(f"{name}: errors on {report.errors(name)} episodes ({how}; see the log or --out)",
                        fg="yellow", err=True)
    if settings.out is not None:
        settings.out.parent.mkdir(parents=True, exist_ok=True)
        recorded = settings_to_dict(settings)
        recorded["judge"].pop("api_key", None)  # never write a secret into a results file
        settings.out.write_text(json.dumps({**report.to_dict(), "settings": recorded}, indent=2) + "\n",
                                encoding="utf-8")
        click.echo(f"-> {settings.out}")
    if settings.html is not None:
        settings.html.parent.mkdir(parents=True, exist_ok=True)
        settings.html.write_text(report.html(), encoding="utf-8")
        click.echo(f"-> {settings.html}")
