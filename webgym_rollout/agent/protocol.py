"""The agent protocol: what the policy is shown at each step and how its reply is read.

A reply (``memory`` variant) looks like::

    Memory: The search page lists 3 flights; cheapest so far $120 (UA 12).
    Progress: Searched Boston to Denver; still need the return date.
    Intention: Open the date picker to set the return date.
    Action: Click the "Return" field.
    <tool_call>
    {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [612, 240]}}
    </tool_call>

The ``vanilla`` variant is the same without the Memory section. The ``compact`` variant, for small
models (a tiny CPU policy learns it in a few hundred steps), is the tool call alone, after a short
system prompt (action names and one example, no JSON schema) and a user turn without URL and title.
Only the tool call is required: a reply without a valid one is recorded on the step as a parse error
and counts as a no-op (`parse_response` never raises).

The system prompt offers the coordinate actions; with ``AgentSettings.element_actions``, or when
the observation numbers the page's elements (``Observation.numbered``: observation modes som, axtree,
elements), the element actions too (``click_element`` and the
others, `webgym_rollout.actions`), and says how elements are named.

Context at step *i*: the system prompt (generated from `webgym_rollout.actions`), then the last
``full_rounds`` (default 4) earlier steps as full (screenshot, reply) turns, older steps as one-line
summaries (action, whether the page changed, page title), then the current screenshot. ``<think>``
blocks are removed from replies put back into the history.

The text observation (`Observation.text`: the accessibility tree and/or the element list, per the
observation modes of `webgym_rollout.settings.ObservationSettings`) is shown in the current user turn
of every variant, after the step's header line(s) and a blank line, before the image; earlier turns
show only their header (and image), so a long page text is in the context once. With the default
``screenshot`` mode it is "" and the prompts are as before. Text-only modes (`Observation.image`
False) leave out the image parts. The history is the episode's own
trajectory `Step`s (`Observation.history`): a step is recorded once, and the context reads it.

`build_messages` returns the messages with each image as ``{"type": "image", "step": j}`` (the
convention of `webgym_rollout.trajectory.contract`, so a trajectory stores each screenshot once);
`inline_images` turns those into base64 ``data:`` URLs for sending.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import typing
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from webgym_rollout.actions import (
    GRID_SIZE,
    TOOL_NAME,
    ActionParseError,
    AgentAction,
    action_space_text,
    example_action,
    offered_actions,
    parse_tool_call,
    tool_schema,
)
from webgym_rollout.trajectory.contract import Step

__all__ = [
    "VARIANTS",
    "AgentSettings",
    "Observation",
    "ParsedResponse",
    "build_messages",
    "format_response",
    "image_data_url",
    "inline_images",
    "observation_images",
    "parse_response",
    "strip_think",
    "system_prompt",
]

Variant = Literal["memory", "vanilla", "compact"]
VARIANTS: tuple[str, ...] = typing.get_args(Variant)
_SECTIONS = {"memory": ("Memory", "Progress", "Intention", "Action"),
             "vanilla": ("Progress", "Intention", "Action"),
             "compact": ()}


@dataclass(frozen=True)
class AgentSettings:
    """How the agent's context is built and its replies read."""

    variant: Variant = "memory"
    """memory (the reply carries a Memory section the model rewrites each step), vanilla (no Memory)
    or compact (the tool call alone, a short prompt without URL and title: for small models)."""
    full_rounds: int = 4
    """How many earlier steps are shown in full (screenshot + reply); older ones become summaries."""
    summary_chars: int = 80
    """Longest text quoted from an action (typed text, answer) in a one-line summary."""
    element_actions: bool = False
    """Offer the element actions (click, type into, select an option of, hover an element by its
    number in the page's element list) beside the coordinate actions, whatever the observation
    modes (the modes that number the elements, som, axtree and elements, offer them anyway)."""

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant: must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        if self.full_rounds < 0:
            raise ValueError(f"full_rounds: must be >= 0, got {self.full_rounds}")


