"""webgym_rl.loop.state: typed records, the identity check, no secrets, and schema-1 files still read."""

from __future__ import annotations

import json

import pytest

from tests.webgym_rl.loops import loop_settings
from webgym_core.settings import settings_from_dict
from webgym_rl.errors import LoopStateError
from webgym_rl.loop.settings import LoopSettings
from webgym_rl.loop.state import (
    IDENTITY,
    STATE_FILE,
    BatchRecord,
    LoopState,
    RolloutRecord,
    TrainRecord,
    VersionRecord,
    load_state,
    save_state,
)


def test_a_new_folder_gets_a_state_with_the_identity_and_the_settings(tmp_path):
    settings = loop_settings(tmp_path, tmp_path / "model", policy={"api_key": "sk-secret"},
                             browser_token="t0ken", attempts=3)
    state = load_state(settings)
    assert state.rounds == {} and state.last_error is None and state.schema_version == 2
    assert [(v.version, v.path, v.checkpoint) for v in state.versions] == [
        (0, "start", str(tmp_path / "model"))]
    assert set(state.identity) == set(IDENTITY)
    assert (state.identity["objective"], state.identity["attempts"], state.identity["schedule"]) == (
        "filtered_bc", 3, "sync")
    (tmp_path / "loop").mkdir()
    path = save_state(settings, state)
    assert path == tmp_path / "loop" / STATE_FILE
    text = path.read_text()
    assert "sk-secret" not in text and "t0ken" not in text
    # The recorded settings read back as the same settings (secrets aside).
    recorded = json.loads(text)["settings"]
    recorded["policy"]["api_key"], recorded["browser_token"] = None, None
    again = settings_from_dict(LoopSettings, recorded)
    assert again.rollout == settings.rollout and again.training == settings.training
    assert again.policy.sampling == settings.policy.sampling and again.pool.browsers == settings.pool.browsers


def test_records_round_trip_and_a_rerun_resumes_with_other_settings_but_not_another_identity(tmp_path):
    settings = loop_settings(tmp_path, tmp_path / "model")
    (tmp_path / "loop").mkdir()
    state = load_state(settings)
    record = state.round(0)
    record.rollout = RolloutRecord(out="o", tasks="t", policy="random", episodes=4, successes=1)
    record.batch = BatchRecord(folder="o", successes_by_version={"0": [1, 4]})
    record.train = TrainRecord(window=[0], weights={"0": 1.0}, steps=3, samples=5)
    state.versions.append(VersionRecord(version=1, round=0, path="memory"))
    save_state(settings, state)
    more = loop_settings(tmp_path, tmp_path / "model", iterations=5, learning_rate=0.5)
    resumed = load_state(more)
    assert resumed.rounds == state.rounds and resumed.version.version == 1 and resumed.trained_rounds == 1
    assert resumed.settings["learning_rate"] == 0.5
    for change, name in (({"objective": "reinforce"}, "objective"), ({"attempts": 2}, "attempts"),
                         ({"sampler": {"kinds": ["web"]}}, "sampler"), ({"schedule": "async"}, "schedule")):
        with pytest.raises(LoopStateError, match=f"belongs to a run with {name}="):
            load_state(loop_settings(tmp_path, tmp_path / "model", **change))


def test_a_broken_or_foreign_state_is_refused_naming_the_field(tmp_path):
    settings = loop_settings(tmp_path, tmp_path / "model")
    out = tmp_path / "loop"
    (out / "rollouts").mkdir(parents=True)
    with pytest.raises(LoopStateError, match="holds a loop's folders but no loop_state.json"):
        load_state(settings)
    (out / STATE_FILE).write_text("{not json")
    with pytest.raises(LoopStateError, match="is unreadable"):
        load_state(settings)
    (out / STATE_FILE).write_text('{"version": 7}')
    with pytest.raises(LoopStateError, match="not a webgym-rl loop state"):
        load_state(settings)
    good = load_state(loop_settings(tmp_path, tmp_path / "model", out=str(tmp_path / "new"))).model_dump(
        mode="json")
    good["rounds"] = {"0": {"train": {"steps": "many"}}}
    (out / STATE_FILE).write_text(json.dumps(good))
    with pytest.raises(LoopStateError, match=r"rounds\.0\.train\.steps: .*integer"):
        load_state(settings)


def _identity_v1(settings: LoopSettings, mode: str) -> dict:
    identity = dict(load_state(settings).identity)
    identity.pop("schedule")
    return {**identity, "mode": mode}


