"""judge-eval against the sites' ground truth: judges measured against the shop's truth of a small run
played over HTTP (a real site server, a real OpenAI-protocol judge with a scripted heuristic behind it),
per difficulty level; judge errors left out or counted as failures; the command and its errors."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from click.testing import CliRunner

from tests.support.scripted_openai import ScriptedOpenAI
from webgym_core.endpoint import Endpoint
from webgym_data.loading import write_tasks
from webgym_data.schema import Task
from webgym_rollout.cli import main as cli_main
from webgym_rollout.errors import JudgeUnavailable
from webgym_rollout.judge.calibration import JudgeEvalSettings, StoredReward, judge_eval, judge_eval_command
from webgym_rollout.judge.judges import JudgeResult, JudgeSettings, ProgrammaticJudge, RubricJudge
from webgym_rollout.judge.metrics import JudgeMetrics
from webgym_rollout.judge.truth import TRUTH_FILE, TruthFileError, append_truth
from webgym_rollout.tasks.sites import SiteServer
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Step
from webgym_rollout.trajectory.writer import TrajectoryWriter
from webgym_sites.facts import SessionFacts
from webgym_sites.shop_tasks import shop_tasks
from webgym_sites.state import new_session_id, with_session

# ------------------------------------------------------------------------------------ a small run

# How each of the 12 generated tasks is played, and what the run's judge stored (its reward):
#   right    every step the task's params say, the right answer; the visited pages recorded
#   hidden   played right, but the recorded pages leave out the product page (the scripted LLM judge
#            looks for it there: a false negative of that judge)
#   browse   only the product pages opened; an info task gets a wrong answer
#   idle     the start page only
# The scripted judge passes an episode whose answer is given, whose visited pages hold the task's
# (first) product page and, for a task with a definite answer, whose answer contains it.
#
#  #  template      level   play    stored  | truth  stored  programmatic  rubric
#  0  price         easy    right   1       | T      TP      FN            TP
#  1  add_quantity  medium  right   1       | T      TP      FN            TP
#  2  checkout      hard    right   0       | T      FN      FN            TP
#  3  rating        easy    browse  1       | F      FP      TN            TN  (wrong answer)
#  4  cheapest      medium  browse  0       | F      TN      TN            FP
#  5  account       hard    idle    0       | F      TN      TN            TN
#  6  add           easy    hidden  1       | T      TP      FN            FN
#  7  best_rated    medium  right   1       | T      TP      FN            TP
#  8  two_items     hard    browse  1       | F      FP      TN            FP
#  9  price         easy    right   1       | no truth line: skipped (without_truth)
# 10  add_quantity  medium  right   1       | error:browser_crashed: skipped (infrastructure)
# 11  checkout      hard    right   0       | T      error   FN            TP  (error:judge_reply_invalid)
PLAYS = ["right", "right", "right", "browse", "browse", "idle", "hidden", "right", "browse", "right", "right",
         "right"]
STORED = [1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0]
TRUTH = {0: True, 1: True, 2: True, 3: False, 4: False, 5: False, 6: True, 7: True, 8: False, 11: True}
RUBRIC = {0: True, 1: True, 2: True, 3: False, 4: True, 5: False, 6: False, 7: True, 8: True, 11: True}
STATUS = {10: EpisodeStatus.BROWSER_CRASHED, 11: EpisodeStatus.JUDGE_REPLY_INVALID}


def product_ids(task: Task) -> list[str]:
    params = task.source.metadata_dict()["params"]
    if "product_id" in params:
        return [params["product_id"]]
    return [line["product_id"] for line in params["lines"]]


def play(sites: SiteServer, task: Task, how: str) -> tuple[str, list[str]]:
    """Play `task` over HTTP; returns the session id and the paths of the pages the episode
    records (its steps' URLs), the first being the start page."""
    params = task.source.metadata_dict()["params"]
    session = new_session_id()
    pages = ["/shop/"]
    with httpx.Client(base_url=sites.base_url, trust_env=False, follow_redirects=True) as client:
        client.get(with_session("/shop/", session))
        if how == "idle":
            return session, pages
        if how == "browse":
            for product in product_ids(task):
                client.get(f"/shop/product/{product}")
                pages.append(f"/shop/product/{product}")
            return session, pages
        if "account" in params:
            client.post("/shop/signin", data=params["account"])
            pages.append("/shop/signin")
        if "search" in params:
            search = f"/shop/search?{urlencode(params['search'])}"
            client.get(search)
            pages.append(search)
        if "product_id" in params:
            client.get(f"/shop/product/{params['product_id']}")
            pages.append(f"/shop/product/{params['product_id']}")
        for line in params.get("lines", []):
            client.get(f"/shop/product/{line['product_id']}")
            pages.append(f"/shop/product/{line['product_id']}")
            client.post("/shop/cart/add", data={k: str(v) for k, v in line.items()})
        pages.append("/shop/cart")
        if "checkout" in params:
            client.post("/shop/checkout", data=params["checkout"])
            client.post("/shop/checkout/confirm")
            pages.append("/shop/checkout")
    if how == "hidden":
        pages = [page for page in pages if not page.startswith("/shop/product/")]
    return session, pages


def answer_of(task: Task, how: str) -> str:
    if how == "browse" and task.definite_answer:
        return "1.0 out of 5, 3 reviews, $1.00"
    return f"Here it is: {task.definite_answer}" if task.definite_answer else "Done."


@pytest.fixture(scope="module")
def shop_run(tmp_path_factory) -> tuple[Path, list[Task]]:
    """A run folder of 12 shop episodes (see the table above), its truth.jsonl and its tasks file."""
    root = tmp_path_factory.mktemp("shop-run")
    run = root / "run"
    with SiteServer(shop_seed=0) as sites:
        tasks = shop_tasks(12, base_url=sites.base_url)
        tasks_file = write_tasks(tasks, root / "tasks.jsonl")
        with TrajectoryWriter(run, max_shard_episodes=5,
                              run_info={"tasks": str(tasks_file), "judge": "run-judge"}) as writer:
            for n, task in enumerate(tasks):
                session, pages = play(sites, task, PLAYS[n])
                urls = [with_session(sites.base_url + pages[0], session),
                        *(sites.base_url + page for page in pages[1:])]
                steps = [Step(index=i, url=url, title="Webgym Shop") for i, url in enumerate(urls)]
                episode = Episode(task=task, episode_id=f"ep{n:02d}", answer=answer_of(task, PLAYS[n]),
                                  reward=float(STORED[n]), status=STATUS.get(n, EpisodeStatus.OK),
                                  judge_model="run-judge", steps=steps)
                writer.add(episode)
                if n != 9:
                    append_truth(run, episode.episode_id, task.task_id, sites.facts(session))
    append_truth(run, "ghost", tasks[0].task_id, SessionFacts(session_id="x"))  # its shard never written
    with open(run / TRUTH_FILE, "a", encoding="utf-8") as file:
        file.write('{"episode_id": "torn"')
    return run, tasks


def heuristic_judge(tasks: list[Task]):
    """A scripted LLM judge: reads the question's prompt and answers as the table above says."""
    products = {task.task_name: product_ids(task)[0] for task in tasks}

    def reply(body: dict) -> str:
        text = next(part["text"] for part in body["messages"][-1]["content"] if part["type"] == "text")
        name = re.search(r"^Task: (.*)$", text, re.M).group(1)
        answer = text.split("The agent's final answer:\n", 1)[1].split("\n\n", 1)[0]
        if "Reference answer:" in text:
            reference = re.search(r"^Reference answer: (.*)$", text, re.M).group(1)
            holds = reference.casefold() in answer.casefold()
            return f"It {'agrees' if holds else 'does not agree'}.\nVERDICT: {'PASS' if holds else 'FAIL'}"
        if "is every claim in the final answer visible" in text:
            return "Looks fine.\nVERDICT: PASS"
        if "does the episode establish fact" in text:
            pages = [line for line in text.splitlines() if line.startswith("step ")]
            seen = any(f"/shop/product/{products[name]} " in page for page in pages)
            return f"Product page {'seen' if seen else 'not seen'}.\nVERDICT: {'PASS' if seen else 'FAIL'}"
        return "I do not know this question."

    return reply


class FlakyJudge:
    """Raises on the cheapest-backpack task (episode 4), cannot decide the rating task (episode 3),
    fails everything else; counts the episodes it judges at once."""

    model_id = "flaky"

    def __init__(self) -> None:
        self.in_flight = self.max_in_flight = 0

    async def score(self, request):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if "cheapest" in request.task.task_name:
                raise JudgeUnavailable("http://127.0.0.1:1/v1: connection refused")
            if "rated" in request.task.task_name:
                return JudgeResult(0.0, (), self.model_id, error="judge_reply_invalid: no verdict line")
            return await ProgrammaticJudge().score(request)
        finally:
            self.in_flight -= 1


def counts(metrics: JudgeMetrics) -> tuple[int, int, int, int]:
    return metrics.tp, metrics.fp, metrics.tn, metrics.fn


def settings_of(run: Path, **changes) -> JudgeEvalSettings:
    return JudgeEvalSettings(trajectories=str(run), progress=False, **changes)


async def test_judges_measured_against_the_shops_truth(shop_run):
    run, tasks = shop_run
    with ScriptedOpenAI(heuristic_judge(tasks)) as llm:
        endpoint = Endpoint(base_url=llm.base_url, model="scripted-judge", max_retries=0)
        settings = JudgeSettings(kind="rubric", endpoint=endpoint)
        async with RubricJudge(settings) as rubric:
            flaky = FlakyJudge()
            judges = {"stored": StoredReward("run-judge"), "programmatic": ProgrammaticJudge(),
                      "rubric": rubric, "flaky": flaky}
            seen: list[tuple[int, int]] = []
            report = await judge_eval(settings_of(run, concurrency=3, exclude_errors=True), judges=judges,
                                      tasks=tasks, on_progress=lambda done, total: seen.append((done, total)))
    assert 1 < flaky.max_in_flight <= 3  # episodes judged at once: --concurrency
    assert [e.episode_id for e in report.episodes] == [f"ep{n:02d}" for n in TRUTH]
    assert {int(e.episode_id[2:]): e.label for e in report.episodes} == TRUTH
    assert report.truth and report.labels == "the sites' ground truth"
    assert report.skipped == {"without_truth": 1, "unknown_task": 0, "infrastructure": 1}
    assert report.truth_without_episode == 1
    assert seen[-1] == (12, 12) and len(seen) == 12
    assert report.judges == {"stored": "stored (run-judge)", "programmatic": "programmatic",
                             "rubric": "scripted-judge", "flaky": "flaky"}
    wrong = next(e for e in report.episodes if e.episode_id == "ep03")
    assert wrong.failed_facts == ("fact:2:0", "fact:2:1", "definite_answer")

    rubric = {int(e.episode_id[2:]): e.judged["rubric"] for e in report.episodes}
    assert rubric == RUBRIC
    levels = ("easy", "medium", "hard", "all")
    stored = report.metrics("stored")
    assert list(stored) == list(levels)
    assert {level: counts(stored[level]) for level in levels} == {
        "easy": (2, 1, 0, 0), "medium": (2, 0, 1, 0), "hard": (0, 1, 1, 1), "all": (4, 2, 2, 1)}
    assert report.errors("stored") == 1 and stored["all"].n == 9
    assert stored["all"].kappa == pytest.approx(4 / 13)  # (9*6 - 42) / (81 - 42)
    assert stored["easy"].specificity == 0.0 and stored["medium"].kappa == 1.0

    programmatic = report.metrics("programmatic")
    assert {level: counts(programmatic[level]) for level in levels} == {
        "easy": (0, 0, 1, 2), "medium": (0, 0, 1, 2), "hard": (0, 0, 2, 2), "all": (0, 0, 4, 6)}
    assert programmatic["all"].kappa == 0.0 and programmatic["all"].precision is None
    assert programmatic["all"].agreement == pytest.approx(0.4) and programmatic["all"].specificity == 1.0

    metrics = report.metrics("rubric")
    assert {level: counts(metrics[level]) for level in levels} == {
        "easy": (1, 0, 1, 1), "medium": (2, 1, 0, 0), "hard": (2, 1, 1, 0), "all": (5, 2, 2, 1)}
    assert report.errors("rubric") == 0
    assert metrics["all"].kappa == pytest.approx(8 / 23)  # (10*7 - 54) / (100 - 54)
    assert metrics["all"].precision == pytest.approx(5 / 7) and metrics["all"].recall == pytest.approx(5 / 6)

    raised, undecided = (next(e for e in report.episodes if e.episode_id == f"ep0{n}") for n in (4, 3))
    assert "flaky" not in raised.judged and raised.errors["flaky"].startswith("judge_unavailable: ")
    assert undecided.errors["flaky"] == "judge_reply_invalid: no verdict line"
    assert report.errors("flaky") == 2 and counts(report.metrics("flaky")["all"]) == (0, 0, 2, 6)

    data = json.loads(json.dumps(report.to_dict()))
    assert data["metrics"]["rubric"]["all"]["tp"] == 5 and data["errors"] == {
        "stored": 1, "programmatic": 0, "rubric": 0, "flaky": 2}
    assert data["label_successes"] == {"easy": 2, "medium": 2, "hard": 2, "all": 6}
    markdown = report.markdown()
    # n, TP, FP, TN, FN, agree, precision, recall, F1, specificity, kappa, label SR, gap, errors
    assert ("| rubric | **all** | 10 | 5 | 2 | 2 | 1 | 70.0 | 71.4 | 83.3 | 76.9 | 50.0 | 0.348 | 60.0 "
            "| +10.0 | 0 |") in markdown
    assert ("| programmatic | easy | 3 | 0 | 0 | 1 | 2 | 33.3 | - | 0.0 | 0.0 | 100.0 | 0.000 | 66.7 | -66.7 "
            "| 0 |") in markdown


async def test_by_default_a_judge_error_is_a_failure_and_a_raising_judge_ends_it(shop_run):
    run, tasks = shop_run
    report = await judge_eval(settings_of(run), judges={"stored": StoredReward()}, tasks=tasks)
    # ep11, whose run judge failed, is a failure of the stored judge: a false negative
    assert counts(report.metrics("stored")["all"]) == (4, 2, 2, 2) and report.errors("stored") == 1
    ep11 = next(e for e in report.episodes if e.episode_id == "ep11")
    assert ep11.judged == {"stored": False} and ep11.errors["stored"].startswith("judge_reply_invalid: ")
    with pytest.raises(JudgeUnavailable):
        await judge_eval(settings_of(run, concurrency=1), judges={"flaky": FlakyJudge()}, tasks=tasks)


async def test_tasks_not_given_and_truth_of_another_task(shop_run, tmp_path):
    run, tasks = shop_run
    judges = {"stored": StoredReward()}
    report = await judge_eval(settings_of(run), judges=judges, tasks=tasks[:6])  # tasks 6-11 not measured
    assert len(report.episodes) == 6 and report.skipped["unknown_task"] == 4  # 9 and 10 skipped already
    with pytest.raises(TruthFileError, match="no episode could be measured"):
        await judge_eval(settings_of(run), judges=judges, tasks=[])
    copy = shutil.copytree(run, tmp_path / "run")
    lines = (copy / TRUTH_FILE).read_text(encoding="utf-8").splitlines()[:-1]  # without the torn line
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "task_id": tasks[5].task_id})
    (copy / TRUTH_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TruthFileError, match=f"episode ep00 is of task {tasks[5].task_id} there"):
        await judge_eval(settings_of(copy), judges=judges, tasks=tasks)