@dataclass(frozen=True)
class Observation:
    """Everything a policy sees at one step."""

    instruction: str
    screenshot: bytes
    """PNG or JPEG bytes of the current viewport."""
    viewport: tuple[int, int] = (1280, 720)
    step: int = 0
    url: str = ""
    title: str = ""
    history: Sequence[Step] = ()
    """The episode's earlier steps, oldest first: the very `Step` records the trajectory stores
    (the context reads their screenshot, reply, typed action, URL, title, error and whether the
    page changed; it never changes them)."""
    elements: tuple[Any, ...] = ()
    """Interactive elements (``PageInfo.elements``: x, y, width, height, tag, role, text in viewport
    pixels), as objects or dicts, numbered from 1 in this order (the numbers of the set-of-marks
    labels, the text observation and the element actions); read at every step by the observation
    modes som, axtree and elements, and for policies that need them (the random one)."""
    last_action_error: str = ""
    """Why the previous action failed ("" if it did not); shown to the policy."""
    episode_id: str = ""
    """Identifies the episode (seeds the random policy; makes no difference to the prompt)."""
    text: str = ""
    """The text observation: the page as text (observation modes ``axtree`` and ``elements``, built
    by the environment with a header per part), "" when the modes show only an image. Shown in the
    current step's user turn, after its header and before its image."""
    image: bool = True
    """Whether the prompt shows `screenshot` (False when the observation modes are text only; the
    screenshot is still recorded on the step)."""
    numbered: bool = False
    """Whether the observation numbers the page's elements (observation modes som, axtree,
    elements): the prompt then offers the element actions, as ``AgentSettings.element_actions``
    does."""


@dataclass(frozen=True)
class ParsedResponse:
    """A policy reply taken apart. `action` is None and `error` says why when it holds no valid call."""

    action: AgentAction | None
    error: str = ""
    memory: str = ""
    progress: str = ""
    intention: str = ""
    action_text: str = ""
    sections: dict[str, str] = field(default_factory=dict, repr=False)


