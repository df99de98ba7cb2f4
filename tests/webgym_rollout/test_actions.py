"""The action space: prompt text, tool schema and parser come from one definition and agree; element
actions resolve to the element's centre on the step's element list."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.untrusted_input import JSON_VALUES, ODD_TEXT, deeply_nested, json_text
from webgym_rollout.actions import (
    ACTIONS,
    GRID_SIZE,
    MAX_ELEMENT_ID,
    TOOL_NAME,
    ActionParseError,
    AgentAction,
    action_space_text,
    element_actions_for,
    element_centre,
    example_action,
    grid_to_pixels,
    offered_actions,
    parse_arguments,
    parse_tool_call,
    pixels_to_grid,
    tool_schema,
)
from webgym_rollout.browser.protocol import BrowserAction, Element

NAMES = [spec.name for spec in ACTIONS]
COORDINATE_NAMES = ["left_click", "type", "key", "select", "scroll", "wait", "go_back", "navigate", "answer"]
ELEMENT_NAMES = ["click_element", "type_element", "select_element", "hover_element"]


def box(x, y, width, height, tag="button", text="OK", role="button") -> Element:
    return Element(x=x, y=y, width=width, height=height, tag=tag, role=role, text=text)


# A page's element list as the env reads it (ids 1, 2, 3), inside a MiniWoB task area (160x210).
PAGE = (box(10, 20, 100, 40), box(10, 80, 140, 30, tag="input", role="textbox", text=""),
        box(10, 140, 120, 24, tag="select", role="combobox", text="Red"))


def test_the_action_set_is_the_one_the_protocol_names():
    assert NAMES == COORDINATE_NAMES + ELEMENT_NAMES
    assert [spec.name for spec in offered_actions()] == COORDINATE_NAMES
    assert [spec.name for spec in offered_actions(element_actions=True)] == NAMES
    assert [spec.name for spec in ACTIONS if spec.on_element] == ELEMENT_NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_action_of_the_schema_parses_from_its_generated_example(name):
    schema = tool_schema(element_actions=True)["function"]
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
        python_type = {"string": str, "number": (int, float), "boolean": bool, "array": list,
                       "integer": int}[declared]
        assert isinstance(value, python_type), (name, key, value, declared)
        if "enum" in properties[key]:
            assert value in properties[key]["enum"]


@pytest.mark.parametrize("element_actions", [False, True])
def test_schema_prompt_and_parser_cover_the_same_parameters(element_actions):
    offered = offered_actions(element_actions)
    properties = tool_schema(element_actions)["function"]["parameters"]["properties"]
    declared = {p.name for spec in offered for p in spec.params} | {"action"}
    assert set(properties) == declared
    assert ("element" in properties) is element_actions
    text = action_space_text(element_actions)
    for spec in offered:
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


@pytest.mark.parametrize(("element_actions", "names"), [(False, COORDINATE_NAMES), (True, NAMES)])
def test_the_example_lines_of_the_prompt_are_valid_tool_calls(element_actions, names):
    lines = action_space_text(element_actions).splitlines()
    examples = [line.split("Example: ", 1)[1] for line in lines if "Example: " in line]
    parsed = [parse_tool_call(f"<tool_call>{example}</tool_call>").name for example in examples]
    assert parsed == names
    schema = tool_schema(element_actions)["function"]
    assert schema["parameters"]["properties"]["action"]["enum"] == names
    assert ("element list" in schema["description"]) is element_actions


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
        BrowserAction.click(640, 360)
    assert AgentAction("left_click", coordinate=(1000, 1000)).to_browser_action(viewport) == \
        BrowserAction.click(1279, 719)
    assert AgentAction("left_click", coordinate=(0, 0)).to_browser_action((160, 210)) == \
        BrowserAction.click(0, 0)
    assert AgentAction("type", text="hi", press_enter=True).to_browser_action(viewport) == \
        BrowserAction.type_text("hi", press_enter=True)
    scroll = AgentAction("scroll", direction="up", coordinate=(250, 750)).to_browser_action(viewport)
    assert scroll == BrowserAction.scroll_by("up", 432, 320, 540)
    down = AgentAction("scroll", direction="down").to_browser_action(viewport)
    assert down == BrowserAction.scroll_by("down", 432)
    assert AgentAction("wait", time=120).to_browser_action(viewport) == BrowserAction.wait_for(10.0)
    assert AgentAction("wait").to_browser_action(viewport) == BrowserAction.wait_for(2.0)
    assert AgentAction("go_back").to_browser_action(viewport) == BrowserAction.back()
    assert AgentAction("key", keys="Control+a").to_browser_action(viewport) == \
        BrowserAction.press("Control+a")
    assert AgentAction("select", coordinate=(500, 250), option="Blue").to_browser_action(viewport) == \
        BrowserAction.select_option(640, 180, "Blue")
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
    for viewport in ((1280, 720), (160, 210)):
        actions = example_action(name).to_browser_actions(viewport, PAGE)
        if name in ("navigate", "answer"):
            assert actions == ()
            continue
        assert 1 <= len(actions) <= 2
        for action in actions:
            # The typed model, and one that survives the trip over the wire unchanged.
            assert isinstance(action, BrowserAction)
            validated = BrowserAction.model_validate_json(action.model_dump_json(exclude_none=True))
            assert validated == action
            if validated.x is not None:
                assert 0 <= validated.x < viewport[0] and 0 <= validated.y < viewport[1]


# ------------------------------------------------------------------ untrusted input: the parser is total

_NAMES = st.sampled_from(NAMES)
_PARAMS = st.sampled_from(sorted({p.name for spec in ACTIONS for p in spec.params}))
# An arguments object: an action name (or any JSON value in its place), parameters holding any JSON value.
_ARGUMENTS = st.builds(lambda name, values: {**values, "action": name}, _NAMES | JSON_VALUES,
                       st.dictionaries(_PARAMS, JSON_VALUES, max_size=4))


def _well_formed(action: AgentAction) -> None:
    """What the runner does with a parsed action works: store it, read it back, send it."""
    stored = action.to_json()
    stored.encode("utf-8")  # a trajectory file can hold it
    assert AgentAction.from_json(stored) == action
    action.describe()
    action.to_tool_call()
    try:
        sent = action.to_browser_actions((1280, 720), PAGE)
    except ActionParseError as exc:  # an element the page does not list, or not a <select>
        assert action.on_element and len(str(exc)) < 400
        return
    for browser in sent:
        if browser.x is not None:
            assert 0 <= browser.x < 1280 and 0 <= browser.y < 720


@pytest.mark.parametrize("name", [[1, 2], {"left_click": 1}, None, 3, 1.5, True, ""])
def test_an_action_name_that_is_not_a_known_string_is_an_agent_mistake(name):
    with pytest.raises(ActionParseError, match="unknown action"):
        parse_arguments({"action": name})
    with pytest.raises(ActionParseError, match="unknown action"):
        parse_tool_call(CALL + json.dumps({"action": name}) + "}</tool_call>")


@settings(max_examples=400, deadline=None)
@given(arguments=_ARGUMENTS | JSON_VALUES)
def test_arguments_of_any_json_value_parse_or_are_refused(arguments):
    try:
        action = parse_arguments(arguments)
    except ActionParseError as exc:
        assert len(str(exc)) < 400  # the message quotes the value in short
        return
    _well_formed(action)


@settings(max_examples=300, deadline=None)
@given(arguments=_ARGUMENTS | JSON_VALUES, name=st.just(TOOL_NAME) | JSON_VALUES,
       around=st.tuples(ODD_TEXT, ODD_TEXT), closed=st.booleans())
def test_any_tool_call_block_parses_or_is_refused(arguments, name, around, closed):
    block = json.dumps({"name": name, "arguments": arguments})
    text = f"{around[0]}<tool_call>{block}{'</tool_call>' if closed else ''}{around[1] if closed else ''}"
    try:
        action = parse_tool_call(text)
    except ActionParseError:
        return
    _well_formed(action)


@settings(max_examples=300, deadline=None)
@given(text=ODD_TEXT | ODD_TEXT.map(lambda t: f"<tool_call>{t}</tool_call>") | json_text().map(
    lambda t: f"<tool_call>{t}</tool_call>") | json_text(_ARGUMENTS))
def test_any_text_parses_or_is_refused(text):
    try:
        _well_formed(parse_tool_call(text))
    except ActionParseError:
        pass
    try:
        _well_formed(AgentAction.from_json(text))
    except ActionParseError:
        pass


@pytest.mark.parametrize(("arguments", "message"), [
    ('{"action": "left_click", "coordinate": [1' + "0" * 400 + ", 5]}", "0-1000 grid"),
    ('{"action": "left_click", "coordinate": [NaN, 5]}', "0-1000 grid"),
    ('{"action": "left_click", "coordinate": [Infinity, 5]}', "0-1000 grid"),
    ('{"action": "wait", "time": 1' + "0" * 400 + "}", "too large"),
    ('{"action": "wait", "time": NaN}', "non-negative number"),
    ('{"action": "wait", "time": -Infinity}', "non-negative number"),
    ('{"action": "wait", "time": 1' + "0" * 5000 + "}", "not valid JSON"),  # beyond int() of text
    ('{"action": "type", "text": "\\ud800"}', "valid Unicode"),
    ('{"action": "type", "text": ' + deeply_nested(500) + "}", "non-empty string"),
    ('{"action": "type", "text": ' + deeply_nested(100_000) + "}", "nested too deeply"),
    (deeply_nested(100_000), "nested too deeply"),
    ('{"action": {"action": "go_back"}}', "unknown action"),
])
def test_hostile_values_are_agent_mistakes_with_short_messages(arguments, message):
    with pytest.raises(ActionParseError, match=message) as caught:
        parse_tool_call(CALL + arguments + "}</tool_call>")
    assert len(str(caught.value)) < 400
    with pytest.raises(ActionParseError):
        AgentAction.from_json(arguments)


def test_a_stored_action_that_is_not_text_is_refused():
    with pytest.raises(ActionParseError, match="JSON text"):
        AgentAction.from_json(b'{"action": "go_back"}')  # type: ignore[arg-type]
    with pytest.raises(ActionParseError, match="must be text"):
        parse_tool_call(["<tool_call>"])  # type: ignore[arg-type]


def test_a_long_run_of_spaces_in_a_tool_call_is_read_in_one_pass():
    # Quadratic before (a regex stripping the code fence backtracked over the run: hours for this
    # reply); the suite's timeout fails the test if that comes back.
    with pytest.raises(ActionParseError, match="not valid JSON"):
        parse_tool_call("<tool_call>{" + " " * 1_000_000 + "x</tool_call>")
    fenced = "<tool_call>```json\n" + json.dumps({"name": TOOL_NAME, "arguments": {"action": "go_back"}}) + \
        " " * 1_000_000 + "```</tool_call>"
    assert parse_tool_call(fenced).name == "go_back"


# ------------------------------------------------------------------ element actions


@pytest.mark.parametrize(("value", "expected"), [(1, 1), (3, 3), (7.0, 7), (MAX_ELEMENT_ID, MAX_ELEMENT_ID)])
def test_an_element_id_is_a_whole_number_from_one(value, expected):
    call = json.dumps({"action": "click_element", "element": value})
    action = parse_tool_call(f"{CALL}{call}}}</tool_call>")
    assert action.name == "click_element" and action.element == expected and action.on_element
    assert action.to_json() == f'{{"action":"click_element","element":{expected}}}'
    assert AgentAction.from_json(action.to_json()) == action


@pytest.mark.parametrize(("value", "message"), [
    (0, "from 1"), (-2, "from 1"), (MAX_ELEMENT_ID + 1, f"to {MAX_ELEMENT_ID}"), (2.5, "whole number"),
    ("3", "whole number"), ("[3]", "whole number"), (True, "whole number"), (None, "whole number"),
    ([3], "whole number"), ({"id": 3}, "whole number"),
])
def test_a_malformed_element_id_is_refused_by_the_parser(value, message):
    with pytest.raises(ActionParseError, match=rf"'click_element' argument 'element' must .*{message}"):
        parse_tool_call(CALL + json.dumps({"action": "click_element", "element": value}) + "}</tool_call>")


@pytest.mark.parametrize("name", ELEMENT_NAMES)
def test_an_element_action_needs_its_element(name):
    args = example_action(name).arguments()
    del args["element"]
    with pytest.raises(ActionParseError, match=f"'{name}' needs the argument 'element'"):
        parse_arguments(args)
    # The coordinate form is no substitute: the element action's arguments are its own.
    with pytest.raises(ActionParseError, match="'element'"):
        parse_arguments({**args, "coordinate": [500, 500]})


def test_element_actions_resolve_to_the_centre_of_the_element_on_the_list():
    viewport = (1280, 720)
    click = AgentAction("click_element", element=1).to_browser_actions(viewport, PAGE)
    assert click == (BrowserAction.click(60, 40),)
    typed = AgentAction("type_element", element=2, text="hi", press_enter=True)
    assert typed.to_browser_actions(viewport, PAGE) == \
        (BrowserAction.click(80, 95), BrowserAction.type_text("hi", press_enter=True))
    chosen = AgentAction("select_element", element=3, option="Blue").to_browser_actions(viewport, PAGE)
    assert chosen == (BrowserAction.select_option(70, 152, "Blue"),)
    hovered = AgentAction("hover_element", element=1).to_browser_actions(viewport, PAGE)
    assert hovered == (BrowserAction.scroll_by("up", 1, 60, 40),)  # the mouse moves there
    # Elements as dicts (what an Observation may hold) resolve alike.
    as_dicts = [element.model_dump() for element in PAGE]
    assert AgentAction("click_element", element=1).to_browser_actions(viewport, as_dicts) == click
    # A coordinate action ignores the list.
    assert AgentAction("left_click", coordinate=(500, 500)).to_browser_actions(viewport, PAGE) == \
        (BrowserAction.click(640, 360),)
    assert AgentAction("left_click", coordinate=(500, 500)).to_browser_actions(viewport) == \
        (BrowserAction.click(640, 360),)


def test_an_element_click_lands_where_the_coordinate_click_at_its_centre_lands():
    viewport = (160, 210)
    element = box(17, 63, 41, 19)
    (click,) = AgentAction("click_element", element=1).to_browser_actions(viewport, [element])
    grid = pixels_to_grid(element.x + element.width / 2, element.y + element.height / 2, viewport)
    (coordinate_click,) = AgentAction("left_click", coordinate=grid).to_browser_actions(viewport)
    assert abs(click.x - coordinate_click.x) <= 1 and abs(click.y - coordinate_click.y) <= 1


def test_an_element_that_sticks_out_of_the_screenshot_is_acted_on_in_its_visible_part():
    # The part of the box inside the 160x210 frame is x 100-160, y 0-30.
    assert element_centre(box(100, -30, 200, 60), (160, 210)) == (130, 15)
    # Wholly outside: the box's own centre (the click lands outside the screenshot, where the page is).
    assert element_centre(box(200, 300, 20, 10), (160, 210)) == (210, 305)
    assert element_centre({"x": 0, "y": 0, "width": 10, "height": 4}, (160, 210)) == (5, 2)


@pytest.mark.parametrize(("element", "elements", "message"), [
    (12, PAGE, "element 12 does not exist: the page lists 3 elements"),
    (2, PAGE[:1], "element 2 does not exist: the page lists 1 element$"),
    (1, (), "element 1 does not exist: the page lists no interactive elements"),
    (0, PAGE, "element 0 does not exist"),  # built in code, not parsed: still no crash
])
def test_an_element_the_page_does_not_list_is_an_agent_mistake(element, elements, message):
    for name in ELEMENT_NAMES:
        action = parse_arguments({**example_action(name).arguments(), "element": max(1, element)})
        action = AgentAction(**{**action.__dict__, "element": element})
        with pytest.raises(ActionParseError, match=message):
            action.to_browser_actions((1280, 720), elements)


def test_select_element_on_something_that_is_not_a_select_is_an_agent_mistake():
    with pytest.raises(ActionParseError, match=r"element 1 is a <button>, not a drop-down list"):
        AgentAction("select_element", element=1, option="Blue").to_browser_actions((1280, 720), PAGE)


def test_an_element_action_has_no_single_browser_action_without_its_list():
    with pytest.raises(ValueError, match="to_browser_actions"):
        AgentAction("click_element", element=1).to_browser_action((1280, 720))


def test_element_actions_describe_themselves_by_their_id():
    assert AgentAction("click_element", element=4).describe() == "click_element [4]"
    assert AgentAction("hover_element", element=2).describe() == "hover_element [2]"
    assert AgentAction("type_element", element=3, text="x" * 100, press_enter=True).describe(10) == \
        'type_element [3] "xxxxxxx..." + Enter'
    assert AgentAction("select_element", element=5, option="Blue").describe() == 'select_element [5] "Blue"'


@pytest.mark.parametrize(("modes", "offered"), [
    (("screenshot",), False), ((), False), (("som",), True), (("axtree",), True),
    (("screenshot", "elements"), True), (["screenshot", "som"], True),
])
def test_the_observation_modes_that_number_elements_call_for_element_actions(modes, offered):
    assert element_actions_for(modes) is offered
