"""The action space: prompt text, tool schema and parser come from one definition and agree."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webgym_rollout.actions import (
    ACTIONS,
    GRID_SIZE,
    TOOL_NAME,
    ActionParseError,
    AgentAction,
    action_space_text,
    example_action,
    grid_to_pixels,
    parse_arguments,
    parse_tool_call,
    pixels_to_grid,
    tool_schema,
)

NAMES = [spec.name for spec in ACTIONS]


def test_the_action_set_is_the_one_the_protocol_names():
    assert NAMES == ["left_click", "type", "key", "select", "scroll", "wait", "go_back", "navigate", "answer"]


@pytest.mark.parametrize("name", NAMES)
def test_every_action_of_the_schema_parses_from_its_generated_example(name):
    schema = tool_schema()["function"]
    assert name in schema["parameters"]["properties"]["action"]["enum"]
    example = example_action(name)
    # The example tool call as the prompt shows it parses back to the same action.
    parsed = parse_tool_call(f"Action: do it\n{example.to_tool_call()}")
    assert parsed == example
    assert parsed.name == name
    # Every argument the example uses is declared in the schema with a matching JSON type.
    properties = schema["parameters"]["properties"]
    for key, value in example.arguments().items():
        assert key in properties, f"{name}: argument {key} is not in the tool schema"
        declared = properties[key]["type"]
        python_type = {"string": str, "number": (int, float), "boolean": bool, "array": list}[declared]
        assert isinstance(value, python_type), (name, key, value, declared)
        if "enum" in properties[key]:
            assert value in properties[key]["enum"]


def test_schema_prompt_and_parser_cover_the_same_parameters():
    properties = tool_schema()["function"]["parameters"]["properties"]
    declared = {p.name for spec in ACTIONS for p in spec.params} | {"action"}
    assert set(properties) == declared
    text = action_space_text()
    for spec in ACTIONS:
        line = next(line for line in text.splitlines() if line.startswith(f"- {spec.name}("))
        for param in spec.params:
            assert param.name in line
            # The schema says, for each property, which actions use it and whether it is required.
            kind = "required" if param in spec.required else "optional"
            assert f"{kind} for action={spec.name}" in properties[param.name]["description"]
        # A required argument missing makes the parser refuse; an optional one does not.
        for param in spec.required:
            args = example_action(spec.name).arguments()
            del args[param.name]
            with pytest.raises(ActionParseError, match=param.name):
                parse_arguments(args)
        for param in spec.optional:
            args = example_action(spec.name).arguments()
            args.pop(param.name, None)
            assert parse_arguments(args).name == spec.name


def test_the_example_lines_of_the_prompt_are_valid_tool_calls():
    lines = action_space_text().splitlines()
    examples = [line.split("Example: ", 1)[1] for line in lines if "Example: " in line]
    assert len(examples) == len(ACTIONS)
    parsed = [parse_tool_call(f"<tool_call>{example}</tool_call>").name for example in examples]
    assert parsed == NAMES


CALL = '<tool_call>{"name": "computer_use", "arguments": '


@pytest.mark.parametrize(("reply", "message"), [
    ("I will click the button.", "no <tool_call>"),
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "go_back"}}</tool_call>'
     '<tool_call>{"name": "computer_use", "arguments": {"action": "go_back"}}</tool_call>', "2 <tool_call>"),
    (CALL + '{"action": "left_click", </tool_call>', "not valid JSON"),
    ('<tool_call>{"name": "browser", "arguments": {"action": "go_back"}}</tool_call>', "'browser'"),
    (CALL + '{"action": "double_click"}}</tool_call>', "unknown action"),
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "left_click"}}</tool_call>', "coordinate"),
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [1200, 5]}}'
     '</tool_call>', "0-1000 grid"),
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [true, 5]}}'
     '</tool_call>', "two numbers"),
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "scroll", "direction": "left"}}'
     '</tool_call>', "up, down"),
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "type", "text": ""}}</tool_call>',
     "non-empty"),
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "wait", "time": -1}}</tool_call>',
     "non-negative"),
    ('<tool_call>[1, 2]</tool_call>', "JSON object"),
])
def test_invalid_tool_calls_are_refused_with_the_reason(reply, message):
    with pytest.raises(ActionParseError, match=message):
        parse_tool_call(reply)


def test_lenient_forms_that_models_really_write_are_accepted():
    # Unclosed block at the end, a code fence, arguments as a JSON string, float coordinates.
    assert parse_tool_call(CALL + '{"action": "go_back"}}').name == "go_back"
    fenced = ('<tool_call>```json\n{"name": "computer_use", "arguments": {"action": "go_back"}}\n```'
              "</tool_call>")
    assert parse_tool_call(fenced).name == "go_back"
    as_string = json.dumps({"name": TOOL_NAME, "arguments": json.dumps({"action": "navigate", "url": "http://a.b/"})})
    assert parse_tool_call(f"<tool_call>{as_string}</tool_call>").url == "http://a.b/"
    action = parse_tool_call(CALL + '{"action": "left_click", "coordinate": [10.6, 999.4], "button": "left"}}'
                             "</tool_call>")
    assert action.coordinate == (11, 999)
    assert action.extra == {"button": "left"}


def test_browser_actions_use_viewport_pixels():
    viewport = (1280, 720)
    assert AgentAction("left_click", coordinate=(500, 500)).to_browser_action(viewport) == \
        {"kind": "click", "x": 640, "y": 360}
    assert AgentAction("left_click", coordinate=(1000, 1000)).to_browser_action(viewport) == \
        {"kind": "click", "x": 1279, "y": 719}
    assert AgentAction("left_click", coordinate=(0, 0)).to_browser_action((160, 210)) == \
        {"kind": "click", "x": 0, "y": 0}
    assert AgentAction("type", text="hi", press_enter=True).to_browser_action(viewport) == \
        {"kind": "type", "text": "hi", "press_enter": True}
    scroll = AgentAction("scroll", direction="up", coordinate=(250, 750)).to_browser_action(viewport)
    assert scroll == {"kind": "scroll", "direction": "up", "amount": 432, "x": 320, "y": 540}
    assert AgentAction("wait", time=120).to_browser_action(viewport) == {"kind": "wait", "seconds": 10.0}
    assert AgentAction("wait").to_browser_action(viewport) == {"kind": "wait", "seconds": 2.0}
    assert AgentAction("go_back").to_browser_action(viewport) == {"kind": "go_back"}
    assert AgentAction("key", keys="Control+a").to_browser_action(viewport) == \
        {"kind": "key", "key": "Control+a"}
    assert AgentAction("select", coordinate=(500, 250), option="Blue").to_browser_action(viewport) == \
        {"kind": "select", "x": 640, "y": 180, "value": "Blue"}
    select = AgentAction("select", coordinate=(500, 250), option="Blue")
    assert select.describe() == 'select [500, 250] "Blue"'
    assert AgentAction("key", keys="Enter").describe() == "key Enter"
    assert AgentAction("navigate", url="http://x.y/").to_browser_action(viewport) is None
    answer = AgentAction("answer", text="42")
    assert answer.to_browser_action(viewport) is None and answer.ends_episode


@given(x=st.integers(0, 1279), y=st.integers(0, 719))
def test_pixels_survive_the_trip_through_the_grid(x, y):
    viewport = (1280, 720)
    grid = pixels_to_grid(x, y, viewport)
    assert all(0 <= c <= GRID_SIZE for c in grid)
    back = grid_to_pixels(grid, viewport)
    # One grid step is 1.28 px wide and 0.72 px high: rounding loses at most one pixel.
    assert abs(back[0] - x) <= 1 and abs(back[1] - y) <= 1


@pytest.mark.parametrize("name", NAMES)
def test_json_form_round_trips(name):
    action = example_action(name)
    assert AgentAction.from_json(action.to_json()) == action
    assert json.loads(action.to_json())["action"] == name
    with pytest.raises(ActionParseError):
        AgentAction.from_json("{not json")


@pytest.mark.parametrize("name", NAMES)
def test_browser_actions_satisfy_the_browser_client_contract(name):
    from webgym_rollout.browser.protocol import BrowserAction

    for viewport in ((1280, 720), (160, 210)):
        action = example_action(name).to_browser_action(viewport)
        if name in ("navigate", "answer"):
            assert action is None
            continue
        validated = BrowserAction.model_validate(action)
        assert validated.kind == action["kind"]
        if validated.x is not None:
            assert 0 <= validated.x < viewport[0] and 0 <= validated.y < viewport[1]
