"""The agent's action space, defined once: the prompt text, the tool schema and the parser come from it.

The policy answers in Qwen's ``computer_use`` tool-call format::

    <tool_call>
    {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [500, 312]}}
    </tool_call>

Coordinates are on a 0-1000 grid over the screenshot, whatever its pixel size; `AgentAction.to_browser_action`
maps them to viewport pixels and returns the browser protocol's typed ``BrowserAction``.

`ACTIONS` is the single definition. From it come:

- `action_space_text()`: the lines of the system prompt that describe each action (with an example);
- `tool_schema()`: the OpenAI ``tools`` entry for ``computer_use`` (also embedded in the prompt);
- `parse_tool_call()` / `parse_arguments()`: the parser, which accepts exactly what the schema allows.

Element actions act on an element of the page by its id instead of a point: the id is the element's
1-based position in the step's list of interactive elements (``BrowserSession.page_info(elements=True)``;
the numbers the set-of-marks labels, the element list and the accessibility tree show)::

    {"name": "computer_use", "arguments": {"action": "click_element", "element": 3}}

They are ``click_element``, ``type_element`` (click the element, then type), ``select_element``
(choose an option of a ``<select>``) and ``hover_element``: actions of their own rather than
``left_click`` with an ``element`` argument in place of ``coordinate``, so that every action keeps one
fixed set of required arguments (the schema's, the prompt's and the parser's rule stays "these
arguments, of these types", never "this one or that one"), the name alone says whether a step acted
on a point or on an element (history summaries, filters, statistics), and leaving them out of the
prompt is leaving names out. A prompt offers them only when asked (``element_actions=True`` of
`tool_schema`, `action_space_text` and `offered_actions`; `element_actions_for` says which
observation modes call for them); the parser always reads them, so a stored step parses whatever
its prompt offered. `AgentAction.to_browser_actions` resolves an element to the centre of its box
(the part inside the screenshot) with the browser's ordinary coordinate actions, so the browser
server's contract does not change.

A reply the parser rejects raises `ActionParseError` (a ``ValueError``): an agent mistake that the
caller records on the step, not an infrastructure failure. An element id the step's list does not
hold is one too (`AgentAction.to_browser_actions` raises it; the parser cannot know the list).
The parser is total: whatever the text or the JSON value (lists where a name goes, huge numbers,
NaN, nesting a thousand deep, lone surrogates), it returns an action or raises `ActionParseError`,
nothing else.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from webgym_rollout.browser.protocol import BrowserAction, Element
from webgym_rollout.errors import ActionParseError
from webgym_rollout.settings import ELEMENT_MODES

__all__ = [
    "ACTIONS",
    "ELEMENT_MODES",
    "GRID_SIZE",
    "MAX_ELEMENT_ID",
    "TOOL_NAME",
    "ActionParseError",
    "ActionSpec",
    "AgentAction",
    "Param",
    "action_space_text",
    "element_actions_for",
    "element_centre",
    "example_action",
    "grid_to_pixels",
    "offered_actions",
    "parse_arguments",
    "parse_tool_call",
    "pixels_to_grid",
    "tool_schema",
]

TOOL_NAME = "computer_use"
# Coordinates run from 0 to GRID_SIZE on both axes, independent of the screenshot's pixel size.
GRID_SIZE = 1000
# Longest wait an agent may ask for; longer requests are clipped (a stuck agent must not stall a browser).
MAX_WAIT_S = 10.0
DEFAULT_WAIT_S = 2.0
# A scroll moves this fraction of the viewport height: most of a screen, keeping some context.
SCROLL_FRACTION = 0.6
# Element ids run from 1 (the first element of the step's list); a viewport lists far fewer.
MAX_ELEMENT_ID = 9999


@dataclass(frozen=True)
class Param:
    """One argument of the ``computer_use`` tool."""

    name: str
    type: str  # "coordinate" | "element" | "string" | "number" | "boolean"
    description: str
    example: Any
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class ActionSpec:
    """One action: its name, what it does, and its required and optional arguments."""

    name: str
    description: str
    required: tuple[Param, ...] = ()
    optional: tuple[Param, ...] = ()

    @property
    def params(self) -> tuple[Param, ...]:
        return self.required + self.optional

    @property
    def on_element(self) -> bool:
        """True for an element action: it names an element of the step's list, not a point."""
        return any(param.type == "element" for param in self.params)