def test_cli_prints_the_table_and_writes_the_report(shop_run, tmp_path):
    run, tasks = shop_run
    out = tmp_path / "report.json"
    with ScriptedOpenAI(heuristic_judge(tasks)) as llm:
        result = CliRunner().invoke(cli_main, [
            "judge-eval", str(run), "--judges", "stored,programmatic", "--judges", "rubric",
            "--judge-base-url", llm.base_url, "--judge-model", "scripted-judge", "--judge-max-retries", "0",
            "--concurrency", "2", "--no-progress", "--exclude-errors", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "judges against the sites' ground truth" in result.output
    rows = [line.split() for line in result.output.splitlines()]
    assert ["rubric", "easy", "3", "1", "0", "1", "1", "66.7", "100.0", "50.0", "66.7", "100.0", "0.400",
            "66.7", "-33.3", "0"] in rows
    assert ["all", "10", "5", "2", "2", "1", "70.0", "71.4", "83.3", "76.9", "50.0", "0.348", "60.0", "+10.0",
            "0"] in rows
    assert "10 episodes measured (6 true successes); skipped: 1 without truth, 0 unknown task, " \
           "1 infrastructure; truth lines without an episode: 1" in result.output
    assert "stored: errors on 1 episodes" in result.output
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["metrics"]["stored"]["all"]["kappa"] == pytest.approx(4 / 13)
    assert data["judges"]["stored"] == "stored (run-judge)" and data["settings"]["judges"] == [
        "stored,programmatic", "rubric"]
    assert "api_key" not in data["settings"]["judge"]
    assert len(data["episodes"]) == 10 and data["labels"] == "the sites' ground truth"

    markdown = CliRunner().invoke(judge_eval_command, [
        str(run), "--truth", "--judges", "stored", "--markdown", "--no-progress", "--exclude-errors",
        "--tasks", str(run.parent / "tasks.jsonl")])
    assert markdown.exit_code == 0, markdown.output
    assert markdown.output.startswith("| judge | group | n | TP |")
    row = ("| stored | **all** | 9 | 4 | 2 | 2 | 1 | 66.7 | 66.7 | 80.0 | 72.7 | 50.0 | 0.308 | 55.6 | +11.1 "
           "| 1 |")
    assert row in markdown.output
    # without --judges: the judge --judge names (programmatic by default)
    default = CliRunner().invoke(judge_eval_command, [str(run), "--markdown", "--no-progress"])
    assert default.exit_code == 0, default.output
    assert "| programmatic | **all** | 10 | 0 | 0 | 4 | 6 |" in default.output


def test_cli_errors(shop_run, tmp_path):
    run, _ = shop_run
    runner = CliRunner()
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(judge_eval_command, [str(empty), "--truth", "--no-progress"])
    assert result.exit_code == 1 and "truth.jsonl: no such file" in result.output
    assert "site server truth source" in result.output
    result = runner.invoke(judge_eval_command, [str(empty), "--no-progress"])  # no labels of any kind
    assert result.exit_code == 1 and "no labels to measure the judges against" in result.output
    assert "--labels FILE" in result.output and "site server truth source" in result.output
    result = runner.invoke(judge_eval_command, [str(tmp_path / "nowhere"), "--truth"])
    assert result.exit_code == 1 and "no such run folder" in result.output
    result = runner.invoke(judge_eval_command, [str(run), "--judges", "rubric"])
    assert result.exit_code == 2 and "--judge-base-url" in result.output
    result = runner.invoke(judge_eval_command, [str(run), "--judges", "stored,oracle"])
    assert result.exit_code == 2 and "unknown judge 'oracle'" in result.output
    result = runner.invoke(judge_eval_command, [str(run), "--no-rescore", "--judges", "programmatic"])
    assert result.exit_code == 2 and "--no-rescore measures the stored rewards only" in result.output
    result = runner.invoke(judge_eval_command, [str(run), "--truth", "--labels", str(tmp_path / "l.jsonl")])
    assert result.exit_code == 2 and "not both" in result.output
    result = runner.invoke(judge_eval_command, [str(run), "--tasks", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 1 and "none.jsonl" in result.output
    help_text = runner.invoke(judge_eval_command, ["--help"]).output
    assert "--judges" in help_text and "webgym-rollout judge-eval out/shop-run" in help_text


def test_stored_reward_of_a_failed_run_judge():
    task = shop_tasks(1)[0]
    failed = Episode(task=task, episode_id="e", reward=0.0, status=EpisodeStatus.JUDGE_TIMEOUT)
    assert StoredReward.verdict(failed) == (False, "judge_timeout: the run's judge failed on this episode")
    assert StoredReward.verdict(Episode(task=task, episode_id="e", reward=1.0)) == (True, "")
