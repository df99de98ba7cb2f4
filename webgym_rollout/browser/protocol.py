"""The browser server's wire protocol: the pydantic models both the server and the client speak.

Requests and replies of `webgym_rollout.browser.server` (routes in its docstring). Every model is
validated on the way in; a `BrowserAction` carries exactly the fields its kind needs. Screenshots
travel as raw bytes after a small JSON header (`SCREENSHOT_MEDIA_TYPE`, `ACT_MEDIA_TYPE`), never as
base64 in JSON.

An agent step is one call: `ActRequest` (the action, and what to observe after it) -> `ActResult`
(the action's `ExecuteResult` and the next observation). ``execute`` and ``screenshot`` stay for
clients that want them apart.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from webgym_rollout.errors import BrowserError

__all__ = [
    "ACT_MEDIA_TYPE",
    "ActRequest",
    "ActResult",
    "ActionKind",
    "BlocklistLifted",
    "BodyHashes",
    "AxNode",
    "BrowserAction",
    "CreateSessionRequest",
    "Element",
    "EnvState",
    "ErrorBody",
    "ExecuteResult",
    "NavigateRequest",
    "PageInfo",
    "PageInfoRequest",
    "PageState",
    "RecordedExchange",
    "RecordingIndex",
    "ReplayOptions",
    "SCREENSHOT_MEDIA_TYPE",
    "Screenshot",
    "ScreenshotRequest",
    "ScreenshotResponse",
    "ServerHealth",
    "SessionCreated",
    "BODIES_MEDIA_TYPE",
    "decode_act",
    "decode_bodies",
    "decode_screenshot",
    "encode_act",
    "encode_bodies",
    "encode_screenshot",
]

ActionKind = Literal["click", "type", "key", "scroll", "go_back", "wait", "select"]
# Which fields each action kind needs; the others must stay unset.
_ACTION_FIELDS: dict[str, tuple[str, ...]] = {
    "click": ("x", "y"),
    "type": ("text",),
    "key": ("key",),
    "scroll": ("direction",),
    "go_back": (),
    "wait": ("seconds",),
    "select": ("x", "y", "value"),
}
_OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {"type": ("press_enter",), "scroll": ("amount", "x", "y")}


class BrowserAction(BaseModel):
    """One browser action, discriminated on `kind`; coordinates are viewport pixels.

    ``click(x, y) | type(text, press_enter=False) | key(key) | scroll(direction, amount=px, x?, y?) |
    go_back | wait(seconds) | select(x, y, value)``. Build with keywords
    (``BrowserAction(kind="click", x=3, y=4)``) or the helpers (``BrowserAction.click(3, 4)``).
    """

    model_config = {"extra": "forbid"}

    kind: ActionKind
    x: float | None = None
    y: float | None = None
    text: str | None = None
    press_enter: bool | None = None
    key: str | None = None
    direction: Literal["up", "down"] | None = None
    amount: int | None = Field(default=None, ge=1, le=100_000)
    seconds: float | None = Field(default=None, ge=0, le=60)
    value: str | None = None

    @model_validator(mode="after")
    def _fields_match_kind(self) -> BrowserAction:
        needed = _ACTION_FIELDS[self.kind]
        allowed = set(needed) | set(_OPTIONAL_FIELDS.get(self.kind, ()))
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"action '{self.kind}' needs {', '.join(missing)}")
        extra = [
            name for name in _all_action_fields() if name not in allowed and getattr(self, name) is not None
        ]
        if extra:
            raise ValueError(f"action '{self.kind}' does not take {', '.join(extra)}")
        if self.kind == "scroll" and (self.x is None) != (self.y is None):
            raise ValueError("action 'scroll' takes both x and y or neither")
        return self

    # Helpers so callers need not remember which fields a kind takes.
    @classmethod
    def click(cls, x: float, y: float) -> BrowserAction:
        return cls(kind="click", x=x, y=y)

    @classmethod
    def type_text(cls, text: str, press_enter: bool = False) -> BrowserAction:
        return cls(kind="type", text=text, press_enter=press_enter)

    @classmethod
    def press(cls, key: str) -> BrowserAction:
        return cls(kind="key", key=key)

    @classmethod
    def scroll_by(
        cls,
        direction: Literal["up", "down"],
        amount: int = 300,
        x: float | None = None,
        y: float | None = None,
    ) -> BrowserAction:
        return cls(kind="scroll", direction=direction, amount=amount, x=x, y=y)

    @classmethod
    def back(cls) -> BrowserAction:
        return cls(kind="go_back")

    @classmethod
    def wait_for(cls, seconds: float) -> BrowserAction:
        return cls(kind="wait", seconds=seconds)

    @classmethod
    def select_option(cls, x: float, y: float, value: str) -> BrowserAction:
        return cls(kind="select", x=x, y=y, value=value)


def _all_action_fields() -> tuple[str, ...]:
    return ("x", "y", "text", "press_enter", "key", "direction", "amount", "seconds", "value")


# ---------------------------------------------------------------- wire models (server <-> client)


class RecordedExchange(BaseModel):
    """One request of a recorded page and the response it got (`webgym_rollout.browser.traffic`)."""

    method: str
    url: str
    resource_type: str = ""
    """Chromium's resource type (Document, Script, Image, XHR, Fetch, ...)."""
    post_sha256: str = ""
    """SHA-256 of the request body ("" without one): replay serves an exact body match first."""
    status: int
    headers: list[tuple[str, str]] = []
    """Response headers as received (a redirect keeps its ``location``)."""
    body_sha256: str = ""
    """SHA-256 of the response body (the body as the page saw it, decoded); "" when it had none."""
    body_size: int = 0


