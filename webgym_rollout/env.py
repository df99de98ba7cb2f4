"""The environment: one task played in one browser session, in the shape Gymnasium users know.

::

    env = WebEnv(client, EnvSettings(sites_url=sites.base_url))   # webgym_rollout.settings
    observation = await env.reset(task)                # opens a session, loads the task's page
    while True:
        result = await env.step(await policy.act(observation))
        if result.terminated or result.truncated:
            break
        observation = result.observation
    await env.close()                                  # closes the session

`reset(task, seed=...)` opens a browser session on a `BrowserClient` (waiting while every server is
busy) and returns the first `Observation` (the screenshot, the instruction, the page's URL and
title, and what the observation modes add). `step(output)` takes the policy's reply (a
`PolicyOutput`, or an `AgentAction` for scripted play), carries out its action, records a trajectory
`Step` (``result.info["step"]``) and returns the next observation. A page action and the observation
after it are one call to the browser server (`BrowserSession.act`: the screenshot, the page's own
state for the outcome, the elements when `EnvSettings.elements`); a navigation, or a reply without
an action, reads the page with separate calls. The result carries

- ``reward``: the environment's own reward (a MiniWoB page's raw reward once it is done; a website
  gives none: its reward comes from the judge after the episode);
- ``terminated``: the agent answered, or the environment ended the episode;
- ``truncated``: the step budget ran out: Gymnasium's time limit, per task kind (`horizon`, from
  `TaskKind.horizon`: the kind's own budget, or the split's table by difficulty, or
  `EnvSettings.horizons`);
- ``info``: ``step`` (the recorded `Step`), ``timings`` (seconds per phase), ``outcome`` (the
  environment's `TaskOutcome`, if it keeps one), ``answer`` and ``browser_actions`` (the
  `BrowserAction`s the step sent, in viewport pixels: where an element action landed).

An element action (``click_element``, ``type_element``, ``select_element``, ``hover_element``:
`webgym_rollout.actions`) names an element by its number in the elements of the observation the
policy saw (read with ``page_info`` first when the env had read none). The env resolves it to the
element's centre and sends the browser's ordinary coordinate actions, so the browser server's
contract does not change (``type_element``: the click alone, then the typing with the next
observation: two calls); the step keeps the action as the policy wrote it. A number the page does
not list is the agent's mistake: a no-op step whose ``action_error`` says so.

An agent's mistake is data on the step, never an exception: a reply without a valid action is a
no-op step with ``action_error`` saying why, a click on nothing or a refused URL likewise. An
infrastructure failure raises a `BrowserError` (a crashed browser, a lost session, an unreachable
server); `reset` again starts the episode over on a fresh session. How a task opens and whether it
keeps its own reward is its kind's business (`webgym_rollout.tasks.kind`); the environment never asks
which kind it plays.

What the policy is shown follows the observation modes (`EnvSettings.observation`,
`webgym_rollout.settings.ObservationSettings`). Modes other than ``screenshot`` read the viewport's
interactive elements at every step (numbered from 1 in the order of that step's list) and build

- ``som``: the observation's screenshot is the screenshot with each element's box and number drawn
  on it (`webgym_rollout.observations.marks.draw_marks`); the step records that marked image;
- the text observation (`Observation.text`, recorded as `Step.observation_text`), its parts in this
  order, each under its header line: ``Accessibility tree:`` (``axtree``:
  `webgym_rollout.observations.axtree.render_axtree`, cut to ``axtree_tokens``), then
  ``Interactive elements:`` (``elements``: `webgym_rollout.observations.render_elements`), parts
  separated by a blank line; "" when neither mode is on.

Elements and the accessibility tree come from one reading of the page (``page_info``), so their
numbers agree.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webgym_core.lazy import moved_names
from webgym_data.schema import Task
from webgym_rollout import settings as rollout_settings
from webgym_rollout.actions import ActionParseError, AgentAction
from webgym_rollout.agent.policies import PolicyOutput
from webgym_rollout.agent.protocol import Observation, ParsedResponse
from webgym_rollout.browser.client import BrowserClient, BrowserSession
from webgym_rollout.browser.protocol import (
    ActResult,
    BrowserAction,
    CreateSessionRequest,
    RecordingIndex,
    Screenshot,
    ScreenshotRequest,
)
from webgym_rollout.errors import EpisodeOver, NavigationRefused, RolloutError, ServerBusy, SiteBlocked
from webgym_rollout.observations import draw_marks, render_axtree, render_elements
from webgym_rollout.tasks.kind import TaskKind, kind_names, task_kind
from webgym_rollout.trajectory.contract import Latency, Step, TaskOutcome, TokenUsage
from webgym_rollout.trajectory.recordings import RecordingStore, ReplaySource

if TYPE_CHECKING:  # at run time the name is looked up in `rollout_settings`: the old path warns
    from webgym_rollout.settings import EnvSettings

__all__ = ["EpisodeOver", "StepResult", "WebEnv"]

# Moved in 0.3.0; the old import path goes in the next release.
__getattr__ = moved_names(__name__, {"EnvSettings": "webgym_rollout.settings"})

log = logging.getLogger(__name__)
_SCREENSHOT = ScreenshotRequest()
AXTREE_HEADER = "Accessibility tree:"
"""The header line of the accessibility tree in the text observation (mode ``axtree``)."""
ELEMENTS_HEADER = "Interactive elements:"
"""The header line of the element list in the text observation (mode ``elements``)."""


@dataclass(frozen=True)
class StepResult:
    """What `WebEnv.step` returns (the fields of Gymnasium's step tuple)."""

    observation: Observation
    """The next observation; once the episode is over, the last one the policy saw."""
    reward: float
    """The environment's own reward for this step (0 where the judge decides later)."""
    terminated: bool
    """The agent answered, or the environment ended the episode."""
    truncated: bool
    """The step budget ran out."""
    info: dict[str, Any]
    """``step`` (the recorded `Step`), ``timings``, ``outcome``, ``answer``, ``browser_actions``."""


class WebEnv:
    """One task at a time in one browser session. Not safe for concurrent use: one per episode slot."""

    def __init__(self, client: BrowserClient, settings: EnvSettings | None = None):
        self.client = client
        self.settings = settings or rollout_settings.EnvSettings()
        kinds = {name.partition(":")[0] for name in kind_names()}
        unknown = sorted(set(self.settings.horizons) - kinds)
        if unknown:
            raise ValueError(f"horizons: no task kind is named {', '.join(map(repr, unknown))}; the kinds "
                             f"are {', '.join(sorted(kinds))}")
        modes = self.settings.observation.modes
        self._som, self._axtree = "som" in modes, "axtree" in modes
        self._wants_elements = self.settings.elements or self.settings.observation.needs_elements
        self.task: Task | None = None
        self.kind: TaskKind | None = None
        self.session: BrowserSession | None = None
        self._forget()

    def _forget(self) -> None:
        self.steps: list[Step] = []
        """The steps recorded since the last `reset`."""
        self.instruction = ""
        self.answer = ""
        self.outcome: TaskOutcome | None = None
        """The environment's last report (None for kinds that keep no reward)."""
        self.horizon = 0
        self.done = True
        self._episode_id = ""
        self._shot: Screenshot | None = None
        self._shot_s = 0.0
        self._url = self._title = ""
        self._elements: tuple[Any, ...] = ()
        self._axnodes: tuple[Any, ...] = ()
        self._shown: tuple[bytes, str, str] = (b"", "", "")  # what the policy is shown: image, its sha, text
        self._last_error = ""
        self._record: RecordingStore | None = None
        self._traffic = False
        self.recording: RecordingIndex | None = None
        """Recording: what the episode's session recorded, read when the session closed (its
        bodies are in the `RecordingStore` given to `reset`); replaying: the requests the recording
        lacked (`RecordingIndex.misses`). None otherwise."""

    # ----------------------------------------------------------------------------------- API

    async def reset(self, task: Task, *, seed: int | None = None, split: str = "train",
                    episode_id: str = "", record: RecordingStore | None = None,
                    replay: ReplaySource | None = None) -> Observation:
        """Start `task` on a fresh session (closing any earlier one) and return the first observation.

        `seed` seeds the page where the task kind has randomness (MiniWoB; default: the task's
        ``env_seed``); `split` picks the horizon table; `episode_id` is shown to the policy (the
        random policy seeds itself with it). `record`: record the session's network traffic, its
        bodies into this store (`recording` holds the index once the session closes); `replay`:
        serve the pages from a recording instead (`webgym_rollout.trajectory.recordings`)."""
        await self.close()
        kind = task_kind(task)
        kind.check(self.settings)
        if replay is not None:
            kind.replaying([exchange.url for exchange in replay.options.exchanges])
        self._forget()
        self.task, self.kind, self._episode_id = task, kind, episode_id
        self._record = record
        self.horizon = kind.horizon(self.settings, split)
        request = kind.session_request(self.settings, task.env_seed if seed is None else seed)
        self.session = await self._create_session(request, record=record is not None, replay=replay)
        self._traffic = record is not None or replay is not None
        self._url, self._title = self.session.url, self.session.title
        self.instruction = await kind.setup(self.session)
        await self._take_screenshot()
        if self._wants_elements:
            await self._read_elements()
        self.done = False
        return self._observation()

    async def step(self, action: Any) -> StepResult:
        """Carry out the action of `action` (a `PolicyOutput` or an `AgentAction`); see the module
        docstring. Raises `EpisodeOver` after the episode ended, `BrowserError` for infrastructure."""
        if self.done or self.session is None or self._shot is None or self.kind is None:
            raise EpisodeOver("the episode is over (or was never started): call reset(task) first")
        output = _as_policy_output(action)
        agent_action: AgentAction | None = output.parsed.action
        shot = self._shot
        step = self._new_step(output)
        execute_s = observe_s = 0.0
        terminated = False
        acted: ActResult | None = None
        outcome: TaskOutcome | None = None
        sent: tuple[BrowserAction, ...] = ()
        truncated = len(self.steps) >= self.horizon
        if agent_action is not None and agent_action.ends_episode:
            self.answer, terminated, truncated = agent_action.text, True, False
        elif agent_action is not None:
            began = time.perf_counter()
            sent, browser_action, popups = await self._inputs(step, agent_action, (shot.width, shot.height))
            if agent_action.name == "navigate":
                step.action_error = await self._navigate(agent_action.url)
                execute_s = time.perf_counter() - began
            elif browser_action is None:  # an element the page does not list, or a first input that failed
                execute_s = time.perf_counter() - began
            else:
                # The action and the next observation in one call (no screenshot after the last step).
                # The accessibility tree is read with the elements by page_info below (one reading).
                acted = await self.session.act(browser_action, screenshot=None if truncated else _SCREENSHOT,
                                               elements=self._wants_elements and not self._axtree
                                               and not truncated)
                execute_s = time.perf_counter() - began - acted.observe_s
                step.action_error, step.popups = acted.error, tuple(acted.popups)
                self._url, self._title = acted.url, acted.title
                step.popups = popups + step.popups
        step.latency = Latency(policy_s=float(output.latency_s), execute_s=execute_s,
                               screenshot_s=self._shot_s)
        if acted is not None:
            outcome, observe_s = self.kind.outcome(acted.env_state), acted.observe_s
            if acted.screenshot is not None:
                self._shot, self._shot_s = acted.screenshot, acted.observe_s
        elif not terminated:
            # Whether the environment ended the episode, and (unless it is over) the next screenshot:
            # asked together.
            began = time.perf_counter()
            outcome, _ = await asyncio.gather(
                self.kind.validate(self.session),
                self._take_screenshot() if not truncated else _nothing())
            observe_s = time.perf_counter() - began
        if not terminated and outcome is not None:
            self.outcome = outcome
            if outcome.done:
                terminated, truncated = True, False
        over = terminated or truncated
        if not over:
            step.same_as_next = self._shot.sha256 == shot.sha256
        self._last_error = step.action_error
        if over:
            self.done = True
        elif acted is not None and acted.elements is not None:
            self._elements = tuple(acted.elements)
        elif self._wants_elements:
            await self._read_elements()
        outcome = self.outcome
        reward = float(outcome.raw_reward or 0.0) if outcome is not None and outcome.done else 0.0
        return StepResult(observation=self._observation(), reward=reward, terminated=terminated,
                          truncated=truncated,
                          info={"step": step, "outcome": outcome, "answer": self.answer,
                                "browser_actions": sent,
                                "timings": {"policy_s": step.latency.policy_s, "execute_s": execute_s,
                                            "observe_s": observe_s}})

    def _new_step(self, output: Any) -> Step:
        """The `Step` of the policy's `output` on what it was shown, appended to the episode."""
        parsed: ParsedResponse = output.parsed
        image, image_sha, text = self._shown
        step = Step(index=len(self.steps), screenshot=image, screenshot_sha256=image_sha,
                    observation_text=text, messages=output.messages_json, response=output.response,
                    action=parsed.action.to_json() if parsed.action is not None else "",
                    action_error=parsed.error, memory=parsed.memory, url=self._url, title=self._title,
                    finish_reason=output.finish_reason,
                    usage=TokenUsage(output.prompt_tokens, output.completion_tokens),
                    policy_version=output.policy_version, logprobs=tuple(output.logprobs),
                    token_ids=tuple(output.token_ids), prompt_token_hash=output.prompt_token_hash,
                    sampling=output.sampling)
        self.steps.append(step)
        return step

    async def close(self) -> None:
        """Close the session (a session that is already gone is no error)."""
        session, self.session = self.session, None
        self.done = True
        if session is None:
            return
        if self._traffic:
            self._traffic = False
            try:
                self.recording = await self._collect_recording(session)
            except RolloutError as exc:  # a crashed session's recording is lost with it
                log.info("reading the recording of session %s failed: %s", session.session_id, exc)
        try:
            await session.close()
        except RolloutError as exc:  # the server expires it anyway; nothing to do for the episode
            log.info("closing session %s failed: %s", session.session_id, exc)

    async def __aenter__(self) -> WebEnv:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------------------- helpers

    def _observation(self) -> Observation:
        shot = self._shot
        assert shot is not None
        self._shown = (*self._image(shot), self._text())
        # Grid coordinates refer to the screenshot: its size is the pixel frame actions are given in
        # (a clipped screenshot, e.g. MiniWoB's task area, is shot at (0, 0) and scale 1).
        return Observation(instruction=self.instruction, screenshot=self._shown[0],
                           viewport=(shot.width, shot.height), step=len(self.steps), url=self._url,
                           title=self._title, history=tuple(self.steps), elements=self._elements,
                           last_action_error=self._last_error, episode_id=self._episode_id,
                           text=self._shown[2], image=self.settings.observation.image,
                           numbered=self.settings.observation.needs_elements)

    def _image(self, shot: Screenshot) -> tuple[bytes, str]:
        """The image the policy is shown and its SHA-256: the screenshot, or in ``som`` mode the
        screenshot with the elements' numbers drawn on it. The boxes are in the pixel frame actions
        are given in, the screenshot's size (a clipped screenshot is shot at (0, 0) and scale 1)."""
        if not self._som:
            return shot.data, shot.sha256
        marked = draw_marks(shot.data, self._elements, viewport=(shot.width, shot.height))
        return marked, hashlib.sha256(marked).hexdigest()

    def _text(self) -> str:
        """The text observation of the current page (see the module docstring); "" in image-only modes."""
        parts = []
        if self._axtree:
            tree = render_axtree(self._axnodes, self._elements,
                                 budget_tokens=self.settings.observation.axtree_tokens)
            parts.append(f"{AXTREE_HEADER}\n{tree or '(empty)'}")
        if "elements" in self.settings.observation.modes:
            parts.append(f"{ELEMENTS_HEADER}\n{render_elements(self._elements) or '(none in view)'}")
        return "\n\n".join(parts)

    async def _collect_recording(self, session: BrowserSession) -> RecordingIndex:
        """The session's recording index; with a store, its bodies the store lacks are fetched."""
        index = await session.recording()
        if self._record is not None:
            missing = [sha for sha in index.body_hashes if not self._record.has_body(sha)]
            bodies = await session.recorded_bodies(missing)
            store = self._record
            await asyncio.to_thread(lambda: [store.put_body(sha, data) for sha, data in bodies.items()])
        return index

    async def _create_session(self, request: CreateSessionRequest, *, record: bool = False,
                              replay: ReplaySource | None = None) -> BrowserSession:
        request = request.model_copy(update={"record": record, "replay": replay.options if replay else None})
        deadline = time.monotonic() + self.settings.busy_wait_s
        delay = 0.2
        while True:
            try:
                return await self.client.open_session(request, bodies=replay.body if replay else None)
            except ServerBusy:
                # Every slot is taken (often by sessions of a killed run waiting for idle expiry):
                # waiting is not a failure of this episode.
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 1.5)

    async def _take_screenshot(self) -> None:
        assert self.session is not None
        began = time.perf_counter()
        self._shot = await self.session.screenshot()
        self._shot_s = time.perf_counter() - began

    async def _inputs(self, step: Step, action: AgentAction, frame: tuple[int, int],
                      ) -> tuple[tuple[BrowserAction, ...], BrowserAction | None, tuple[str, ...]]:
        """The browser inputs of a page action (`AgentAction.to_browser_actions` in the screenshot's
        frame; an element action resolved on the elements the policy saw), with every input before
        the last one already sent, alone (``type_element``'s click). Returns the inputs sent or to
        send, the last one (the caller sends it with the next observation) and the popups the
        earlier ones reported. The last is None when there is nothing to send: ``navigate``, an
        element the page does not list, or an earlier input that failed (the error is on the step)."""
        if action.name == "navigate":
            return (), None, ()
        try:
            inputs = action.to_browser_actions(frame, await self._elements_for(action))
        except ActionParseError as exc:  # an element the page does not list: a no-op step
            step.action_error = str(exc)
            return (), None, ()
        assert self.session is not None
        popups: list[str] = []
        for index, earlier in enumerate(inputs[:-1]):
            done = await self.session.act(earlier, screenshot=None, env_state=False)
            popups += done.popups
            self._url, self._title = done.url, done.title
            if done.error:
                step.action_error, step.popups = done.error, tuple(popups)
                return inputs[:index + 1], None, tuple(popups)
        return inputs, inputs[-1], tuple(popups)

    async def _elements_for(self, action: AgentAction) -> tuple[Any, ...]:
        """The elements an element action's number refers to: those of the observation the policy
        saw, read now when the env had read none (`EnvSettings.elements` off); () for other actions."""
        if not action.on_element:
            return ()
        if self._elements:
            return self._elements
        assert self.session is not None
        return tuple((await self.session.page_info(elements=True)).elements)

    async def _read_elements(self) -> None:
        """The viewport's interactive elements (and, in ``axtree`` mode, the accessibility tree of the
        same reading, so that the numbers agree)."""
        assert self.session is not None
        if self._axtree:
            info = await self.session.page_info(elements=True, axtree=True)
            self._axnodes = tuple(info.axtree)
        else:
            info = await self.session.page_info(elements=True)
        self._elements = tuple(info.elements)
        self._url, self._title = info.url, info.title

    async def _navigate(self, url: str) -> str:
        """Navigate as the agent asked; returns the agent-level error ("" when the page loaded)."""
        assert self.session is not None
        try:
            state = await self.session.navigate(url)
        except (NavigationRefused, SiteBlocked) as exc:
            return str(exc)  # the agent chose a forbidden URL: its mistake, a no-op step
        self._url, self._title = state.url, state.title
        return state.error


async def _nothing() -> None:
    return None


def _as_policy_output(action: Any) -> Any:
    if isinstance(action, PolicyOutput):
        return action
    if isinstance(action, AgentAction):
        return PolicyOutput.scripted(action)
    raise TypeError(f"step() takes a PolicyOutput (from Policy.act) or an AgentAction, "
                    f"got {type(action).__name__}")
