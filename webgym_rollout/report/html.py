"""``webgym-rollout report RUN [RUN ...] --out DIR``: success rates with confidence intervals, charts,
and runs compared task by task.

A report reads only a few columns of each run (`read_episodes(...).batches(columns=...)`, never a
screenshot) and holds, per run:

- the success rate with its Wilson score interval (`wilson_interval`, 95 % by default), overall and
  by difficulty level, benchmark, domain and website (the `ReportSettings.top_websites` websites
  with the most episodes over all runs);
- steps to success: how many steps each successful episode took;
- infrastructure failures by kind. An episode whose status `EpisodeStatus.is_error` (``error:<kind>``,
  ``blocked``) says nothing about the agent: it is left out of every success rate and counted
  apart. A ``timeout`` is the agent's own failure and counts as one. Next to each run's success
  rate stands the rate with those episodes counted as failures (`RunSummary.overall_with_failures`),
  so that a run that lost half its episodes to a broken server cannot pass for a good one;
- bugs: episodes with status ``error:internal`` (`RunSummary.internal_errors`) are a bug of the
  toolkit, not an infrastructure failure. The page opens with a warning box naming each run that
  has any, the text summary with a WARNING line, and the build logs a warning.

For two or more runs, every pair (A, B) is compared task by task, paired on ``task_id`` over the
tasks both runs evaluated: A *won* a task when its success rate on it (successes / evaluated
attempts; 0 or 1 with one attempt) is higher than B's, *lost* it when lower, *tied* otherwise.
The pair also gets each run's success rate on the shared tasks and an exact two-sided sign test of
won against lost (ties dropped; McNemar's exact test when there is one attempt per task).

When two runs hold the same episodes (a run and its ``webgym-rollout rejudge``,
`webgym_rollout.judge.rejudge`), their pair also compares the two judges episode by episode
(`JudgeAgreement`): the verdicts paired on ``episode_id``, the share they agree on, Cohen's kappa and the
episodes whose verdict changed. An episode counts as the same only when its id, start time, policy
and number of steps are: episode ids are stable per (task, attempt, iteration), so two policies
played on the same tasks share ids, and their agreement would be a comparison of policies, not of
judges (such a pair gets no judge comparison).

`write_report` writes ``DIR/report.html`` (charts as inline SVG, `webgym_rollout.report.charts`: no script,
nothing loaded, so it opens from disk) and ``DIR/report.json`` (every figure of the page, for tests
and the loop). The rates and the sign test are `webgym_rollout.report.rates`. The loop adds its learning
curve: `CurvePoint`s (iteration, label, success rate, interval), drawn as a PNG by
`webgym_rollout.report.charts.write_learning_curve` and inline by
``write_report(..., learning_curve=points)``::

    report = build_report(["out/loop/evals/v-0003/trajectories"], ReportSettings(top_websites=10))
    points.append(CurvePoint.from_counts(3, "test", report.runs[0].overall.successes,
                                         report.runs[0].overall.trials))
    write_learning_curve(points, "out/loop/learning_curve.png")
    write_report(report, "out/loop/evals/v-0003/report", learning_curve=points)

Errors: a run that is not a trajectory dataset raises `TrajectoryError` naming it; bad arguments
(labels that do not match the runs, an empty point list) raise `ValueError` naming the argument.
"""

from __future__ import annotations

import html
import itertools
import logging
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from webgym_core.errors import SettingsError
from webgym_core.files import write_atomic, write_json_atomic
from webgym_core.settings import flat, load_settings, settings_options
from webgym_data.schema import TASK_DIFFICULTY_LEVELS
from webgym_rollout.report.charts import (
    CurvePoint,
    count_chart,
    curve_points,
    histogram,
    learning_curve_svg,
    rate_chart,
    run_colours,
)
from webgym_rollout.report.rates import SuccessRate, sign_test
from webgym_rollout.trajectory.contract import EpisodeStatus, TrajectoryError, succeeded
from webgym_rollout.trajectory.reader import TrajectorySet, read_episodes

__all__ = [
    "Group",
    "JudgeAgreement",
    "PairedComparison",
    "Report",
    "ReportCommandSettings",
    "ReportSettings",
    "RunSummary",
    "SuccessRate",
    "TaskDiff",
    "build_report",
    "format_summary",
    "report_command",
    "write_report",
]

logger = logging.getLogger(__name__)

REPORT_SCHEMA_VERSION = 1
"""Version of the layout of ``report.json``."""

# The columns a report reads (tests check they are trajectory columns); never the steps.
_COLUMNS = ("task_id", "task_name", "reward", "status", "num_steps", "difficulty_level",
            "benchmark_name", "domain", "website", "episode_id", "judge_model", "started_at", "policy_model")
# Breakdowns: (key in the JSON, heading). Difficulty levels come in their natural order.
_BREAKDOWNS = (("difficulty_level", "difficulty level"), ("benchmark", "benchmark"), ("domain", "domain"),
               ("website", "website"))
_NONE = "(none)"


# ------------------------------------------------------------------------------------- settings

