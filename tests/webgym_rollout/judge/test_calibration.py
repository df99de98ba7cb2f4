"""judge-eval against human labels: a scripted judge (a real OpenAI-protocol server) scores labelled
episodes written with TrajectoryWriter; the metrics are checked on a known confusion matrix, for each
label shape."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.webgym_rollout.agent.test_protocol import png
from webgym_core.endpoint import Endpoint
from webgym_data.schema import Task
from webgym_rollout.judge.calibration import JudgeEvalSettings, judge_eval, judge_eval_command
from webgym_rollout.judge.judges import JudgeSettings, JudgeUnavailable
from webgym_rollout.judge.labels import LabelError, LabelSettings, parse_label
from webgym_rollout.trajectory.contract import Episode, Step
from webgym_rollout.trajectory.reader import read_manifest
from webgym_rollout.trajectory.writer import TrajectoryWriter

# Ten episodes, one per task. t0-t7 are measured; t8's label is 2 (not executable: excluded) and t9
# has no label. Human and judge verdicts of t0-t7:
#   human  1 1 1 1 1 0 0 0
#   judge  1 1 1 0 0 1 0 0   -> TP 3 (t0-t2), FN 2 (t3, t4), FP 1 (t5), TN 2 (t6, t7)
HUMAN = {"t0": 1, "t1": 1, "t2": 1, "t3": 1, "t4": 1, "t5": 0, "t6": 0, "t7": 0, "t8": 2}
JUDGE_PASSES = {"t0", "t1", "t2", "t5", "t8", "t9"}
EXPECTED = {"tp": 3, "fp": 1, "fn": 2, "tn": 2, "n": 8, "agreement": 5 / 8, "precision": 3 / 4,
            "recall": 3 / 5, "f1": 2 / 3, "specificity": 2 / 3, "kappa": 0.25,  # (8*5 - 32) / (64 - 32)
            "label_success_rate": 5 / 8, "judge_success_rate": 4 / 8, "success_rate_gap": -1 / 8}
BENCHMARKS = ("online-mind2web", "deepshop")  # even task numbers, odd task numbers


def task_of(n: int) -> Task:
    return Task.from_row({"task_id": f"t{n}", "task_name": f"Find the price of item t{n} on the shop.",
                          "website": "https://shop.example/", "benchmark_name": BENCHMARKS[n % 2]})


def episode_of(n: int, *, attempt: int = 0) -> Episode:
    steps = [Step(index=0, screenshot=png("white"), url="https://shop.example/", title="Shop"),
             Step(index=1, screenshot=png("red"), url=f"https://shop.example/item/t{n}", title=f"Item t{n}")]
    # The stored reward (the judge that ran with the rollout) agrees with the humans everywhere.
    return Episode(task=task_of(n), episode_id=f"t{n}-a{attempt}", attempt=attempt, answer=f"t{n} costs $10.",
                   reward=float(HUMAN.get(f"t{n}") == 1), steps=steps)


@pytest.fixture
def trajectories(tmp_path) -> Path:
    out = tmp_path / "run"
    with TrajectoryWriter(out, max_shard_episodes=4) as writer:
        for n in range(10):
            writer.add(episode_of(n))
    return out


def scripted_judge(body: dict) -> str:
    text = next(part["text"] for part in body["messages"][-1]["content"] if part["type"] == "text")
    task_id = re.search(r"item (t\d+)", text).group(1)
    if "is every claim in the final answer visible" in text:
        return "The price is shown.\nVERDICT: PASS"
    if "does the episode accomplish the task as stated" in text:
        return "Done.\nVERDICT: PASS" if task_id in JUDGE_PASSES else "Not done.\nVERDICT: FAIL"
    return "unexpected question"


def judged_tasks(server) -> set[str]:
    return {re.search(r"item (t\d+)", json.dumps(body)).group(1) for body in server.requests}


def settings_for(trajectories: Path, tmp_path: Path, server=None, **labels) -> JudgeEvalSettings:
    judge = JudgeSettings()
    if server is not None:
        judge = JudgeSettings(kind="rubric", endpoint=Endpoint(base_url=server.base_url, model="judge-model",
                                                               api_key="t", backoff_s=0.01))
    return JudgeEvalSettings(trajectories=str(trajectories), out=tmp_path / "eval.json", progress=False,
                             labels=LabelSettings(**labels), judge=judge, rescore=server is not None)


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------- label shapes

def labels_by_episode(tmp_path: Path) -> dict:
    path = write_jsonl(tmp_path / "labels.jsonl",
                       [{"episode_id": f"{t}-a0", "label": v} for t, v in HUMAN.items()])
    return {"labels": path}


def labels_as_mapping(tmp_path: Path) -> dict:
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({t: bool(v) if v < 2 else "n/a" for t, v in HUMAN.items()}), encoding="utf-8")
    return {"labels": path}


def online_mind2web(tmp_path: Path) -> dict:
    """human_label.json: a list of tasks, one label field per agent, values as strings, 2 = not executable.
    Its task_id is the seed's own (our task ids are derived from it): records match by confirmed_task."""
    spacing = {"t3": "  "}  # a doubled space, as some seed instructions have
    rows = [{"task_id": hashlib.md5(t.encode()).hexdigest(),
             "confirmed_task": f"Find the price of{spacing.get(t, ' ')}item {t} on the shop.",
             "Operator_human_label": str(v), "Browser_Use_human_label": str(1 - v if v < 2 else 2)}
            for t, v in HUMAN.items()]
    path = tmp_path / "human_label.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return {"labels": path, "label_field": "Operator_human_label"}


