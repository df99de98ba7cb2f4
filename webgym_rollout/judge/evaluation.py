"""``webgym-rollout judge-eval-sites RUN``: how often a judge agrees with the local sites' ground truth.

A run of generated site tasks (`webgym_rollout.tasks.websites.shop_tasks`) made with a site server's
truth source keeps, beside its episodes, the file ``truth.jsonl`` (`TRUTH_FILE`): one line per
finished episode, ``{"episode_id": ..., "task_id": ..., "facts": {...}}``, the session's
`SessionFacts` as the site recorded them when the episode ended. `append_truth` writes a line (the
runner), `read_truth` reads the file. The truth of an episode is the site's own verdict on those
stored facts and the stored final answer (`site_verdicts`: every rubric fact's check holds, and the
answer contains the task's definite answer); computing it again needs no model, browser or site.

Each candidate judge scores the episode as it would in a run (`JudgeRequest.from_episode`), and
its pass is compared with the truth:

- ``stored``: the reward stored in the run (`StoredReward`: the judge that ran with the rollout);
- ``programmatic``: `ProgrammaticJudge`, the environment's own reward; the sites report none, so
  it fails every episode (the floor any judge should beat);
- ``rubric``: `RubricJudge` through the OpenAI endpoint of the ``--judge-*`` flags.

The figures (`Agreement`, success = positive, the truth as reference) are the counts tp, fp, tn,
fn, and agreement, precision, recall, specificity and Cohen's kappa, each over its n paired
episodes, per difficulty level (easy, medium, hard) and over all of them. A ratio whose
denominator is 0 is None (``null``, shown ``-``); kappa is None when truth and judge both put every
episode in one and the same class (chance agreement is then 1: there is nothing to measure beyond
it; their agreement, 1.0, says all there is).

Which episodes count:

- an episode without a truth line is skipped and counted (``without_truth``), and so is one whose
  task is not among the tasks given, or has no checks (``unknown_task``);
- an infrastructure failure (browser, policy endpoint, blocked site) says nothing about the agent
  and is skipped and counted (``infrastructure``); an episode whose run judge failed
  (``error:judge_*``) is measured, and is an error of ``stored``;
- a judge that raises on an episode, or cannot decide (a `JudgeResult` with ``error``), has an
  error on that episode: counted and listed, and left out of that judge's figures (its n is smaller).

Exceptions: `TruthFileError` (a `RolloutError`) for a truth file that is missing, unreadable or does
not match the run; `TrajectoryError` for a run that cannot be read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings, settings_options, settings_to_dict
from webgym_data.schema import DIFFICULTY_LEVELS, Task
from webgym_rollout.errors import RolloutError, TruthFileError
from webgym_rollout.judge.judges import JudgeRequest, JudgeSettings, ProgrammaticJudge, make_judge
from webgym_rollout.judge.site import site_verdicts
from webgym_rollout.tasks.websites.facts import SessionFacts
from webgym_rollout.tasks.websites.goals import task_checks
from webgym_rollout.trajectory.contract import Episode, TrajectoryError
from webgym_rollout.trajectory.reader import read_episodes, read_manifest

__all__ = [
    "JUDGE_NAMES",
    "TRUTH_FILE",
    "Agreement",
    "JudgedEpisode",
    "SiteEvalReport",
    "SiteEvalSettings",
    "StoredReward",
    "TruthFileError",
    "append_truth",
    "judge_eval",
    "judge_eval_sites_command",
    "make_judges",
    "read_truth",
]

log = logging.getLogger(__name__)

TRUTH_FILE = "truth.jsonl"
"""The ground-truth file of a run, beside its manifest: one JSON object per finished episode."""
JUDGE_NAMES = ("stored", "programmatic", "rubric")
"""The candidate judges ``--judges`` may name."""
ALL = "all"
"""The group of every measured episode, beside the difficulty levels."""

_append_lock = threading.Lock()


# ------------------------------------------------------------------------------------ truth file

def append_truth(run_dir: str | Path, episode_id: str, task_id: str, facts: SessionFacts) -> None:
    """Append the ground truth of one finished episode to ``run_dir/truth.jsonl`` as one line,
    flushed to disk before returning. A line a crash left half-written (no newline at the end of
    the file) is cut off first, so it never runs into the new one. Thread-safe within a process.
    A later line for the same episode id replaces an earlier one (a resumed run redoes episodes
    that never reached a shard)."""
    line = json.dumps({"episode_id": episode_id, "task_id": task_id, "facts": facts.model_dump(mode="json")},
                      ensure_ascii=False, separators=(",", ":")) + "\n"
    path = Path(run_dir) / TRUTH_FILE
    with _append_lock, open(path, "a+b") as file:
        size = file.seek(0, os.SEEK_END)
        if size:
            file.seek(size - 1)
            if file.read(1) != b"\n":
                file.truncate(_last_line_end(file, size))
        file.write(line.encode("utf-8"))
        file.flush()
        os.fsync(file.fileno())


def _last_line_end(file: Any, size: int, chunk: int = 1 << 16) -> int:
    """The offset just after the last newline of the file (0 when it has none)."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        file.seek(start)
        at = file.read(end - start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def read_truth(run_dir: str | Path) -> dict[str, tuple[str, SessionFacts]]:
    """``{episode_id: (task_id, facts)}`` from ``run_dir/truth.jsonl``; a later line for an episode
    replaces an earlier one. A last line a crash cut short (not JSON and no newline after it) is
    skipped with a warning. Raises `TruthFileError` for a missing file, and one naming the file
    and line for any other line that is not a truth record."""
    path = Path(run_dir) / TRUTH_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TruthFileError(f"{path}: no such file: the run holds no ground truth. The run must be made on "
                             "generated site tasks with a site server truth source (webgym-rollout run ... "
                             f"--truth-url URL), which writes {TRUTH_FILE} beside the episodes") from None
    except OSError as exc:
        raise TruthFileError(f"{path}: cannot read the truth file: {exc}") from None
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: "" when the file ends properly
    truth: dict[str, tuple[str, SessionFacts]] = {}
    numbered = [(n, line) for n, line in enumerate(lines, start=1)]
    if torn.strip():
        try:
            json.loads(torn)
        except ValueError:
            log.warning("%s line %d: a line cut short (a crash while writing it?); skipped",
                        path, len(lines) + 1)
        else:
            numbered.append((len(lines) + 1, torn))
    for number, raw in numbered:
        if not raw.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(raw)
        except ValueError as exc:
            raise TruthFileError(f"{where}: not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise TruthFileError(f"{where}: expected an object, got {type(record).__name__}")
        for name in ("episode_id", "task_id"):
            if not isinstance(record.get(name), str) or not record[name]:
                raise TruthFileError(f"{where}: {name}: expected a non-empty string, "
                                     f"got {record.get(name)!r}")
        try:
            facts = SessionFacts.model_validate(record.get("facts"))
        except ValidationError as exc:
            problem = exc.errors()[0]
            place = ".".join(str(part) for part in problem["loc"])
            raise TruthFileError(f"{where}: facts{'.' + place if place else ''}: {problem['msg']}") from None
        truth[record["episode_id"]] = (record["task_id"], facts)
    return truth


# --------------------------------------------------------------------------------------- metrics

def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


@dataclass(frozen=True)
class Agreement:
    """A judge's verdicts against the truth over a set of episodes (success = positive)."""

    tp: int = 0
    """Both say success."""
    fp: int = 0
    """The judge says success, the truth failure."""
    tn: int = 0
    """Both say failure."""
    fn: int = 0
    """The judge says failure, the truth success."""

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[bool, bool]]) -> Agreement:
        """From ``(truth, judged)`` pairs."""
        counts = {"tp": 0, "fp": 0, "tn": 0, "fn": 0}
        for truth, judged in pairs:
            counts[("t" if truth == judged else "f") + ("p" if judged else "n")] += 1
        return cls(**counts)

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.tn + self.fn

    @property
    def agreement(self) -> float | None:
        """Share of the episodes on which the judge and the truth agree."""
        return _ratio(self.tp + self.tn, self.n)

    @property
    def precision(self) -> float | None:
        """Of the judge's passes, the share that are true successes (None: it passed none)."""
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        """Of the true successes, the share the judge passed (None: there were none)."""
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def specificity(self) -> float | None:
        """Of the true failures, the share the judge failed (None: there were none)."""
        return _ratio(self.tn, self.tn + self.fp)

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa, (p_o - p_e) / (1 - p_e): agreement beyond what chance gives with these
        two rates of success. None when there are no episodes, or when truth and judge both give
        every episode one and the same class (p_e = 1). Computed in integers: n^2 p_e is exact."""
        n = self.n
        chance = (self.tp + self.fp) * (self.tp + self.fn) + (self.tn + self.fn) * (self.tn + self.fp)
        if n == 0 or chance == n * n:
            return None
        return (n * (self.tp + self.tn) - chance) / (n * n - chance)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "tp": self.tp, "fp": self.fp, "tn": self.tn, "fn": self.fn,
                **{name: getattr(self, name) for name in ("agreement", "precision", "recall", "specificity",
                                                          "kappa")}}


# ---------------------------------------------------------------------------------------- report

@dataclass(frozen=True)
class JudgedEpisode:
    """One measured episode: its truth and what each judge said."""

    episode_id: str
    task_id: str
    level: str
    """The task's difficulty level (easy, medium, hard)."""
    truth: bool
    failed_facts: tuple[str, ...] = ()
    """The truth's failed criteria (``fact:<group>:<n>``, ``definite_answer``); empty when it passed."""
    judged: dict[str, bool] = field(default_factory=dict)
    """Each judge's pass, by judge name; a judge with an error on the episode is not here."""
    errors: dict[str, str] = field(default_factory=dict)
    """Each judge's error on the episode ("kind: message"), by judge name."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class SiteEvalReport:
    """What ``judge-eval-sites`` measured, and what it left out."""

    run: str
    judges: dict[str, str]
    """The judges measured, by name: their model id (``stored``: the run's judge)."""
    episodes: list[JudgedEpisode] = field(default_factory=list)
    """The measured episodes, in the run's order."""
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("without_truth", "unknown_task", "infrastructure"), 0))
    """Episodes not measured, by reason (see the module docstring)."""
    truth_without_episode: int = 0
    """Truth lines whose episode is not in the run (a run cut before its shard was written)."""

    def levels(self) -> list[str]:
        """The difficulty levels present, easiest first, then `ALL`."""
        present = {e.level for e in self.episodes}
        return [level for level in DIFFICULTY_LEVELS if level in present] + sorted(
            present - set(DIFFICULTY_LEVELS)) + [ALL]

    def metrics(self, judge: str) -> dict[str, Agreement]:
        """`judge`'s figures per difficulty level and over `ALL` measured episodes."""
        return {level: Agreement.from_pairs((e.truth, e.judged[judge]) for e in self.episodes
                                            if judge in e.judged and level in (ALL, e.level))
                for level in self.levels()}

    def errors(self, judge: str) -> int:
        """Episodes on which `judge` raised or could not decide."""
        return sum(1 for e in self.episodes if judge in e.errors)

    def truth_successes(self) -> dict[str, int]:
        """True successes per level and over all."""
        return {level: sum(1 for e in self.episodes if e.truth and level in (ALL, e.level))
                for level in self.levels()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run, "judges": dict(self.judges),
            "measured": len(self.episodes), "truth_successes": self.truth_successes(),
            "skipped": dict(self.skipped), "truth_without_episode": self.truth_without_episode,
            "metrics": {name: {level: m.to_dict() for level, m in self.metrics(name).items()}
                        for name in self.judges},
            "errors": {name: self.errors(name) for name in self.judges},
            "episodes": [e.to_dict() for e in self.episodes],
        }

    def _rows(self) -> list[tuple[str, str, list[str]]]:
        """(judge, level, cells) for the tables, every judge's levels in order."""
        rows = []
        for name in self.judges:
            for level, m in self.metrics(name).items():
                errors = str(sum(1 for e in self.episodes if name in e.errors and level in (ALL, e.level)))
                rows.append((name, level, [str(m.n), str(m.tp), str(m.fp), str(m.tn), str(m.fn),
                                           _percent(m.agreement), _percent(m.precision), _percent(m.recall),
                                           _percent(m.specificity), _fixed(m.kappa), errors]))
        return rows

    def table(self) -> Any:
        """A rich table: one block per judge, a row per difficulty level and one for all."""
        from rich import box
        from rich.table import Table

        table = Table(title=f"judges against the sites' ground truth ({self.run})", box=box.SIMPLE_HEAD,
                      caption=_CAPTION)
        for name in _COLUMNS:
            table.add_column(name, justify="left" if name in ("judge", "level") else "right", no_wrap=True)
        previous = None
        for judge, level, cells in self._rows():
            if previous is not None and judge != previous:
                table.add_section()
            shown = judge if judge != previous else ""
            style = "bold" if level == ALL else None
            table.add_row(shown, level, *cells, style=style)
            previous = judge
        return table

    def markdown(self) -> str:
        """The table as GitHub markdown, with the counts of what was left out below it."""
        lines = ["| " + " | ".join(_COLUMNS) + " |",
                 "|" + "|".join(":---" if n in ("judge", "level") else "---:" for n in _COLUMNS) + "|"]
        for judge, level, cells in self._rows():
            name = f"**{level}**" if level == ALL else level
            lines.append("| " + " | ".join([judge, name, *cells]) + " |")
        return "\n".join([*lines, "", _CAPTION, "", self.summary()]) + "\n"

    def summary(self) -> str:
        """One line: what was measured and what was left out."""
        skipped = ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in self.skipped.items())
        return (f"{len(self.episodes)} episodes measured ({self.truth_successes()[ALL]} true successes); "
                f"skipped: {skipped}; truth lines without an episode: {self.truth_without_episode}")


