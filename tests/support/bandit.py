"""A one-step visual bandit with a known answer, played through the toolkit's real path.

A local page speaks the MiniWoB++ protocol (a ``#sync-task-cover``, ``core.startEpisodeReal()``,
``core.getUtterance()``, the ``WOB_*`` globals), so it is a task of the ``miniwob`` kind: the browser
server opens it in Chromium, the screenshot is the 160x210 task area, the policy's reply is a click
on the 0-1000 grid over it, and the page reports raw reward 1 when the click lands on the red box,
-1 when it does not (the programmatic judge turns that into reward 1 or 0). The box (a band over
the whole height) is drawn at a place chosen once per run (`Bandit.drawn`): the same place in every
episode, so what a policy can learn is where to click; a policy that clicks at random hits it with
probability `Bandit.chance`, the box's share of the task area.

`Bandit.write(folder)` writes ``folder/miniwob/bandit.html``; `arena` serves the folder on
127.0.0.1 beside a browser server that may reach it. `tasks_file` writes bandit task rows (the seed
only names the episode: every episode shows the same page). `demonstrations` are a random
clicker's episodes (to imitate), `SeededPolicy` samples each episode with a seed of its own (a fixed
evaluation set), `shuffled_rewards` makes the control's data.
"""

from __future__ import annotations

import contextlib
import json
import random
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webgym_rollout.agent.protocol import AgentSettings

AREA = (160, 210)
"""The task area (`webgym_rollout.tasks.miniwob.MINIWOB_CLIP`): what the screenshot shows."""
GRID = 1000
"""Coordinates are on a 0-1000 grid over the task area (`webgym_rollout.actions.GRID_SIZE`)."""
INSTRUCTION = "Click the red box."

_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>bandit</title>
<style>
  body { margin: 0; font: 12px sans-serif; }
  #wrap { position: absolute; left: 0; top: 0; width: 160px; height: 210px; background: #fff; }
  #query { height: 40px; padding: 4px; box-sizing: border-box; background: #ff0; }
  #box { position: absolute; background: #d00; left: LEFTpx; top: TOPpx; width: WIDTHpx; height: HEIGHTpx;
         z-index: 1; }
  #sync-task-cover { display: none; }
</style></head>
<body>
<div id="wrap"><div id="query">INSTRUCTION</div><div id="box"></div></div>
<div id="sync-task-cover"></div>
<script>
  var WOB_TASK_READY = false, WOB_DONE_GLOBAL = false, WOB_REWARD_GLOBAL = 0, WOB_RAW_REWARD_GLOBAL = 0;
  var WOB_REWARD_REASON = null;
  Math.seedrandom = function (seed) {};  // every episode shows the same page
  var core = {
    EPISODE_MAX_TIME: 60000,
    getUtterance: function () { return "INSTRUCTION"; },
    startEpisodeReal: function () { WOB_TASK_READY = true; },
  };
  document.addEventListener("click", function (event) {
    if (WOB_DONE_GLOBAL) { return; }
    var box = document.getElementById("box").getBoundingClientRect();
    var hit = event.clientX >= box.left && event.clientX < box.right &&
              event.clientY >= box.top && event.clientY < box.bottom;
    WOB_RAW_REWARD_GLOBAL = hit ? 1 : -1;
    WOB_REWARD_GLOBAL = WOB_RAW_REWARD_GLOBAL;
    WOB_REWARD_REASON = hit ? "hit" : "miss";
    WOB_DONE_GLOBAL = true;
  }, true);
