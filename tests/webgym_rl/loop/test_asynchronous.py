"""The asynchronous schedule (`webgym_rl.loop.asynchronous`) with real parts: MiniWoB site server,
Chromium browser server, the CPU policy server (a child process) with a tiny random Qwen2-VL, the
resident trainer (a child process)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.webgym_rl.loops import committed_episodes, loop_settings
from webgym_rl.loop.events import VersionPublished
from webgym_rl.loop.phases import episode_staleness, step_version
from webgym_rl.loop.run import run_loop
from webgym_rollout.trajectory.reader import read_episodes

ASYNC = dict(schedule="async", iterations=3, max_staleness=1, batch_episodes=2, eval_every=0,
             sampler={"kind": "epoch", "batch_size": 2}, bootstrap_policy="random")


@pytest.mark.browser
@pytest.mark.slow
def test_versions_roll_out_while_training_within_the_staleness_bound(tmp_path, tiny_qwen2_vl):
    # Four versions: the chunks started at v0 play the random bootstrap, often done before the first
    # training starts; the chunks admitted at v1 and v2 (the staleness window) play while v2 and v3
    # train. Every judged episode is trained on (threshold 0), so no training round is skipped for
    # want of a success. Version 3 is evaluated (two tasks) while v4 trains.
    settings = loop_settings(tmp_path, tiny_qwen2_vl, **{**ASYNC, "iterations": 4, "eval_every": 3,
                                                         "eval_sampler": {"batch_size": 2},
                                                         "success_threshold": 0.0, "last_k_iterations": 2})
    seen: list[dict] = []
    base_url: list[str] = []

    def on_event(event):
        if hasattr(event, "base_url"):
            base_url.append(event.base_url)
        if isinstance(event, VersionPublished):
            # Asked right after the publish: the same process now serves the new version.
            health = httpx.get(base_url[0].removesuffix("/v1") + "/health", timeout=30).json()
            seen.append({"version": event.version, "path": event.path, "health": health})

    result = run_loop(settings, on_event=on_event)
    out = Path(settings.out)
    state = json.loads((out / "loop_state.json").read_text())

    # Four versions published in memory, each answered at once by the same policy server process.
    assert [(v["version"], v["path"]) for v in state["versions"]] == [
        (0, "start"), (1, "memory"), (2, "memory"), (3, "memory"), (4, "memory")]
    assert [s["health"]["version"] for s in seen] == [1, 2, 3, 4]
    assert len({s["health"]["pid"] for s in seen}) == 1 and seen[-1]["health"]["reloads"] == 0
    assert result.checkpoint == str(out / "checkpoints" / "v-0004")

    # Steps of at least two versions were played while the trainer trained.
    episodes = committed_episodes(out)
    rounds = [state["rounds"][str(r)] for r in range(4)]
    windows = [(r["train"]["started_at"], r["train"]["done_at"]) for r in rounds]
    overlapping = {step_version(s.policy_version) for e in episodes.values() for s in e.steps
                   if any(e.started_at < end and e.started_at + e.duration_s > start
                          for start, end in windows)}
    assert len(overlapping) >= 2, (overlapping, windows)
    # Model replies name the version that produced them (the random bootstrap names none: v0).
    versions = {s.policy_version for e in episodes.values() for s in e.steps}
    assert versions & {1, 2, 3, 4}, versions
    assert all(s.logprobs for e in episodes.values() for s in e.steps if s.policy_version is not None)

    # Each batch: its episodes once, none beyond the bound; the trainer's data is the window of the
    # last two batches, as in the synchronous schedule.
    ids = [i for r in rounds for i in r["batch"]["episodes"]]
    assert len(ids) == len(set(ids)) == 8 and set(ids) <= set(episodes)
    for r, record in enumerate(rounds):
        # The batch is a manifest of (chunk folder, episode id): the episodes are read where the
        # rollout wrote them, never copied.
        members = record["batch"]["members"]
        assert all(Path(folder).parent == out / "rollouts" and Path(folder).name.startswith("chunk-")
                   for folder, _ in members)
        trained = [episodes[episode_id] for _, episode_id in members]
        assert {e.episode_id for e in trained} == set(record["batch"]["episodes"]) - set(
            record["batch"]["dropped_stale"])
        assert all(episode_staleness(e, r) <= 1 for e in trained)
        assert record["train"]["window"] == list(range(max(0, r - 1), r + 1))
        assert record["train"]["weights"] == ({"0": 1.0} if r == 0 else {str(r - 1): 0.5, str(r): 1.0})
    metrics = state["metrics"]
    assert metrics["versions_published"] == 4 and metrics["staleness_max"] <= 1
    assert 1 <= metrics["in_flight_max"] <= settings.rollout.concurrency  # the gate held the slots
    assert sum(metrics["staleness_histogram"].values()) == sum(
        sum(r["batch"]["staleness"].values()) for r in rounds)
    assert metrics["episodes_per_s"] > 0 and metrics["rollout_idle_s"] >= 0 and metrics["trainer_idle_s"] >= 0
    assert 0 <= metrics["staleness_mean"] <= metrics["staleness_max"]
    # The staleness manager's counts (one process): each batched episode accepted or rejected once,
    # under its version; episodes begun under versions that served, within the run's total.
    dropped = sum(len(r["batch"]["dropped_stale"]) for r in rounds)
    assert sum(metrics["episodes_accepted"].values()) == len(ids) - dropped
    assert sum(metrics["episodes_rejected"].values()) == dropped
    assert set(metrics["episodes_accepted"]) <= {"0", "1", "2", "3"}
    total = 4 * 2 + settings.async_loop.overprovision  # the episodes the run needs
    assert len(ids) <= sum(metrics["episodes_submitted"].values()) <= total
    assert set(metrics["episodes_submitted"]) <= {"0", "1", "2", "3"}
    assert "episodes submitted/accepted/rejected by version v0 " in _summary(metrics)
    # The resident trainer trained four rounds in one life: its step count runs on.
    assert rounds[3]["train"]["trainer_step"] == sum(r["train"]["steps"] for r in rounds)

    # The evaluation of v3 ran on its own schedule beside the training of v4, which was published
    # only once the evaluation had finished: every step of it was answered by v3, the version it is
    # plotted as. Its episodes were not trained on; it wrote its report with the learning curve so far.
    evaluation = rounds[2]["eval"]
    assert evaluation["version"] == 3 and evaluation["done_at"] <= state["versions"][4]["published_at"]
    assert rounds[3]["train"]["started_at"] < evaluation["done_at"]  # v4 trained meanwhile
    evaluated = {(e.episode_id, e.started_at)
                 for e in read_episodes(out / "evals" / "v-0003" / "trajectories")}
    assert len(evaluated) == evaluation["episodes"] == 2
    batched = {(episodes[i].episode_id, episodes[i].started_at)
               for r in rounds for _, i in r["batch"]["members"]}
    assert len(batched) == 8 and not evaluated & batched
    assert evaluation["step_versions"] == {"v3": sum(len(e.steps) for e in read_episodes(
        out / "evals" / "v-0003" / "trajectories"))}
    report = Path(evaluation["report"])
    assert report.is_file() and (out / "learning_curve.png").is_file()
    curve = json.loads((report.parent / "report.json").read_text())["learning_curve"]
    assert {(p["iteration"], p["label"]) for p in curve} >= {(0, "train"), (3, "test")}

    # A rerun with the same settings has nothing left to do.
    again = run_loop(settings)
    assert again.checkpoint == result.checkpoint


def _summary(metrics: dict) -> str:
    from webgym_rl.loop.state import AsyncMetrics

    return AsyncMetrics(**metrics).summary()


async def test_the_gate_admits_no_episode_beyond_the_staleness_managers_capacity_or_the_concurrency():
    import asyncio

    from webgym_rl.loop.asynchronous import _Board, _Gate
    from webgym_rl.loop.staleness import StalenessManager

    async def settle() -> None:  # let every admission that can go ahead go ahead
        for _ in range(20):
            await asyncio.sleep(0)

    board = _Board(StalenessManager(0, 2))  # while v0 serves: 2 episodes
    gate = _Gate(board, concurrency=5)
    board.listeners.append(gate.wake)
    gate.open()
    await gate.admit()
    await gate.admit()
    third = asyncio.create_task(gate.admit())
    await settle()
    assert not third.done() and board.staleness.submitted == 2
    board.publish(1)  # from any thread: wakes the gate
    await asyncio.wait_for(third, timeout=30)
    assert board.staleness.counts().submitted == {0: 2, 1: 1}

    narrow = _Gate(_Board(StalenessManager(3, 10)), concurrency=1)
    narrow.open()
    await narrow.admit()
    second = asyncio.create_task(narrow.admit())
    await settle()
    assert not second.done() and narrow.most == 1
    narrow.release()
    await asyncio.wait_for(second, timeout=30)
    assert (narrow.running, narrow.most, narrow.board.staleness.submitted) == (1, 1, 2)


def _committed(out: Path) -> set[str]:
    return set(committed_episodes(out))


@pytest.mark.browser
@pytest.mark.slow
def test_sigkill_at_several_points_then_rerun_loses_nothing_and_trains_nothing_twice(tmp_path, tiny_qwen2_vl):
    import os
    import signal
    import subprocess
    import sys

    import yaml

    from webgym_core.settings import settings_to_dict

    # A full checkpoint every 2 versions: a kill between two of them supersedes what was trained after.
    settings = loop_settings(tmp_path, tiny_qwen2_vl, **ASYNC, checkpoint_every=2, success_threshold=0.0)
    config = tmp_path / "loop.yaml"
    config.write_text(yaml.safe_dump({**settings_to_dict(settings), "progress": True}))
    out = Path(settings.out)
    command = [sys.executable, "-c", "from webgym_rl.cli import main; main()", "loop", "--config",
               str(config)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # Killed while training for v1, right after v1 is published (no checkpoint yet), and while v3's
    # batch trains (after the checkpoint of round 1).
    kill_points = ["batch for v1 ready", "v1 published", "round 2: train ..."]
    for point in kill_points:
        before = _committed(out) if out.exists() else set()
        process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                   env=env)
        lines = []
        for line in process.stderr:  # type: ignore[union-attr]
            lines.append(line)
            if point in line:
                os.kill(process.pid, signal.SIGKILL)
                break
        process.wait(timeout=120)
        assert process.returncode == -signal.SIGKILL, "".join(lines[-30:])
        # Nothing committed before is lost.
        assert before <= _committed(out)
    finished = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert finished.returncode == 0, finished.stderr[-3000:]
    state = json.loads((out / "loop_state.json").read_text())
    live = [v for v in state["versions"] if not v["superseded"]]
    assert [v["version"] for v in live] == [0, 1, 2, 3]
    # v1 was published before the second kill and trained again after it: the first one is superseded.
    assert [v["version"] for v in state["versions"] if v["superseded"]] == [1]
    assert [r["round"] for r in state["superseded"]] == [0]
    assert "resumed: trainer at round" not in finished.stderr  # the last run superseded nothing
    # Each round's batch: no episode in two batches, every one committed once.
    rounds = [state["rounds"][str(r)] for r in range(3)]
    ids = [i for r in rounds for i in r["batch"]["episodes"]]
    assert len(ids) == len(set(ids)) == 6
    committed = _committed(out)
    assert set(ids) <= committed
    # No episode was played twice (one row per episode id across the chunk folders).
    rows = sum(len(read_episodes(c)) for c in (out / "rollouts").glob("chunk-*") if c.is_dir())
    assert rows == len(committed)
    # The final weights hold each round's samples once: the trainer's steps are those of the live rounds.
    assert rounds[-1]["train"]["trainer_step"] == sum(r["train"]["steps"] for r in rounds)
    final = json.loads((Path(live[-1]["checkpoint"]) / "trainer_state.json").read_text())
    assert final["step"] == rounds[-1]["train"]["trainer_step"] and final["round"] == 2
    # The stream position covers exactly the trained episodes' shards: nothing re-read, nothing skipped.
    assert state["position"] == rounds[2]["batch"]["position"]
    assert "v3 published" in finished.stderr
    assert "success by policy version" in finished.stderr  # the progress line of each version


@pytest.mark.browser
def test_lora_versions_are_adapters_of_the_starting_model_loaded_into_vllm(tmp_path, tiny_qwen2_vl):
    # vLLM (here a stand-in speaking its LoRA and chat endpoints) serves the starting model; each
    # version is loaded as a LoRA adapter of it. One episode per version, on-policy: chunk 0 is the
    # random bootstrap, chunk 1 plays v1, chunk 2 plays v2 in a rerun with one more iteration (a new
    # process, as after a crash, while vLLM still holds the adapters of the first).
    import dataclasses
    import itertools

    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    from tests.webgym_rl.vllm_stand_in import serving, vllm_stand_in
    from webgym_rl.modeling import load_model
    from webgym_rollout.agent.protocol import AgentAction, format_response

    calls: list[tuple[str, dict, dict]] = []
    reply = format_response(AgentAction("left_click", coordinate=(500, 500)), memory="clicked")
    with serving(vllm_stand_in(calls, served_name="policy", reply=reply)) as base_url:
        settings = loop_settings(tmp_path, tiny_qwen2_vl, **{
            **ASYNC, "iterations": 2, "max_staleness": 0, "batch_episodes": 1,
            "sampler": {"kind": "epoch", "batch_size": 1}, "success_threshold": 0.0,
            "lora": True, "lora_rank": 4, "lora_alpha": 8, "learning_rate": 0.05,
            "policy": {"base_url": base_url, "model": "policy", "updater": "vllm_lora"}})
        run_loop(settings)
        loads_before_rerun = sum(1 for name, _, _ in calls if name == "load_lora_adapter")
        run_loop(dataclasses.replace(settings, iterations=3))
    out = Path(settings.out)
    versions = json.loads((out / "loop_state.json").read_text())["versions"]
    adapters = {v["version"]: Path(v["adapter"]) for v in versions[1:]}
    assert list(adapters) == [1, 2, 3] and versions[0].get("adapter") is None
    assert all(v["path"] == "folder" for v in versions[1:])

    # Each published adapter folder was loaded under its version's name; the rerun first unloaded
    # what the first run left loaded (vLLM refuses a name it holds), then loaded v2 again.
    loads = [(body["lora_name"], body["lora_path"]) for name, _, body in calls if name == "load_lora_adapter"]
    assert loads == [("policy-v1", str(adapters[1])), ("policy-v2", str(adapters[2])),
                     ("policy-v2", str(adapters[2])), ("policy-v3", str(adapters[3]))]
    assert loads_before_rerun == 2
    assert [body["lora_name"] for name, _, body in calls if name == "unload_lora_adapter"] == [
        "policy-v1", "policy-v2"]

    # Requests asked for the newest adapter once it was loaded (the stand-in answers 404 for a model
    # it does not hold); the steps record the version that answered.
    order = [(name, body.get("lora_name") or body.get("model")) for name, _, body in calls]
    asked = [model for name, model in order if name == "chat_completions"]
    assert [model for model, _ in itertools.groupby(asked)] == ["policy-v1", "policy-v2"]
    last_v2_load = max(i for i, call in enumerate(order) if call == ("load_lora_adapter", "policy-v2"))
    assert order.index(("chat_completions", "policy-v2")) > last_v2_load
    for chunk, version in (("chunk-0001", 1), ("chunk-0002", 2)):
        steps = [s for e in read_episodes(out / "rollouts" / chunk) for s in e.steps]
        assert steps and {s.policy_version for s in steps} == {version}

    # Every adapter adapts the starting model, and each version trained the same adapter on.
    for version, folder in adapters.items():
        config = json.loads((folder / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == str(tiny_qwen2_vl), version
    steps = [json.loads((adapters[v] / "trainer_state.json").read_text())["step"] for v in (1, 2, 3)]
    assert steps[0] < steps[1] < steps[2]  # one trainer's step count, across the rerun too
    first, second = (load_file(adapters[v] / "adapter_model.safetensors") for v in (1, 2))
    assert first.keys() == second.keys() and any(not torch.equal(first[k], second[k]) for k in first)
    # Versions published as adapters wrote no merged folder; the last version's merged folder (the
    # run's result) is adapter 3 folded into the starting model.
    assert not (out / "checkpoints" / "v-0001").exists()
    merged = PeftModel.from_pretrained(load_model(tiny_qwen2_vl), adapters[3]).merge_and_unload().state_dict()
    published = load_model(versions[3]["checkpoint"]).state_dict()
    assert merged.keys() == published.keys()
    assert all(torch.allclose(merged[k], published[k], atol=1e-6) for k in merged)
    base = load_model(tiny_qwen2_vl).state_dict()
    assert any(not torch.equal(base[k], published[k]) for k in base)


def test_a_lora_run_refuses_to_go_on_from_schema_1_weights_that_are_not_an_adapter(tmp_path, tiny_qwen2_vl):
    from webgym_rl.errors import LoopStateError
    from webgym_rl.loop.phases import Loop, start_trainer
    from webgym_rl.loop.state import CheckpointRecord, load_state

    # Versions of a full fine-tune (or of a run before adapters were kept): --lora has no adapter
    # of the starting model to train on, and would silently train a new one on merged weights.
    settings = loop_settings(tmp_path, tiny_qwen2_vl, **ASYNC, lora=True)
    state = load_state(settings)
    state.checkpoints = [CheckpointRecord(round=0, folder=str(tiny_qwen2_vl), optimizer=False)]
    loop = Loop(settings, None, state, lambda event: None)  # type: ignore[arg-type]
    with pytest.raises(LoopStateError, match="are not a LoRA adapter of --model, so --lora cannot train"):
        start_trainer(loop)
    assert loop.trainer is None