_COLUMNS = ("judge", "level", "n", "TP", "FP", "TN", "FN", "agree %", "precision %", "recall %",
            "specificity %", "kappa", "errors")
_CAPTION = ("%: of the episodes each judge decided (n); TP: judge and truth pass; FP: the judge passes a "
            "true failure; FN: it fails a true success; kappa: Cohen's; -: undefined (nothing to divide by)")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _fixed(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# --------------------------------------------------------------------------------------- judging

class StoredReward:
    """The candidate ``stored``: the verdict stored in the run (its reward), not a judge called
    again. An episode whose run judge failed (``error:judge_*``) is an error of this candidate."""

    model_id = "stored"

    def __init__(self, run_judge: str = "") -> None:
        if run_judge:
            self.model_id = f"stored ({run_judge})"

    @staticmethod
    def verdict(episode: Episode) -> tuple[bool, str]:
        """(passed, error) of the stored reward."""
        if episode.status.is_error:
            return False, f"{episode.status.error_kind}: the run's judge failed on this episode"
        return episode.success, ""


def make_judges(names: Sequence[str], settings: JudgeSettings, *, run_judge: str = "") -> dict[str, Any]:
    """The candidate judges `names` (of `JUDGE_NAMES`), by name; ``rubric`` is the LLM judge of
    ``settings``' endpoint (its ``kind`` is not read). `run_judge` names the run's own judge."""
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


def _measurable(episode: Episode) -> bool:
    """Only infrastructure failures other than the run judge's own are left out."""
    return not episode.status.is_error or episode.status.error_kind.startswith("judge_")


async def judge_eval(run_dir: str | Path, judges: Mapping[str, Any], tasks: Iterable[Task], *,
                     concurrency: int = 8,
                     on_progress: Callable[[int, int], None] | None = None) -> SiteEvalReport:
    """Measure `judges` (by name: a `Judge`, or a `StoredReward`) against the ground truth of the
    run in `run_dir` (its episodes and `TRUTH_FILE`), with `tasks` the generated site tasks it
    played (their checks; matched by task id). At most `concurrency` episodes are judged at once;
    `on_progress(done, total)` follows the run's episodes. The judges are left open (close a
    `RubricJudge` yourself). Raises `TruthFileError` (no truth file, a bad line, a truth line of
    another task than its episode's, nothing to measure) and `TrajectoryError`."""
    if concurrency < 1:
        raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
    run_dir = Path(run_dir)
    truth = read_truth(run_dir)
    trajectories = read_episodes(run_dir)
    by_id = {task.task_id: task for task in tasks}
    report = SiteEvalReport(run=str(run_dir), judges={name: str(getattr(judge, "model_id", name))
                                                      for name, judge in judges.items()})
    results: dict[int, JudgedEpisode] = {}
    seen: set[str] = set()
    total, done = len(trajectories), 0
    pending: set[asyncio.Task] = set()

    def advance() -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, total)

    async def measure(position: int, episode: Episode, task: Task, facts: SessionFacts) -> None:
        verdicts = site_verdicts(task, facts, episode.answer, by_id.get(task.parent_task_id))
        request = JudgeRequest.from_episode(episode)
        scored = await asyncio.gather(*(_judge_one(name, judge, episode, request)
                                        for name, judge in judges.items()))
        results[position] = JudgedEpisode(
            episode_id=episode.episode_id, task_id=task.task_id, level=task.difficulty_level,
            truth=bool(verdicts) and all(v.passed for v in verdicts),
            failed_facts=tuple(v.criterion for v in verdicts if not v.passed),
            judged={name: passed for name, passed, error in scored if not error},
            errors={name: error for name, _, error in scored if error})
        advance()

    try:
        for position, episode in enumerate(trajectories):  # read in small batches
            seen.add(episode.episode_id)
            if not _measurable(episode):
                report.skipped["infrastructure"] += 1
                advance()
                continue
            if episode.episode_id not in truth:
                report.skipped["without_truth"] += 1
                advance()
                continue
            task_id, facts = truth[episode.episode_id]
            if task_id != episode.task.task_id:
                raise TruthFileError(f"{run_dir / TRUTH_FILE}: episode {episode.episode_id} is of task "
                                     f"{task_id} there, but of task {episode.task.task_id} in the run")
            task = by_id.get(task_id)
            if task is None or not _has_checks(task, by_id.get(task.parent_task_id)):
                report.skipped["unknown_task"] += 1
                advance()
                continue
            while len(pending) >= concurrency:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for future in finished:
                    future.result()
            pending.add(asyncio.create_task(measure(position, episode, task, facts),
                                            name=f"judge-eval-{episode.episode_id}"))
        for future in asyncio.as_completed(list(pending)):
            await future
    except BaseException:
        for future in pending:
            future.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise
    report.episodes = [results[position] for position in sorted(results)]
    report.truth_without_episode = len(set(truth) - seen)
    if not report.episodes:
        skipped = ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in report.skipped.items())
        raise TruthFileError(f"{run_dir}: no episode could be measured ({total} episodes; skipped: "
                             f"{skipped}); are the tasks the ones the run played (--tasks)?")
    return report


