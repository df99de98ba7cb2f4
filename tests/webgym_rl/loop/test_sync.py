"""The synchronous schedule (`webgym_rl.loop.sync`) with real parts: MiniWoB site server, Chromium
browser server, the CPU policy server (a child process) with a tiny random Qwen2-VL, the resident
trainer (a child process). Two rounds, a failure in round 1's training, a resume that continues from
exactly that phase with the trainer's optimizer restored; settings and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.webgym_rl.loops import MINIWOB
from tests.webgym_rl.loops import loop_settings as _settings
from tests.webgym_rl.loops import tasks_file as _tasks
from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings
from webgym_rl.errors import LoopSettingsError, LoopStateError, PhaseFailed
from webgym_rl.loop.events import PhaseSkipped, PhaseStarted
from webgym_rl.loop.run import run_loop
from webgym_rl.loop.settings import LoopSettings
from webgym_rollout.trajectory.reader import read_episodes, read_manifest


def _fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """(mtime_ns, sha256) of every file under `folder`: proves a rerun did not rewrite it."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _phases(events, kind) -> list[tuple[int, str]]:
    return [(e.round, e.phase) for e in events if isinstance(e, kind)]


@pytest.mark.browser
@pytest.mark.slow
def test_two_rounds_then_resume_after_a_train_failure(tmp_path, tiny_qwen2_vl, monkeypatch):
    from huggingface_hub import HfApi

    from webgym_rl.modeling import load_model

    # The Hub's write API is the one thing replaced: it records what each push would upload.
    commits = []

    def create_commit(api, *, repo_id, operations, commit_message, **kwargs):
        files = {op.path_in_repo: op.path_or_fileobj for op in operations}
        commits.append({"repo_id": repo_id, "message": commit_message, "files": files})
        return "http://127.0.0.1/fake-commit"

    monkeypatch.setattr(HfApi, "create_repo", lambda api, repo_id, **kwargs: None)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    settings = _settings(tmp_path, tiny_qwen2_vl, push_to="me/webgym-loop-test", bootstrap_policy="random")
    out = Path(settings.out)
    shard: dict[str, bytes] = {}
    events: list = []

    def inject(event):
        events.append(event)
        # A real failure, not a mock: round 1's rollout shard is made unreadable before it trains.
        if isinstance(event, PhaseStarted) and (event.round, event.phase) == (1, "train"):
            folder = out / "rollouts" / "round-0001"
            path = folder / read_manifest(folder)["shards"][0]["path"]
            shard["path"], shard["bytes"] = str(path), path.read_bytes()
            path.write_bytes(b"not parquet")

    with pytest.raises(PhaseFailed) as caught:
        run_loop(settings, on_event=inject)
    assert (caught.value.round, caught.value.phase) == (1, "train")
    assert "round 1, phase 'train'" in str(caught.value) and "resident trainer failed" in str(caught.value)
    state = json.loads((out / "loop_state.json").read_text())
    first, second = state["rounds"]["0"], state["rounds"]["1"]
    # No eval record: evaluations are due every 2 versions.
    assert {k for k, v in first.items() if v} == {"rollout", "batch", "train", "push"}
    assert {k for k, v in second.items() if v} == {"rollout", "batch"}
    assert (state["last_error"]["round"], state["last_error"]["phase"]) == (1, "train")
    # Round 0 trained the resident trainer and wrote its full checkpoint (optimizer included).
    (checkpoint,) = state["checkpoints"]
    assert checkpoint["round"] == 0 and checkpoint["optimizer"]
    assert (Path(checkpoint["folder"]) / "training_state" / "optimizer.bin").is_file()

    # Round 0: the random bootstrap; round 1: version 1 behind the policy server, published in memory.
    rollout0 = list(read_episodes(out / "rollouts" / "round-0000"))
    assert len(rollout0) == len(MINIWOB) and {e.policy_model for e in rollout0} == {"random"}
    successes0 = sum(e.reward >= 1.0 for e in rollout0)
    assert first["rollout"]["successes"] == successes0 > 0
    assert first["train"]["counts"]["trajectories_kept"] == successes0 and first["train"]["window"] == [0]
    assert second["rollout"]["policy"] == "v1"
    assert [(v["version"], v["path"]) for v in state["versions"]] == [(0, "start"), (1, "memory")]

    before0 = _fingerprint(out / "rollouts" / "round-0000")
    Path(shard["path"]).write_bytes(shard["bytes"])
    before1 = _fingerprint(out / "rollouts" / "round-0001")
    events.clear()
    result = run_loop(settings, on_event=events.append)

    assert _phases(events, PhaseStarted) == [(1, "train"), (1, "publish"), (1, "eval"), (1, "push")]
    assert _phases(events, PhaseSkipped) == [(0, "rollout"), (0, "train"), (0, "push"), (1, "rollout")]
    assert _fingerprint(out / "rollouts" / "round-0000") == before0
    assert _fingerprint(out / "rollouts" / "round-0001") == before1
    rollout1 = list(read_episodes(out / "rollouts" / "round-0001"))
    assert {s.policy_version for e in rollout1 for s in e.steps} == {1}

    state = json.loads((out / "loop_state.json").read_text())
    assert state["last_error"] is None
    train0, train1 = state["rounds"]["0"]["train"], state["rounds"]["1"]["train"]
    # The trainer went on from round 0's optimizer state: its step count runs on.
    assert train1["trainer_step"] == train0["trainer_step"] + train1["steps"]
    # Round 1's window held both rounds (last K = 4), the newer one weighted higher (recency); the
    # samples came from the successes of each.
    assert train1["window"] == [0, 1] and train1["weights"] == {"0": 0.5, "1": 1.0}
    by_round = train1["samples_by_round"]
    assert by_round["0"] == train0["samples"] == sum(by_round.values()) - by_round.get("1", 0)
    assert result.checkpoint == str(out / "checkpoints" / "v-0002")
    trainer_state = json.loads((out / "checkpoints" / "v-0002" / "trainer_state.json").read_text())
    assert trainer_state["round"] == 1 and trainer_state["step"] == train1["trainer_step"]
    load_model(result.checkpoint)
    evaluation = list(read_episodes(out / "evals" / "v-0002" / "trajectories"))
    assert len(evaluation) == len(MINIWOB)
    measured = state["rounds"]["1"]["eval"]
    assert measured["version"] == 2 and measured["episodes"] == len(evaluation)
    assert measured["successes"] == sum(e.reward >= 1.0 for e in evaluation)
    assert {s.policy_version for e in evaluation for s in e.steps} == {2}
    # The evaluation's report and the learning curve so far (x: the policy version that played).
    figures = json.loads((out / "evals" / "v-0002" / "report" / "report.json").read_text())
    assert figures["runs"][0]["overall"]["successes"] == measured["evaluated"][0] == measured["successes"]
    assert [(p["iteration"], p["label"]) for p in figures["learning_curve"]] == [(0, "train"), (1, "train"),
                                                                                (2, "test")]
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The page says what it evaluated; train and test are drawn apart, version 0 named by its bootstrap.
    page = (out / "evals" / "v-0002" / "report" / "report.html").read_text()
    assert (f"<h1>Evaluation of policy version 2: {len(evaluation)} episodes of the {settings.eval_split} "
            "tasks</h1>") in page
    assert page.count("class='chart learning-curve'") == 2 and ">v0 (bootstrap: random)</text>" in page
    # One push per version; the second card carries the success rate its evaluation measured.
    assert [c["message"] for c in commits] == ["webgym-rl loop: v1", "webgym-rl loop: v2"]
    assert Path(commits[1]["files"]["model.safetensors"]).parent == out / "checkpoints" / "v-0002"
    assert "training_state" not in " ".join(commits[1]["files"])
    card = commits[1]["files"]["README.md"].decode()
    assert f"| eval (train split) | {measured['success_rate']:.1%} |" in card

    # A finished loop reruns as a no-op; a rerun with other identity settings is refused.
    events.clear()
    run_loop(settings, on_event=events.append)
    assert events and all(isinstance(e, PhaseSkipped) for e in events)
    other = _settings(tmp_path, tiny_qwen2_vl, objective="reinforce", bootstrap_policy="random")
    with pytest.raises(LoopStateError, match="objective"):
        run_loop(other)