@dataclass(frozen=True)
class ReportSettings:
    """What a report computes (the loop holds these too)."""

    top_websites: int = 20
    """Show the success rate of this many websites, those with the most episodes over all runs."""
    confidence: float = 0.95
    """Confidence level of the Wilson score intervals."""
    split: str | None = None
    """Read only the episodes of this task split (train, test); all when unset."""

    def __post_init__(self) -> None:
        if self.top_websites < 0:
            raise ValueError(f"top_websites: must be >= 0, got {self.top_websites}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence: must be between 0 and 1 (exclusive), got {self.confidence}")


@dataclass(frozen=True)
class ReportCommandSettings:
    """Settings of ``webgym-rollout report``."""

    out: Path | None = None
    """Folder to write report.html and report.json into (created)."""
    labels: tuple[str, ...] = ()
    """A name for each run, in the order given (default: the folder names or Hub ids)."""
    cache_dir: Path | None = None
    """Cache folder of Hub datasets (default: the datasets library's)."""
    report: ReportSettings = flat(ReportSettings)

    def __post_init__(self) -> None:
        if self.out is None:
            raise ValueError("out: an output folder is required")


# ------------------------------------------------------------------------------------- the figures

@dataclass(frozen=True)
class Group:
    """One row of a breakdown: a difficulty level, benchmark, domain or website."""

    name: str
    episodes: int
    """All episodes of the group, infrastructure failures included."""
    errors: int
    """Infrastructure failures among them."""
    success: SuccessRate

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "episodes": self.episodes, "errors": self.errors, **self.success.as_dict()}


@dataclass
class RunSummary:
    """The figures of one run."""

    label: str
    source: str
    """The folder or Hub id read."""
    version: str
    """The source's version (a Hub commit; a digest of a folder's shards)."""
    episodes: int
    errors: int
    """Episodes that ended in an infrastructure failure: not in any success rate."""
    overall: SuccessRate
    overall_with_failures: SuccessRate = field(default_factory=lambda: SuccessRate.of(0, 0))
    """Successes out of every episode: infrastructure failures (and bugs) counted as failures."""
    internal_errors: int = 0
    """Episodes with status ``error:internal``: bugs to report (also counted in `errors`)."""
    error_kinds: dict[str, int] = field(default_factory=dict)
    """Infrastructure failures by kind (``browser_crashed``, ``blocked``, ...), most frequent first."""
    statuses: dict[str, int] = field(default_factory=dict)
    """Episodes by status (``ok``, ``timeout``, ``error:<kind>``, ...)."""
    steps_to_success: dict[int, int] = field(default_factory=dict)
    """Number of successful episodes by their number of steps."""
    breakdowns: dict[str, list[Group]] = field(default_factory=dict)
    """Key (difficulty_level, benchmark, domain, website) -> groups, in the report's shared order."""
    attempts_per_task: int = 1
    """The most evaluated attempts any one task has in this run."""
    tasks: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    """task_id -> (successes, evaluated attempts)."""
    task_names: dict[str, str] = field(default_factory=dict, repr=False)
    verdicts: dict[str, bool] = field(default_factory=dict, repr=False)
    """episode_id -> passed, for the judged episodes (infrastructure failures left out)."""
    played: dict[str, tuple[float, str, int]] = field(default_factory=dict, repr=False)
    """episode_id -> (start time, policy, steps) of the judged episodes: what makes an episode of
    another run the same episode (a rejudge keeps them), not only one with the same id."""
    judge_models: tuple[str, ...] = ()
    """The judges that scored the run's episodes."""

    def as_dict(self) -> dict[str, Any]:
        steps = [n for n, count in self.steps_to_success.items() for _ in range(count)]
        return {
            "label": self.label, "source": self.source, "version": self.version,
            "episodes": self.episodes, "errors": self.errors, "evaluated_tasks": len(self.tasks),
            "attempts_per_task": self.attempts_per_task, "overall": self.overall.as_dict(),
            "overall_with_failures": self.overall_with_failures.as_dict(),
            "internal_errors": self.internal_errors,
            "error_kinds": dict(self.error_kinds), "statuses": dict(self.statuses),
            "steps_to_success": {"counts": {str(n): c for n, c in sorted(self.steps_to_success.items())},
                                 "mean": statistics.fmean(steps) if steps else None,
                                 "median": statistics.median(steps) if steps else None},
            "breakdowns": {key: [g.as_dict() for g in groups] for key, groups in self.breakdowns.items()},
        }


@dataclass(frozen=True)
class TaskDiff:
    """A shared task on which two runs did not do equally well."""

    task_id: str
    task_name: str
    a: tuple[int, int]
    """Run A's (successes, evaluated attempts) on the task."""
    b: tuple[int, int]

    def as_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "task_name": self.task_name, "a_successes": self.a[0],
                "a_trials": self.a[1], "b_successes": self.b[0], "b_trials": self.b[1]}