class RecordingIndex(BaseModel):
    """What a session recorded (``GET /sessions/{id}/recording``) or, in replay, could not serve."""

    exchanges: list[RecordedExchange] = []
    """Every response the page received, in the order they arrived."""
    misses: list[str] = []
    """Replay: ``METHOD URL`` of requests the recording did not hold (failed, or served live with
    the fallback on)."""
    live: int = 0
    """Replay: misses that went to the live network (``live_fallback``)."""

    @property
    def body_hashes(self) -> list[str]:
        """The distinct body hashes the exchanges reference, in first-use order."""
        return list(dict.fromkeys(e.body_sha256 for e in self.exchanges if e.body_sha256))


class ReplayOptions(BaseModel):
    """Serve a session's requests from a recording (the bodies must be on the server: ``PUT
    /bodies/{sha256}``)."""

    exchanges: list[RecordedExchange] = []
    live_fallback: bool = False
    """Let a request the recording does not hold go to the live network (through the URL guard and
    the egress proxy); default: it fails (``net::ERR_INTERNET_DISCONNECTED``)."""


class BodyHashes(BaseModel):
    """A list of body hashes (``POST /bodies/missing`` takes and answers one)."""

    sha256: list[str] = []


class CreateSessionRequest(BaseModel):
    start_url: str
    viewport: tuple[int, int] = (1280, 720)
    environment: str = "web"
    seed: int | None = None
    record: bool = False
    """Record the page's network traffic (``GET /sessions/{id}/recording`` before closing)."""
    replay: ReplayOptions | None = None
    """Serve the page from this recording instead of the network."""

    @model_validator(mode="after")
    def _viewport_sane(self) -> CreateSessionRequest:
        width, height = self.viewport
        if not (64 <= width <= 4096 and 64 <= height <= 4096):
            raise ValueError(f"viewport {width}x{height} is outside 64..4096 pixels")
        if self.record and self.replay is not None:
            raise ValueError("record: a session either records or replays, not both")
        return self


class SessionCreated(BaseModel):
    session_id: str
    environment: str
    viewport: tuple[int, int]
    url: str
    title: str
    browser_pid: int | None = None
    """Process id of the Chromium browser hosting this session (for operators and fault tests)."""


class NavigateRequest(BaseModel):
    url: str


class PageState(BaseModel):
    url: str
    title: str
    error: str = ""
    """Network failure of the page load (e.g. ``net::ERR_CONNECTION_REFUSED``); "" when it loaded."""


class ScreenshotRequest(BaseModel):
    format: Literal["png", "jpeg"] = "png"
    quality: int = Field(default=80, ge=1, le=100)
    scale: float = Field(default=1.0, gt=0, le=1.0)


class Element(BaseModel):
    """An interactive element in the viewport: its box in viewport pixels, tag, role and text."""

    x: float
    y: float
    width: float
    height: float
    tag: str
    role: str
    text: str
    name: str = ""
    """The element's ``id``, else its ``name`` attribute ("" when it has neither)."""


