"""The online loop (`webgym_rl.loop`) with real parts: MiniWoB site server, Chromium browser server,
the CPU policy server with a tiny random Qwen2-VL, the trainer. Two iterations, a failure injected
into iteration 1's train phase, and a resume that continues from exactly that phase."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from webgym_rl.loop import (
    LoopSettings,
    LoopSettingsError,
    LoopStateError,
    PhaseFailed,
    PolicyEndpointError,
    run_loop,
)

MINIWOB = [("click-test", 0), ("click-test", 1), ("click-test-2", 0), ("click-test-2", 1)]


def _tasks(path: Path) -> Path:
    from webgym_data.importers.miniwob import miniwob_task

    path.write_text("".join(json.dumps(miniwob_task(name, seed).to_row()) + "\n" for name, seed in MINIWOB))
    return path


def _fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """(mtime_ns, sha256) of every file under `folder`: proves a rerun did not rewrite it."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _load(folder: Path, cache: Path):
    import datasets

    # A cache of its own per folder: offline, `datasets` would serve an earlier folder of the same name.
    return datasets.load_dataset(str(folder), split="train",
                                 cache_dir=str(cache / folder.parent.name / folder.name))


def _settings(tmp_path: Path, model: Path, **changes) -> LoopSettings:
    values = dict(tasks=str(_tasks(tmp_path / "tasks.jsonl")), model=str(model), out=str(tmp_path / "loop"),
                  iterations=2, miniwob_horizon=3, viewport="320x240", concurrency=4, policy_max_new_tokens=8,
                  learning_rate=1e-3, epochs=1.0, per_device_batch_size=2, log_with="none", eval_every=2,
                  eval_split="train", progress=False)
    values.update(changes)
    return LoopSettings(**values)


@pytest.mark.browser
@pytest.mark.slow
def test_two_iterations_then_resume_after_a_train_failure(tmp_path, tiny_qwen2_vl, monkeypatch):
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
                      "learning_rate: 0.001\n")
    settings = LoopSettings.from_sources(config, tasks="t.jsonl", model="m", out="o", iterations=3,
                                         eval_every=None, servers=())
    assert (settings.iterations, settings.last_k_iterations, settings.learning_rate) == (3, 2, 0.001)
    assert settings.servers == ["http://127.0.0.1:8300"] and settings.eval_every == 0
    config.write_text("iteratons: 5\n")
    with pytest.raises(LoopSettingsError, match="unknown setting 'iteratons'"):
        LoopSettings.from_sources(config)


@pytest.mark.parametrize(("changes", "message"), [
    ({"policy_base_url": "http://127.0.0.1:8000/v1"}, "--policy-command .* or --reload-url"),
    ({"policy_command": "vllm serve --port {port}"}, "must contain {checkpoint}"),
    ({"only_environment": "desktop"}, "only_environment 'desktop' is unknown"),
    ({"viewport": "wide"}, "expected WIDTHxHEIGHT"),
    ({"iterations": 0}, "iterations must be >= 1"),
    ({"tasks": "/nonexistent/tasks.jsonl"}, "--tasks /nonexistent/tasks.jsonl: no such file"),
])
def test_bad_settings_stop_before_anything_starts(tmp_path, changes, message):
    settings = _settings(tmp_path, tmp_path / "model", **changes)
    with pytest.raises(LoopSettingsError, match=message):
        run_loop(settings)
    assert not (tmp_path / "loop").exists()


def test_cli_reports_a_bad_setting_in_one_line(tmp_path):
    from click.testing import CliRunner

    from webgym_rl.cli import main

    tasks = _tasks(tmp_path / "tasks.jsonl")
    result = CliRunner().invoke(main, ["loop", "--tasks", str(tasks), "--model", "m", "--out",
                                       str(tmp_path / "o"), "--policy-base-url", "http://127.0.0.1:1/v1"])
    assert result.exit_code == 1
    assert "Error: --policy-base-url needs a way to switch" in result.output
    assert "Traceback" not in result.output


def _root(base_url: str) -> str:
    import httpx

    (card,) = httpx.get(f"{base_url}/models", timeout=10).json()["data"]
    return card["root"]


def test_external_endpoint_is_switched_through_the_reload_url(tmp_path, tiny_qwen2_vl):
    from webgym_rl.loop import LoopServices
    from webgym_rl.modeling import build_tiny_model
    from webgym_rollout.policy_server import PolicyServerSettings, running_policy_server

    other = build_tiny_model(tmp_path / "other", seed=1)
    served = PolicyServerSettings(model=str(tiny_qwen2_vl), port=0, served_model_name="webgym-policy")
    with running_policy_server(served) as url:
        settings = _settings(tmp_path, tiny_qwen2_vl, policy_base_url=url,
                             reload_url=url.removesuffix("/v1") + "/reload")
        settings.validate()
        events = []
        with LoopServices(settings, on_event=lambda kind, detail: events.append(kind)) as services:
            assert services.serve(str(other)) == (url, "webgym-policy")
            assert _root(url) == str(other)
            with pytest.raises(PolicyEndpointError, match="reloading the policy"):
                services.serve(str(tmp_path / "missing-checkpoint"))
        assert events == ["policy_reloaded"]
        assert _root(url) == str(other)  # a failed reload leaves the endpoint serving the last good one


@pytest.mark.slow
def test_policy_command_is_restarted_for_each_checkpoint_and_stopped(tmp_path, tiny_qwen2_vl):
    """The vLLM way, with a command that runs on CPU: the loop restarts it per checkpoint."""
    import shlex
    import sys

    import psutil

    from webgym_rl.loop import LoopServices
    from webgym_rl.modeling import build_tiny_model

    other = build_tiny_model(tmp_path / "other", seed=1)
    # The braces of the dict stand for vLLM's JSON flags: only the three placeholders are replaced.
    command = (f"{shlex.quote(sys.executable)} -c 'assert {{\"image\": 5}}; "
               "from webgym_rollout.cli import main; main()' serve-policy --model {checkpoint} "
               "--port {port} --served-model-name {name} --max-new-tokens 4")
    settings = _settings(tmp_path, tiny_qwen2_vl, policy_command=command, policy_start_timeout_s=300)
    settings.validate()
    pids = []
    with LoopServices(settings, on_event=lambda kind, detail: pids.append(detail.get("pid"))) as services:
        url, name = services.serve(str(tiny_qwen2_vl))
        assert name == "webgym-policy" and _root(url) == str(tiny_qwen2_vl)
        url, _ = services.serve(str(other))
        assert _root(url) == str(other)
    started = pids[::2]
    assert len(pids) == 4 and pids[0] == pids[1] and pids[2] == pids[3] and pids[0] != pids[2], pids
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in started)
    assert "serving webgym-policy" in (tmp_path / "loop" / "policy-server.log").read_text()


@pytest.mark.browser
@pytest.mark.slow
def test_training_under_a_launcher_runs_webgym_rl_train_in_a_child_process(tmp_path, tiny_qwen2_vl):
    """--train-launcher is how several GPUs are used (accelerate launch + an Accelerate config)."""
    import sys

    from webgym_rl.modeling import load_model

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

    from webgym_rl.modeling import load_model

    config = tmp_path / "train.yaml"
    config.write_text("lora: true\nlora_rank: 4\nlora_alpha: 8\n")
    settings = _settings(tmp_path, tiny_qwen2_vl, iterations=2, eval_every=0, train_config=str(config),
                         learning_rate=0.05)
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