def system_prompt(variant: str = "memory", *, element_actions: bool = False) -> str:
    """The system prompt of `variant`, generated from the action definitions (the element actions
    among them with `element_actions`)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown agent variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    if variant == "compact":
        return _compact_system_prompt(element_actions)
    guide = {
        "Memory": "every fact you have found so far that the task needs, with where you saw it. Rewrite "
                  "it in full at each step: it is all you keep from pages you have left.",
        "Progress": "what is done and what remains to do.",
        "Intention": "what you will do next and why.",
        "Action": "the next action, in words.",
    }
    sections = "\n".join(f"{name}: {guide[name]}" for name in _SECTIONS[variant])
    schema = json.dumps(tool_schema(element_actions), ensure_ascii=False)
    return (
        "You are a web agent. You see a screenshot of a web browser and complete the user's task by "
        "acting on the page, one action per reply.\n\n"
        "Write these sections, each on its own line, then exactly one tool call:\n"
        f"{sections}\n"
        f"<tool_call>\n{{\"name\": \"{TOOL_NAME}\", \"arguments\": {{\"action\": ..., ...}}}}\n"
        "</tool_call>\n\n"
        f"Actions of the `{TOOL_NAME}` tool:\n{action_space_text(element_actions)}\n\n"
        f"Coordinates are [x, y] on a 0-{GRID_SIZE} grid over the screenshot, whatever its size: "
        f"[0, 0] is the top-left corner and [{GRID_SIZE}, {GRID_SIZE}] the bottom-right. Click the centre "
        f"of what you want to press.{_ELEMENT_NOTE if element_actions else ''} "
        "When the task is done, or cannot be done, use `answer` with every "
        "fact the task asks for, as seen on the pages; say so if something could not be found.\n\n"
        f"# Tools\n\n<tools>\n{schema}\n</tools>"
    )


_ELEMENT_NOTE = (" An element action names an element by its number in the page's element list (`element`: "
                 "3 is the element marked [3]) and acts on its middle.")


def _compact_system_prompt(element_actions: bool = False) -> str:
    """The short prompt of the compact variant: the same actions, by name, and one example call."""
    names = ", ".join(spec.name for spec in offered_actions(element_actions))
    example = json.dumps({"name": TOOL_NAME, "arguments": example_action("left_click").arguments()},
                         ensure_ascii=False)
    elements = " Elements by their number [n] in the element list." if element_actions else ""
    return (f"You are a web agent. Reply with one tool call, e.g.\n<tool_call>\n{example}\n</tool_call>\n"
            f"Actions: {names}. Coordinates are [x, y] on a 0-{GRID_SIZE} grid over the screenshot."
            f"{elements}")


_OPEN, _CLOSE = "<think>", "</think>"


def strip_think(text: str) -> str:
    """Remove ``<think>...</think>`` blocks (and reasoning before a lone ``</think>``, which some
    chat templates open in the prompt), and an unclosed ``<think>`` tail.

    One pass with `str.find` (a lazy regex rescans the rest of the text from every unclosed
    ``<think>``: quadratic in a reply that repeats the tag)."""
    text = text or ""
    kept: list[str] = []
    position = 0
    while (start := text.find(_OPEN, position)) >= 0:
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            break
        kept.append(text[position:start])
        position = end + len(_CLOSE)
    kept.append(text[position:])
    text = "".join(kept)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text.strip()


_SECTION_HEAD = re.compile(r"^[ \t>#*_]*(Memory|Progress|Intention|Action)[ \t*_]*:[ \t*_]*(.*)$",
                           re.IGNORECASE | re.MULTILINE)


def _sections(text: str) -> dict[str, str]:
    """Section name (capitalised) -> text, read up to the next section header or tool call."""
    body = text.split("<tool_call>", 1)[0]
    heads = list(_SECTION_HEAD.finditer(body))
    found: dict[str, str] = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(body)
        content = (head.group(2) + body[head.end():end]).strip()
        found.setdefault(head.group(1).capitalize(), content)
    return found


def parse_response(text: str, variant: str = "memory") -> ParsedResponse:
    """Read a policy reply. Never raises: a reply without one valid tool call gives ``action=None``
    and the reason in ``error`` (an agent mistake the caller records on the step)."""
    if text is not None and not isinstance(text, str):
        return ParsedResponse(action=None, error=f"the reply must be text, got {type(text).__name__}")
    visible = strip_think(text or "")
    sections = _sections(visible)
    try:
        action: AgentAction | None = parse_tool_call(visible)
        error = ""
    except ActionParseError as exc:
        action, error = None, str(exc)
    return ParsedResponse(
        action=action,
        error=error,
        memory=sections.get("Memory", "") if variant == "memory" else "",
        progress=sections.get("Progress", ""),
        intention=sections.get("Intention", ""),
        action_text=sections.get("Action", ""),
        sections=sections,
    )


def format_response(action: AgentAction, *, variant: str = "memory", memory: str = "", progress: str = "",
                    intention: str = "", action_text: str = "") -> str:
    """Write a reply in the protocol's format (the inverse of `parse_response`)."""
    values = {"Memory": memory, "Progress": progress, "Intention": intention,
              "Action": action_text or action.describe()}
    lines = [f"{name}: {' '.join(values[name].split()) or '-'}\n" for name in _SECTIONS[variant]]
    return "".join(lines) + action.to_tool_call()


def _summary(step: Step, chars: int) -> str:
    action = step.parsed_action
    parts = [f"Step {step.index}: {action.describe(chars) if action is not None else 'no valid action'}"]
    if step.action_error:
        parts.append("failed" if action is not None else "reply could not be parsed")
    parts.append("page changed" if step.page_changed else "page unchanged")
    parts.append(f"title {json.dumps(step.title, ensure_ascii=False)}")
    return "; ".join(parts)


def _observation_text(step: int, url: str, title: str, error: str, variant: str) -> str:
    if variant == "compact":
        return f"Step {step}." + (f" Previous action failed: {error}" if error else "")
    text = f"Step {step}. URL: {url or '(unknown)'}\nTitle: {title or '(none)'}"
    if error:
        text += f"\nThe previous action did not work: {error}"
    return text