def test_settings_from_yaml_then_flags(tmp_path):
    config = tmp_path / "loop.yaml"
    config.write_text("iterations: 5\nlast-k-iterations: 2\nservers: [http://127.0.0.1:8300]\n"
                      "learning_rate: 0.001\npolicy: {temperature: 0.7, max_new_tokens: 16}\n"
                      "pool: {browsers: 2}\nschedule: async\noverprovision: 8\ncheckpoint_every: 3\n")
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
    assert (settings.schedule, settings.async_loop.overprovision, settings.trainer.checkpoint_every) == (
        "async", 8, 3)
    # The defaults are the published recipe's: the model's own first rollouts, a fresh random batch.
    assert settings.bootstrap_policy == "model" and settings.sampler.kind == "epoch"
    config.write_text("iteratons: 5\n")
    with pytest.raises(SettingsError, match="iteratons: unknown setting"):
        load_settings(LoopSettings, config)


@pytest.mark.parametrize(("changes", "message"), [
    ({"policy": {"base_url": "http://127.0.0.1:8000/v1"}}, "--policy-command .*--policy-reload-url"),
    ({"policy": {"command": "vllm serve --port {port}"}}, "must contain {checkpoint}"),
    ({"sampler": {"kinds": ["desktop"]}}, "sampler.kinds: desktop unknown"),
    ({"viewport": "wide"}, "expected WIDTHxHEIGHT"),
    ({"iterations": 0}, "iterations: must be >= 1"),
    ({"schedule": "later"}, "schedule: 'later' is not one of 'sync', 'async'"),
    ({"lr_scheduler": "cosine"}, "lr_scheduler: cosine decays over the run's optimizer steps"),
    ({"eval_sampler": {"kind": "success_aware", "batch_size": 2}}, "eval_sampler.kind: success_aware"),
    ({"servers": ["http://127.0.0.1:8300"], "fleet": "web", "ray_address": "127.0.0.1:6379"},
     "servers: give browser server URLs or --fleet web, not both"),
    ({"fleet": "web"}, "ray_address: --fleet web needs"),
    ({"policy": {"base_url": "http://127.0.0.1:8000/v1", "updater": "vllm_lora"}},
     "policy.updater: vllm_lora loads each version as a LoRA adapter of --model, so it needs training.lora"),
    ({"tasks": "/nonexistent/tasks.jsonl"}, "--tasks /nonexistent/tasks.jsonl: no such file"),
    ({"judge": "programmatic", "sampler": {"kinds": ["web"]}}, "no 'train' task passes the sampler"),
])
def test_bad_settings_stop_before_anything_starts(tmp_path, changes, message):
    # Values are refused when the settings are made (SettingsError), paths and task sets when the
    # loop starts (LoopSettingsError); both are ValueErrors naming the field.
    with pytest.raises(ValueError, match=message):
        run_loop(_settings(tmp_path, tmp_path / "model", **changes))
    assert not (tmp_path / "loop").exists()


