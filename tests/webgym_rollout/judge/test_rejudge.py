"""`webgym_rollout.judge.rejudge` and the judge comparison of `webgym_rollout.report.html`: stored
episodes are scored again by a rubric judge behind a real OpenAI-protocol server with scripted
verdicts, without browsers. The rewards change as scripted and nothing else does."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner

from tests.webgym_rollout.agent.test_protocol import png
from webgym_core.endpoint import Endpoint
from webgym_data.schema import Task
from webgym_rollout.browser.protocol import RecordedExchange, RecordingIndex
from webgym_rollout.judge.judges import JudgeSettings
from webgym_rollout.judge.rejudge import RejudgeSettings, rejudge, rejudge_command
from webgym_rollout.report.html import ReportSettings, build_report, format_summary, write_report
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Step, TaskOutcome, Verdict
from webgym_rollout.trajectory.reader import read_episodes
from webgym_rollout.trajectory.recordings import RecordingStore
from webgym_rollout.trajectory.writer import TrajectoryWriter

BODY = b"<html>recorded page</html>"


def _episode(name: str, *, status: EpisodeStatus, reward: float, answer: str = "",
             recording: str = "") -> Episode:
    task = Task.from_row({"task_id": f"task-{name}", "task_name": f"Task {name}: find the price",
                          "website": "http://127.0.0.1:9/", "start_url": "http://127.0.0.1:9/"})
    steps = [Step(index=0, screenshot=png("white"), url="http://127.0.0.1:9/", title="home",
                  response="click", action='{"name": "left_click"}'),
             Step(index=1, screenshot=png("green"), url="http://127.0.0.1:9/p", title="price",
                  response="answer", action='{"name": "answer"}')]
    return Episode(task=task, episode_id=f"ep-{name}", status=status, reward=reward, answer=answer,
                   judge_model="old-judge", policy_model="policy-x", steps=steps, recording=recording,
                   verdicts=[Verdict("task", reward >= 1, "old reason")], outcome=TaskOutcome())


def _source(tmp_path):
    """A stored run: A (answered, failed), B (answered, passed), C (no answer, timeout), D (a browser
    crash), E (answered; its judge timed out). A has a recording."""
    folder = tmp_path / "run"
    store = RecordingStore(folder)
    sha = hashlib.sha256(BODY).hexdigest()
    store.put_body(sha, BODY)
    index = RecordingIndex(exchanges=[RecordedExchange(method="GET", url="http://127.0.0.1:9/", status=200,
                                                       body_sha256=sha, body_size=len(BODY))])
    relative = store.write_index("ep-A", index)
    episodes = [_episode("A", status=EpisodeStatus.OK, reward=0.0, answer="$5", recording=relative),
                _episode("B", status=EpisodeStatus.OK, reward=1.0, answer="$7"),
                _episode("C", status=EpisodeStatus.TIMEOUT, reward=0.0),
                _episode("D", status=EpisodeStatus.BROWSER_CRASHED, reward=0.0),
                _episode("E", status=EpisodeStatus.JUDGE_TIMEOUT, reward=0.0, answer="$9")]
    with TrajectoryWriter(folder) as writer:
        for episode in episodes:
            writer.add(episode)
    return folder


def _judge_replies(body: dict) -> str:
    """Fails every question about task B, passes every other."""
    text = json.dumps(body["messages"])
    return "Checked.\nVERDICT: FAIL" if "Task B" in text else "Checked.\nVERDICT: PASS"


def _settings(server, out, **kwargs) -> RejudgeSettings:
    endpoint = Endpoint(base_url=server.base_url, model="judge-v2", api_key="t", backoff_s=0.01)
    return RejudgeSettings(out=out, progress=False, judge=JudgeSettings(kind="rubric", endpoint=endpoint),
                           **kwargs)


async def test_rejudge_changes_the_rewards_as_scripted_and_keeps_everything_else(tmp_path, scripted_openai):
    source = _source(tmp_path)
    server = scripted_openai(_judge_replies)
    report = await rejudge(source, _settings(server, tmp_path / "run2", concurrency=2))
    assert (report.episodes, report.rejudged, report.copied, report.judge_errors) == (5, 4, 1, 0)
    assert report.changed == 3  # A 0 -> 1, B 1 -> 0, E 0 -> 1 (C has no answer: 0 without asking)

    old = {e.episode_id: e for e in read_episodes(source)}
    new = {e.episode_id: e for e in read_episodes(tmp_path / "run2")}
    assert set(new) == set(old)
    assert {i: e.reward for i, e in new.items()} == {"ep-A": 1.0, "ep-B": 0.0, "ep-C": 0.0, "ep-D": 0.0,
                                                     "ep-E": 1.0}
    assert new["ep-E"].status is EpisodeStatus.OK  # the failed judge's status is undone, then judged
    assert new["ep-D"].status is EpisodeStatus.BROWSER_CRASHED and new["ep-D"].judge_model == "old-judge"
    for episode_id in ("ep-A", "ep-B", "ep-C", "ep-E"):
        assert new[episode_id].judge_model == "judge-v2"
        assert all(v.reason != "old reason" for v in new[episode_id].verdicts)
    for episode_id, episode in new.items():  # everything but the judgement is as stored
        before = old[episode_id]
        assert [s.screenshot_sha256 for s in episode.steps] == [s.screenshot_sha256 for s in before.steps]
        assert [(s.url, s.response, s.action) for s in episode.steps] == [
            (s.url, s.response, s.action) for s in before.steps]
        assert (episode.answer, episode.task, episode.policy_model, episode.attempt) == (
            before.answer, before.task, before.policy_model, before.attempt)
    # Only episodes with an answer reached the judge; nothing of task D was asked.
    asked = [json.dumps(r["messages"]) for r in server.requests]
    assert asked and not any("Task D" in text or "Task C" in text for text in asked)

    manifest = json.loads((tmp_path / "run2" / "manifest.json").read_text())
    assert manifest["run"]["rejudge"]["judge"] == "judge-v2"
    assert manifest["run"]["rejudge"]["source"] == str(source)
    # The recording came along and is complete in the new dataset.
    copied = RecordingStore(tmp_path / "run2")
    index = copied.read_index(new["ep-A"].recording)
    assert copied.get_body(index.exchanges[0].body_sha256) == BODY


async def test_report_compares_the_two_judges_episode_by_episode(tmp_path, scripted_openai):
    source = _source(tmp_path)
    await rejudge(source, _settings(scripted_openai(_judge_replies), tmp_path / "run2"))
    report = build_report([source, tmp_path / "run2"], ReportSettings(), labels=["v1", "v2"])
    judges = report.comparisons[0].judges
    assert judges is not None and (judges.a_judge, judges.b_judge) == ("old-judge", "judge-v2")
    # Shared judged episodes A, B, C (D is a failure in both, E only judged in v2).
    assert judges.shared_episodes == 3
    assert (judges.both_pass, judges.a_only, judges.b_only, judges.both_fail) == (0, 1, 1, 1)
    assert judges.agreement == pytest.approx(1 / 3)
    assert judges.kappa == pytest.approx(-0.5)
    assert judges.changed == ("ep-A", "ep-B")
    assert "Cohen's kappa -0.50" in format_summary(report)
    html = write_report(report, tmp_path / "report").read_text()
    assert "id='judges'" in html
    figures = json.loads((tmp_path / "report" / "report.json").read_text())
    assert figures["comparisons"][0]["judges"]["changed"] == ["ep-A", "ep-B"]
    # A run against itself: the same judge agrees with itself on every episode.
    alone = build_report([source, source], labels=["x", "y"])
    assert alone.comparisons[0].judges is not None and alone.comparisons[0].judges.agreement == 1.0
    assert alone.comparisons[0].judges.changed == ()


def test_rejudge_command_writes_a_new_dataset_and_refuses_to_overwrite(tmp_path, scripted_openai):
    source = _source(tmp_path)
    server = scripted_openai(_judge_replies)
    args = [str(source), "--out", str(tmp_path / "run2"), "--judge", "rubric", "--judge-base-url",
            server.base_url, "--judge-model", "judge-v2", "--no-progress"]
    result = CliRunner().invoke(rejudge_command, args)
    assert result.exit_code == 0, result.output
    assert "4 re-judged by judge-v2, 3 rewards changed" in result.output
    again = CliRunner().invoke(rejudge_command, args)
    assert again.exit_code == 1 and "--resume" in again.output
    resumed = CliRunner().invoke(rejudge_command, [*args, "--resume"])
    assert resumed.exit_code == 0 and "(5 already done)" in resumed.output
    missing = CliRunner().invoke(rejudge_command, [str(tmp_path / "nothing"), "--out", str(tmp_path / "o")])
    assert missing.exit_code == 1 and "nothing" in missing.output
    assert len(read_episodes(tmp_path / "run2")) == 5


def test_rejudge_of_a_folder_that_is_no_trajectory_set_says_what_it_holds_and_writes_nothing(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("re-judge the eval run")
    (folder / "plots").mkdir()
    result = CliRunner().invoke(rejudge_command, [str(folder), "--out", str(tmp_path / "o"), "--no-progress"])
    assert result.exit_code == 1, result.output
    assert f"{folder} is not a trajectory set" in result.output
    assert "holds plots/, todo.txt" in result.output and "webgym-rollout run" in result.output
    assert not (tmp_path / "o").exists()


def test_rejudge_of_a_split_without_episodes_exits_non_zero_and_writes_nothing(tmp_path):
    source = _source(tmp_path)  # every episode of split train
    args = [str(source), "--split", "test", "--out", str(tmp_path / "o"), "--no-progress"]
    result = CliRunner().invoke(rejudge_command, args)
    assert result.exit_code == 1, result.output
    assert "holds no episodes of split 'test'; nothing was re-judged" in result.output
    assert not (tmp_path / "o").exists()
