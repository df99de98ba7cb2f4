"""The online loop (`webgym_rl.loop`, `webgym_rl.services`, `webgym_rl.loop_state`) with real parts:
MiniWoB site server, Chromium browser server, the CPU policy server with a tiny random Qwen2-VL, the
trainer. Two iterations, a failure injected into iteration 1's train phase, and a resume that
continues from exactly that phase."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from tests.webgym_rl.loops import MINIWOB
from tests.webgym_rl.loops import loop_settings as _settings
from tests.webgym_rl.loops import tasks_file as _tasks
from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings
from webgym_rl.loop import (
    LoopSettings,
    LoopSettingsError,
    LoopStateError,
    PhaseFailed,
    run_loop,
)


def _fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """(mtime_ns, sha256) of every file under `folder`: proves a rerun did not rewrite it."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _load(folder: Path, cache: Path):
    import datasets

    # A cache of its own per folder: offline, `datasets` would serve an earlier folder of the same name.
    return datasets.load_dataset(str(folder), split="train",
                                 cache_dir=str(cache / folder.parent.name / folder.name))


@pytest.mark.browser
@pytest.mark.slow
def test_two_iterations_then_resume_after_a_train_failure(tmp_path, tiny_qwen2_vl, monkeypatch):
    from huggingface_hub import HfApi

    from webgym_rollout.modeling import load_model

    # The Hub's write API is the one thing replaced: it records what each push would upload.
    commits = []

    def create_commit(api, *, repo_id, operations, commit_message, **kwargs):
        files = {op.path_in_repo: op.path_or_fileobj for op in operations}
        commits.append({"repo_id": repo_id, "message": commit_message, "files": files})
        return "http://127.0.0.1/fake-commit"

    monkeypatch.setattr(HfApi, "create_repo", lambda api, repo_id, **kwargs: None)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    settings = _settings(tmp_path, tiny_qwen2_vl, push_to="me/webgym-loop-test")
    out = Path(settings.out)
    blocker = out / "iter-0001" / "train"
    events: list[tuple[str, int, str]] = []

    def inject(kind, detail):
        events.append((kind, detail.get("iteration", -1), detail.get("phase", "")))
        # A real failure, not a mock: a file where iteration 1's trainer output folder must go.
        if kind == "phase_done" and detail["iteration"] == 1 and detail["phase"] == "rollout":
            blocker.write_text("in the way")

    with pytest.raises(PhaseFailed) as caught:
        run_loop(settings, on_event=inject)
    assert (caught.value.iteration, caught.value.phase) == (1, "train")
    assert "iteration 1, phase 'train'" in str(caught.value) and str(blocker) in str(caught.value)
    state = json.loads((out / "loop_state.json").read_text())
    assert set(state["iterations"]["0"]) == {"rollout", "train", "push"}  # no eval: due every 2 iterations
    assert set(state["iterations"]["1"]) == {"rollout"}
    assert state["last_error"]["iteration"] == 1 and state["last_error"]["phase"] == "train"

    # Iteration 0 is complete and loadable: random bootstrap rollout, a checkpoint trained on it.
    rollout0 = _load(out / "iter-0000" / "trajectories", tmp_path / "hf-cache")
    assert len(rollout0) == len(MINIWOB) and set(rollout0["policy_model"]) == {"random"}
    assert set(rollout0["iteration"]) == {0}
    successes0 = sum(r >= 1.0 for r in rollout0["reward"])
    assert state["iterations"]["0"]["rollout"]["successes"] == successes0 > 0
    train0 = state["iterations"]["0"]["train"]
    assert train0["checkpoint"] == str(out / "iter-0000" / "checkpoint")
    assert train0["counts"]["trajectories_kept"] == successes0
    load_model(train0["checkpoint"])
    # Iteration 1 rolled out with iteration 0's checkpoint behind the policy server.
    rollout1 = _load(out / "iter-0001" / "trajectories", tmp_path / "hf-cache")
    assert len(rollout1) == len(MINIWOB) and set(rollout1["policy_model"]) == {"webgym-policy"}
    assert state["iterations"]["1"]["rollout"]["checkpoint"] == train0["checkpoint"]

    before0 = _fingerprint(out / "iter-0000")
    before1 = _fingerprint(out / "iter-0001" / "trajectories")
    blocker.unlink()
    events.clear()
    result = run_loop(settings, on_event=lambda kind, detail: events.append(
        (kind, detail.get("iteration", -1), detail.get("phase", ""))))

    started = [(i, p) for kind, i, p in events if kind == "phase_started"]
    skipped = [(i, p) for kind, i, p in events if kind == "phase_skipped"]
    assert started == [(1, "train"), (1, "eval"), (1, "push")]
    assert skipped == [(0, "rollout"), (0, "train"), (0, "push"), (1, "rollout")]
    assert _fingerprint(out / "iter-0000") == before0
    assert _fingerprint(out / "iter-0001" / "trajectories") == before1

    state = json.loads((out / "loop_state.json").read_text())
    assert state["last_error"] is None
    train1 = state["iterations"]["1"]["train"]
    assert result.checkpoint == train1["checkpoint"] == str(out / "iter-0001" / "checkpoint")
    # Iteration 1 continued from iteration 0's checkpoint, on both iterations' trajectories (last K=4).
    trainer_state = json.loads((out / "iter-0001" / "checkpoint" / "trainer_state.json").read_text())
    assert trainer_state["base_model"] == train0["checkpoint"]
    assert train1["data"] == [str(out / f"iter-000{i}" / "trajectories") for i in (0, 1)]
    assert train1["counts"]["iterations_kept"] == [0, 1]
    load_model(train1["checkpoint"])
    evaluation = _load(out / "iter-0001" / "eval", tmp_path / "hf-cache")
    assert len(evaluation) == len(MINIWOB)
    measured = state["iterations"]["1"]["eval"]
    assert measured["checkpoint"] == train1["checkpoint"]
    assert measured["episodes"] == len(evaluation)
    assert measured["successes"] == sum(r >= 1.0 for r in evaluation["reward"])
    # The evaluation's report and the learning curve so far (train points of both rollouts, one test point)
    figures = json.loads((out / "iter-0001" / "report" / "report.json").read_text())
    assert figures["runs"][0]["overall"]["successes"] == measured["evaluated"][0] == measured["successes"]
    assert [(p["iteration"], p["label"]) for p in figures["learning_curve"]] == [(0, "train"), (1, "train"),
                                                                                (1, "test")]
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert measured["valid_actions"] == sum(1 for row in evaluation for s in row["steps"] if s["action"])
    assert measured["steps"] == sum(evaluation["num_steps"])
    # One push per iteration, each of that iteration's checkpoint; the second card carries the
    # success rate the evaluation measured.
    assert [c["message"] for c in commits] == ["webgym-rl loop: iteration 0", "webgym-rl loop: iteration 1"]
    assert all(c["repo_id"] == "me/webgym-loop-test" for c in commits)
    assert Path(commits[1]["files"]["model.safetensors"]).parent == out / "iter-0001" / "checkpoint"
    assert "training_state" not in " ".join(commits[1]["files"])
    card = commits[1]["files"]["README.md"].decode()
    assert f"| eval (train split) | {measured['success_rate']:.1%} |" in card
    assert "No evaluation figures" in commits[0]["files"]["README.md"].decode()

    # A finished loop reruns as a no-op; a rerun with other identity settings is refused.
    events.clear()
    run_loop(settings, on_event=lambda kind, detail: events.append((kind, -1, "")))
    assert all(kind == "phase_skipped" for kind, _, _ in events)
    other = _settings(tmp_path, tiny_qwen2_vl, objective="reinforce")
    with pytest.raises(LoopStateError, match="objective"):
        run_loop(other)