class AxNode(BaseModel):
    """One node of the page's accessibility tree, in document order (``page_info`` with ``axtree``).

    Invisible nodes are left out and layout wrappers without a role or text of their own collapse
    into their children, so `depth` counts the nodes kept above this one (0 at the top)."""

    depth: int
    role: str
    """The ``role`` attribute, else the role the tag (and an input's type) implies; "text" for a
    run of text without one, "generic" for an interactive element without any."""
    name: str
    """The accessible name: aria-label, aria-labelledby, a ``label[for]``, alt, title, placeholder,
    else the text content (trimmed, whitespace collapsed, capped at 200 characters)."""
    element: int | None = None
    """The node's 1-based id in the same call's element list (`PageInfo.elements`); None when it is
    not one of those interactive elements (or they were not asked for)."""


class ScreenshotResponse(BaseModel):
    data_b64: str
    sha256: str
    width: int
    height: int
    format: Literal["png", "jpeg"]


class Screenshot(BaseModel):
    """Image bytes; `sha256` is equal for pixel-identical pages shot with the same settings."""

    data: bytes
    sha256: str
    width: int
    height: int
    format: Literal["png", "jpeg"]


SCREENSHOT_MEDIA_TYPE = "application/vnd.webgym.screenshot"
"""Screenshot wire format: ``X-Webgym-Meta-Length: K``, then a body of K bytes of JSON metadata
(`Screenshot` without `data`) followed by the image bytes. No base64, no JSON string of the image:
both cost CPU on every step. A request with ``Accept: application/json`` gets `ScreenshotResponse`."""
_META_HEADER = "x-webgym-meta-length"


def encode_screenshot(shot: Screenshot) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a screenshot reply (`SCREENSHOT_MEDIA_TYPE`)."""
    meta = shot.model_dump_json(exclude={"data"}).encode()
    return meta + shot.data, {_META_HEADER: str(len(meta))}


def decode_screenshot(headers: dict[str, str], body: bytes) -> Screenshot:
    """Inverse of `encode_screenshot`; `headers` has lower-case names."""
    try:
        size = int(headers[_META_HEADER])
        meta = json.loads(body[:size])
    except (KeyError, ValueError) as exc:
        raise BrowserError(f"malformed screenshot reply (no valid {_META_HEADER} header): {exc}") from exc
    return Screenshot(data=body[size:], **meta)


BODIES_MEDIA_TYPE = "application/vnd.webgym.bodies"
"""Recorded bodies on the wire (``POST /sessions/{id}/recording/bodies``): ``X-Webgym-Meta-Length:
K``, then K bytes of JSON (``[[sha256, size], ...]``) followed by the bodies, one after another."""


def encode_bodies(bodies: list[tuple[str, bytes]]) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a reply carrying several recorded bodies (`BODIES_MEDIA_TYPE`)."""
    meta = json.dumps([[sha, len(data)] for sha, data in bodies]).encode()
    return meta + b"".join(data for _, data in bodies), {_META_HEADER: str(len(meta))}


def decode_bodies(headers: dict[str, str], content: bytes) -> dict[str, bytes]:
    """Inverse of `encode_bodies`: sha256 -> bytes; `headers` has lower-case names."""
    try:
        size = int(headers[_META_HEADER])
        meta = json.loads(content[:size])
    except (KeyError, ValueError) as exc:
        raise BrowserError(f"malformed bodies reply (no valid {_META_HEADER} header): {exc}") from exc
    bodies, offset = {}, size
    for sha, length in meta:
        bodies[sha] = content[offset:offset + length]
        offset += length
    if offset != len(content):
        raise BrowserError(f"malformed bodies reply: {len(content) - offset} bytes left over")
    return bodies


class EnvState(BaseModel):
    utterance: str = ""
    done: bool = False
    reward: float = 0.0
    raw_reward: float = 0.0
    reason: str = ""


class ExecuteResult(BaseModel):
    ok: bool
    error: str = ""
    """Agent-level failure text ("" when ok): no element to select, unknown key, refused navigation."""
    url: str
    """The page actually shown after the action."""
    title: str
    popups: list[str] = []
    """URLs of the pages (popups, new tabs) opened since the last action, by the action or by the
    page on its own, that the server closed at once: a session has one page. ``window.open`` and
    links with a target open in the page's own tab instead; what still opens a new page (e.g. a
    form with ``target=_blank`` submitted by script) lands here."""