def test_web_tasks_with_the_programmatic_judge_are_refused_naming_the_kind_and_the_fix(tmp_path):
    from webgym_data.schema import Task

    tasks = _tasks(tmp_path / "mixed.jsonl")  # the MiniWoB tasks and two web tasks
    with tasks.open("a") as handle:
        for i in range(2):
            web = Task(task_id=f"w{i}", task_name="find it", website="http://127.0.0.1:9/",
                       benchmark_name="t")
            handle.write(json.dumps(web.to_row()) + "\n")
    settings = _settings(tmp_path, tmp_path / "model", tasks=str(tasks), judge="programmatic")
    refused = (r"programmatic scores only tasks whose environment keeps a reward .* has 2 of kind 'web'"
               r".*--judge rubric.*--sampler-kinds")
    with pytest.raises(LoopSettingsError, match=refused):
        run_loop(settings)
    assert not (tmp_path / "loop").exists()
    # Keeping only the tasks with a reward is the other fix: the check passes (and the loop would run).
    from webgym_rl.loop.run import check_recipe

    check_recipe(_settings(tmp_path, tmp_path / "model", tasks=str(tasks), sampler={"kinds": ["miniwob"]},
                           eval_sampler={"kinds": ["miniwob"]}))


def test_the_site_judge_with_a_site_server_elsewhere_is_refused_naming_the_fix(tmp_path):
    # The loop judges by the truth of the site server it runs itself; one at --sites-url it cannot read.
    settings = _settings(tmp_path, tmp_path / "model", judge="site", sites_url="http://127.0.0.1:8400")
    with pytest.raises(LoopSettingsError, match=r"judge.kind \(--judge\): site .* the loop runs itself; "
                       r"with --sites-url http://127.0.0.1:8400 .* Leave out --sites-url"):
        run_loop(settings)
    assert not (tmp_path / "loop").exists()