@dataclass(frozen=True)
class JudgeAgreement:
    """Two runs that hold the same episodes (a run and its ``rejudge``) compared verdict by verdict:
    how often their judges agree, beyond chance (Cohen's kappa)."""

    a_judge: str
    """The judge(s) of run A."""
    b_judge: str
    shared_episodes: int
    """Episodes both runs judged (paired on episode_id; infrastructure failures left out)."""
    both_pass: int
    a_only: int
    """Passed by A's judge, failed by B's."""
    b_only: int
    both_fail: int
    changed: tuple[str, ...] = ()
    """episode_ids of the episodes the judges disagree on."""

    @property
    def agreement(self) -> float | None:
        """Share of the shared episodes with the same verdict."""
        n = self.shared_episodes
        return (self.both_pass + self.both_fail) / n if n else None

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa: agreement beyond what the two pass rates alone give (None when chance
        agreement is total, e.g. both judges pass everything)."""
        n = self.shared_episodes
        if not n:
            return None
        pa, pb = (self.both_pass + self.a_only) / n, (self.both_pass + self.b_only) / n
        chance = pa * pb + (1 - pa) * (1 - pb)
        return None if chance >= 1 else ((self.agreement or 0.0) - chance) / (1 - chance)

    def as_dict(self) -> dict[str, Any]:
        return {"a_judge": self.a_judge, "b_judge": self.b_judge, "shared_episodes": self.shared_episodes,
                "both_pass": self.both_pass, "a_only": self.a_only, "b_only": self.b_only,
                "both_fail": self.both_fail, "agreement": self.agreement, "kappa": self.kappa,
                "changed": list(self.changed)}


@dataclass(frozen=True)
class PairedComparison:
    """Two runs compared on the tasks both evaluated (paired on task_id)."""

    a: str
    """Label of run A."""
    b: str
    """Label of run B."""
    shared_tasks: int
    won: int
    """Shared tasks on which A's success rate is higher than B's."""
    lost: int
    """Shared tasks on which A's success rate is lower than B's."""
    tied: int
    a_success: SuccessRate
    """A's success rate over its episodes of the shared tasks."""
    b_success: SuccessRate
    only_a: int
    """Tasks A evaluated and B did not."""
    only_b: int
    p_value: float | None
    """Exact two-sided sign test of won against lost (None when both are 0)."""
    differing: tuple[TaskDiff, ...] = ()
    """The won and lost tasks."""
    judges: JudgeAgreement | None = None
    """The two judges compared on the episodes both runs hold (None when they share none: two
    rollouts, not a run and its rejudge)."""

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "shared_tasks": self.shared_tasks, "won": self.won,
                "lost": self.lost, "tied": self.tied, "a_success": self.a_success.as_dict(),
                "b_success": self.b_success.as_dict(), "only_a": self.only_a, "only_b": self.only_b,
                "p_value": self.p_value, "differing": [d.as_dict() for d in self.differing],
                "judges": self.judges.as_dict() if self.judges is not None else None}


@dataclass
class Report:
    """Everything a report shows: `build_report` computes it, `write_report` writes it."""

    runs: list[RunSummary]
    comparisons: list[PairedComparison]
    settings: ReportSettings
    websites_total: int = 0
    """Distinct websites over all runs (the breakdown shows `settings.top_websites` of them)."""

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": REPORT_SCHEMA_VERSION, "confidence": self.settings.confidence,
                "split": self.settings.split, "top_websites": self.settings.top_websites,
                "websites_total": self.websites_total, "runs": [r.as_dict() for r in self.runs],
                "comparisons": [c.as_dict() for c in self.comparisons]}


# ------------------------------------------------------------------------------------- computing

@dataclass(frozen=True)
class _Row:
    task_id: str
    task_name: str
    success: bool
    status: EpisodeStatus
    error: bool
    """`EpisodeStatus.is_error`: an infrastructure failure."""
    num_steps: int
    groups: tuple[str, ...]
    """The row's group under each of `_BREAKDOWNS`, in order."""
    episode_id: str = ""
    judge_model: str = ""
    started_at: float = 0.0
    policy_model: str = ""


def _read_rows(trajectories: TrajectorySet) -> list[_Row]:
    rows = []
    for batch in trajectories.batches(columns=_COLUMNS, batch_size=1024):
        for row in batch.to_pylist():
            status = EpisodeStatus(row.get("status") or EpisodeStatus.OK.value)
            groups = tuple(str(row.get(column) or "") or _NONE
                           for column in ("difficulty_level", "benchmark_name", "domain", "website"))
            rows.append(_Row(task_id=str(row.get("task_id") or ""), task_name=str(row.get("task_name") or ""),
                             success=succeeded(row.get("reward")),
                             status=status, error=status.is_error, num_steps=int(row.get("num_steps") or 0),
                             groups=groups, episode_id=str(row.get("episode_id") or ""),
                             judge_model=str(row.get("judge_model") or ""),
                             started_at=float(row.get("started_at") or 0.0),
                             policy_model=str(row.get("policy_model") or "")))
    return rows


