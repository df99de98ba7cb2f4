"""`played(task, ...)`: an ended `Episode` of `task` with one step per screenshot, URL or title, the
way a judge test describes what the agent saw (the judges take the episode itself)."""

from __future__ import annotations

from collections.abc import Sequence

from webgym_data.schema import Task
from webgym_rollout.trajectory.contract import Episode, Step, TaskOutcome


def played(task: Task | str, *, answer: str = "", screenshots: Sequence[bytes] = (), urls: Sequence[str] = (),
           titles: Sequence[str] = (), outcome: TaskOutcome | None = None,
           episode_id: str = "ep-played") -> Episode:
    """An episode of `task` (a `Task`, or an instruction for a bare task) that ended with `answer`;
    step i has ``screenshots[i]``, ``urls[i]`` and ``titles[i]`` where given (b"" / "" past an end)."""
    if isinstance(task, str):
        task = Task(task_id="", task_name=task, website="", benchmark_name="")
    count = max(len(screenshots), len(urls), len(titles))
    steps = [Step(index=i, screenshot=screenshots[i] if i < len(screenshots) else b"",
                  url=urls[i] if i < len(urls) else "", title=titles[i] if i < len(titles) else "")
             for i in range(count)]
    return Episode(task=task, episode_id=episode_id, answer=answer, outcome=outcome or TaskOutcome(),
                   steps=steps)