def test_the_groups_check_themselves_when_built_in_python():
    from webgym_core.endpoint import Endpoint
    from webgym_rl.loop.settings import PolicyEndpointSettings

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
    result = CliRunner().invoke(main, ["loop", "--config", "no-such-recipe", "--tasks", str(tasks)])
    assert result.exit_code == 1 and "no recipe of that name (shipped recipes: miniwob-cpu, published" in \
        result.output


@pytest.mark.browser
@pytest.mark.slow
def test_the_resident_trainer_runs_under_a_launcher(tmp_path, tiny_qwen2_vl):
    """--train-launcher is how several GPUs are used (accelerate launch + an Accelerate config); the
    launched trainer stays up across rounds."""
    import sys

    from webgym_rl.modeling import load_model

    accelerate = Path(sys.executable).with_name("accelerate")
    launcher = (f"{accelerate} launch --num_processes 1 --num_machines 1 --mixed_precision no "
                "--dynamo_backend no")
    settings = _settings(tmp_path, tiny_qwen2_vl, iterations=2, eval_every=0, train_launcher=launcher,
                         bootstrap_policy="random", success_threshold=0.0, publish="folder")
    result = run_loop(settings)
    out = Path(settings.out)
    first, second = (result.state.rounds[r].train for r in (0, 1))
    assert first.steps >= 1 and second.trainer_step == first.trainer_step + second.steps
    states = [json.loads((out / "checkpoints" / f"v-000{v}" / "trainer_state.json").read_text())
              for v in (1, 2)]
    assert [s["round"] for s in states] == [0, 1] and all(s["num_processes"] == 1 for s in states)
    # Both versions came from the same launched process: it stayed up between the rounds.
    assert states[0]["pid"] == states[1]["pid"] != os.getpid()
    assert states[0]["launched"]  # started by accelerate launch (it sets LOCAL_RANK), not as a plain child
    assert result.checkpoint == str(out / "checkpoints" / "v-0002")
    load_model(result.checkpoint)


def test_miniwob_on_remote_browser_servers_needs_their_own_site_server(tmp_path, tiny_qwen2_vl):
    # 192.0.2.0/24 is reserved for documentation: nothing is sent there, the loop stops before.
    settings = _settings(tmp_path, tiny_qwen2_vl, servers=["http://192.0.2.10:8300"], train_process=False,
                         bootstrap_policy="random")
    with pytest.raises(PhaseFailed, match="round 0, phase 'rollout'.*need --sites-url") as caught:
        run_loop(settings)
    assert isinstance(caught.value.__cause__, LoopSettingsError)
    state = json.loads((tmp_path / "loop" / "loop_state.json").read_text())
    empty = dict.fromkeys(("rollout", "batch", "train", "eval", "push", "round"))
    assert state["rounds"] == {"0": empty}
    assert state["last_error"]["phase"] == "rollout"