def test_settings_from_yaml_then_flags(tmp_path):
    config = tmp_path / "loop.yaml"
    config.write_text("iterations: 5\nlast-k-iterations: 2\nservers: [http://127.0.0.1:8300]\n"
                      "learning_rate: 0.001\npolicy: {temperature: 0.7, max_new_tokens: 16}\n"
                      "pool: {browsers: 2}\n")
    flags = {"tasks": "t.jsonl", "model": "m", "out": "o", "iterations": 3, "eval_every": None, "servers": (),
             "policy__max_new_tokens": 32}
    settings = load_settings(LoopSettings, config, flags)
    training = settings.training
    assert (settings.iterations, training.samples.last_k_iterations, training.learning_rate) == (3, 2, 0.001)
    assert settings.servers == ["http://127.0.0.1:8300"] and settings.eval_every == 0
    # The groups are the rollout's and the trainer's own settings, not copies of them.
    assert (settings.policy.sampling.temperature, settings.policy.max_new_tokens) == (0.7, 32)
    assert (settings.pool.browsers, settings.pool.contexts_per_browser) == (2, 4)
    assert settings.eval_temperature == 0.0 and settings.rollout.concurrency == 4
    config.write_text("iteratons: 5\n")
    with pytest.raises(SettingsError, match="iteratons: unknown setting"):
        load_settings(LoopSettings, config)


