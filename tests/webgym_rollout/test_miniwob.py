"""The MiniWoB episode adapter on a real page: seeding, utterance, rewards."""

from __future__ import annotations

import pytest

from webgym_rollout import miniwob
from webgym_rollout.errors import InvalidRequest
from webgym_rollout.sites import SiteServer, miniwob_task_url


def test_parse_environment():
    assert miniwob.parse_environment("web") == miniwob.Environment("web")
    env = miniwob.parse_environment("miniwob:click-button")
    assert (env.kind, env.task, env.name) == ("miniwob", "click-button", "miniwob:click-button")
    for bad in ("miniwob:", "gym:click", "miniwob:../etc", "browser"):
        with pytest.raises(InvalidRequest, match="environment"):
            miniwob.parse_environment(bad)


@pytest.mark.browser
async def test_seeded_episode_state_and_rewards(chromium):
    with SiteServer() as sites:
        context = await chromium.new_context(viewport={"width": 400, "height": 400})
        try:
            page = await context.new_page()
            utterances = []
            for seed in (3, 3, 4, 5, 6):
                await page.goto(miniwob_task_url(sites.base_url, "click-button"))
                await miniwob.start_episode(page, seed, max_time_s=30, timeout_s=10)
                state = await miniwob.read_state(page)
                assert state["done"] is False and state["reward"] == 0
                assert state["reason"] == ""  # no reason yet (not the text "undefined")
                utterances.append(state["utterance"])
            assert utterances[0] == utterances[1]  # same seed, same task
            assert len(set(utterances[1:])) > 1  # other seeds, other tasks
            target = utterances[-1].split('"')[1]
            await page.get_by_role("button", name=target, exact=True).first.click()
            state = await miniwob.read_state(page)
            assert state["done"] is True and state["raw_reward"] == 1 and 0 < state["reward"] <= 1
        finally:
            await context.close()