@pytest.mark.browser
@pytest.mark.slow
def test_lora_versions_are_published_merged_and_the_adapter_trains_on(tmp_path, tiny_qwen2_vl):
    import torch

    from webgym_rl.modeling import load_model

    settings = _settings(tmp_path, tiny_qwen2_vl, iterations=2, eval_every=0, lora=True, lora_rank=4,
                         lora_alpha=8, learning_rate=0.05, publish="folder", bootstrap_policy="random",
                         success_threshold=0.0)
    result = run_loop(settings)
    out = Path(settings.out)
    first = out / "checkpoints" / "v-0001"
    names = {p.name for p in first.iterdir()}
    assert "model.safetensors" in names and "adapter_config.json" not in names
    assert (out / "adapters" / "v-0001" / "adapter_config.json").is_file()
    # The merged weights are the trained ones: the adapted projections moved, the rest did not.
    base, tuned = load_model(tiny_qwen2_vl).state_dict(), load_model(first).state_dict()
    assert base.keys() == tuned.keys()
    changed = {name for name in base if not torch.equal(base[name], tuned[name])}
    assert changed and all(name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"))
                           for name in changed), sorted(changed)
    # Round 1 rolled out with v1 (loaded from its folder) and trained the same adapter on.
    assert result.state.rounds[1].rollout.policy == "v1"
    assert [v.path for v in result.state.versions] == ["start", "folder", "folder"]
    second = load_model(result.checkpoint).state_dict()
    assert any(not torch.equal(tuned[k], second[k]) for k in tuned)
    for version in (1, 2):
        config = json.loads((out / "adapters" / f"v-{version:04d}" / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == str(tiny_qwen2_vl)


def test_loop_help_shows_the_schedules_the_recipe_and_the_ablation_settings():
    from click.testing import CliRunner

    from webgym_rl.loop.cli import loop_command

    text = CliRunner().invoke(loop_command, ["--help"], terminal_width=200).output
    for flag in ("--config RECIPE|FILE", "--dry-run", "--schedule [sync|async]", "--overprovision",
                 "--checkpoint-every", "--publish [auto|memory|folder]", "--lockstep / --no-lockstep",
                 "--sampler [all|epoch|uniform_difficulty|success_aware]", "--sampler-batch-size",
                 "--sampler-benchmarks", "--eval-sampler", "--eval-temperature", "--eval-horizons",
                 "--train-horizons", "--test-horizons", "--policy-variant [memory|vanilla|compact]",
                 "--policy-full-rounds", "--fleet", "--ray-address", "--judge-max-screenshots"):
        assert flag in text, flag
    assert "--mode " not in text and "--mode [" not in text  # the episode scheduler is --lockstep


@pytest.mark.browser
@pytest.mark.slow
def test_site_tasks_are_judged_by_the_truth_of_the_site_server_the_loop_starts(tmp_path, tiny_qwen2_vl):
    from webgym_sites.generate import site_tasks

    tasks = tmp_path / "site-tasks.jsonl"
    tasks.write_text("".join(json.dumps(task.to_row()) + "\n" for task in site_tasks(2, sites=("shop",))))
    settings = _settings(tmp_path, tiny_qwen2_vl, tasks=str(tasks), iterations=1, judge="site",
                         bootstrap_policy="random", success_threshold=0.0, eval_every=0,
                         horizons={"site": 2})
    run_loop(settings)
    folder = Path(settings.out) / "rollouts" / "round-0000"
    episodes = read_episodes(folder)
    assert len(episodes) == 2 and read_manifest(folder)["run"]["judge"] == "site-truth"
    truth = [json.loads(line) for line in (folder / "truth.jsonl").read_text().splitlines()]
    assert sorted(row["episode_id"] for row in truth) == sorted(e.episode_id for e in episodes)