@pytest.mark.parametrize(("changes", "message"), [
    ({"policy": {"base_url": "http://127.0.0.1:8000/v1"}}, "--policy-command .* or --policy-reload-url"),
    ({"policy": {"command": "vllm serve --port {port}"}}, "must contain {checkpoint}"),
    ({"sampler": {"kinds": ["desktop"]}}, "sampler.kinds: desktop unknown"),
    ({"viewport": "wide"}, "expected WIDTHxHEIGHT"),
    ({"iterations": 0}, "iterations: must be >= 1"),
    ({"servers": ["http://127.0.0.1:8300"], "fleet": "web", "ray_address": "127.0.0.1:6379"},
     "servers: give browser server URLs or --fleet web, not both"),
    ({"fleet": "web"}, "ray_address: --fleet web needs"),
    ({"policy": {"base_url": "http://127.0.0.1:8000/v1", "updater": "vllm_lora"}, "mode": "async"},
     "policy.updater: vllm_lora loads each version as a LoRA adapter of --model, so it needs training.lora"),
    ({"tasks": "/nonexistent/tasks.jsonl"}, "--tasks /nonexistent/tasks.jsonl: no such file"),
])
def test_bad_settings_stop_before_anything_starts(tmp_path, changes, message):
    # Values are refused when the settings are made (SettingsError), paths when the loop starts
    # (LoopSettingsError); both are ValueErrors naming the field.
    with pytest.raises(ValueError, match=message):
        run_loop(_settings(tmp_path, tmp_path / "model", **changes))
    assert not (tmp_path / "loop").exists()


def test_the_groups_check_themselves_when_built_in_python(tmp_path):
    from webgym_core.endpoint import Endpoint
    from webgym_rl.loop import PolicyEndpointSettings

    with pytest.raises(LoopSettingsError, match="base_url: needs a way to switch"):
        PolicyEndpointSettings(endpoint=Endpoint(base_url="http://127.0.0.1:8000/v1"))
    with pytest.raises(LoopSettingsError, match="reload_url: goes with --policy-base-url"):
        PolicyEndpointSettings(reload_url="http://127.0.0.1:8000/reload")
    with pytest.raises(LoopSettingsError, match="tasks: is required"):
        LoopSettings(model="m", out="o")


def test_cli_reports_a_bad_setting_in_one_line(tmp_path):
    from click.testing import CliRunner

    from webgym_rl.cli import main

    tasks = _tasks(tmp_path / "tasks.jsonl")
    result = CliRunner().invoke(main, ["loop", "--tasks", str(tasks), "--model", "m", "--out",
                                       str(tmp_path / "o"), "--policy-base-url", "http://127.0.0.1:1/v1"])
    assert result.exit_code == 1
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert "--policy-base-url" in error and "needs a way to switch" in error
    assert "Traceback" not in result.output


@pytest.mark.browser
@pytest.mark.slow
def test_training_under_a_launcher_runs_webgym_rl_train_in_a_child_process(tmp_path, tiny_qwen2_vl):
    """--train-launcher is how several GPUs are used (accelerate launch + an Accelerate config)."""
    import sys

    from webgym_rollout.modeling import load_model

    accelerate = Path(sys.executable).with_name("accelerate")
    launcher = (f"{accelerate} launch --num_processes 1 --num_machines 1 --mixed_precision no "
                "--dynamo_backend no")
    settings = _settings(tmp_path, tiny_qwen2_vl, iterations=1, eval_every=0, train_launcher=launcher)
    result = run_loop(settings)
    train = result.iterations[0]["train"]
    out = Path(settings.out) / "iter-0000"
    written = (out / "train-settings.yaml").read_text()
    assert f"model: {tiny_qwen2_vl}" in written and str(out / "trajectories") in written
    trainer_state = json.loads((out / "checkpoint" / "trainer_state.json").read_text())
    assert trainer_state["step"] == train["steps"] >= 1 and trainer_state["num_processes"] == 1
    assert train["counts"]["trajectories_kept"] == result.iterations[0]["rollout"]["successes"]
    assert result.checkpoint == str(out / "checkpoint")
    load_model(result.checkpoint)