def _summarise(label: str, trajectories: TrajectorySet, rows: list[_Row],
               settings: ReportSettings) -> tuple[RunSummary, list[dict[str, list[int]]]]:
    """The run's own figures, and per breakdown: group -> [episodes, errors, successes, trials]."""
    evaluated = [r for r in rows if not r.error]
    kinds = Counter(r.status.error_kind for r in rows if r.error)
    counts: list[dict[str, list[int]]] = [defaultdict(lambda: [0, 0, 0, 0]) for _ in _BREAKDOWNS]
    tasks: dict[str, list[int]] = {}
    names: dict[str, str] = {}
    for row in rows:
        for position, name in enumerate(row.groups):
            cell = counts[position][name]
            cell[0] += 1
            cell[1] += row.error
            cell[2] += (not row.error) and row.success
            cell[3] += not row.error
        if not row.error:
            task = tasks.setdefault(row.task_id, [0, 0])
            task[0] += row.success
            task[1] += 1
            names.setdefault(row.task_id, row.task_name)
    summary = RunSummary(
        label=label, source=trajectories.id, version=trajectories.version, episodes=len(rows),
        errors=len(rows) - len(evaluated),
        overall=SuccessRate.of(sum(r.success for r in evaluated), len(evaluated), settings.confidence),
        overall_with_failures=SuccessRate.of(sum(r.success for r in evaluated), len(rows),
                                             settings.confidence),
        internal_errors=sum(r.status is EpisodeStatus.INTERNAL for r in rows),
        error_kinds=dict(kinds.most_common()),
        statuses=dict(Counter(r.status.value for r in rows).most_common()),
        steps_to_success=dict(sorted(Counter(r.num_steps for r in evaluated if r.success).items())),
        attempts_per_task=max((t[1] for t in tasks.values()), default=1),
        tasks={task_id: (s, n) for task_id, (s, n) in tasks.items()}, task_names=names,
        verdicts={r.episode_id: r.success for r in evaluated if r.episode_id},
        played={r.episode_id: (r.started_at, r.policy_model, r.num_steps) for r in evaluated if r.episode_id},
        judge_models=tuple(sorted({r.judge_model for r in evaluated if r.judge_model})))
    return summary, counts


def _group_order(key: str, totals: Counter, top_websites: int) -> list[str]:
    if key == "difficulty_level":
        known = [level for level in TASK_DIFFICULTY_LEVELS if level in totals]
        return known + sorted(name for name in totals if name not in TASK_DIFFICULTY_LEVELS)
    ordered = sorted(totals, key=lambda name: (-totals[name], name))
    return ordered[:top_websites] if key == "website" else ordered


def _compare(a: RunSummary, b: RunSummary, confidence: float) -> PairedComparison:
    shared = sorted(set(a.tasks) & set(b.tasks))
    won = lost = 0
    differing = []
    for task_id in shared:
        (sa, na), (sb, nb) = a.tasks[task_id], b.tasks[task_id]
        if sa * nb == sb * na:
            continue
        if sa * nb > sb * na:
            won += 1
        else:
            lost += 1
        differing.append(TaskDiff(task_id, a.task_names.get(task_id, ""), (sa, na), (sb, nb)))

    def pooled(run: RunSummary) -> SuccessRate:
        return SuccessRate.of(sum(run.tasks[t][0] for t in shared), sum(run.tasks[t][1] for t in shared),
                              confidence)

    return PairedComparison(
        a=a.label, b=b.label, shared_tasks=len(shared), won=won, lost=lost, tied=len(shared) - won - lost,
        a_success=pooled(a), b_success=pooled(b), only_a=len(set(a.tasks) - set(b.tasks)),
        only_b=len(set(b.tasks) - set(a.tasks)), p_value=sign_test(won, lost), differing=tuple(differing),
        judges=_judge_agreement(a, b))


def _judge_agreement(a: RunSummary, b: RunSummary) -> JudgeAgreement | None:
    """The two runs' judges compared on the episodes both hold (the same id, start time, policy and
    steps); None when they hold none: two rollouts, however alike their episode ids."""
    episodes = sorted(e for e in set(a.verdicts) & set(b.verdicts) if a.played.get(e) == b.played.get(e))
    if not episodes:
        return None
    cells = Counter((a.verdicts[e], b.verdicts[e]) for e in episodes)
    return JudgeAgreement(
        a_judge=", ".join(a.judge_models) or "(unnamed)", b_judge=", ".join(b.judge_models) or "(unnamed)",
        shared_episodes=len(episodes), both_pass=cells[(True, True)], a_only=cells[(True, False)],
        b_only=cells[(False, True)], both_fail=cells[(False, False)],
        changed=tuple(e for e in episodes if a.verdicts[e] != b.verdicts[e]))


def _labels(sources: Sequence[Any], labels: Sequence[str] | None) -> list[str]:
    if labels:
        if len(labels) != len(sources):
            raise ValueError(f"labels: {len(labels)} labels given for {len(sources)} runs")
        if len(set(labels)) != len(labels):
            raise ValueError(f"labels: each run needs its own label, got {list(labels)}")
        return list(labels)
    names = []
    for source in sources:
        text = source.id if isinstance(source, TrajectorySet) else str(source)
        path = Path(text)
        names.append(path.name if path.exists() and path.name else text)
    for i, name in enumerate(names):  # two folders named "eval": use their longer paths
        if names.count(name) > 1:
            source = sources[i]
            names[i] = source.id if isinstance(source, TrajectorySet) else str(source)
    return [name if names.count(name) == 1 else f"{name} ({i + 1})" for i, name in enumerate(names)]


