"""Loop settings for the loop tests: four MiniWoB tasks and a small, fast configuration."""

from __future__ import annotations

import json
from pathlib import Path

from webgym_core.settings import settings_from_dict
from webgym_rl.loop.settings import LoopSettings

MINIWOB = [("click-test", 0), ("click-test", 1), ("click-test-2", 0), ("click-test-2", 1)]


def tasks_file(path: Path) -> Path:
    """A JSONL task file of the `MINIWOB` tasks (name, seed)."""
    from webgym_data.importers.miniwob import miniwob_task

    path.write_text("".join(json.dumps(miniwob_task(name, seed).to_row()) + "\n" for name, seed in MINIWOB))
    return path


def loop_settings(tmp_path: Path, model: Path, **changes) -> LoopSettings:
    """`LoopSettings` from YAML-style keys (flat groups beside the loop's own, ``policy: {...}``)."""
    tasks = tasks_file(tmp_path / "tasks.jsonl")
    values = dict(tasks=str(tasks), model=str(model), out=str(tmp_path / "loop"), iterations=2,
                  horizons={"miniwob": 3}, viewport="320x240", concurrency=4, policy={"max_new_tokens": 8},
                  learning_rate=1e-3, epochs=1.0, per_device_batch_size=2, log_with="none", eval_every=2,
                  eval_split="train", progress=False)
    for key, value in changes.items():
        values[key] = {**values.get(key, {}), **value} if isinstance(value, dict) else value
    return settings_from_dict(LoopSettings, values)


def committed_episodes(out: Path) -> dict:
    """The episodes an asynchronous loop in `out` committed (every chunk folder), by id."""
    from webgym_rollout.trajectory.reader import read_episodes

    return {e.episode_id: e for chunk in sorted((out / "rollouts").glob("chunk-*")) if chunk.is_dir()
            for e in read_episodes(chunk)}


def check_finished_async_run(out: Path, iterations: int) -> dict:
    """What must hold after an asynchronous run finished, whatever failed on the way: the state
    reads, versions 0..N are live, no episode is in two batches and every batched one is committed,
    no episode was played twice, and the final weights hold each live round once (the trainer's step
    is the sum of the live rounds' steps). Returns the state."""
    from webgym_rollout.trajectory.reader import read_episodes

    state = json.loads((out / "loop_state.json").read_text())
    assert [v["version"] for v in state["versions"] if not v["superseded"]] == list(range(iterations + 1))
    rounds = [state["rounds"][str(r)] for r in range(iterations)]
    ids = [i for r in rounds for i in r["batch"]["episodes"]]
    committed = committed_episodes(out)
    assert len(ids) == len(set(ids)) and set(ids) <= set(committed)
    for record in rounds:  # each batch's manifest lists its episodes less the stale ones, as committed
        members = record["batch"]["members"]
        assert [i for _, i in members] == [i for i in record["batch"]["episodes"]
                                           if i not in record["batch"]["dropped_stale"]]
        assert all(any(e.episode_id == i for e in read_episodes(folder)) for folder, i in members)
    rows = sum(len(read_episodes(c)) for c in (out / "rollouts").glob("chunk-*") if c.is_dir())
    assert rows == len(committed)
    assert rounds[-1]["train"]["trainer_step"] == sum(r["train"]["steps"] for r in rounds)
    assert state["position"] == rounds[-1]["batch"]["position"]
    return state


def bandit_loop_settings(tmp_path: Path, start, sites_url: str, *, tasks: int, **changes) -> LoopSettings:
    """`LoopSettings` of a loop on the known-answer bandit (`tests.support.bandit`, served at `sites_url`):
    `start` (the ``bandit_start`` fixture) plays from round 0 (its replies carry token ids and
    log-probabilities, which the policy-gradient objectives need; it hits the box about a fifth of
    the time, so groups of attempts seldom all get the same reward), one step per episode, `tasks`
    bandit tasks."""
    from tests.support.bandit import VIEWPORT, tasks_file

    values = dict(tasks=str(tasks_file(tmp_path / "bandit.jsonl", tasks)), model=str(start.checkpoint),
                  out=str(tmp_path / "loop"), iterations=2, bootstrap_policy="model", sites_url=sites_url,
                  horizons={"miniwob": 1}, viewport=VIEWPORT, concurrency=4,
                  policy={"max_new_tokens": 48, "max_tokens": 48, "variant": "compact", "full_rounds": 0},
                  judge="programmatic", learning_rate=1e-4, epochs=1.0, per_device_batch_size=8,
                  log_with="none", eval_every=2, eval_split="train", progress=False)
    for key, value in changes.items():
        values[key] = {**values.get(key, {}), **value} if isinstance(value, dict) else value
    return settings_from_dict(LoopSettings, values)
