"""The loop trains with grpo (`webgym_rl.loop` with `webgym_rl.objectives.grpo`): several attempts per
task form the groups; the record counts them and the dropped ones. The asynchronous schedule takes
whole groups into a batch (`webgym_rl.loop.stream`), never half of one. The loops play the
known-answer bandit (`tests.support.bandit`) from a policy that clicks at random: a policy with a model (the
policy-gradient objectives need its log-probabilities) whose attempts at a task get mixed rewards."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import serve_directory
from tests.webgym_rl.loops import (
    bandit_loop_settings,
    check_finished_async_run,
    committed_episodes,
    loop_settings,
)
from webgym_rl.errors import LoopSettingsError
from webgym_rl.loop.run import run_loop


@pytest.mark.browser
def test_grpo_trains_on_groups_of_attempts_in_the_synchronous_loop(tmp_path, bandit_start):
    with serve_directory(bandit_start.site) as sites_url:
        settings = bandit_loop_settings(tmp_path, bandit_start, sites_url, tasks=4, schedule="sync",
                                        objective="grpo", attempts=6, ppo_epochs=2,
                                        sampler={"kind": "epoch", "batch_size": 4})
        run_loop(settings)
    state = json.loads((Path(settings.out) / "loop_state.json").read_text())
    assert [v["version"] for v in state["versions"]] == [0, 1, 2]
    assert state["rounds"]["1"]["eval"]["episodes"] == 4  # each evaluation task once (--eval-attempts 1)
    trained = [state["rounds"][r]["train"] for r in ("0", "1")]
    # The starting policy hits some attempts of a task and not others (a fifth of the time), so
    # round 0 trains, on every step of the groups with a signal: they all carry log-probabilities.
    assert trained[0]["steps"] > 0 and trained[0]["counts"]["steps_without_logprobs"] == 0, trained[0]
    for train in trained:
        if train["skipped"]:
            assert "no learning signal" in train["skipped"]
            continue
        counts = train["counts"]
        assert counts["objective"] == "grpo" and train["steps"] % 2 == 0  # two passes per batch
        groups = {int(size): n for size, n in counts["group_sizes"].items()}
        assert groups and max(groups) <= 6 and sum(groups.values()) >= counts["groups_dropped"]
        assert counts["retokenised"] == 0 and set(train["on_policy"]) <= {"v0", "v1"}
    # The on-policy check of the version the trainer held: the same policy, scored the same.
    assert trained[0]["on_policy"]["v0"]["max_abs"] < 1e-3, trained[0]["on_policy"]


@pytest.mark.browser
@pytest.mark.slow
def test_grpo_in_the_asynchronous_loop_takes_whole_groups_into_each_batch(tmp_path, bandit_start):
    # Four concurrent episodes over four tasks x four attempts: attempts finish out of order, so
    # commit order alone would cut groups at batch boundaries.
    with serve_directory(bandit_start.site) as sites_url:
        settings = bandit_loop_settings(tmp_path, bandit_start, sites_url, tasks=4, schedule="async",
                                        objective="grpo", attempts=4, iterations=2, max_staleness=1,
                                        eval_every=0, sampler={"kind": "epoch", "batch_size": 4})
        run_loop(settings)
    out = Path(settings.out)
    state = check_finished_async_run(out, iterations=2)
    committed = committed_episodes(out)
    for r in ("0", "1"):
        batch = state["rounds"][r]["batch"]["episodes"]
        groups = Counter((committed[i].iteration, committed[i].task.task_id) for i in batch)
        assert len(batch) == 16 and set(groups.values()) == {4}, groups  # four whole groups of 4
        train = state["rounds"][r]["train"]
        if not train["skipped"]:
            assert train["counts"]["objective"] == "grpo"
            assert set(train["counts"]["group_sizes"]) <= {"4", "8"}  # 8: one task drawn by two chunks
    assert any(not state["rounds"][r]["train"]["skipped"] for r in ("0", "1"))


def test_a_batch_that_is_not_whole_groups_is_refused(tmp_path, tiny_qwen2_vl):
    settings = loop_settings(tmp_path, tiny_qwen2_vl, schedule="async", objective="grpo", attempts=3,
                             batch_episodes=4, bootstrap_policy="random")
    with pytest.raises(LoopSettingsError, match="--batch-episodes 4 is not a multiple of --attempts 3"):
        run_loop(settings)