_COORDINATE = Param("coordinate", "coordinate",
                    f"[x, y] on a 0-{GRID_SIZE} grid over the screenshot: [0, 0] is the top-left corner, "
                    f"[{GRID_SIZE}, {GRID_SIZE}] the bottom-right", [500, 500])
_SCROLL_AT = Param("coordinate", "coordinate", "[x, y] of the area to scroll (default: the page)", [500, 500])
_TYPE_TEXT = Param("text", "string", "the text to type", "hello world")
_PRESS_ENTER = Param("press_enter", "boolean", "press Enter after typing (submits a search box)", False)
_DIRECTION = Param("direction", "string", "which way to scroll", "down", enum=("up", "down"))
_TIME = Param("time", "number", f"seconds to wait (at most {MAX_WAIT_S:g})", DEFAULT_WAIT_S)
_URL = Param("url", "string", "the address to open, with http:// or https://", "https://example.com/")
_KEYS = Param("keys", "string", "the key to press, or a combination joined by '+' (Enter, Escape, Tab, "
              "PageDown, Control+a)", "Enter")
_OPTION = Param("option", "string", "the visible text of the option to choose", "Blue")
_ELEMENT = Param("element", "element",
                 "the element's number in the page's element list: [1] is the first", 3)
_FIELD_TEXT = Param("text", "string", "the text to type into the element", "hello world")
_ANSWER_TEXT = Param("text", "string",
                     "the final answer: every fact the task asks for, as found on the pages",
                     "The cheapest flight costs $120.")

ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec("left_click", "Click the left mouse button at a point of the screenshot.", (_COORDINATE,)),
    ActionSpec("type", "Type text into the focused field (click the field first).", (_TYPE_TEXT,),
               (_PRESS_ENTER,)),
    ActionSpec("key", "Press a key or a key combination.", (_KEYS,)),
    ActionSpec("select", "Choose an option of the drop-down list at a point of the screenshot.",
               (_COORDINATE, _OPTION)),
    ActionSpec("scroll", "Scroll the page (or the area at coordinate) up or down by most of a screen.",
               (_DIRECTION,), (_SCROLL_AT,)),
    ActionSpec("wait", "Wait for the page to finish loading or changing.", (), (_TIME,)),
    ActionSpec("go_back", "Go back to the previous page, like the browser's back button."),
    ActionSpec("navigate", "Open a web address directly.", (_URL,)),
    ActionSpec("answer", "Finish the task and report the answer; the episode ends.", (_ANSWER_TEXT,)),
    ActionSpec("click_element", "Click the middle of an element of the page's element list.", (_ELEMENT,)),
    ActionSpec("type_element", "Click an element of the list (a text field) and type text into it.",
               (_ELEMENT, _FIELD_TEXT), (_PRESS_ENTER,)),
    ActionSpec("select_element", "Choose an option of a drop-down list (a <select>) of the element list.",
               (_ELEMENT, _OPTION)),
    ActionSpec("hover_element", "Move the mouse over an element of the list without clicking (opens "
               "menus and tooltips that appear on hover).", (_ELEMENT,)),
)
_BY_NAME = {spec.name: spec for spec in ACTIONS}


def offered_actions(element_actions: bool = False) -> tuple[ActionSpec, ...]:
    """The actions a prompt offers: the coordinate actions, and the element actions too when
    `element_actions` (the parser reads all of `ACTIONS` either way)."""
    return tuple(spec for spec in ACTIONS if element_actions or not spec.on_element)


def element_actions_for(modes: Iterable[str]) -> bool:
    """Whether observation `modes` show the policy element ids (`ELEMENT_MODES`: set-of-marks
    labels, the accessibility tree, the element list), so its prompt should offer element actions."""
    return any(mode in ELEMENT_MODES for mode in modes)


def grid_to_pixels(coordinate: tuple[int, int], viewport: tuple[int, int]) -> tuple[int, int]:
    """Map a 0-1000 grid point to viewport pixels (clamped inside the viewport)."""
    width, height = viewport
    x = min(width - 1, max(0, round(coordinate[0] * width / GRID_SIZE)))
    y = min(height - 1, max(0, round(coordinate[1] * height / GRID_SIZE)))
    return x, y


def pixels_to_grid(x: float, y: float, viewport: tuple[int, int]) -> tuple[int, int]:
    """Map a viewport pixel to the 0-1000 grid (the inverse of `grid_to_pixels`, up to rounding)."""
    width, height = viewport
    return (min(GRID_SIZE, max(0, round(x * GRID_SIZE / width))),
            min(GRID_SIZE, max(0, round(y * GRID_SIZE / height))))