def test_miniwob_on_remote_browser_servers_needs_their_own_site_server(tmp_path):
    # 192.0.2.0/24 is reserved for documentation: nothing is sent there, the loop stops before.
    settings = _settings(tmp_path, tmp_path / "model", servers=["http://192.0.2.10:8300"])
    with pytest.raises(PhaseFailed, match="iteration 0, phase 'rollout'.*need --sites-url") as caught:
        run_loop(settings)
    assert isinstance(caught.value.__cause__, LoopSettingsError)
    state = json.loads((tmp_path / "loop" / "loop_state.json").read_text())
    assert state["iterations"]["0"] == {} and state["last_error"]["phase"] == "rollout"


@pytest.mark.browser
@pytest.mark.slow
def test_lora_training_is_merged_before_the_next_rollout(tmp_path, tiny_qwen2_vl):
    import torch

    from webgym_rollout.modeling import load_model

    settings = _settings(tmp_path, tiny_qwen2_vl, iterations=2, eval_every=0, lora=True, lora_rank=4,
                         lora_alpha=8, learning_rate=0.05)
    result = run_loop(settings)
    out = Path(settings.out)
    first = out / "iter-0000" / "checkpoint"
    names = {p.name for p in first.iterdir()}
    assert "model.safetensors" in names and "adapter_config.json" not in names
    trained = sorted((out / "iter-0000" / "train").glob("checkpoint-*"))
    assert trained and all((p / "adapter_config.json").is_file() for p in trained)  # trainer: adapters
    # The merged weights are the trained ones: the adapted projections moved, the rest did not.
    base, tuned = load_model(tiny_qwen2_vl).state_dict(), load_model(first).state_dict()
    assert base.keys() == tuned.keys()
    changed = {name for name in base if not torch.equal(base[name], tuned[name])}
    assert changed and all(name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"))
                           for name in changed), sorted(changed)
    # Iteration 1 rolled out with the merged checkpoint and trained a new adapter on top of it.
    assert result.iterations[1]["rollout"]["checkpoint"] == str(first)
    trainer_state = json.loads((out / "iter-0001" / "checkpoint" / "trainer_state.json").read_text())
    assert trainer_state["base_model"] == str(first) and trainer_state["settings"]["lora"] is True
    assert result.checkpoint == str(out / "iter-0001" / "checkpoint")
    load_model(result.checkpoint)


def test_each_rollout_gets_the_loops_groups_and_its_own_temperature(tmp_path, monkeypatch):
    """The runner is replaced here (its settings are the subject); the big loop test runs it for real."""
    from webgym_data.schema import Task
    from webgym_rl import loop
    from webgym_rollout.dataset import TrajectoryWriter
    from webgym_rollout.env import EnvSettings
    from webgym_rollout.runner import RunReport

    seen = []

    async def fake_run(run_settings):
        seen.append(run_settings)
        with TrajectoryWriter(run_settings.out, resume=True):
            pass
        return RunReport(out=run_settings.out, episodes=0, skipped=0, steps=0, successes=0, errors={},
                         elapsed_s=1.0, session_retries=0, parse_errors=0)

    monkeypatch.setattr("webgym_rollout.runner.run", fake_run)

    class Services:  # the loop's services, reduced to the URLs they would hand out
        def browser_urls(self):
            return ("http://127.0.0.1:1",)

        def sites_url(self):
            return "http://127.0.0.1:2"

        def serve(self, checkpoint):
            return "http://127.0.0.1:3/v1", "webgym-policy"

    tasks = _tasks(tmp_path / "mixed.jsonl")  # the MiniWoB tasks and one web task
    web = Task(task_id="w1", task_name="find it", website="http://127.0.0.1:9/", benchmark_name="t")
    with tasks.open("a") as handle:
        handle.write(json.dumps(web.to_row()) + "\n")
    settings = _settings(tmp_path, tmp_path / "model", tasks=str(tasks), sampler={"kinds": ["miniwob"]},
                         eval_sampler={"kinds": ["miniwob"]},
                         policy={"temperature": 0.8, "top_p": 0.9}, eval_temperature=0.1, attempts=2,
                         judge={"kind": "programmatic"})
    state = {"iterations": {"0": {"train": {"checkpoint": "c0"}}, "1": {"train": {"checkpoint": "c1"}}}}
    for iteration, phase in ((0, "rollout"), (1, "rollout"), (1, "eval")):
        result = loop._run_phase(settings, Services(), state, iteration, phase)
        assert result["episodes"] == 0 and result["out"] == str(seen[-1].out)
    bootstrap, rollout, evaluation = seen
    assert bootstrap.policy.kind == "random" and bootstrap.policy.random.seed == 0
    assert (rollout.policy.kind, rollout.policy.endpoint.base_url, rollout.policy.endpoint.model) == (
        "openai", "http://127.0.0.1:3/v1", "webgym-policy")
    assert (rollout.policy.sampling.temperature, rollout.policy.sampling.top_p) == (0.8, 0.9)
    assert (evaluation.policy.sampling.temperature, evaluation.policy.sampling.top_p) == (0.1, 0.9)
    assert (rollout.split, evaluation.split, evaluation.iteration) == ("train", "train", 1)
    for run_settings in seen:
        # Episodes are scheduled asynchronously inside a rollout whatever the loop's --mode.
        assert run_settings.rollout == dataclasses.replace(settings.rollout, mode="async")
        assert run_settings.judge is settings.judge
        assert run_settings.env.sites_url == "http://127.0.0.1:2"  # MiniWoB tasks need the site server
        assert run_settings.env.viewport == "320x240" and run_settings.env.miniwob_horizon == 3
        rows = [json.loads(line) for line in Path(run_settings.tasks).read_text().splitlines()]
        assert len(rows) == len(MINIWOB) and all(r["environment"].startswith("miniwob:") for r in rows)
    assert not loop._needs_site_server([web], EnvSettings())
    only_web = _settings(tmp_path, tmp_path / "model", tasks=str(tasks), sampler={"kinds": ["web"]},
                         out=str(tmp_path / "web-loop"))
    written = loop._task_batch(only_web, source=str(tasks), split="train", sampler=only_web.sampler,
                               iteration=0, target=tmp_path / "web-loop" / "tasks.jsonl")
    assert [json.loads(line)["task_id"] for line in written.read_text().splitlines()] == ["w1"]