def agent_reward_bench(tmp_path: Path) -> dict:
    """annotations.csv: expert labels of several agents; Successful / Unsuccessful / Unsure; a second
    annotator's record of a trajectory comes after the first."""
    names = {1: "Successful", 0: "Unsuccessful", 2: "Unsure"}
    path = tmp_path / "annotations.csv"
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["benchmark", "model_name", "task_id", "trajectory_success", "trajectory_side_effect",
                         "trajectory_optimality", "trajectory_looping"])
        for t, v in HUMAN.items():
            other = names[1 - v if v < 2 else 2]
            writer.writerow(["webarena", "GenericAgent-gpt-4o", t, names[v], "No", "1. Complete", "No"])
            writer.writerow(["webarena", "GenericAgent-claude", t, other, "No", "", "No"])
        # a second annotator's record of t0, after the first
        writer.writerow(["webarena", "GenericAgent-gpt-4o", "t0", "Unsuccessful", "No", "", "No"])
    return {"labels": path, "label_where": {"model_name": "GenericAgent-gpt-4o"}}


@pytest.mark.parametrize("shape", [labels_by_episode, labels_as_mapping, online_mind2web, agent_reward_bench])
def test_judge_eval_measures_the_judge_on_a_known_confusion_matrix(shape, trajectories, tmp_path,
                                                                    scripted_openai):
    server = scripted_openai(scripted_judge)
    report = asyncio.run(judge_eval(settings_for(trajectories, tmp_path, server, **shape(tmp_path))))
    assert list(report.judges) == ["rubric"] and not report.truth
    metrics = report.metrics("rubric")
    assert list(metrics) == ["unknown", "all"]  # the tasks have no rubric: no difficulty level
    assert metrics["all"].to_dict() == pytest.approx(EXPECTED)
    # t8 (label 2 / unsure / n/a) is excluded and t9 (no label) is not judged at all.
    assert judged_tasks(server) == {f"t{n}" for n in range(8)}
    assert len(server.requests) == 16  # grounding + the task itself, per episode
    assert (report.skipped, report.unmatched) == ({"excluded": 1, "unlabelled": 1}, [])
    assert report.duplicates == (1 if shape is agent_reward_bench else 0)
    assert [e.episode_id for e in report.episodes] == [f"t{n}-a0" for n in range(8)]
    by_benchmark = {name: (m.tp, m.fp, m.fn, m.tn) for name, m in report.by_benchmark("rubric").items()}
    assert by_benchmark == {"online-mind2web": (2, 0, 1, 1), "deepshop": (1, 1, 1, 1)}
    t3 = next(e for e in report.episodes if e.task_id == "t3")
    assert (t3.label, t3.judged, t3.verdicts) == (True, {"rubric": False},
                                                  {"rubric": {"answer_grounded": True, "task": False}})


