"""Faults in the loop with real parts (`webgym_rl.loop`): a SIGKILL while a version is published,
an exception inside the resident trainer in the middle of a version, the policy server dying
mid-run, a write that fails for lack of space. After each, and after the rerun that resumes, no
committed episode is lost, none is trained twice and the loop state reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.webgym_rl.loops import check_finished_async_run, committed_episodes, loop_settings
from webgym_core.failpoints import ENV as FAILPOINTS
from webgym_core.settings import settings_to_dict
from webgym_rl.errors import LoopError, PhaseFailed
from webgym_rl.loop.events import BatchReady, ServiceStarted
from webgym_rl.loop.run import run_loop

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ASYNC = dict(schedule="async", iterations=3, max_staleness=1, batch_episodes=2, eval_every=0,
             sampler={"kind": "epoch", "batch_size": 2}, bootstrap_policy="random", success_threshold=0.0)


def _cli(settings, tmp_path: Path, preexec_fn=None, **env: str) -> subprocess.CompletedProcess:
    """Run ``webgym-rl loop`` on `settings` in a child process (faults there cannot kill pytest)."""
    config = tmp_path / "loop.yaml"
    config.write_text(yaml.safe_dump(settings_to_dict(settings)))
    command = [sys.executable, "-c", "from webgym_rl.cli import main; main()", "loop", "--config",
               str(config)]
    environment = {key: value for key, value in os.environ.items() if key != FAILPOINTS}
    return subprocess.run(command, capture_output=True, text=True, timeout=900, preexec_fn=preexec_fn,
                          env={**environment, "OMP_NUM_THREADS": "1", **env})


def _state(out: Path) -> dict:
    return json.loads((out / "loop_state.json").read_text())


def test_sigkill_while_a_version_is_published_then_a_rerun_loses_nothing(tmp_path, tiny_qwen2_vl):
    # v2 reaches the endpoint, then the loop dies before it records v2 (or its round's training).
    settings = loop_settings(tmp_path, tiny_qwen2_vl, **ASYNC, checkpoint_every=2)
    out = Path(settings.out)
    killed = _cli(settings, tmp_path, **{FAILPOINTS: "loop.publish=kill@2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    state = _state(out)  # written atomically: readable whatever the kill interrupted
    assert [v["version"] for v in state["versions"]] == [0, 1]
    assert state["rounds"]["1"]["batch"] and not state["rounds"]["1"].get("train")
    before = set(committed_episodes(out))
    round_1 = state["rounds"]["1"]["batch"]["episodes"]

    finished = _cli(settings, tmp_path)
    assert finished.returncode == 0, finished.stderr[-3000:]
    state = check_finished_async_run(out, 3)
    assert before <= set(committed_episodes(out))
    # No full checkpoint before the kill: round 0 trains again, round 1 on the batch recorded for it.
    assert [v["version"] for v in state["versions"] if v["superseded"]] == [1]
    assert state["rounds"]["1"]["batch"]["episodes"] == round_1


def test_an_exception_in_the_trainer_mid_version_stops_the_run_and_the_rerun_trains_it_once(
        tmp_path, tiny_qwen2_vl, monkeypatch):
    # Round 1's optimizer steps are taken, then the trainer (a child process) raises before replying.
    settings = loop_settings(tmp_path, tiny_qwen2_vl, **ASYNC, checkpoint_every=1)
    out = Path(settings.out)
    monkeypatch.setenv(FAILPOINTS, "trainer.train_round=raise@2")
    with pytest.raises(PhaseFailed) as caught:
        run_loop(settings)
    assert (caught.value.round, caught.value.phase) == (1, "train")
    assert "FailpointError" in str(caught.value) and "trainer.log" in str(caught.value)
    state = _state(out)
    assert (state["last_error"]["round"], state["last_error"]["phase"]) == (1, "train")
    assert [c["round"] for c in state["checkpoints"]] == [0]
    round_1 = state["rounds"]["1"]["batch"]["episodes"]
    before = set(committed_episodes(out))

    monkeypatch.delenv(FAILPOINTS)
    run_loop(settings)
    state = check_finished_async_run(out, 3)
    assert before <= set(committed_episodes(out)) and state["last_error"] is None
    # The steps the failed attempt took died with its trainer: the rerun restored round 0's checkpoint.
    assert state["rounds"]["1"]["batch"]["episodes"] == round_1
    assert not any(v["superseded"] for v in state["versions"])


def test_the_policy_server_dying_mid_run_stops_it_with_a_clear_error_and_a_rerun_resumes(
        tmp_path, tiny_qwen2_vl):
    settings = loop_settings(tmp_path, tiny_qwen2_vl, **ASYNC, checkpoint_every=1)
    out = Path(settings.out)
    policy: list[int] = []

    def kill_the_policy_server(event):
        if isinstance(event, ServiceStarted) and event.service == "policy":
            policy.append(event.pid)
        if isinstance(event, BatchReady) and event.round == 1:
            os.kill(policy[0], signal.SIGKILL)

    with pytest.raises(LoopError) as caught:
        run_loop(settings, on_event=kill_the_policy_server)
    message = " ".join(str(error) for error in (caught.value, caught.value.__cause__) if error)
    assert f"the policy server (pid {policy[0]}) exited with status -9" in message
    assert "rerun the same command to resume" in message
    assert _state(out)["last_error"] is not None or "the rollout failed" in message
    before = committed_episodes(out)

    run_loop(settings)
    check_finished_async_run(out, 3)
    after = committed_episodes(out)
    assert set(before) <= set(after)
    assert all(after[i].status is before[i].status for i in before)  # nothing committed was redone
    # Episodes the dead server failed (if any finished before the run stopped) are kept as failures
    # with their reason: an infrastructure failure, not the agent's.
    assert all(e.status.error_kind.startswith("policy") for e in after.values()
               if e.status.is_error)


def test_a_write_that_fails_for_lack_of_space_stops_the_run_and_a_rerun_loses_nothing(
        tmp_path, tiny_qwen2_vl):
    import resource

    settings = loop_settings(tmp_path, tiny_qwen2_vl, **ASYNC, checkpoint_every=1)
    out = Path(settings.out)
    limit = 600_000  # above every shard and state file, below the model's weights

    def small_disk() -> None:  # python ignores SIGXFSZ: a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    full = _cli(settings, tmp_path, preexec_fn=small_disk)
    assert full.returncode == 1, full.stderr[-3000:]
    assert "File too large" in full.stderr, full.stderr[-3000:]
    state = _state(out)
    before = set(committed_episodes(out))
    assert not state["checkpoints"]

    finished = _cli(settings, tmp_path)
    assert finished.returncode == 0, finished.stderr[-3000:]
    check_finished_async_run(out, 3)
    assert before <= set(committed_episodes(out))