def _has_checks(task: Task, parent: Task | None) -> bool:
    try:
        return bool(task_checks(task, parent))
    except ValueError:
        return False


async def _judge_one(name: str, judge: Any, episode: Episode, request: JudgeRequest) -> tuple[str, bool, str]:
    """(name, passed, error) of one judge on one episode; an exception is an error, not a crash."""
    if isinstance(judge, StoredReward):
        return (name, *judge.verdict(episode))
    try:
        result = await judge.score(request)
    except Exception as exc:  # a judge endpoint down after its retries, or a bug: reported per episode
        kind = exc.kind if isinstance(exc, RolloutError) else type(exc).__name__
        log.warning("judge %s failed on episode %s: %s", name, episode.episode_id, exc)
        return name, False, f"{kind}: {exc}"
    if result.error:
        return name, False, result.error
    return name, result.passed, ""


# ------------------------------------------------------------------------------------------- CLI

@dataclass(frozen=True)
class SiteEvalSettings:
    """Settings of ``webgym-rollout judge-eval-sites``."""

    run: Path | None = field(default=None, metadata={"cli": False})
    """The run folder: its episodes and truth.jsonl."""
    judges: tuple[str, ...] = ("stored",)
    """The judges to measure, comma- or space-separated: stored (the reward in the run),
    programmatic (the environment's reward), rubric (the LLM judge of the --judge-* endpoint flags;
    --judge itself is not read)."""
    tasks: Path | None = None
    """The site tasks the run played (a task file or folder, with their checks); default: the
    --tasks its manifest records."""
    out: Path | None = None
    """Write the JSON report here: every figure, the counts and each episode's verdicts."""
    markdown: bool = False
    """Print the table as GitHub markdown instead of a terminal table."""
    concurrency: int = 8
    """Episodes judged at once."""
    progress: bool = True
    """Show a progress bar on stderr."""
    judge: JudgeSettings = field(default_factory=JudgeSettings)

    def __post_init__(self) -> None:
        if self.run is None:
            raise ValueError("run: the run folder is required")
        if self.concurrency < 1:
            raise ValueError(f"concurrency: must be >= 1, got {self.concurrency}")
        names = self.judge_names
        if not names:
            raise ValueError(f"judges: name at least one of {', '.join(JUDGE_NAMES)}")
        for name in names:
            if name not in JUDGE_NAMES:
                raise ValueError(f"judges: unknown judge {name!r}; expected one of {', '.join(JUDGE_NAMES)}")
        if len(set(names)) != len(names):
            raise ValueError(f"judges: a judge is named twice in {', '.join(names)}")
        if self.judge.kind == "rubric" and "rubric" not in names:
            raise ValueError("judges: --judge is not read by judge-eval-sites; name the rubric judge in "
                             "--judges (--judges stored,rubric)")
        if "rubric" in names and not self.judge.endpoint.configured:
            raise ValueError("judges: the rubric judge needs its endpoint (--judge-base-url and "
                             "--judge-model)")

    @property
    def judge_names(self) -> tuple[str, ...]:
        """`judges` with comma-separated values split: ``stored,rubric`` -> ("stored", "rubric")."""
        return tuple(part.strip() for value in self.judges for part in value.split(",") if part.strip())