def test_a_schema_1_sync_state_resumes_from_its_published_weights(tmp_path):
    # The file the loop wrote before it was one package (webgym_rl/loop_state.py, version 1).
    settings = loop_settings(tmp_path, tmp_path / "model")
    out = tmp_path / "loop"
    out.mkdir()
    rollout = {"out": str(out / "iter-0000" / "trajectories"),
               "tasks": str(out / "iter-0000" / "tasks.jsonl"),
               "checkpoint": "random", "steps_per_s": 2.0, "elapsed_s": 3.0, "episodes_this_run": 4,
               "episodes": 4, "successes": 2, "errors": 1, "steps": 8, "valid_actions": 6,
               "success_rate": 0.5, "valid_action_rate": 0.75, "seconds": 4.0}
    train = {"checkpoint": str(out / "iter-0000" / "checkpoint"),
             "trainer_checkpoint": str(out / "iter-0000" / "train" / "checkpoint-000004"), "steps": 4,
             "counts": {"steps_kept": 6, "iterations_kept": [0]}, "data": [rollout["out"]],
             "first_loss": 5.0, "last_loss": 4.0, "seconds": 9.0}
    evaluation = {**rollout, "checkpoint": train["checkpoint"], "out": str(out / "iter-0000" / "eval"),
                  "evaluated": [2, 3], "success_low": 0.2, "success_high": 0.9, "report": "r.html",
                  "learning_curve": None}
    v1 = {"version": 1, "identity": _identity_v1(settings, "sync"), "settings": {},
          "iterations": {"0": {"rollout": rollout, "train": train, "eval": evaluation,
                               "push": {"repo_id": "me/x", "commit": "abc", "seconds": 1.0}},
                         "1": {"rollout": {**rollout, "checkpoint": train["checkpoint"]}}},
          "last_error": {"iteration": 1, "phase": "train", "error": "boom", "at": 1.0}}
    (out / STATE_FILE).write_text(json.dumps(v1))
    state = load_state(settings)
    assert isinstance(state, LoopState) and state.schema_version == 2
    assert state.identity["schedule"] == "sync" and "mode" not in state.identity
    first, second = state.rounds[0], state.rounds[1]
    assert (first.rollout.policy, first.rollout.version, first.rollout.successes) == ("random", 0, 2)
    assert first.batch.folder == rollout["out"] and first.batch.successes_by_version == {"0": [2, 3]}
    assert (first.train.steps, first.train.samples, first.train.window) == (4, 6, [0])
    assert first.eval.version == 1 and first.eval.evaluated == [2, 3] and first.push.commit == "abc"
    assert second.rollout.policy == "v1" and second.train is None
    # Version 1 is the published checkpoint; the trainer resumes from it with a fresh optimizer.
    assert [(v.version, v.checkpoint) for v in state.versions] == [(0, str(tmp_path / "model")),
                                                                   (1, train["checkpoint"])]
    (checkpoint,) = state.checkpoints
    assert (checkpoint.round, checkpoint.folder, checkpoint.optimizer) == (0, train["checkpoint"], False)
    assert (state.last_error.round, state.last_error.phase) == (1, "train")
    # Written back, it is a schema-2 file that reads the same.
    save_state(settings, state)
    assert json.loads((out / STATE_FILE).read_text())["schema_version"] == 2
    assert load_state(settings).rounds == state.rounds


def test_a_schema_1_async_state_keeps_its_batches_and_adapters(tmp_path):
    settings = loop_settings(tmp_path, tmp_path / "model", schedule="async")
    out = tmp_path / "loop"
    out.mkdir()
    versions = [{"version": 0, "checkpoint": str(tmp_path / "model")},
                {"version": 1, "checkpoint": str(out / "checkpoints" / "v-0001"),
                 "adapter": str(out / "adapters" / "v-0001"), "published_at": 5.0}]
    batch = {"folder": str(out / "train" / "batch-0000" / "trajectories"), "episodes": ["e1", "e2"],
             "dropped_stale": ["e2"], "staleness": {"0": 3}, "successes_by_version": {"0": [1, 2]},
             "position": {"chunk-0000": [2, 0]}, "composed_at": 1.0, "train_started_at": 2.0,
             "train_done_at": 3.0,
             "train": {"trainer_checkpoint": "x", "steps": 2, "counts": {"steps_kept": 3}, "samples": 3,
                       "first_loss": 1.0, "last_loss": 0.5}}
    evaluation = {"version": 1, "out": "e", "tasks": "t", "episodes": 2, "errors": 0, "evaluated": [1, 2],
                  "success_rate": 0.5, "success_low": 0.1, "success_high": 0.9, "report": "r",
                  "learning_curve": None, "step_versions": {"v1": 4}, "started_at": 1.0, "done_at": 2.0}
    v1 = {"version": 1, "identity": _identity_v1(settings, "async"), "settings": {}, "iterations": {},
          "async": {"versions": versions, "position": {"chunk-0000": [2, 0]}, "batches": {"0": batch},
                    "evals": {"1": evaluation}, "metrics": {}}, "last_error": None}
    (out / STATE_FILE).write_text(json.dumps(v1))
    state = load_state(settings)
    record = state.rounds[0]
    assert record.batch.episodes == ["e1", "e2"] and record.batch.dropped_stale == ["e2"]
    assert record.batch.position == {"chunk-0000": [2, 0]} and state.position == {"chunk-0000": [2, 0]}
    assert record.train.samples == 3 and record.eval.step_versions == {"v1": 4}
    assert state.versions[1].adapter == str(out / "adapters" / "v-0001")
    # A LoRA run trains the version's adapter on.
    assert state.checkpoints[0].folder == str(out / "adapters" / "v-0001")