def build_messages(observation: Observation, settings: AgentSettings | None = None) -> list[dict[str, Any]]:
    """The chat messages for this step, images as ``{"type": "image", "step": j}`` placeholders."""
    settings = settings or AgentSettings()
    history = list(observation.history)
    cut = max(0, len(history) - settings.full_rounds)
    older, recent = history[:cut], history[cut:]

    intro = f"Task: {observation.instruction}"
    if older:
        intro += "\n\nEarlier steps:\n" + "\n".join(_summary(r, settings.summary_chars) for r in older)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt(
        settings.variant, element_actions=settings.element_actions or observation.numbered)}]
    # Each observation shows the error of the action before it, as the policy saw it at the time.
    previous_error = older[-1].action_error if older else ""
    for index, step in enumerate(recent):
        text = _observation_text(step.index, step.url, step.title, previous_error, settings.variant)
        previous_error = step.action_error
        if index == 0:
            text = f"{intro}\n\n{text}"
        messages.append({"role": "user", "content": _user_content(text, step.index, observation.image)})
        messages.append({"role": "assistant", "content": strip_think(step.response)})
    current = _observation_text(observation.step, observation.url, observation.title,
                                observation.last_action_error, settings.variant)
    if not recent:
        current = f"{intro}\n\n{current}"
    if observation.text:
        current = f"{current}\n\n{observation.text}"
    messages.append({"role": "user", "content": _user_content(current, observation.step, observation.image)})
    return messages


def _user_content(text: str, step: int, image: bool) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if image:
        parts.append({"type": "image", "step": step})
    return parts


def observation_images(observation: Observation) -> dict[int, bytes]:
    """Step index -> screenshot bytes, for every step an observation's messages can refer to."""
    images = {step.index: step.screenshot for step in observation.history}
    images[observation.step] = observation.screenshot
    return images


def image_data_url(data: bytes) -> str:
    """A base64 ``data:`` URL for PNG or JPEG bytes (the type is read from the bytes)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        mime = "image/png"
    elif data[:3] == b"\xff\xd8\xff":
        mime = "image/jpeg"
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        mime = "image/webp"
    else:
        raise ValueError("screenshot is neither PNG, JPEG nor WebP")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def inline_images(messages: Sequence[Mapping[str, Any]],
                  image_for_step: Callable[[int], bytes] | Mapping[int, bytes]) -> list[dict[str, Any]]:
    """A copy of `messages` with each ``{"type": "image", "step": j}`` part replaced by an OpenAI
    ``image_url`` part holding the screenshot of step j as a base64 data URL."""
    lookup = image_for_step.__getitem__ if isinstance(image_for_step, Mapping) else image_for_step
    cache: dict[int, str] = {}
    out = []
    for message in messages:
        message = copy.copy(dict(message))
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "image" and "step" in part:
                    step = int(part["step"])
                    if step not in cache:
                        cache[step] = image_data_url(lookup(step))
                    parts.append({"type": "image_url", "image_url": {"url": cache[step]}})
                else:
                    parts.append(dict(part) if isinstance(part, Mapping) else part)
            message["content"] = parts
        out.append(message)
    return out


def _round(step: int, screenshot: bytes, response: str, action: AgentAction | None = None, url: str = "",
           title: str = "", page_changed: bool = True, action_error: str = "") -> Step:
    """The `Step` that the former ``Round(...)`` described (deprecated: build `Step`s)."""
    return Step(index=step, screenshot=screenshot, response=response,
                action=action.to_json() if action is not None else "", url=url, title=title,
                same_as_next=not page_changed, action_error=action_error)


def __getattr__(name: str) -> Any:
    if name == "Round":
        warnings.warn("webgym_rollout.agent.Round is gone: an observation's history is the episode's "
                      "trajectory Steps (Round(...) now builds a Step); it goes away in the next release",
                      DeprecationWarning, stacklevel=2)
        return _round
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