</script>
</body></html>
"""


@dataclass(frozen=True)
class Bandit:
    """The red box: left, top, width, height in task-area pixels."""

    box: tuple[int, int, int, int]

    @classmethod
    def drawn(cls, seed: int) -> Bandit:
        """A band over the whole height covering two adjacent columns of the grid's ten (a fifth of
        the width), at columns drawn by `seed`. Only the x coordinate of a click decides a hit. Left
        out: the middle columns (4 and 5: a policy whose clicks merely narrow, as reinforcement by
        chance makes them, drifts to the middle of the grid, and a box there would reward that too)
        and column 0 (x below 100: its numbers start with the same digits as others'), so that with
        the coordinates of `demonstrations` the first digit of x decides a hit."""
        pairs = [first for first in range(1, 9) if not {first, first + 1} & {4, 5}]
        first = random.Random(seed).choice(pairs)
        left, right = (round(grid * AREA[0] / GRID) for grid in (100 * first, 100 * (first + 2)))
        return cls((left, 0, right - left, AREA[1]))

    @property
    def chance(self) -> float:
        """The hit rate of clicks uniformly at random over the task area: the box's share of it."""
        return self.box[2] * self.box[3] / (AREA[0] * AREA[1])

    def hits(self, grid_x: int, grid_y: int) -> bool:
        """Whether a click at (`grid_x`, `grid_y`) on the 0-1000 grid over the task area lands on the box."""
        from webgym_rollout.actions import grid_to_pixels

        x, y = grid_to_pixels((grid_x, grid_y), AREA)
        left, top, width, height = self.box
        return left <= x < left + width and top <= y < top + height

    def write(self, folder: Path) -> Path:
        """Write the page to ``folder/miniwob/bandit.html``; returns `folder` (serve it)."""
        left, top, width, height = self.box
        page = folder / "miniwob" / "bandit.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        html = _PAGE
        for key, value in (("LEFT", left), ("TOP", top), ("WIDTH", width), ("HEIGHT", height),
                           ("INSTRUCTION", INSTRUCTION)):
            html = html.replace(key, str(value))
        page.write_text(html, encoding="utf-8")
        return folder


def tasks_file(path: Path, count: int, *, first_seed: int = 0) -> Path:
    """A JSONL file of `count` bandit tasks (seeds from `first_seed`)."""
    from webgym_data.importers.miniwob import miniwob_task

    rows = [miniwob_task("bandit", seed).to_row() for seed in range(first_seed, first_seed + count)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------- playing it for real

COMPACT = AgentSettings(variant="compact", full_rounds=0)
"""The agent settings of every bandit policy: the short tool-call prompt, no history."""
VIEWPORT = "320x240"
"""The browser window (the MiniWoB recipe's); the screenshot is the task area inside it."""


@dataclass(frozen=True)
class Arena:
    """Where a bandit is played: its site server and a browser server that may reach it (that
    ``host:port`` alone)."""

    sites_url: str
    browser_url: str

    def run_settings(self, tasks: Path, out: Path, *, attempts: int = 1, iteration: int = 0,
                     concurrency: int = 4, split: str = "train") -> Any:
        """`RunSettings` of a rollout of `tasks` here: one step per episode, the programmatic judge."""
        from webgym_rollout.judge.judges import JudgeSettings
        from webgym_rollout.runner import RolloutSettings, RunSettings
        from webgym_rollout.settings import EnvSettings

        rollout = RolloutSettings(concurrency=concurrency, attempts=attempts)
        env = EnvSettings(viewport=VIEWPORT, sites_url=self.sites_url, horizons={"miniwob": 1})
        judge = JudgeSettings(kind="programmatic")
        return RunSettings(tasks=tasks, servers=(self.browser_url,), out=out, progress=False, split=split,
                           iteration=iteration, rollout=rollout, env=env, judge=judge)


@contextlib.asynccontextmanager
async def arena(chromium_path: str, site: Path, *, contexts: int = 4) -> AsyncIterator[Arena]:
    """Serve `site` (`Bandit.write`'s folder) on 127.0.0.1 and run a browser server for it."""
    from tests.conftest import serve_directory
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    with serve_directory(site) as sites_url:
        pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=contexts,
                            allow_hosts=(sites_url.removeprefix("http://"),))
        async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (browser_url, _):
            yield Arena(sites_url, browser_url)


def success(folder: Path) -> float:
    """The share of a rollout's episodes that hit the box."""
    from webgym_rollout.trajectory.reader import read_episodes

    episodes = list(read_episodes(folder))
    return sum(episode.success for episode in episodes) / len(episodes)


def demonstrations(screenshot: bytes, out: Path, *, repeat: int = 3, seed: int = 0) -> Path:
    """A trajectory dataset of a random clicker on the bandit page: x at each of the ten column
    centres 50, 150, ..., 950 of the grid, each ``10 * repeat`` times, y always 500 (so only the
    digits of x vary, and the first one decides a hit),
    in random order, each reply written as a model writes it. No browser is needed: the page is
    the same in every episode, `screenshot` is it."""
    from tests.webgym_rl.synthetic import task, write_shards
    from webgym_rollout.actions import AgentAction
    from webgym_rollout.agent.policies import scripted_reply
    from webgym_rollout.agent.protocol import Observation
    from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Step

    rng = random.Random(seed)
    points = [(50 + 100 * column, 500) for column in range(10)] * (10 * repeat)
    rng.shuffle(points)
    episodes = []
    for i, point in enumerate(points):
        observation = Observation(instruction=INSTRUCTION, screenshot=screenshot, viewport=AREA,
                                  episode_id=f"demo-{i}")
        reply = scripted_reply(AgentAction(name="left_click", coordinate=point), observation, COMPACT,
                               "random-clicker", 0.0, memory="", intention="")
        step = Step(index=0, screenshot=screenshot, messages=reply.messages_json, response=reply.response,
                    finish_reason="stop")
        episodes.append(Episode(task=task(f"demo-{i}"), episode_id=f"demo-{i}", reward=1.0,
                                status=EpisodeStatus.OK, instruction=INSTRUCTION, steps=[step]))
    return write_shards(out, episodes)


class SeededPolicy:
    """A policy endpoint sampled at temperature 1 with a seed of each episode's own (from its id):
    the same episodes give the same replies from the same weights, so a set of episodes is a fixed
    evaluation set of a sampling policy."""

    observes_elements = False
    model_id = "bandit-policy"

    def __init__(self, base_url: str, model: str, max_tokens: int = 48):
        self.base_url, self.model, self.max_tokens = base_url, model, max_tokens
        self._policies: dict[int, Any] = {}

    async def act(self, observation: Any) -> Any:
        from webgym_core.endpoint import Endpoint
        from webgym_rollout.agent.policies import OpenAIPolicy, SamplingSettings

        seed = zlib.crc32(observation.episode_id.encode())
        if seed not in self._policies:
            sampling = SamplingSettings(temperature=1.0, max_tokens=self.max_tokens, sampling_seed=seed)
            self._policies[seed] = OpenAIPolicy(Endpoint(base_url=self.base_url, model=self.model),
                                                sampling=sampling, agent=COMPACT)
        return await self._policies[seed].act(observation)

    async def close(self) -> None:
        for policy in self._policies.values():
            await policy.close()


def shuffled_rewards(folder: Path, out: Path, rng: random.Random) -> Path:
    """A copy of the rollout in `folder` whose rewards are shuffled among its episodes (the control:
    the same replies and the same number of successes, with no link between a reply and its reward)."""
    import dataclasses

    from webgym_rollout.trajectory.reader import read_episodes
    from webgym_rollout.trajectory.writer import TrajectoryWriter

    episodes = list(read_episodes(folder))
    rewards = [episode.reward for episode in episodes]
    rng.shuffle(rewards)
    with TrajectoryWriter(out, max_shard_episodes=len(episodes)) as writer:
        for episode, reward in zip(episodes, rewards, strict=True):
            writer.add(dataclasses.replace(episode, reward=reward))
    return out
