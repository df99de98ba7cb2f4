"""A one-step visual bandit with a known answer, played through the toolkit's real path.

A local page speaks the MiniWoB++ protocol (a ``#sync-task-cover``, ``core.startEpisodeReal()``,
``core.getUtterance()``, the ``WOB_*`` globals), so it is a task of the ``miniwob`` kind: the browser
server opens it in Chromium, the screenshot is the 160x210 task area, the policy's reply is a click
on the 0-1000 grid over it, and the page reports raw reward 1 when the click lands on the red box,
-1 when it does not (the programmatic judge turns that into reward 1 or 0). The box (a band over
the whole height) is drawn at a place chosen once per run (`Bandit.drawn`): the same place in every
episode, so what a policy can learn is where to click; a policy that clicks at random hits it with
probability `Bandit.chance`, the box's share of the task area.

`Bandit.write(folder)` writes ``folder/miniwob/bandit.html``; serve the folder on 127.0.0.1 and
give its URL as the environment's ``sites_url``. `tasks_file` writes bandit task rows (the seed
only names the episode: every episode shows the same page).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

AREA = (160, 210)
"""The task area (`webgym_rollout.tasks.miniwob.MINIWOB_CLIP`): what the screenshot shows."""
GRID = 1000
"""Coordinates are on a 0-1000 grid over the task area (`webgym_rollout.agent.actions.GRID_SIZE`)."""
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
        `random_click`'s coordinates the first digit of x decides a hit."""
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
        from webgym_rollout.agent.actions import grid_to_pixels

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


def random_click(rng: random.Random) -> tuple[int, int]:
    """A click uniformly at random among the centres of a 10 x 10 grid of cells over the task area
    (x and y in 50, 150, ..., 950): the clicks of the random policy a test imitates."""
    return 50 + 100 * rng.randrange(10), 50 + 100 * rng.randrange(10)
