"""The wire models: actions validated per kind, request bounds, the screenshot wire format."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from webgym_rollout.browser.protocol import (
    ActRequest,
    ActResult,
    BrowserAction,
    CreateSessionRequest,
    Element,
    EnvState,
    PageInfo,
    PageInfoRequest,
    RecordedExchange,
    ReplayOptions,
    Screenshot,
    ScreenshotRequest,
    ServerHealth,
    decode_act,
    decode_screenshot,
    encode_act,
    encode_screenshot,
)
from webgym_rollout.errors import BrowserError


def test_actions_validate_per_kind():
    assert BrowserAction(kind="click", x=3, y=4) == BrowserAction.click(3, 4)
    assert BrowserAction.scroll_by("down", 500).model_dump(exclude_none=True) == {
        "kind": "scroll",
        "direction": "down",
        "amount": 500,
    }
    assert BrowserAction.model_validate({"kind": "type", "text": "hi", "press_enter": True}).press_enter
    for bad in (
        {"kind": "click", "x": 1},
        {"kind": "type"},
        {"kind": "key", "key": "a", "x": 1},
        {"kind": "scroll", "direction": "sideways"},
        {"kind": "teleport"},
        {"kind": "hover", "x": 1, "y": 2},  # removed: no agent action reached it
        {"kind": "wait", "seconds": -1},
        {"kind": "wait", "seconds": 61},
        {"kind": "select", "x": 1, "y": 2},
        {"kind": "scroll", "direction": "up", "x": 5},
        {"kind": "scroll", "direction": "up", "amount": 0},
        {"kind": "go_back", "colour": "red"},
    ):
        with pytest.raises(ValidationError):
            BrowserAction.model_validate(bad)
    for action in (
        BrowserAction.back(),
        BrowserAction.wait_for(0.5),
        BrowserAction.select_option(1, 2, "v"),
        BrowserAction.press("Enter"),
        BrowserAction.type_text("x"),
        BrowserAction.scroll_by("up", 100, x=5, y=6),
    ):
        assert BrowserAction.model_validate(action.model_dump(exclude_none=True)) == action


def test_requests_keep_their_bounds():
    assert ScreenshotRequest().model_dump() == {"format": "png", "quality": 80, "scale": 1.0}
    for bad in ({"format": "gif"}, {"quality": 0}, {"quality": 101}, {"scale": 0}, {"scale": 1.5}):
        with pytest.raises(ValidationError):
            ScreenshotRequest.model_validate(bad)
    assert PageInfoRequest().model_dump() == {"elements": False, "axtree": False}
    # A reply from a server without the tree (or a request without it) reads as an empty tree.
    assert PageInfo.model_validate({"url": "http://127.0.0.1/", "title": ""}).axtree == []
    with pytest.raises(ValidationError, match="outside 64..4096"):
        CreateSessionRequest(start_url="http://127.0.0.1/", viewport=(32, 720))
    assert CreateSessionRequest(start_url="http://127.0.0.1/").environment == "web"
    assert ServerHealth(active_sessions=3, max_sessions=4, browsers=1).load == 0.75
    assert ServerHealth(active_sessions=0, max_sessions=0, browsers=0).load == 0.0


def test_screenshot_wire_format_round_trips():
    shot = Screenshot(data=b"\x89PNG\r\n\x1a\nnot really", sha256="ab" * 32, width=160, height=210,
                      format="png")
    body, headers = encode_screenshot(shot)
    assert body.endswith(shot.data) and not body.startswith(shot.data)  # metadata first, raw bytes after
    assert decode_screenshot(headers, body) == shot
    with pytest.raises(BrowserError, match="malformed screenshot reply"):
        decode_screenshot({}, body)
    with pytest.raises(BrowserError, match="malformed screenshot reply"):
        decode_screenshot({"x-webgym-meta-length": "many"}, body)


def test_act_wire_format_round_trips_with_and_without_a_screenshot():
    shot = Screenshot(data=b"\x89PNG\r\n\x1a\nimage bytes", sha256="cd" * 32, width=1280, height=720,
                      format="png")
    element = Element(x=1, y=2, width=3, height=4, tag="button", role="button", text="Ünïcode \"OK\"")
    full = ActResult(ok=False, error="no <select> element at (5, 5)", url="http://127.0.0.1:1/a",
                     title="Tïtle", popups=["http://127.0.0.1:1/pop"], screenshot=shot,
                     env_state=EnvState(utterance="Click", done=True, raw_reward=1.0), elements=[element],
                     execute_s=0.25, observe_s=0.5)
    body, headers = encode_act(full)
    assert body.endswith(shot.data) and b"image bytes" not in body[:int(headers["x-webgym-meta-length"])]
    assert decode_act(headers, body) == full
    bare = ActResult(ok=True, url="http://127.0.0.1:1/b", title="")
    body, headers = encode_act(bare)
    back = decode_act(headers, body)
    assert back == bare and back.screenshot is None and back.env_state is None and back.elements is None
    with pytest.raises(BrowserError, match="malformed act reply"):
        decode_act({}, body)
    with pytest.raises(BrowserError, match="image bytes without a screenshot"):
        decode_act(headers, body + b"stray")


def test_act_requests_and_session_requests_survive_their_json():
    request = ActRequest(action=BrowserAction.click(3, 4))
    assert request.screenshot == ScreenshotRequest() and request.env_state and not request.elements
    for sent in (request,
                 ActRequest(action=BrowserAction.type_text("hi", press_enter=True), screenshot=None,
                            env_state=False, elements=True),
                 ActRequest(action=BrowserAction.scroll_by("up", 5, 1, 2),
                            screenshot=ScreenshotRequest(format="jpeg", quality=50, scale=0.5))):
        assert ActRequest.model_validate_json(sent.model_dump_json()) == sent
    with pytest.raises(ValidationError):
        ActRequest.model_validate({"action": {"kind": "click", "x": 1}})  # the action is checked too
    with pytest.raises(ValidationError):
        ActRequest.model_validate({"action": {"kind": "go_back"}, "screenshot": {"format": "gif"}})
    replay = ReplayOptions(exchanges=[RecordedExchange(method="GET", url="http://127.0.0.1:1/", status=200,
                                                       headers=[("a", "b")], body_sha256="ef" * 32)])
    create = CreateSessionRequest(start_url="http://127.0.0.1:1/", viewport=(800, 600),
                                  environment="miniwob:click-button", seed=3, replay=replay)
    assert CreateSessionRequest.model_validate_json(create.model_dump_json()) == create