class ActRequest(BaseModel):
    """One agent step (``POST /sessions/{id}/act``): run `action`, then read the next observation,
    in one call under the session's lock (nothing else runs on the page in between)."""

    action: BrowserAction
    screenshot: ScreenshotRequest | None = Field(default_factory=ScreenshotRequest)
    """The screenshot taken after the action; None takes none (e.g. an episode's last step)."""
    env_state: bool = True
    """Also read the page's own state (`EnvState`); environments that keep none answer None at no
    cost, so a client need not know which kind it plays."""
    elements: bool = False
    """Also list the interactive elements in the viewport (`Element`; `page_info` with elements)."""


class ActResult(ExecuteResult):
    """What ``act`` answers: the action's `ExecuteResult` fields, then the observation after it.

    An agent's mistake is ``ok=False`` with `error` (as for ``execute``); an infrastructure failure
    is an error reply, as for every operation. With `ActRequest.elements`, `url` and `title` are
    read again after the action (as ``page_info`` reads them)."""

    screenshot: Screenshot | None = None
    """The screenshot after the action (None when the request asked for none)."""
    env_state: EnvState | None = None
    """The page's own state after the action; None when not asked for or the environment keeps none."""
    elements: list[Element] | None = None
    """The interactive elements in the viewport, when asked for."""
    execute_s: float = 0.0
    """Seconds the server spent on the action (a ``wait`` included)."""
    observe_s: float = 0.0
    """Seconds the server spent reading the observation."""


ACT_MEDIA_TYPE = "application/vnd.webgym.act"
"""`ActResult` on the wire, framed like `SCREENSHOT_MEDIA_TYPE`: ``X-Webgym-Meta-Length: K``, then K
bytes of JSON (the result, its screenshot without ``data``), then the image bytes. One body: the
metadata (a page title, an agent's error text) is not limited to what a header may carry."""


def encode_act(result: ActResult) -> tuple[bytes, dict[str, str]]:
    """The body and headers of an ``act`` reply (`ACT_MEDIA_TYPE`)."""
    meta = result.model_dump_json(exclude={"screenshot": {"data"}}).encode()
    data = result.screenshot.data if result.screenshot is not None else b""
    return meta + data, {_META_HEADER: str(len(meta))}


def decode_act(headers: dict[str, str], body: bytes) -> ActResult:
    """Inverse of `encode_act`; `headers` has lower-case names."""
    try:
        size = int(headers[_META_HEADER])
        meta = json.loads(body[:size])
    except (KeyError, ValueError) as exc:
        raise BrowserError(f"malformed act reply (no valid {_META_HEADER} header): {exc}") from exc
    if meta.get("screenshot") is not None:
        meta["screenshot"]["data"] = body[size:]
    elif len(body) != size:
        raise BrowserError(f"malformed act reply: {len(body) - size} image bytes without a screenshot")
    return ActResult.model_validate(meta)


class PageInfoRequest(BaseModel):
    elements: bool = False
    """Also list the interactive elements in the viewport (`Element`)."""
    axtree: bool = False
    """Also read the page's accessibility tree (`AxNode`, the whole document in document order, at
    most 2000 nodes and 60 levels), from the same in-page evaluation as the elements, so a node's
    `AxNode.element` is an id into this reply's `PageInfo.elements`."""


class PageInfo(BaseModel):
    url: str
    title: str
    elements: list[Element] = []
    axtree: list[AxNode] = []


class ServerHealth(BaseModel):
    url: str = ""
    status: str = "ok"
    active_sessions: int
    max_sessions: int
    browsers: int
    queue_depths: dict[str, int] = {}
    uptime_s: float = 0.0

    @property
    def load(self) -> float:
        return self.active_sessions / max(1, self.max_sessions)


class BlocklistLifted(BaseModel):
    """The answer to ``DELETE /blocklist/{origin}``."""

    origin: str
    """The origin the request named (``scheme://host[:port]``)."""
    lifted: bool
    """Whether the origin was blocked (and is not any more)."""
    reason: str = ""
    """Why it had been blocked."""


class ErrorBody(BaseModel):
    error: str
    message: str
    url: str = ""
    session_closed: bool = False