def build_report(sources: Sequence[str | Path | TrajectorySet], settings: ReportSettings | None = None, *,
                 labels: Sequence[str] | None = None, cache_dir: str | Path | None = None) -> Report:
    """The report of one or more runs: rollout folders, Hub dataset ids (``org/name[@revision]``)
    or `TrajectorySet`s already opened (read as they are: `settings.split` applies to the others).
    Runs are labelled by `labels` (default: folder names, longer paths where two names clash).

    Raises `TrajectoryError` naming a source that is not a trajectory dataset."""
    settings = settings or ReportSettings()
    if not sources:
        raise ValueError("sources: at least one run is needed")
    names = _labels(sources, labels)
    runs, counts = [], []
    for name, source in zip(names, sources, strict=True):
        trajectories = source if isinstance(source, TrajectorySet) else read_episodes(
            source, split=settings.split, cache_dir=cache_dir)
        rows = _read_rows(trajectories)
        summary, run_counts = _summarise(name, trajectories, rows, settings)
        logger.info("%s: %d episodes, %d infrastructure failures, success %s (%s with them counted as "
                    "failures)", name, summary.episodes, summary.errors, summary.overall.describe(),
                    summary.overall_with_failures.describe())
        if summary.internal_errors:
            logger.warning("%s: %s", name, _bug_text(summary))
        runs.append(summary)
        counts.append(run_counts)
    websites: set[str] = set()
    for position, (key, _) in enumerate(_BREAKDOWNS):
        totals: Counter = Counter()
        for run_counts in counts:
            totals.update({name: cell[0] for name, cell in run_counts[position].items()})
        if key == "website":
            websites = set(totals) - {_NONE}
        for run, run_counts in zip(runs, counts, strict=True):
            groups = []
            for name in _group_order(key, totals, settings.top_websites):
                episodes, errors, successes, trials = run_counts[position].get(name, (0, 0, 0, 0))
                groups.append(Group(name, episodes, errors,
                                    SuccessRate.of(successes, trials, settings.confidence)))
            run.breakdowns[key] = groups
    comparisons = [_compare(a, b, settings.confidence) for a, b in itertools.combinations(runs, 2)]
    return Report(runs=runs, comparisons=comparisons, settings=settings, websites_total=len(websites))


def _bug_text(run: RunSummary) -> str:
    return (f"{run.internal_errors} of {run.episodes} episodes ended with error:internal: this is a bug, "
            "please report it (the run's log holds the tracebacks). They are left out of the success rate "
            "like infrastructure failures, but they are not one.")


def format_summary(report: Report) -> str:
    """The report as plain text for the terminal: each run's success by difficulty level (and
    overall with infrastructure failures counted as failures), its failures, a WARNING line for
    bugs (``error:internal``), and the paired comparisons."""
    level = int(round(100 * report.settings.confidence))
    lines = []
    for run in report.runs:
        kinds = ", ".join(f"{kind} {count}" for kind, count in run.error_kinds.items())
        lines.append(f"{run.label} ({run.source}): {run.episodes} episodes, {run.errors} infrastructure "
                     f"failures{f' ({kinds})' if kinds else ''}")
        if run.internal_errors:
            lines.append(f"  WARNING: {_bug_text(run)}")
        lines.append(f"  success {run.overall.describe()}  [{level}% Wilson interval]")
        lines.append(f"  success with infrastructure failures counted as failures "
                     f"{run.overall_with_failures.describe()}")
        for group in run.breakdowns.get("difficulty_level", []):
            lines.append(f"    {group.name:<10} {group.success.describe()}")
    for pair in report.comparisons:
        p = "n/a" if pair.p_value is None else f"{pair.p_value:.3g}"
        lines.append(f"{pair.a} vs {pair.b}: {pair.shared_tasks} shared tasks, {pair.a} won {pair.won}, "
                     f"lost {pair.lost}, tied {pair.tied}; success {pair.a_success.percent()} vs "
                     f"{pair.b_success.percent()}; sign test p = {p}")
        if pair.judges is not None:
            lines.append(f"  judges {_judges_line(pair.judges)}")
    return "\n".join(lines)