def test_each_iteration_draws_its_own_batch_and_the_same_seed_draws_the_same(tmp_path, monkeypatch):
    """The runner is replaced (the batches are the subject): epoch batches without replacement across
    iterations, recorded beside the iteration, the same on a rerun with the same seed."""
    from webgym_rl import loop
    from webgym_rollout.dataset import TrajectoryWriter
    from webgym_rollout.runner import RunReport

    played: list[list[str]] = []

    async def fake_run(run_settings):
        rows = Path(run_settings.tasks).read_text().splitlines()
        played.append([json.loads(line)["task_id"] for line in rows])
        with TrajectoryWriter(run_settings.out, resume=True):
            pass
        return RunReport(out=run_settings.out, episodes=0, skipped=0, steps=0, successes=0, errors={},
                         elapsed_s=1.0, session_retries=0, parse_errors=0)

    monkeypatch.setattr("webgym_rollout.runner.run", fake_run)

    class Services:
        def browser_urls(self):
            return ("http://127.0.0.1:1",)

        def sites_url(self):
            return "http://127.0.0.1:2"

        def serve(self, checkpoint):
            return "http://127.0.0.1:3/v1", "webgym-policy"

    def batches(out: str, seed: int) -> list[list[str]]:
        settings = _settings(tmp_path, tmp_path / "model", out=str(tmp_path / out),
                             sampler={"kind": "epoch", "batch_size": 2, "seed": seed})
        state = {"iterations": {"0": {"train": {"checkpoint": "c0"}}, "1": {"train": {"checkpoint": "c1"}}}}
        for iteration in (0, 1):
            loop._run_phase(settings, Services(), state, iteration, "rollout")
        return played[-2:]

    first = batches("a", seed=5)
    assert len(first[0]) == len(first[1]) == 2 and not set(first[0]) & set(first[1])  # no task twice
    assert (tmp_path / "a" / "iter-0001" / "tasks.jsonl").is_file()  # recorded beside the iteration
    assert batches("b", seed=5) == first  # the same seed draws the same batches
    assert batches("a", seed=5) == first  # a rerun of the same folder plays the recorded batches
    others = [batches(f"c{seed}", seed=seed) for seed in (6, 7, 8)]
    assert any(other != first for other in others)


def test_loop_help_shows_the_sampler_the_evaluation_and_the_ablation_settings():
    from click.testing import CliRunner

    from webgym_rl.loop import loop_command

    text = CliRunner().invoke(loop_command, ["--help"], terminal_width=200).output
    for flag in ("--sampler [all|epoch|uniform_difficulty|success_aware]", "--sampler-batch-size",
                 "--sampler-benchmarks", "--sampler-domains", "--sampler-difficulties", "--sampler-websites",
                 "--eval-sampler", "--eval-temperature", "--eval-horizons", "--train-horizons",
                 "--test-horizons", "--policy-variant [memory|vanilla|compact]", "--policy-full-rounds",
                 "--fleet", "--ray-address",
                 "--judge-max-screenshots"):
        assert flag in text, flag