@dataclass(frozen=True)
class AgentAction:
    """A parsed action. Coordinates stay on the 0-1000 grid; `to_browser_action` maps them to pixels."""

    name: str
    coordinate: tuple[int, int] | None = None
    text: str = ""
    press_enter: bool = False
    direction: str = ""
    time: float | None = None
    url: str = ""
    keys: str = ""
    option: str = ""
    element: int | None = None
    """An element action's element: its 1-based position in the step's element list."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ends_episode(self) -> bool:
        """True for ``answer``: the episode ends with `text` as the final answer."""
        return self.name == "answer"

    @property
    def on_element(self) -> bool:
        """True for an element action (``click_element``, ...): it needs the step's element list."""
        return _BY_NAME[self.name].on_element

    def arguments(self) -> dict[str, Any]:
        """The tool-call ``arguments`` object: ``action`` plus the parameters this action uses."""
        args: dict[str, Any] = {"action": self.name}
        for param in _BY_NAME[self.name].params:
            value = getattr(self, param.name)
            if param.name == "coordinate" and value is not None:
                args["coordinate"] = [int(value[0]), int(value[1])]
            elif param in _BY_NAME[self.name].required or not (
                    value is None or value == "" or value is False):
                args[param.name] = value
        return args

    def to_json(self) -> str:
        """The arguments as compact JSON (what a trajectory step stores as ``action``)."""
        return json.dumps(self.arguments(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> AgentAction:
        """Inverse of `to_json` (raises `ActionParseError`)."""
        if not isinstance(text, str):
            raise ActionParseError(f"action must be JSON text, got {type(text).__name__}")
        try:
            data = _loads(text)
        except ValueError as exc:
            raise ActionParseError(f"action is not JSON: {exc}") from None
        return parse_arguments(data)

    def to_tool_call(self) -> str:
        """The ``<tool_call>`` block a policy would write for this action."""
        call = {"name": TOOL_NAME, "arguments": self.arguments()}
        return f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"

    def describe(self, max_chars: int = 80) -> str:
        """A short one-line form for history summaries, e.g. ``left_click [500, 312]``."""
        if self.name in ("left_click",) and self.coordinate:
            return f"left_click [{self.coordinate[0]}, {self.coordinate[1]}]"
        if self.name in ("type", "answer"):
            text = self.text if len(self.text) <= max_chars else self.text[: max_chars - 3] + "..."
            suffix = " + Enter" if self.press_enter else ""
            return f"{self.name} {json.dumps(text, ensure_ascii=False)}{suffix}"
        if self.name == "scroll":
            return f"scroll {self.direction}"
        if self.name == "navigate":
            return f"navigate {self.url}"
        if self.name == "key":
            return f"key {self.keys}"
        if self.name == "select" and self.coordinate:
            option = json.dumps(self.option, ensure_ascii=False)
            return f"select [{self.coordinate[0]}, {self.coordinate[1]}] {option}"
        if self.name == "type_element":
            text = self.text if len(self.text) <= max_chars else self.text[: max_chars - 3] + "..."
            suffix = " + Enter" if self.press_enter else ""
            return f"type_element [{self.element}] {json.dumps(text, ensure_ascii=False)}{suffix}"
        if self.name == "select_element":
            return f"select_element [{self.element}] {json.dumps(self.option, ensure_ascii=False)}"
        if self.on_element:
            return f"{self.name} [{self.element}]"
        if self.name == "wait":
            return f"wait {self.time if self.time is not None else DEFAULT_WAIT_S:g}s"
        return self.name

    def to_browser_action(self, viewport: tuple[int, int]) -> BrowserAction | None:
        """The `BrowserAction` (viewport pixels) for this coordinate action.

        Returns None for the two actions that are not page inputs: ``navigate`` (call
        ``BrowserSession.navigate(action.url)``) and ``answer`` (the episode ends). An element
        action needs the step's elements: `to_browser_actions` (a ``ValueError`` here).
        """
        if self.on_element:
            raise ValueError(f"'{self.name}' acts on an element: resolve it with "
                             "to_browser_actions(viewport, elements)")
        if self.name == "left_click":
            x, y = grid_to_pixels(self.coordinate, viewport)  # type: ignore[arg-type]
            return BrowserAction.click(x, y)
        if self.name == "type":
            return BrowserAction.type_text(self.text, self.press_enter)
        if self.name == "key":
            return BrowserAction.press(self.keys)
        if self.name == "select":
            x, y = grid_to_pixels(self.coordinate, viewport)  # type: ignore[arg-type]
            return BrowserAction.select_option(x, y, self.option)
        if self.name == "scroll":
            amount = max(1, round(viewport[1] * SCROLL_FRACTION))
            if self.coordinate is None:
                return BrowserAction.scroll_by(self.direction, amount)  # type: ignore[arg-type]
            x, y = grid_to_pixels(self.coordinate, viewport)
            return BrowserAction.scroll_by(self.direction, amount, x, y)  # type: ignore[arg-type]
        if self.name == "wait":
            seconds = DEFAULT_WAIT_S if self.time is None else self.time
            return BrowserAction.wait_for(min(MAX_WAIT_S, max(0.0, float(seconds))))
        if self.name == "go_back":
            return BrowserAction.back()
        return None

    def to_browser_actions(self, viewport: tuple[int, int],
                           elements: Sequence[Element | dict[str, Any]] = ()) -> tuple[BrowserAction, ...]:
        """The `BrowserAction`s (viewport pixels) that carry out this action, in order.

        A coordinate action gives its one `to_browser_action` (none for ``navigate`` and ``answer``).
        An element action is resolved on `elements`, the step's element list (id ``n`` is
        ``elements[n - 1]``), to the centre of the element's box, clipped to the screenshot frame
        `viewport` where it sticks out, with the browser's ordinary actions:

        - ``click_element``: a click there;
        - ``type_element``: a click there, then the typing (two actions);
        - ``select_element``: the browser's ``select`` there (the ``<select>`` under the point);
        - ``hover_element``: the browser's scroll there by its smallest step (one pixel, up): it moves
          the mouse onto the element, and the browser contract has no bare mouse move.

        Raises `ActionParseError` (an agent mistake, for the step's ``action_error``) for an id the
        list does not hold, and for ``select_element`` on an element that is not a ``<select>``.
        """
        if not self.on_element:
            single = self.to_browser_action(viewport)
            return () if single is None else (single,)
        element = self.target(elements)
        x, y = element_centre(element, viewport)
        if self.name == "click_element":
            return (BrowserAction.click(x, y),)
        if self.name == "type_element":
            return BrowserAction.click(x, y), BrowserAction.type_text(self.text, self.press_enter)
        if self.name == "select_element":
            tag = _field(element, "tag")
            if tag != "select":
                raise ActionParseError(f"element {self.element} is a <{tag}>, not a drop-down list "
                                       "(<select>): select_element needs one")
            return (BrowserAction.select_option(x, y, self.option),)
        if self.name == "hover_element":
            return (BrowserAction.scroll_by("up", 1, x, y),)
        raise AssertionError(f"element action {self.name} has no browser actions")  # a bug in ACTIONS

    def target(self, elements: Sequence[Element | dict[str, Any]]) -> Element | dict[str, Any]:
        """The element of `elements` this element action names (raises `ActionParseError` when the
        list does not hold it)."""
        count = len(elements)
        if self.element is None or not 1 <= self.element <= count:
            listed = (f"the page lists {count} element{'' if count == 1 else 's'}" if count
                      else "the page lists no interactive elements")
            raise ActionParseError(f"element {self.element} does not exist: {listed}")
        return elements[self.element - 1]


def _field(element: Element | dict[str, Any], name: str) -> Any:
    return element[name] if isinstance(element, dict) else getattr(element, name)


def element_centre(element: Element | dict[str, Any], viewport: tuple[int, int]) -> tuple[float, float]:
    """The centre of `element`'s box in viewport pixels; of the part inside the frame `viewport`
    (the screenshot's) when the box sticks out of it and part of it is inside."""
    x, y = float(_field(element, "x")), float(_field(element, "y"))
    right, bottom = x + float(_field(element, "width")), y + float(_field(element, "height"))
    left, top = max(x, 0.0), max(y, 0.0)
    right_in, bottom_in = min(right, float(viewport[0])), min(bottom, float(viewport[1]))
    if left < right_in and top < bottom_in:
        x, y, right, bottom = left, top, right_in, bottom_in
    return (x + right) / 2, (y + bottom) / 2


class _ShortRepr(reprlib.Repr):
    """`repr` of an agent's value for an error message: bounded in depth and length, whatever the
    value (a list nested 900 deep, an int of 5,000 digits)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother, self.maxlist, self.maxdict = 3, 60, 60, 4, 4

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() <= 200:
            return super().repr_int(x, level)
        return f"<an integer of about {int(x.bit_length() * math.log10(2))} digits>"


_SHORT_REPR = _ShortRepr()


def _show(value: Any, limit: int = 120) -> str:
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value: int | float) -> bool:
    # math.isfinite converts an int to float and overflows on a huge one; every int is finite.
    return isinstance(value, int) or math.isfinite(value)


def _is_text(value: str) -> bool:
    """Encodable as UTF-8: no lone surrogate (JSON's ``"\\ud800"`` decodes to one), which no
    browser input and no trajectory file can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_value(action: str, param: Param, value: Any) -> Any:
    where = f"'{action}' argument '{param.name}'"
    if param.type == "element":
        if not _is_number(value) or not _is_finite(value) or value != math.floor(value):
            raise ActionParseError(f"{where} must be an element's number in the element list (a whole "
                                   f"number from 1), got {_show(value)}")
        if not 1 <= value <= MAX_ELEMENT_ID:
            raise ActionParseError(f"{where} must be from 1 (the first element of the list) to "
                                   f"{MAX_ELEMENT_ID}, got {_show(value)}")
        return int(value)
    if param.type == "coordinate":
        if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_is_number(v) for v in value):
            raise ActionParseError(f"{where} must be [x, y] (two numbers), got {_show(value)}")
        if not all(_is_finite(v) and 0 <= v <= GRID_SIZE for v in value):
            raise ActionParseError(f"{where} must lie on the 0-{GRID_SIZE} grid, got {_show(list(value))}")
        return (round(value[0]), round(value[1]))
    if param.type == "string":
        if not isinstance(value, str) or not value.strip():
            raise ActionParseError(f"{where} must be a non-empty string, got {_show(value)}")
        if not _is_text(value):
            raise ActionParseError(f"{where} must be valid Unicode text (it holds a lone surrogate)")
        if param.enum and value not in param.enum:
            raise ActionParseError(f"{where} must be one of {', '.join(param.enum)}, got {_show(value)}")
        return value
    if param.type == "number":
        if not _is_number(value) or not _is_finite(value) or value < 0:
            raise ActionParseError(f"{where} must be a non-negative number, got {_show(value)}")
        try:
            return float(value)
        except OverflowError:
            raise ActionParseError(f"{where} is too large, got {_show(value)}") from None
    if param.type == "boolean":
        if not isinstance(value, bool):
            raise ActionParseError(f"{where} must be true or false, got {_show(value)}")
        return value
    raise AssertionError(f"unknown parameter type {param.type}")  # a bug in ACTIONS


def _loads(text: str) -> Any:
    """`json.loads` whose every failure is a `ValueError`: bad JSON, an integer of more than 4,300
    digits, or nesting deeper than the interpreter's recursion limit (a `RecursionError`)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None


def parse_arguments(arguments: Any) -> AgentAction:
    """Validate a tool call's ``arguments`` object against `ACTIONS` (raises `ActionParseError`).

    Arguments an action does not use are kept in `AgentAction.extra` and otherwise ignored.
    """
    if isinstance(arguments, str):  # some servers encode arguments as a JSON string
        try:
            arguments = _loads(arguments)
        except ValueError:
            raise ActionParseError("'arguments' is a string that is not JSON") from None
    if not isinstance(arguments, dict):
        raise ActionParseError(f"'arguments' must be an object, got {type(arguments).__name__}")
    name = arguments.get("action")
    if not isinstance(name, str) or name not in _BY_NAME:  # a list or an object is not a name
        raise ActionParseError(f"unknown action {_show(name)}; expected one of {', '.join(_BY_NAME)}")
    spec = _BY_NAME[name]
    values: dict[str, Any] = {}
    for param in spec.required:
        if param.name not in arguments:
            raise ActionParseError(f"'{name}' needs the argument '{param.name}'")
        values[param.name] = _check_value(name, param, arguments[param.name])
    for param in spec.optional:
        if arguments.get(param.name) is not None:
            values[param.name] = _check_value(name, param, arguments[param.name])
    known = {"action", *(p.name for p in spec.params)}
    extra = {k: v for k, v in arguments.items() if k not in known}
    return AgentAction(name=name, extra=extra, **values)


_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def _unfenced(body: str) -> str:
    """`body` (stripped) without a Markdown code fence around it (```` ```json ... ``` ````).
    String operations, not a regex: one that strips whitespace before the closing fence backtracks
    quadratically over a run of spaces."""
    if body.startswith("```"):
        body = body[3:].removeprefix("json").lstrip()
    if body.endswith("```"):
        body = body[:-3].rstrip()
    return body


def parse_tool_call(text: str) -> AgentAction:
    """Parse the one ``<tool_call>`` block of a reply (raises `ActionParseError`).

    A block left unclosed at the end of the reply is accepted (a reply cut right after the JSON);
    zero or several blocks, bad JSON, another tool name or invalid arguments are errors.
    """
    if text is not None and not isinstance(text, str):
        raise ActionParseError(f"the reply must be text, got {type(text).__name__}")
    blocks = _TOOL_CALL.findall(text or "")
    if not blocks:
        raise ActionParseError("the reply has no <tool_call> block")
    if len(blocks) > 1:
        raise ActionParseError(f"the reply has {len(blocks)} <tool_call> blocks; exactly one is allowed")
    body = _unfenced(blocks[0].strip())
    try:
        call = _loads(body)
    except json.JSONDecodeError as exc:
        raise ActionParseError(
            f"the <tool_call> block is not valid JSON ({exc.msg} at char {exc.pos})") from None
    except ValueError as exc:
        raise ActionParseError(f"the <tool_call> block is not valid JSON ({exc})") from None
    if not isinstance(call, dict):
        raise ActionParseError("the <tool_call> block must hold a JSON object")
    if call.get("name") != TOOL_NAME:
        raise ActionParseError(f"the tool call names {_show(call.get('name'))}; expected '{TOOL_NAME}'")
    return parse_arguments(call.get("arguments"))


def example_action(name: str) -> AgentAction:
    """An example of action `name` built from the example values of its parameters."""
    spec = _BY_NAME[name]
    return parse_arguments({"action": name, **{p.name: p.example for p in spec.params}})


def _json_type(param: Param) -> dict[str, Any]:
    if param.type == "element":
        return {"type": "integer", "minimum": 1, "maximum": MAX_ELEMENT_ID}
    if param.type == "coordinate":
        return {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": GRID_SIZE},
                "minItems": 2, "maxItems": 2}
    schema: dict[str, Any] = {"type": param.type}
    if param.enum:
        schema["enum"] = list(param.enum)
    if param.type == "number":
        schema["minimum"] = 0
    return schema


def tool_schema(element_actions: bool = False) -> dict[str, Any]:
    """The OpenAI ``tools`` entry for ``computer_use`` generated from `ACTIONS` (the element
    actions only with `element_actions`)."""
    offered = offered_actions(element_actions)
    properties: dict[str, Any] = {
        "action": {"type": "string", "enum": [spec.name for spec in offered],
                   "description": "The action to perform:\n" + "\n".join(
                       f"* `{spec.name}`: {spec.description}" for spec in offered)},
    }
    for spec in offered:
        for param in spec.params:
            entry = properties.setdefault(param.name, {**_json_type(param), "description": "", "_used": []})
            kind = "required" if param in spec.required else "optional"
            entry["_used"].append((spec.name, kind, param.description))
    for name, entry in properties.items():
        if name == "action":
            continue
        used = entry.pop("_used")
        entry["description"] = "; ".join(
            f"{desc} ({kind} for action={action})" for action, kind, desc in used)
    description = ("Control a web browser with the mouse and keyboard by looking at screenshots. "
                   f"Coordinates are on a 0-{GRID_SIZE} grid over the screenshot.")
    if element_actions:
        description += " Elements are named by their number in the page's element list."
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": ["action"]},
        },
    }


def action_space_text(element_actions: bool = False) -> str:
    """One line per action for the system prompt: signature, meaning and an example call (the
    element actions only with `element_actions`)."""
    lines = []
    for spec in offered_actions(element_actions):
        params = [p.name for p in spec.required] + [f"{p.name}?" for p in spec.optional]
        example = json.dumps({"name": TOOL_NAME, "arguments": example_action(spec.name).arguments()},
                             ensure_ascii=False)
        lines.append(f"- {spec.name}({', '.join(params)}): {spec.description}\n  Example: {example}")
    return "\n".join(lines)
