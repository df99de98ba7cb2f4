"""The loop trains with grpo (`webgym_rl.loop` with `webgym_rl.objectives.grpo`): several attempts per
task form the groups; the record counts them and the dropped ones. (The asynchronous schedule takes
its batches in commit order, which can split a group across two batches: not tested here yet.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.webgym_rl.loops import loop_settings
from webgym_rl.loop.run import run_loop


@pytest.mark.browser
def test_grpo_trains_on_groups_of_attempts_in_the_synchronous_loop(tmp_path, tiny_qwen2_vl):
    settings = loop_settings(tmp_path, tiny_qwen2_vl, schedule="sync", objective="grpo", attempts=4,
                             iterations=2, eval_every=0, bootstrap_policy="random", ppo_epochs=2,
                             sampler={"kind": "epoch", "batch_size": 2})
    run_loop(settings)
    state = json.loads((Path(settings.out) / "loop_state.json").read_text())
    assert [v["version"] for v in state["versions"]] == [0, 1, 2]
    trained = [state["rounds"][r]["train"] for r in ("0", "1")]
    # A round whose groups all got equal rewards has no signal and is skipped, the weights kept; the
    # DOM-aware random bootstrap wins some attempts of a task and not others, so round 0 trains.
    assert trained[0]["steps"] > 0, trained[0]
    for train in trained:
        if train["skipped"]:
            assert "no learning signal" in train["skipped"]
            continue
        counts = train["counts"]
        assert counts["objective"] == "grpo" and train["steps"] % 2 == 0  # two passes per batch
        groups = {int(size): n for size, n in counts["group_sizes"].items()}
        assert groups and max(groups) <= 4 and sum(groups.values()) >= counts["groups_dropped"]
