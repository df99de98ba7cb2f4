"""The scripted expert of the local sites: it plays each generated site task's plan, a demonstration
source.

`ExpertPolicy(tasks)` knows the tasks it may be shown. For an observation it finds the task by its
instruction, takes the task's plan (`webgym_sites.generate.expert_plan`: moves written
from the truth the task generator kept, which no agent sees) and turns the next move into one
ordinary action of the action space:

    Goto(path)          navigate to the path on the host and port of the page the episode is on
    Fill(field, text)   left_click the field; key Control+a when it shows text; type the text
    Choose(field, opt)  select the option in the <select> at the field's centre
    Press(target)       left_click the element's centre
    Answer(text)        answer

A target is found among the observation's elements by its ``id`` or ``name`` (`Element.name`);
one out of view is scrolled to (down, then back up), and a plan that cannot find its target after
`ExpertPolicy.max_scrolls` scrolls each way answers that it is stuck, so the episode fails as data.
Replies are written in the agent's reply format (memory, progress, intention, tool call), so its
episodes can be trained on like a model's; their ``policy_model`` is ``scripted-expert``, which
marks them as demonstrations in a trajectory dataset.

The expert follows an episode by its ``episode_id``; an observation of step 0 starts the plan over
(a restarted session). Given another planner (``plan=``, such as a shortcut of
`webgym_sites.shortcuts`) it plays that planner's moves instead, under its own
``model_id``: only the expert's episodes are demonstrations.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from webgym_data.schema import Task
from webgym_rollout.actions import AgentAction, pixels_to_grid
from webgym_rollout.agent.policies import PolicyOutput, element_field, scripted_reply
from webgym_rollout.agent.protocol import AgentSettings, Observation
from webgym_sites.generate import expert_plan
from webgym_sites.plans import Answer, Choose, Goto, Move, Press

__all__ = ["EXPERT_MODEL_ID", "ExpertPolicy"]

_MAX_EPISODES = 4096
"""Episodes followed at once (more than a run's concurrency); the oldest is forgotten first."""
EXPERT_MODEL_ID = "scripted-expert"
"""The ``policy_model`` of the expert's episodes: demonstrations, not a model's samples."""


@dataclass
class _Progress:
    moves: list[Move]
    index: int = 0
    part: int = 0
    """How far into the current move (Fill: 0 click, 1 select all or type, 2 type)."""
    scrolled: int = 0
    """Scrolls made looking for the current move's target (positive down, negative up)."""


class ExpertPolicy:
    """Plays the plans of generated site tasks through the ordinary action space (see the module)."""

    observes_elements = True

    def __init__(self, tasks: Iterable[Task], *, agent: AgentSettings | None = None, max_scrolls: int = 4,
                 plan: Callable[[Task], list[Move] | None] = expert_plan, model_id: str = EXPERT_MODEL_ID):
        self.agent = agent or AgentSettings()
        self.max_scrolls = max_scrolls
        self.model_id = model_id
        """The ``policy_model`` of its episodes (`EXPERT_MODEL_ID`: demonstrations)."""
        self._plan = plan
        self._tasks = {task.task_name: task for task in tasks}
        self._episodes: OrderedDict[str, _Progress] = OrderedDict()

    async def act(self, observation: Observation) -> PolicyOutput:
        started = time.perf_counter()
        progress = self._progress(observation)
        action, intention = self._next(progress, observation)
        if action.ends_episode:
            self._episodes.pop(observation.episode_id, None)
        memory = f"Following the plan: move {progress.index + 1} of {len(progress.moves)}."
        return scripted_reply(action, observation, self.agent, self.model_id, started, memory=memory,
                              intention=intention)

    # ------------------------------------------------------------------------------- helpers

    def _progress(self, observation: Observation) -> _Progress:
        progress = self._episodes.get(observation.episode_id)
        if progress is None or observation.step == 0:
            task = self._tasks.get(observation.instruction)
            moves = (self._plan(task) if task is not None else None) or [
                Answer("The scripted expert has no plan for this task.")]
            progress = self._episodes[observation.episode_id] = _Progress(moves)
            while len(self._episodes) > _MAX_EPISODES:  # episodes cut by their step budget never answer
                self._episodes.popitem(last=False)
        return progress

    def _next(self, progress: _Progress, observation: Observation) -> tuple[AgentAction, str]:
        if progress.index >= len(progress.moves):
            return AgentAction(name="answer", text="Done."), "Finish: the plan is done."
        move = progress.moves[progress.index]
        if isinstance(move, Answer):
            return AgentAction(name="answer", text=move.text), "Report the answer."
        if isinstance(move, Goto):
            self._advance(progress)
            parts = urlsplit(observation.url)
            path, _, query = move.path.partition("?")
            url = urlunsplit((parts.scheme or "http", parts.netloc, path, query, ""))
            return AgentAction(name="navigate", url=url), f"Open {move.path}."
        target = move.target if isinstance(move, Press) else move.field
        element = self._find(observation, target, move.text if isinstance(move, Press) else "")
        if element is None:
            return self._search(progress, target)
        progress.scrolled = 0
        x = float(element_field(element, "x")) + float(element_field(element, "width")) / 2
        y = float(element_field(element, "y")) + float(element_field(element, "height")) / 2
        point = pixels_to_grid(x, y, observation.viewport)
        if isinstance(move, Choose):
            self._advance(progress)
            return AgentAction(name="select", coordinate=point, option=move.option), \
                f"Choose {move.option!r} in {target}."
        if isinstance(move, Press):
            self._advance(progress)
            return AgentAction(name="left_click", coordinate=point), f"Click {target}."
        # Fill: click the field, select what it shows (if anything), type.
        if progress.part == 0:
            progress.part = 1 if str(element_field(element, "text") or "").strip() else 2
            return AgentAction(name="left_click", coordinate=point), f"Click the field {target}."
        if progress.part == 1:
            progress.part = 2
            return AgentAction(name="key", keys="Control+a"), f"Select the text of {target}."
        self._advance(progress)
        return (AgentAction(name="type", text=move.text, press_enter=move.submit),
                f"Type into {target}" + (" and submit." if move.submit else "."))

    @staticmethod
    def _advance(progress: _Progress) -> None:
        progress.index += 1
        progress.part = progress.scrolled = 0

    def _find(self, observation: Observation, target: str, text: str) -> Any:
        for element in observation.elements:
            if str(element_field(element, "name", "") or "") != target:
                continue
            shown = " ".join(str(element_field(element, "text") or "").split())
            if text and shown.casefold() != text.casefold():
                continue
            return element
        return None

    def _search(self, progress: _Progress, target: str) -> tuple[AgentAction, str]:
        """Scroll down to look for `target`, then up; answer that the plan is stuck after that."""
        if 0 <= progress.scrolled < self.max_scrolls:
            progress.scrolled += 1
            return AgentAction(name="scroll", direction="down"), f"Scroll down to find {target}."
        if progress.scrolled >= self.max_scrolls:
            progress.scrolled = -1
        if -progress.scrolled <= 2 * self.max_scrolls:
            progress.scrolled -= 1
            return AgentAction(name="scroll", direction="up"), f"Scroll up to find {target}."
        progress.index = len(progress.moves)
        return AgentAction(name="answer", text=f"Stuck: {target} is not on the page."), \
            f"Give up: {target} is not on the page."
