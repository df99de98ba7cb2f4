"""webgym_rl.loop.recipes: the shipped recipes load, dry-run against a task set (endpoints on
127.0.0.1), refuse what cannot work, and the CPU recipe runs end to end, cut down."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.webgym_rl.loops import tasks_file
from webgym_rl.cli import main
from webgym_rl.loop.recipes import describe_recipe, load_recipe, plan, recipe_names, recipe_path

SAMPLE_TASKS = Path(__file__).resolve().parents[3] / "webgym" / "sample_tasks.jsonl"


def test_the_shipped_recipes_are_listed_and_described():
    assert recipe_names() == ["miniwob-cpu", "published", "published-async"]
    assert "published WebGym recipe" in describe_recipe("published")
    result = CliRunner().invoke(main, ["recipes"])
    assert result.exit_code == 0
    listed = [line.split()[0] for line in result.output.splitlines() if not line.startswith(" ")]
    assert listed == recipe_names()
    shown = CliRunner().invoke(main, ["recipes", "published-async"])
    assert shown.exit_code == 0 and shown.output == recipe_path("published-async").read_text()


def test_a_docs_section_a_recipe_points_to_exists():
    root = Path(__file__).resolve().parents[3]
    pointers = [(name, page, heading) for name in recipe_names()
                for page, heading in re.findall(r'see (docs/[\w/.-]+\.md), "([^"]+)"',
                                                recipe_path(name).read_text(encoding="utf-8"))]
    assert pointers  # published.yaml points to the paper's section of the loop guide
    for name, page, heading in pointers:
        text = (root / page).read_text(encoding="utf-8")
        assert f"## {heading}\n" in text, f"{name} points to {page}, which has no section {heading!r}"


def test_the_published_recipes_hold_the_papers_settings():
    for name in ("published", "published-async"):
        s = load_recipe(name, tasks="t", out="o")
        t, selection = s.training, s.training.samples
        assert (s.model, s.bootstrap_policy, s.sampler.kind, s.judge.kind) == (
            "Qwen/Qwen3-VL-8B-Instruct", "model", "epoch", "rubric")
        assert (t.objective.value, selection.last_k_iterations, selection.recency_power,
                selection.success_threshold, selection.drop_same_as_next) == (
            "filtered_bc", 4, 1.0, 1.0, True)
        assert (s.policy.agent.variant, s.policy.agent.full_rounds) == ("memory", 4)
        assert (s.env.train_horizons, s.env.test_horizons) == ((10, 20, 30), (30, 50, 70))
        assert (s.eval_every, s.eval_split, s.eval_temperature, s.eval_horizons) == (1, "test", 0.0, "test")
    assert load_recipe("published", tasks="t", out="o").schedule == "sync"
    asynchronous = load_recipe("published-async", tasks="t", out="o")
    assert (asynchronous.schedule, asynchronous.async_loop.max_staleness) == ("async", 1)


def _model_folder(tmp_path: Path) -> Path:
    """A folder that passes for a checkpoint in a dry run (which reads no weights)."""
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_vl"}))
    return folder


@pytest.mark.parametrize("name", ["published", "published-async", "miniwob-cpu"])
def test_every_shipped_recipe_dry_runs_against_a_task_set(tmp_path, scripted_openai, name):
    llm = scripted_openai(["unused"])
    if name == "miniwob-cpu":
        tasks, changes = tasks_file(tmp_path / "tasks.jsonl"), {"model": str(_model_folder(tmp_path))}
    else:  # the endpoints of a GPU machine, here on 127.0.0.1: one answers, one does not
        tasks = SAMPLE_TASKS
        changes = {"policy": {"base_url": llm.base_url}, "judge": {"base_url": "http://127.0.0.1:9/v1"}}
    settings = load_recipe(name, tasks=str(tasks), out=str(tmp_path / "out"), **changes)
    text = plan(settings).render()
    for section in ("tasks:", "judge:", "endpoints:", "horizons:", "schedule:", "training:", "resume:"):
        assert section in text, (section, text)
    assert f"{tmp_path / 'out'}: new loop folder" in text
    assert "first batch has" in text
    if name == "miniwob-cpu":
        assert f"{tmp_path / 'model'}: a local checkpoint folder" in text
        assert "programmatic" in text and "the CPU policy server the loop starts" in text
        assert "published in memory" in text and "weights by age 1.00, 0.50, 0.33, 0.25" in text
    else:
        assert "Qwen/Qwen3-VL-8B-Instruct: a Hub model id (not a local folder); a dry run does not" in text
        assert f"policy policy at {llm.base_url}: answers" in text
        assert "gpt-4o at http://127.0.0.1:9/v1: does not answer" in text
        assert "train 10/20/30, test 30/50/70 steps" in text and "prompt memory with 4 image rounds" in text
        assert "published as folders" in text
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def test_the_dry_run_refuses_the_programmatic_judge_on_web_tasks_through_the_cli(tmp_path):
    result = CliRunner().invoke(main, ["loop", "--config", "published", "--dry-run", "--tasks",
                                       str(SAMPLE_TASKS), "--out", str(tmp_path / "out"), "--judge",
                                       "programmatic"])
    assert result.exit_code == 1, result.output
    assert "of kind 'web'" in result.output and "--judge rubric" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("model", ["./nope", "out/tiny-qwen2vl/nope", "~/models/nope"])
def test_the_dry_run_refuses_a_model_folder_that_does_not_exist_and_asks_no_hub(tmp_path, monkeypatch, model):
    import huggingface_hub

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: pytest.fail("a Hub call"))
    result = CliRunner().invoke(main, ["loop", "--config", "miniwob-cpu", "--dry-run", "--tasks",
                                       str(tasks_file(tmp_path / "tasks.jsonl")), "--model", model,
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert f"--model {model}: no such folder" in result.output and "tiny-model" in result.output
    assert not (tmp_path / "out").exists()


def test_the_dry_run_warns_when_the_evaluation_tasks_are_the_training_tasks(tmp_path):
    tasks = tasks_file(tmp_path / "tasks.jsonl")
    args = ["loop", "--config", "miniwob-cpu", "--dry-run", "--tasks", str(tasks), "--model",
            str(_model_folder(tmp_path)), "--out", str(tmp_path / "out")]
    same = CliRunner().invoke(main, [*args, "--eval-split", "train"])  # a task file is all one split
    assert same.exit_code == 0, same.output
    assert f"the evaluation tasks {tasks} [train] are all training tasks" in same.output
    assert "--eval-tasks" in same.output
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text("".join(line.replace('"task_id": "', '"task_id": "heldout-') + "\n"
                               for line in tasks.read_text().splitlines()))
    apart = CliRunner().invoke(main, [*args, "--eval-tasks", str(heldout), "--eval-split", "train"])
    assert apart.exit_code == 0 and "training tasks" not in apart.output, apart.output


def test_the_dry_run_says_what_a_rerun_would_resume(tmp_path):
    from webgym_rl.loop.state import CheckpointRecord, TrainRecord, VersionRecord, load_state, save_state

    settings = load_recipe("miniwob-cpu", tasks=str(tasks_file(tmp_path / "tasks.jsonl")),
                           out=str(tmp_path / "out"), model=str(_model_folder(tmp_path)), iterations=4)
    (tmp_path / "out").mkdir()
    state = load_state(settings)
    for r in (0, 1):
        state.round(r).train = TrainRecord(steps=1)
        state.versions.append(VersionRecord(version=r + 1, round=r))
    folder = tmp_path / "out" / "trainer" / "checkpoint-r0000"
    state.checkpoints = [CheckpointRecord(round=0, folder=str(folder))]
    save_state(settings, state)
    text = plan(settings).render()
    assert "2 versions published; the trainer would restore" in text
    assert "checkpoint-r0000 and train rounds [1] again; next round 1 of 4" in text


@pytest.mark.browser
@pytest.mark.slow
def test_the_cpu_recipe_runs_end_to_end_cut_down(tmp_path, tiny_qwen3_vl):
    from webgym_data.importers.miniwob import miniwob_task
    from webgym_data.loading import write_tasks
    from webgym_rl.loop.run import run_loop

    train = write_tasks([miniwob_task("click-test", s) for s in range(4)], tmp_path / "train.jsonl")
    heldout = write_tasks([miniwob_task("click-test", 100_000 + s) for s in range(2)],
                          tmp_path / "heldout.jsonl")
    settings = load_recipe("miniwob-cpu", tasks=str(train), eval_tasks=str(heldout), model=str(tiny_qwen3_vl),
                           out=str(tmp_path / "loop"), iterations=1, max_steps=2, per_device_batch_size=2,
                           concurrency=2, policy={"max_new_tokens": 8, "max_tokens": 8})
    result = run_loop(settings)
    record = result.state.rounds[0]
    assert record.rollout.policy == "random" and record.rollout.episodes == 4
    assert record.train.steps == 2 and record.train.samples > 0  # click-test: the random policy succeeds
    assert record.eval.version == 1 and record.eval.episodes == 2
    assert [(v.version, v.path) for v in result.state.versions] == [(0, "start"), (1, "memory")]
    assert result.checkpoint == str(tmp_path / "loop" / "checkpoints" / "v-0001")
    state = json.loads((tmp_path / "loop" / "loop_state.json").read_text())
    assert state["settings"]["policy"]["variant"] == "compact" and state["identity"]["schedule"] == "sync"


def test_a_browser_server_url_without_its_scheme_is_refused(tmp_path):
    result = CliRunner().invoke(main, ["loop", "--config", "miniwob-cpu", "--dry-run", "--tasks",
                                       str(tasks_file(tmp_path / "tasks.jsonl")), "--model",
                                       str(_model_folder(tmp_path)), "--out", str(tmp_path / "out"),
                                       "--servers", "127.0.0.1:8300"])
    assert result.exit_code == 1, result.output
    assert "'127.0.0.1:8300' has no scheme; write it as http://127.0.0.1:8300" in result.output


def test_the_dry_run_warns_of_a_model_folder_without_a_config(tmp_path):
    (tmp_path / "empty").mkdir()
    settings = load_recipe("miniwob-cpu", tasks=str(tasks_file(tmp_path / "tasks.jsonl")),
                           out=str(tmp_path / "out"), model=str(tmp_path / "empty"))
    text = plan(settings).render()
    assert f"--model {tmp_path / 'empty'} has no config.json (nor adapter_config.json)" in text
    (tmp_path / "empty" / "adapter_config.json").write_text("{}")
    assert f"{tmp_path / 'empty'}: a local LoRA adapter folder" in plan(settings).render()


def test_the_dry_run_names_the_site_judge_and_warns_of_a_site_server_it_cannot_read(tmp_path):
    tasks = tasks_file(tmp_path / "tasks.jsonl")
    args = ["loop", "--config", "miniwob-cpu", "--dry-run", "--tasks", str(tasks),
            "--model", str(_model_folder(tmp_path)), "--out", str(tmp_path / "out"), "--judge", "site"]
    here = CliRunner().invoke(main, args)
    assert here.exit_code == 0, here.output
    assert "site: each episode's facts checked against the ground truth" in here.output
    assert "programmatic" not in here.output.split("judge:")[1].split("\n")[1]
    elsewhere = CliRunner().invoke(main, [*args, "--sites-url", "http://127.0.0.1:8400"])
    assert "with --sites-url http://127.0.0.1:8400 it has none to read" in elsewhere.output