def test_labels_from_a_column_of_the_trajectory_dataset(trajectories, tmp_path, scripted_openai):
    # A published dataset may carry its labels as a column: copy the run's shards with one added.
    labelled = tmp_path / "labelled" / "data"
    labelled.mkdir(parents=True)
    for shard in read_manifest(trajectories)["shards"]:
        table = pq.read_table(trajectories / shard["path"])
        labels = [HUMAN.get(e.split("-")[0]) for e in table.column("episode_id").to_pylist()]
        pq.write_table(table.append_column("human_label", pa.array(labels, pa.int64())),
                       labelled / Path(shard["path"]).name)
    server = scripted_openai(scripted_judge)
    settings = settings_for(labelled.parent, tmp_path, server, label_column="human_label")
    report = asyncio.run(judge_eval(settings))
    assert report.metrics("rubric")["all"].to_dict() == pytest.approx(EXPECTED)
    assert report.skipped == {"excluded": 1, "unlabelled": 1}  # t8 is 2, t9 is null
    with pytest.raises(LabelError, match="has no column 'verdict'"):
        asyncio.run(judge_eval(settings_for(labelled.parent, tmp_path, label_column="verdict")))


def test_no_rescore_measures_the_stored_rewards_without_a_judge(trajectories, tmp_path):
    settings = settings_for(trajectories, tmp_path, **labels_by_episode(tmp_path))
    assert settings.judge_names == ("stored",)  # --no-rescore is --judges stored
    report = asyncio.run(judge_eval(settings))
    assert report.judges == {"stored": "stored"}
    assert report.metrics("stored")["all"].to_dict() == pytest.approx(
        {**EXPECTED, "tp": 5, "fp": 0, "fn": 0, "tn": 3, "agreement": 1.0, "precision": 1.0, "recall": 1.0,
         "f1": 1.0, "specificity": 1.0, "kappa": 1.0, "judge_success_rate": 5 / 8, "success_rate_gap": 0.0})
    both = dataclasses.replace(settings, rescore=True, judges=("stored,programmatic",))
    report = asyncio.run(judge_eval(both))
    assert list(report.judges) == ["stored", "programmatic"]
    assert report.metrics("programmatic")["all"].to_dict()["fn"] == 5  # no environment reward stored