_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1200px; }
h2 { border-top: 2px solid #888; padding-top: .4em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { border-bottom: 1px solid #ddd; padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
svg.chart { font: 12px system-ui, sans-serif; overflow: visible; }
svg .heading { font-weight: 600; }
svg .grid { stroke: #ddd; }
svg .ci { stroke: #222; stroke-width: 1.3; fill: none; }
svg .tick, svg .value { fill: #555; }
.swatch { display: inline-block; width: .8em; height: .8em; margin-right: .35em; border-radius: 2px;
          vertical-align: -.05em; }
.run { white-space: nowrap; }
.note { color: #555; }
.bugs { border: 2px solid #b00020; background: #fdecea; color: #5f0010; padding: .6em 1em;
        margin: 1em 0; border-radius: 4px; }
.bugs strong { color: #b00020; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _rate_cells(rate: SuccessRate) -> str:
    if not rate.trials:
        return "<td class='num'>n/a</td><td class='num'>0/0</td>"
    return (f"<td class='num'>{rate.rate:.1%} [{100 * rate.low:.1f}&ndash;{100 * rate.high:.1f}]</td>"
            f"<td class='num'>{rate.successes}/{rate.trials}</td>")


def _run_name(label: str, colours: Mapping[str, str]) -> str:
    """A run's name with a swatch of its colour, for a table cell."""
    return (f"<span class='run'><span class='swatch' data-run='{_e(label)}' "
            f"style='background:{_e(colours[label])}' aria-hidden='true'></span>{_e(label)}</span>")


def _runs_table(report: Report, colours: Mapping[str, str]) -> str:
    head = ("<tr><th>run</th><th>source</th><th>episodes</th><th>infrastructure failures</th>"
            "<th>of them bugs (error:internal)</th><th>success rate, failures left out</th>"
            "<th>successes / evaluated</th>"
            "<th>success rate, failures counted</th><th>successes / episodes</th><th>tasks</th>"
            "<th>attempts per task</th></tr>")
    rows = "".join(
        f"<tr data-run='{_e(run.label)}'><td>{_run_name(run.label, colours)}</td>"
        f"<td title='version {_e(run.version)}'>"
        f"{_e(run.source)}</td><td class='num'>{run.episodes}</td><td class='num errors'>{run.errors}</td>"
        f"<td class='num internal'>{run.internal_errors}</td>"
        f"{_rate_cells(run.overall)}{_rate_cells(run.overall_with_failures)}"
        f"<td class='num'>{len(run.tasks)}</td>"
        f"<td class='num'>{run.attempts_per_task}</td></tr>"
        for run in report.runs)
    return f"<table class='runs'>{head}{rows}</table>"


def _breakdown_section(report: Report, key: str, heading: str, level: int, colours: Mapping[str, str]) -> str:
    groups = [g.name for g in report.runs[0].breakdowns[key]]
    title = f"Success rate by {heading}"
    if key == "website":
        title = f"Success rate by website (top {len(groups)} of {report.websites_total} by episodes)"
    if not groups:
        return (f"<section class='breakdown' data-key='{key}'><h2>{_e(title)}</h2>"
                "<p>(no episodes)</p></section>")
    series = [(run.label, [g.success for g in run.breakdowns[key]]) for run in report.runs]
    head = "<tr><th>" + _e(heading) + "</th>" + "".join(
        f"<th>{_run_name(run.label, colours)}: success [{level}% CI]</th><th>s/n</th><th>failures</th>"
        for run in report.runs) + "</tr>"
    rows = []
    for i, name in enumerate(groups):
        cells = "".join(_rate_cells(run.breakdowns[key][i].success)
                        + f"<td class='num'>{run.breakdowns[key][i].errors}</td>" for run in report.runs)
        rows.append(f"<tr data-group='{_e(name)}'><td>{_e(name)}</td>{cells}</tr>")
    return (f"<section class='breakdown' data-key='{key}'><h2>{_e(title)}</h2>"
            f"{rate_chart(title, groups, series, level, colours=colours)}"
            f"<table>{head}{''.join(rows)}</table></section>")


def _steps_section(report: Report, colours: Mapping[str, str]) -> str:
    seen = [n for run in report.runs for n in run.steps_to_success]
    if not seen:
        return "<section id='steps'><h2>Steps to success</h2><p>(no successful episode)</p></section>"
    lowest, highest = min(seen), max(seen)
    charts, rows = [], []
    for run in report.runs:
        charts.append(histogram(f"{run.label}: steps of successful episodes", run.steps_to_success,
                                 lowest, highest, colours[run.label]))
        figures = run.as_dict()["steps_to_success"]
        mean = "n/a" if figures["mean"] is None else f"{figures['mean']:.1f}"
        median = "n/a" if figures["median"] is None else f"{figures['median']:g}"
        rows.append(f"<tr data-run='{_e(run.label)}'><td>{_run_name(run.label, colours)}</td>"
                    f"<td class='num'>{sum(run.steps_to_success.values())}</td><td class='num'>{mean}</td>"
                    f"<td class='num'>{median}</td></tr>")
    return ("<section id='steps'><h2>Steps to success</h2><div class='charts'>" + "".join(charts) + "</div>"
            "<table><tr><th>run</th><th>successful episodes</th><th>mean steps</th><th>median steps</th></tr>"
            + "".join(rows) + "</table></section>")


def _errors_section(report: Report, colours: Mapping[str, str]) -> str:
    charts, rows = [], []
    for run in report.runs:
        if run.error_kinds:
            charts.append(count_chart(f"{run.label}: infrastructure failures by kind",
                                       list(run.error_kinds.items()), colours[run.label]))
        for status, count in run.statuses.items():
            rows.append(f"<tr data-run='{_e(run.label)}' data-status='{_e(status)}'>"
                        f"<td>{_run_name(run.label, colours)}</td>"
                        f"<td>{_e(status)}</td><td class='num'>{count}</td></tr>")
    return ("<section id='errors'><h2>Infrastructure failures</h2><p class='note'>Episodes that ended "
            "in an infrastructure failure (<code>error:&lt;kind&gt;</code>, <code>blocked</code>) say "
            "nothing about the agent: they are left out of every success rate. A timeout is the "
            "agent's failure and counts. <code>error:internal</code> is a bug, not an infrastructure "
            "failure: it is counted here and left out in the same way, and it should be reported.</p>"
            + (f"<div class='charts'>{''.join(charts)}</div>" if charts else "<p>(none)</p>")
            + "<table class='statuses'><tr><th>run</th><th>status</th><th>episodes</th></tr>"
            + "".join(rows) + "</table></section>")


def _judges_line(judges: JudgeAgreement) -> str:
    kappa = "n/a" if judges.kappa is None else f"{judges.kappa:.2f}"
    return (f"{judges.a_judge} vs {judges.b_judge} on {judges.shared_episodes} shared episodes: agree on "
            f"{judges.agreement:.1%} (both pass {judges.both_pass}, both fail {judges.both_fail}, only A "
            f"passes {judges.a_only}, only B passes {judges.b_only}); Cohen's kappa {kappa}")


def _judges_section(report: Report) -> str:
    pairs = [pair for pair in report.comparisons if pair.judges is not None]
    if not pairs:
        return ""
    items = "".join(f"<li class='judges' data-a='{_e(p.a)}' data-b='{_e(p.b)}'>{_e(p.a)} vs {_e(p.b)}: "
                    f"{_e(_judges_line(p.judges))}</li>" for p in pairs if p.judges is not None)
    return ("<section id='judges'><h2>Judges compared episode by episode</h2><p class='note'>Runs that "
            "hold the same episodes (a run and its <code>rejudge</code>: the same episode id, start time, "
            "policy and steps), paired on episode id; "
            "infrastructure failures left out. Cohen's kappa is the agreement beyond what the two pass "
            f"rates give by chance.</p><ul>{items}</ul></section>")


def _comparison_section(report: Report, colours: Mapping[str, str]) -> str:
    if not report.comparisons:
        return ""
    head = ("<tr><th>run A</th><th>run B</th><th>shared tasks</th><th>A won</th><th>A lost</th>"
            "<th>tied</th><th>A success (shared)</th><th>B success (shared)</th><th>sign test p</th>"
            "<th>only in A</th><th>only in B</th></tr>")
    rows, details = [], []
    for pair in report.comparisons:
        p = "n/a" if pair.p_value is None else f"{pair.p_value:.3g}"
        rows.append(
            f"<tr class='pair' data-a='{_e(pair.a)}' data-b='{_e(pair.b)}'>"
            f"<td>{_run_name(pair.a, colours)}</td><td>{_run_name(pair.b, colours)}</td>"
            f"<td class='num shared'>{pair.shared_tasks}</td>"
            f"<td class='num won'>{pair.won}</td><td class='num lost'>{pair.lost}</td>"
            f"<td class='num tied'>{pair.tied}</td><td class='num'>{_e(pair.a_success.describe())}</td>"
            f"<td class='num'>{_e(pair.b_success.describe())}</td><td class='num p'>{p}</td>"
            f"<td class='num'>{pair.only_a}</td><td class='num'>{pair.only_b}</td></tr>")
        if pair.differing:
            items = "".join(
                f"<tr class='{'won' if d.a[0] * d.b[1] > d.b[0] * d.a[1] else 'lost'}' "
                f"data-task-id='{_e(d.task_id)}'><td>{_e(d.task_name)}</td><td>{_e(d.task_id)}</td>"
                f"<td class='num'>{d.a[0]}/{d.a[1]}</td><td class='num'>{d.b[0]}/{d.b[1]}</td></tr>"
                for d in pair.differing)
            details.append(f"<details><summary>{_e(pair.a)} vs {_e(pair.b)}: the {len(pair.differing)} tasks "
                           f"won or lost</summary><table class='differing'><tr><th>task</th><th>task id</th>"
                           f"<th>{_e(pair.a)}</th><th>{_e(pair.b)}</th></tr>{items}</table></details>")
    return ("<section id='paired'><h2>Runs compared task by task</h2><p class='note'>Paired on task id "
            "over the tasks both runs evaluated (infrastructure failures left out). A won a task when its "
            "success rate on it (successes / attempts) is higher than B's. The sign test asks how likely "
            "a split of won : lost at least this uneven is if neither run is better.</p>"
            f"<table class='paired'>{head}{''.join(rows)}</table>{''.join(details)}</section>")


def _bugs_banner(report: Report) -> str:
    """The warning box at the top of the page when any run has ``error:internal`` episodes."""
    runs = [run for run in report.runs if run.internal_errors]
    if not runs:
        return ""
    items = "".join(f"<li data-run='{_e(run.label)}'>{_e(run.label)}: {_e(_bug_text(run))}</li>"
                    for run in runs)
    return ("<div class='bugs' id='bugs' role='alert'><strong>Warning: episodes ended in a bug "
            "(<code>error:internal</code>).</strong> An exception in the toolkit's own code (or in a "
            "policy or judge passed to it) ended these episodes: they are not infrastructure failures, "
            f"and the figures below may be skewed by them. Please report it.<ul>{items}</ul></div>")


@dataclass(frozen=True)
class _Curve:
    """The learning curve of a page and how it is drawn (`write_report`'s arguments)."""

    points: list[CurvePoint]
    x_label: str = "iteration"
    tick_names: Mapping[int, str] | None = None
    panels: Mapping[str, str] | None = None

    def svg(self, colours: Mapping[str, str]) -> str:
        return learning_curve_svg(self.points, title=f"Success rate by {self.x_label}", x_label=self.x_label,
                                  colours=colours, tick_names=self.tick_names, panels=self.panels)


def _page(report: Report, curve: _Curve | None, colours: Mapping[str, str] | None = None,
          title: str | None = None) -> str:
    level = int(round(100 * report.settings.confidence))
    title = title or "WebGym evaluation report: " + ", ".join(run.label for run in report.runs)
    # One colour per run (and per curve of the learning curve), used by every chart and table.
    curve_labels = [p.label for p in curve.points] if curve else []
    colours = run_colours([run.label for run in report.runs] + curve_labels, colours)
    overall = rate_chart("Success rate", ["all tasks"], [(run.label, [run.overall]) for run in report.runs],
                          level, colours=colours)
    split = f" Split: {_e(report.settings.split)}." if report.settings.split else ""
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{_e(title)}</h1>",
        _bugs_banner(report),
        f"<p class='note'>Success rates with {level}% Wilson score intervals; episodes that ended in an "
        f"infrastructure failure are left out of them and counted apart (the rate with them counted as "
        f"failures stands next to each run's).{split}</p>",
        f"<section id='overall'>{_runs_table(report, colours)}{overall}</section>",
    ]
    if curve:
        parts.append(f"<section id='learning-curve'><h2>Learning curve</h2>{curve.svg(colours)}</section>")
    parts.append(_comparison_section(report, colours))
    parts.append(_judges_section(report))
    parts += [_breakdown_section(report, key, heading, level, colours) for key, heading in _BREAKDOWNS]
    parts += [_steps_section(report, colours), _errors_section(report, colours), "</body></html>"]
    return "".join(parts)


def write_report(report: Report, out_dir: str | Path, *,
                 learning_curve: Iterable[CurvePoint | Sequence[Any] | Mapping[str, Any]] | None = None,
                 x_label: str = "iteration", colours: Mapping[str, str] | None = None,
                 title: str | None = None, tick_names: Mapping[int, str] | None = None,
                 panels: Mapping[str, str] | None = None) -> Path:
    """Write ``out_dir/report.html`` and ``out_dir/report.json`` (each replaced atomically); returns
    the HTML's path. With `learning_curve` points (see `write_learning_curve`) the page shows the
    curve (its x axis named `x_label`, its iterations named by `tick_names`, its labels in their own
    panels with `panels`) and the JSON holds the points under ``learning_curve``. Pass no curve for
    runs that are not versions of one policy (policies compared side by side): the page's first
    chart already shows each run's success rate with its interval. `title` is the page's title
    and heading: say what the runs are (default: "WebGym evaluation report: " and the run labels).

    Each run has one colour in every chart and table of the page, and each curve of the learning
    curve too: `colours` (label -> CSS colour, e.g. from `webgym_rollout.report.charts.run_colours`) for the
    labels it holds, free palette colours for the others, runs first in their order, then the
    curves' labels. A curve labelled like a run takes the run's colour. Pass the same `colours` to
    `write_learning_curve` for a PNG in the page's colours."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    points = curve_points(learning_curve) if learning_curve is not None else None
    figures = report.as_dict()
    if points:
        figures["learning_curve"] = [p.as_dict() for p in points]
    if title:
        figures["title"] = title
    curve = _Curve(points, x_label, tick_names, panels) if points else None
    html_path = out_dir / "report.html"
    write_json_atomic(out_dir / "report.json", figures)
    write_atomic(html_path, _page(report, curve, colours, title))
    logger.info("wrote %s and report.json", html_path)
    return html_path


# ------------------------------------------------------------------------------------- CLI

@click.command("report")
@click.argument("runs", nargs=-1, required=True)
@settings_options(ReportCommandSettings)
def report_command(runs: tuple[str, ...], config: str | None, **flags: Any) -> None:
    """Report success rates of one or more runs (rollout folders or Hub dataset ids) with Wilson
    confidence intervals, by difficulty, benchmark, domain and website; steps to success; failures
    by kind; and, for two or more runs, every pair compared task by task. Prints a summary and
    writes OUT/report.html (charts inline, opens from disk) and OUT/report.json.

    \b
    Example:
      # two evaluations of a webgym-rl loop run in out/loop (OUT/evals/v-NNNN/trajectories):
      webgym-rollout report out/loop/evals/v-0001/trajectories out/loop/evals/v-0004/trajectories \\
          --labels v1 v4 --out out/report-v1-vs-v4
      webgym-rollout report org/webgym-eval@main --split test --top-websites 10 --out out/report
    """
    try:
        settings = load_settings(ReportCommandSettings, config, flags)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        report = build_report(runs, settings.report, labels=settings.labels or None,
                              cache_dir=settings.cache_dir)
    except TrajectoryError as exc:
        raise click.ClickException(str(exc)) from exc
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    path = write_report(report, settings.out)  # type: ignore[arg-type]
    click.echo(format_summary(report))
    click.echo(f"wrote {path} and {path.with_name('report.json')}")