def _tasks_of(settings: SiteEvalSettings) -> list[Task]:
    """The tasks of --tasks, or of the path the run's manifest records."""
    from webgym_data.loading import TaskSourceError, load_tasks

    source = settings.tasks
    if source is None:
        recorded = read_manifest(settings.run).get("run", {}).get("tasks")  # type: ignore[arg-type]
        if not recorded:
            raise click.UsageError(f"{settings.run}: the run's manifest records no task source: give --tasks")
        source = Path(recorded)
        if not source.exists():
            raise click.UsageError(f"{settings.run}: the run's manifest names the tasks {source}, which "
                                   "is not there (relative to where the run was started?): give --tasks")
    try:
        return list(load_tasks(source, split=None, skip_invalid=True))
    except TaskSourceError as exc:
        raise click.ClickException(f"--tasks: {exc}") from exc


@click.command("judge-eval-sites")
@click.argument("run", type=click.Path(path_type=Path))
@settings_options(SiteEvalSettings)
def judge_eval_sites_command(run: Path, config: str | None, **flags: Any) -> None:
    """Measure judges against the ground truth of a run on the local sites: RUN holds the episodes
    and truth.jsonl (the sites' facts of each episode, written when the run used a site server truth
    source). The truth of an episode is the sites' own checks of its task on those facts; each judge
    named by --judges scores the stored episode again, without browsers. Printed: agreement,
    precision, recall, specificity and Cohen's kappa per difficulty level and overall; --out gets
    them all as JSON, with each episode's verdicts.

    \b
    Example:
      webgym-rollout judge-eval-sites out/shop-run --judges stored,programmatic
      webgym-rollout judge-eval-sites out/shop-run --judges stored,rubric \\
          --judge-base-url http://127.0.0.1:8001/v1 --judge-model Qwen/Qwen2.5-VL-7B-Instruct \\
          --tasks out/shop-tasks.jsonl --out judges.json --markdown
    """
    try:
        settings = load_settings(SiteEvalSettings, config, flags, run=run)
    except (SettingsError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    if not run.is_dir():
        raise click.ClickException(f"{run}: no such run folder")
    try:
        if not (run / TRUTH_FILE).is_file():  # first: without it nothing else matters
            read_truth(run)  # raises, saying how a run gets one
        report = asyncio.run(_evaluate(settings, _tasks_of(settings)))
    except (TruthFileError, TrajectoryError) as exc:
        raise click.ClickException(str(exc)) from exc
    if settings.markdown:
        click.echo(report.markdown(), nl=False)
    else:
        import sys

        from rich.console import Console

        # a pipe or a file gets the whole table; a terminal its own width
        Console(width=None if sys.stdout.isatty() else 160).print(report.table())
        click.echo(report.summary())
    for name in report.judges:
        if report.errors(name):
            click.secho(f"{name}: errors on {report.errors(name)} episodes (left out of its figures; "
                        "see the log or --out)", fg="yellow", err=True)
    if settings.out is not None:
        settings.out.parent.mkdir(parents=True, exist_ok=True)
        recorded = settings_to_dict(settings)
        recorded["judge"].pop("api_key", None)  # never write a secret into a results file
        recorded["run"] = str(settings.run)
        settings.out.write_text(json.dumps({**report.to_dict(), "settings": recorded}, indent=2) + "\n",
                                encoding="utf-8")
        click.echo(f"-> {settings.out}")


async def _evaluate(settings: SiteEvalSettings, tasks: list[Task]) -> SiteEvalReport:
    from tqdm import tqdm

    run_judge = str(read_manifest(settings.run).get("run", {}).get("judge", ""))  # type: ignore[arg-type]
    judges = make_judges(settings.judge_names, settings.judge, run_judge=run_judge)
    bar = tqdm(unit="episode", desc="judge-eval-sites", disable=not settings.progress)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        return await judge_eval(settings.run, judges, tasks,  # type: ignore[arg-type]
                                concurrency=settings.concurrency, on_progress=progress)
    finally:
        bar.close()
        for judge in judges.values():
            close = getattr(judge, "close", None)
            if close is not None:
                await close()