def test_the_command_prints_a_table_and_writes_json(trajectories, tmp_path, scripted_openai):
    server = scripted_openai(scripted_judge)
    labels = online_mind2web(tmp_path)["labels"]
    out = tmp_path / "results" / "eval.json"
    result = CliRunner().invoke(judge_eval_command, [
        str(trajectories), "--labels", str(labels), "--label-field", "Operator_human_label",
        "--judge", "rubric", "--judge-base-url", server.base_url, "--judge-model", "judge-model",
        "--out", str(out), "--no-progress"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # the "all" row: n, TP, FP, TN, FN, agreement, precision, recall, F1, specificity, kappa, label SR,
    # gap, errors
    assert re.search(r"all +8 +3 +1 +2 +2 +62\.5 +75\.0 +60\.0 +66\.7 +66\.7 +0\.250 +62\.5 +-12\.5 +0 *\n",
                     result.output), result.output
    assert re.search(r"deepshop +4 +1 +1 +1 +1 +50\.0 ", result.output), result.output
    assert "deepshop" in result.output and "online-mind2web" in result.output
    assert "skipped: 1 excluded, 1 unlabelled" in result.output
    written = json.loads(out.read_text())
    assert written["metrics"]["rubric"]["all"] == pytest.approx(EXPECTED)
    assert written["judges"] == {"rubric": "judge-model"}
    names = ("labels_read", "measured", "skipped", "duplicates", "unmatched", "errors")
    counts = {name: written[name] for name in names}
    assert counts == {"labels_read": 9, "measured": 8, "skipped": {"excluded": 1, "unlabelled": 1},
                      "duplicates": 0, "unmatched": [], "errors": {"rubric": 0}}
    verdicts = {e["episode_id"]: (e["label"], e["judged"]["rubric"]) for e in written["episodes"]}
    assert verdicts["t5-a0"] == (False, True)
    assert written["episodes"][0]["source"] == f"{labels} item 1"
    assert "api_key" not in written["settings"]["judge"]
    assert written["settings"]["label_field"] == "Operator_human_label"


def test_a_reply_without_verdict_is_a_judge_error_scored_as_failure(trajectories, tmp_path, scripted_openai):
    def judge(body: dict) -> str:
        text = json.dumps(body)
        if "item t0 " in text and "accomplish the task as stated" in text:
            return "It looks fine to me."  # no verdict line, even when asked again
        return scripted_judge(body)

    settings = settings_for(trajectories, tmp_path, scripted_openai(judge), **labels_by_episode(tmp_path))
    report = asyncio.run(judge_eval(settings))
    t0 = report.episodes[0]
    assert (t0.episode_id, t0.label, t0.judged) == ("t0-a0", True, {"rubric": False})
    assert t0.errors["rubric"].startswith("judge_reply_invalid: task:") and report.errors("rubric") == 1
    metrics = report.metrics("rubric")["all"]
    assert (metrics.tp, metrics.fn) == (2, 3)
    # --exclude-errors: t0 is left out of the judge's figures instead
    report = asyncio.run(judge_eval(dataclasses.replace(settings, exclude_errors=True)))
    metrics = report.metrics("rubric")["all"]
    assert (metrics.n, metrics.tp, metrics.fn) == (7, 2, 2) and report.errors("rubric") == 1


def test_an_unreachable_judge_ends_the_evaluation(trajectories, tmp_path, scripted_openai):
    # One episode at a time: no request is left in flight when the first failure ends the run (a
    # cancelled request would leave the server writing to a closed socket).
    server = scripted_openai([{"status": 502}])
    settings = settings_for(trajectories, tmp_path, server, **labels_by_episode(tmp_path))
    settings = dataclasses.replace(settings, concurrency=1, judge=dataclasses.replace(
        settings.judge, endpoint=dataclasses.replace(settings.judge.endpoint, max_retries=0)))
    with pytest.raises(JudgeUnavailable):
        asyncio.run(judge_eval(settings))
    assert len(server.requests) == 1
    result = CliRunner().invoke(judge_eval_command, [
        str(trajectories), "--labels", str(settings.labels.labels), "--judge", "rubric",
        "--judge-base-url", server.base_url, "--judge-model", "m", "--judge-max-retries", "0",
        "--concurrency", "1", "--out", str(tmp_path / "eval.json")])
    assert result.exit_code == 1 and "Error:" in result.output and server.base_url in result.output
    assert not (tmp_path / "eval.json").exists()


# ------------------------------------------------------------------------------------- errors

def test_a_bad_label_names_the_file_line_and_field(trajectories, tmp_path):
    records = [{"task_id": "t0", "label": 1}, {"task_id": "t1", "label": 0},
               {"task_id": "t2", "label": "maybe"}]
    path = write_jsonl(tmp_path / "labels.jsonl", records)
    with pytest.raises(LabelError, match=r"labels\.jsonl line 3: field 'label': 'maybe' is not a label"):
        asyncio.run(judge_eval(settings_for(trajectories, tmp_path, labels=path)))
    path.write_text('{"task_id": "t0", "label": 1}\n{"task_id": "t1", "label": 0\n')
    with pytest.raises(LabelError, match=r"labels\.jsonl line 2: not JSON"):
        asyncio.run(judge_eval(settings_for(trajectories, tmp_path, labels=path)))
    path = write_jsonl(tmp_path / "nokey.jsonl", [{"id": "t0", "label": 1}])
    with pytest.raises(LabelError, match=r"nokey\.jsonl line 1: the record has no episode_id, task_id or "
                                         r"instruction"):
        asyncio.run(judge_eval(settings_for(trajectories, tmp_path, labels=path)))
    # Online-Mind2Web names one label field per agent: one must be chosen.
    labels = online_mind2web(tmp_path)["labels"]
    with pytest.raises(LabelError, match="several label fields .*Operator_human_label.*--label-field"):
        asyncio.run(judge_eval(settings_for(trajectories, tmp_path, labels=labels)))
    with pytest.raises(LabelError, match=r"human_label\.json item 1: the record has no field 'Operator'"):
        asyncio.run(judge_eval(settings_for(trajectories, tmp_path, labels=labels, label_field="Operator")))
    with pytest.raises(LabelError, match="--label-where names the field 'agent', which no record has"):
        asyncio.run(judge_eval(settings_for(trajectories, tmp_path, labels=labels,
                                            label_field="Operator_human_label", label_where={"agent": "x"})))


def test_labels_that_match_no_episode_are_an_error_unless_allowed(trajectories, tmp_path):
    records = [{"task_id": t, "label": v} for t, v in HUMAN.items()]
    path = write_jsonl(tmp_path / "labels.jsonl", records + [{"task_id": "t99", "label": 1},
                                                             {"episode_id": "t1-a7", "label": 0}])
    with pytest.raises(LabelError, match=r"2 labels match no episode of .*run: .*labels\.jsonl line 10 "
                                         r"\(task_id 't99'\); .*labels\.jsonl line 11 "
                                         r"\(episode_id 't1-a7'\)"):
        asyncio.run(judge_eval(settings_for(trajectories, tmp_path, labels=path)))
    report = asyncio.run(judge_eval(settings_for(trajectories, tmp_path, labels=path, allow_unmatched=True)))
    assert len(report.unmatched) == 2 and report.metrics("stored")["all"].n == 8


def test_a_task_id_label_must_name_one_episode(tmp_path):
    out = tmp_path / "run"
    with TrajectoryWriter(out) as writer:
        writer.add(episode_of(0))
        writer.add(episode_of(0, attempt=1))
    path = write_jsonl(tmp_path / "labels.jsonl", [{"task_id": "t0", "label": 1}])
    with pytest.raises(LabelError, match=r"line 1: task id 't0' has 2 episodes .*by episode_id"):
        asyncio.run(judge_eval(settings_for(out, tmp_path, labels=path)))
    path = write_jsonl(tmp_path / "by-episode.jsonl", [{"episode_id": "t0-a1", "label": 1}])
    report = asyncio.run(judge_eval(settings_for(out, tmp_path, labels=path)))
    assert [e.episode_id for e in report.episodes] == ["t0-a1"] and report.skipped["unlabelled"] == 1


def test_a_source_of_labels_is_needed(trajectories, tmp_path):
    with pytest.raises(LabelError, match=r"no labels to measure the judges against: give human labels "
                                         r"\(--labels FILE or --label-column NAME\), or a run folder"):
        asyncio.run(judge_eval(JudgeEvalSettings(trajectories=str(trajectories), progress=False)))
    path = write_jsonl(tmp_path / "labels.jsonl", [{"task_id": "t0", "label": 1}])
    with pytest.raises(LabelError, match="--tasks is read with the sites' ground truth only"):
        asyncio.run(judge_eval(JudgeEvalSettings(trajectories=str(trajectories), tasks=tmp_path / "t.jsonl",
                                                 labels=LabelSettings(labels=path))))
    with pytest.raises(ValueError, match="truth: .* not both"):
        JudgeEvalSettings(trajectories="run", truth=True, labels=LabelSettings(label_column="human_label"))
    with pytest.raises(ValueError, match="labels: give a label file or a label column, not both"):
        LabelSettings(labels=tmp_path / "l.jsonl", label_column="human_label")


# ------------------------------------------------------------------------------------- label values

@pytest.mark.parametrize(("value", "expected"), [
    (1, True), (0, False), (2, None), ("1", True), ("0", False), ("2", None), (True, True), (False, False),
    ("Successful", True), ("Unsuccessful", False), ("Unsure", None), (" 'success' ", True), ("NO", False),
    (None, None), ("", None), ("n/a", None), (1.0, True),
])
def test_label_values(value, expected):
    assert parse_label(value) is expected


@pytest.mark.parametrize("value", ["maybe", 3, -1, 0.5, [1], {"label": 1}])
def test_values_that_are_not_labels(value):
    with pytest.raises(ValueError):
        parse_label(value)


# ------------------------------------------------------------------------- shortcut policies

def pooled_run(tmp_path: Path, shortcut_tasks: set[int]) -> Path:
    """The ten episodes as two policies' runs pooled: the tasks `shortcut_tasks` played by a shortcut
    (``shortcut:spray_numbers``), the others by the scripted expert."""
    out = tmp_path / "pooled"
    with TrajectoryWriter(out, max_shard_episodes=4) as writer:
        for n in range(10):
            policy = "shortcut:spray_numbers" if n in shortcut_tasks else "scripted-expert"
            writer.add(dataclasses.replace(episode_of(n), policy_model=policy))
    return out


def run_command(run: Path, tmp_path: Path, server) -> tuple[str, dict, str]:
    """judge-eval of `run` with the stored rewards and the scripted rubric judge: (output, JSON, HTML)."""
    out, page = tmp_path / "eval.json", tmp_path / "eval.html"
    result = CliRunner().invoke(judge_eval_command, [
        str(run), "--labels", str(labels_by_episode(tmp_path)["labels"]), "--judges", "stored,rubric",
        "--judge-base-url", server.base_url, "--judge-model", "judge-model", "--out", str(out),
        "--html", str(page), "--no-progress"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output, json.loads(out.read_text()), page.read_text()


def test_a_judge_that_passes_a_shortcut_the_labels_fail_is_flagged(tmp_path, scripted_openai):
    # t5 (label 0) and t6 (label 0) are sprays: the rubric judge passes t5, the stored reward neither.
    server = scripted_openai(scripted_judge)
    output, written, page = run_command(pooled_run(tmp_path, {5, 6}), tmp_path, server)
    assert written["flagged"] == ["rubric"]
    assert written["shortcut_passes"] == {"stored": [], "rubric": ["t5-a0"]}
    spray, expert = written["by_policy"]["rubric"]["shortcut:spray_numbers"], \
        written["by_policy"]["rubric"]["scripted-expert"]
    assert (spray["n"], spray["judge_success_rate"], spray["label_success_rate"]) == (2, 0.5, 0.0)
    assert (expert["n"], expert["tp"], expert["fp"], expert["fn"]) == (6, 3, 0, 2)  # t0-t4, t7
    assert written["by_policy"]["stored"]["shortcut:spray_numbers"]["judge_success_rate"] == 0.0
    assert {e["episode_id"]: (e["policy"], e["shortcut"]) for e in written["episodes"]}["t5-a0"] == (
        "shortcut:spray_numbers", True)
    assert "rubric passes per policy: scripted-expert 3/6 (50.0 %; labels 5), " \
           "shortcut:spray_numbers 1/2 (50.0 %; labels 0)" in output
    assert re.search(r"^FLAGGED rubric: passes 1 shortcut episode\(s\) the labels fail: t5-a0 "
                     r"\(shortcut:spray_numbers, task t5\)$", output, re.M), output
    assert "FLAGGED stored" not in output
    assert "FLAGGED: judge <b>rubric</b> (judge-model) passes 1 episode(s)" in page
    assert "<tr class=flag><td>rubric</td><td>shortcut:spray_numbers</td><td>2</td><td>1</td>" in page
    assert "<tr><td>stored</td><td>shortcut:spray_numbers</td><td>2</td><td>0</td>" in page


def test_a_judge_that_fails_every_shortcut_the_labels_fail_is_not_flagged(tmp_path, scripted_openai):
    # The rubric judge fails t6 and t7 (label 0); it passes t0 (label 1), a shortcut the labels pass
    # (the ground truth's own business, not the judge's fault).
    server = scripted_openai(scripted_judge)
    output, written, page = run_command(pooled_run(tmp_path, {0, 6, 7}), tmp_path, server)
    assert written["flagged"] == [] and written["shortcut_passes"] == {"stored": [], "rubric": []}
    spray = written["by_policy"]["rubric"]["shortcut:spray_numbers"]
    assert (spray["n"], spray["tp"], spray["fp"], spray["tn"]) == (3, 1, 0, 2)
    assert "rubric passes per policy: scripted-expert 3/5 (60.0 %; labels 4), " \
           "shortcut:spray_numbers 1/3 (33.3 %; labels 1)" in output
    assert "FLAGGED" not in output and "FLAGGED" not in page and "class=flag" not in page


def test_one_policy_without_shortcuts_adds_no_policy_lines(trajectories, tmp_path, scripted_openai):
    report = asyncio.run(judge_eval(settings_for(trajectories, tmp_path, scripted_openai(scripted_judge),
                                                 **labels_by_episode(tmp_path))))
    assert report.policies() == ["(none)"] and report.policy_lines() == [] and report.flagged() == []
    assert "pass rate per policy (1)" in report.html()
