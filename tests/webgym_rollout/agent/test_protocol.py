"""Agent protocol: the context window, the stored/sent forms of messages, reading replies."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.support.untrusted_input import JSON_VALUES, ODD_TEXT, json_text
from webgym_rollout.actions import ACTIONS, AgentAction, example_action, offered_actions, tool_schema
from webgym_rollout.agent.protocol import (
    VARIANTS,
    AgentSettings,
    Observation,
    ParsedResponse,
    build_messages,
    format_response,
    image_data_url,
    inline_images,
    observation_images,
    parse_response,
    strip_think,
    system_prompt,
)
from webgym_rollout.trajectory.contract import Step, expand_messages


def png(color: str, size=(64, 48)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, "PNG")
    return buffer.getvalue()


COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]


def observation_with_history(n: int, **kwargs) -> Observation:
    history = tuple(
        Step(index=j, screenshot=png(COLORS[j]),
             response=f"<think>secret reasoning {j}</think>Memory: m{j}\nAction: click\n"
                      + AgentAction("left_click", coordinate=(10 * j, 20 * j)).to_tool_call(),
             action=AgentAction("left_click", coordinate=(10 * j, 20 * j)).to_json(),
             url=f"http://127.0.0.1/p{j}", title=f"Page {j}", same_as_next=j % 2 == 1)
        for j in range(n))
    return Observation(instruction="Find the cheapest flight", screenshot=png(COLORS[n]), step=n,
                       url=f"http://127.0.0.1/p{n}", title=f"Page {n}", history=history, **kwargs)


def image_steps(messages) -> list[int]:
    return [part["step"] for m in messages if isinstance(m["content"], list)
            for part in m["content"] if part.get("type") == "image"]


def test_last_four_rounds_in_full_older_ones_as_summaries():
    obs = observation_with_history(6)
    messages = build_messages(obs)
    assert messages[0] == {"role": "system", "content": system_prompt("memory")}
    # Steps 2..5 in full with their screenshots, then the current screenshot (step 6).
    assert image_steps(messages) == [2, 3, 4, 5, 6]
    roles = [m["role"] for m in messages[1:]]
    assert roles == ["user", "assistant"] * 4 + ["user"]
    first_user = messages[1]["content"][0]["text"]
    assert first_user.startswith("Task: Find the cheapest flight")
    # Older steps 0 and 1: one line each with action, whether the page changed, and the title.
    assert 'Step 0: left_click [0, 0]; page changed; title "Page 0"' in first_user
    assert 'Step 1: left_click [10, 20]; page unchanged; title "Page 1"' in first_user
    assert "Step 2:" not in first_user.split("Earlier steps:")[1].split("\n\n")[0]
    # Replies in the history lose their <think> block.
    assistant = [m["content"] for m in messages if m["role"] == "assistant"]
    assert all("secret reasoning" not in text and text.startswith("Memory: m") for text in assistant)
    assert "Page 6" in messages[-1]["content"][0]["text"]


def test_window_size_is_a_setting_and_short_histories_are_all_full():
    obs = observation_with_history(6)
    assert image_steps(build_messages(obs, AgentSettings(full_rounds=1))) == [5, 6]
    assert image_steps(build_messages(obs, AgentSettings(full_rounds=0))) == [6]
    first = build_messages(observation_with_history(0))
    assert image_steps(first) == [0]
    assert first[1]["content"][0]["text"].startswith("Task: Find the cheapest flight")
    assert "Earlier steps" not in first[1]["content"][0]["text"]
    with pytest.raises(ValueError, match="variant"):
        AgentSettings(variant="chatty")


def test_a_failed_action_and_a_parse_error_are_shown_to_the_policy():
    history = (Step(index=0, screenshot=png("red"), response="gibberish",
                    action_error="the reply has no <tool_call> block", title="T0"),)
    obs = Observation(instruction="x", screenshot=png("blue"), step=1, history=history,
                      last_action_error="the reply has no <tool_call> block")
    messages = build_messages(obs, AgentSettings(full_rounds=0))
    text = messages[-1]["content"][0]["text"]
    assert "Step 0: no valid action; reply could not be parsed" in text
    assert "The previous action did not work: the reply has no <tool_call> block" in text


def test_stored_messages_use_placeholders_and_sent_messages_inline_data_urls():
    obs = observation_with_history(5)
    stored = build_messages(obs)
    sent = inline_images(stored, observation_images(obs))
    # The stored form is JSON-serialisable and untouched by inlining.
    assert "data:" not in json.dumps(stored)
    urls = [part["image_url"]["url"] for m in sent if isinstance(m["content"], list)
            for part in m["content"] if part["type"] == "image_url"]
    assert len(urls) == 5
    decoded = [base64.b64decode(url.split(",", 1)[1]) for url in urls]
    assert decoded == [png(COLORS[j]) for j in (1, 2, 3, 4, 5)]
    assert all(url.startswith("data:image/png;base64,") for url in urls)
    # trajectory.expand_messages restores the same images from the stored JSON.
    expanded = expand_messages(json.dumps(stored), lambda j: f"image-{j}")
    restored = [part["image"] for m in expanded if isinstance(m["content"], list)
                for part in m["content"] if part.get("type") == "image"]
    assert restored == [f"image-{j}" for j in (1, 2, 3, 4, 5)]


def test_image_type_is_read_from_the_bytes():
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, "JPEG")
    assert image_data_url(buffer.getvalue()).startswith("data:image/jpeg;base64,")
    with pytest.raises(ValueError, match="PNG"):
        image_data_url(b"GIF89a....")


@pytest.mark.parametrize("variant", ["memory", "vanilla", "compact"])
@pytest.mark.parametrize("name", [spec.name for spec in ACTIONS])
def test_formatted_replies_parse_back(variant, name):
    action = example_action(name)
    reply = format_response(action, variant=variant, memory="price $120 at UA",
                            progress="searched", intention="finish")
    parsed = parse_response(reply, variant)
    assert parsed.action == action and parsed.error == ""
    assert parsed.memory == ("price $120 at UA" if variant == "memory" else "")
    if variant == "compact":  # the tool call alone
        assert reply == action.to_tool_call()
    else:
        assert parsed.progress == "searched" and parsed.intention == "finish"
    assert ("Memory:" in reply) == (variant == "memory")


def test_sections_span_lines_and_think_is_ignored():
    reply = ("<think>I could <tool_call>{\"name\": \"computer_use\", "
             "\"arguments\": {\"action\": \"go_back\"}}</tool_call></think>\n"
             "**Memory:** flight UA 12, $120\nreturn leg not found yet\n"
             "Progress: half done\nIntention: scroll\nAction: scroll down\n"
             '<tool_call>{"name": "computer_use", "arguments": {"action": "scroll", "direction": "down"}}'
             "</tool_call>")
    parsed = parse_response(reply)
    assert parsed.action == AgentAction("scroll", direction="down")
    assert parsed.memory == "flight UA 12, $120\nreturn leg not found yet"
    assert parsed.action_text == "scroll down"
    assert strip_think("reasoning only</think>Action: x") == "Action: x"
    assert strip_think("Action: x<think>unfinished") == "Action: x"


@pytest.mark.parametrize("reply", [
    "", "Memory: nothing", "<tool_call>{oops", "\x00\ufffd" * 50, "<think>",
    '<tool_call>{"name": "computer_use", "arguments": {"action": "fly"}}</tool_call>'])
def test_unparseable_replies_become_a_recorded_error_not_an_exception(reply):
    parsed = parse_response(reply)
    assert parsed.action is None
    assert parsed.error


def test_the_system_prompt_is_generated_from_the_action_definitions():
    for variant in ("memory", "vanilla"):
        prompt = system_prompt(variant)
        embedded = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
        assert json.loads(embedded) == tool_schema()
        for spec in offered_actions():
            assert f"- {spec.name}(" in prompt
        assert ("Memory:" in prompt) == (variant == "memory")


def test_each_full_round_shows_the_error_of_the_action_before_it():
    history = (Step(index=0, screenshot=png("red"), response="r0", action=AgentAction("go_back").to_json(),
                    action_error="no page to go back to"),
               Step(index=1, screenshot=png("green"), response="r1", action=AgentAction("go_back").to_json()))
    obs = Observation(instruction="x", screenshot=png("blue"), step=2, history=history)
    texts = [m["content"][0]["text"] for m in build_messages(obs) if m["role"] == "user"]
    assert len(texts) == 3
    assert "did not work" not in texts[0]
    assert "The previous action did not work: no page to go back to" in texts[1]
    assert "did not work" not in texts[2]


def test_the_compact_variant_is_short_and_names_every_action():
    compact, full = system_prompt("compact"), system_prompt("vanilla")
    assert len(compact) * 5 < len(full)
    for spec in offered_actions():
        assert spec.name in compact
    # Its one example is a call the parser accepts.
    example = "<tool_call>" + compact.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0] + "</tool_call>"
    assert parse_response(example, "compact").action == example_action("left_click")
    messages = build_messages(observation_with_history(2), AgentSettings(variant="compact", full_rounds=1))
    texts = [part["text"] for m in messages[1:] if isinstance(m["content"], list)
             for part in m["content"] if part.get("type") == "text"]
    assert texts[0].startswith("Task: Find the cheapest flight")
    assert "Step 0: left_click" in texts[0]  # older rounds still summarised
    assert not any("URL:" in text or "Title:" in text for text in texts)
    assert image_steps(messages) == [1, 2]
    failed = Observation(instruction="x", screenshot=png("red"), step=1, last_action_error="no such element")
    last = build_messages(failed, AgentSettings(variant="compact"))[-1]["content"][0]["text"]
    assert "no such element" in last


@pytest.mark.parametrize("variant", VARIANTS)
def test_element_actions_are_offered_only_when_the_settings_ask(variant):
    element_names = [spec.name for spec in ACTIONS if spec.on_element]
    assert len(element_names) == 4
    plain, offered = system_prompt(variant), system_prompt(variant, element_actions=True)
    assert plain == system_prompt(variant, element_actions=False)
    assert not any(name in plain for name in element_names) and "element list" not in plain
    assert all(name in offered for name in element_names) and "element list" in offered
    # The coordinate actions stay offered beside them.
    assert all(spec.name in offered for spec in offered_actions())
    if variant != "compact":
        embedded = offered.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
        assert json.loads(embedded) == tool_schema(element_actions=True)
    # build_messages follows AgentSettings.element_actions.
    observation = observation_with_history(1)
    on = build_messages(observation, AgentSettings(variant=variant, element_actions=True))
    off = build_messages(observation, AgentSettings(variant=variant))
    assert on[0]["content"] == offered and off[0]["content"] == plain
    assert on[1:] == off[1:]  # only the system prompt differs
    # An observation that numbers the page's elements (modes som, axtree, elements) turns them on too.
    numbered = build_messages(replace(observation, numbered=True), AgentSettings(variant=variant))
    assert numbered[0]["content"] == offered and numbered[1:] == off[1:]


def test_a_reply_with_an_element_action_parses_whatever_the_prompt_offered():
    action = AgentAction("type_element", element=2, text="hello", press_enter=True)
    parsed = parse_response(format_response(action, memory="the form is open"))
    assert parsed.action == action and parsed.error == "" and parsed.memory == "the form is open"
    assert parsed.action_text == 'type_element [2] "hello" + Enter'
    bad = parse_response('<tool_call>{"name": "computer_use", "arguments": {"action": "click_element", '
                         '"element": 0}}</tool_call>')
    assert bad.action is None and "'element' must be from 1" in bad.error


# ------------------------------------------------------------ untrusted input: parse_response is total

_CALL = '<tool_call>{{"name": "computer_use", "arguments": {arguments}}}</tool_call>'


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", ["[1, 2]", '{"name": "left_click"}', "null", "7"])
def test_an_action_that_is_a_list_or_an_object_is_an_agent_mistake(variant, action):
    reply = "Memory: m\nProgress: p\nIntention: i\nAction: a\n" + _CALL.format(
        arguments=f'{{"action": {action}, "coordinate": [1, 2]}}')
    parsed = parse_response(reply, variant)
    assert isinstance(parsed, ParsedResponse)
    assert parsed.action is None and "unknown action" in parsed.error
    # The acceptance case of the issue, verbatim.
    acceptance = '<tool_call>{"name": "computer_use", "arguments": {"action": [1, 2]}}</tool_call>'
    parsed = parse_response(acceptance, variant)
    assert parsed.action is None and parsed.error


_HEADS = st.sampled_from(["Memory", "Progress", "Intention", "Action", "**memory**", "> Action"])
_ARGUMENTS = st.fixed_dictionaries({"action": st.sampled_from([spec.name for spec in ACTIONS]) | JSON_VALUES},
                                   optional={"coordinate": JSON_VALUES, "text": JSON_VALUES,
                                             "direction": JSON_VALUES, "time": JSON_VALUES})
# (the tool name's own fuzzing is test_actions')
_CALLS = json_text(st.fixed_dictionaries({"name": st.just("computer_use"),
                                          "arguments": _ARGUMENTS | JSON_VALUES}))
_SECTIONED = st.builds(
    lambda heads, call, think: "".join(f"{h}: {t}\n" for h, t in heads) + think + call,
    st.lists(st.tuples(_HEADS, ODD_TEXT), max_size=4),
    _CALLS.map(lambda t: f"<tool_call>{t}</tool_call>") | ODD_TEXT,
    st.sampled_from(["", "<think>", "</think>", "<think>x</think>", "<think><tool_call>{}</tool_call>"]))


@settings(max_examples=400, deadline=None)
@given(text=ODD_TEXT | _SECTIONED, variant=st.sampled_from(VARIANTS))
def test_any_reply_is_read_without_raising(text, variant):
    parsed = parse_response(text, variant)
    assert (parsed.action is None) == bool(parsed.error)
    if parsed.action is not None:
        parsed.action.to_json().encode("utf-8")
    assert all(isinstance(v, str) for v in (parsed.memory, parsed.progress, parsed.intention,
                                            parsed.action_text))


@pytest.mark.parametrize("reply", [None, b"<tool_call>", 42, ["<tool_call>"]])
def test_a_reply_that_is_not_text_is_an_agent_mistake(reply):
    parsed = parse_response(reply)  # type: ignore[arg-type]
    assert parsed.action is None and parsed.error


def test_many_unclosed_think_tags_are_read_in_one_pass():
    # Quadratic before (a lazy regex rescanned the rest from each tag: hours for this reply); the
    # suite's timeout fails the test if that comes back.
    reply = "Action: go back\n" + "<think>" * 200_000
    assert strip_think(reply) == "Action: go back"
    assert parse_response(reply).error == "the reply has no <tool_call> block"
    assert strip_think("a<think>b</think>c<think>d</think>e</think>f<think>g") == "f"


def test_the_history_is_the_episodes_steps_read_typed():
    # The context reads a step's typed action and whether the page changed from the Step itself.
    action = AgentAction("type", text="Paris", press_enter=True)
    unchanged = Step(index=0, screenshot=png("red"), response="r0", action=action.to_json(), title="Search",
                     same_as_next=True)
    assert unchanged.parsed_action == action and not unchanged.page_changed
    assert Step(index=1).parsed_action is None
    obs = Observation(instruction="x", screenshot=png("blue"), step=1, history=(unchanged,))
    text = build_messages(obs, AgentSettings(full_rounds=0))[-1]["content"][0]["text"]
    assert 'Step 0: type "Paris" + Enter; page unchanged; title "Search"' in text


def test_round_is_deprecated_and_builds_a_step():
    import webgym_rollout.agent as agent

    with pytest.warns(DeprecationWarning, match="Round"):
        round_ = agent.Round(step=2, screenshot=png("red"), response="r", action=AgentAction("go_back"),
                             page_changed=False)
    assert isinstance(round_, Step)
    assert (round_.index, round_.parsed_action, round_.same_as_next) == (2, AgentAction("go_back"), True)


def test_the_action_space_moved_and_the_old_path_warns():
    import webgym_rollout.actions as actions
    import webgym_rollout.agent.actions as old

    with pytest.warns(DeprecationWarning, match="webgym_rollout.actions.AgentAction"):
        assert old.AgentAction is actions.AgentAction


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_shows_the_text_observation_in_the_current_user_turn_only(variant):
    text = 'Interactive elements:\n[1] button "Submit" (id=subbtn)\n[2] link "Help"'
    agent = AgentSettings(variant=variant, full_rounds=2)
    plain = observation_with_history(3)
    shown = observation_with_history(3, text=text)
    before, after = build_messages(plain, agent), build_messages(shown, agent)
    # Only the last user turn changes: its text part gains the observation after a blank line.
    assert after[:-1] == before[:-1]
    assert after[-1]["content"][0]["text"] == before[-1]["content"][0]["text"] + "\n\n" + text
    assert after[-1]["content"][1] == before[-1]["content"][1] == {"type": "image", "step": 3}
    assert [m for m in after if m["role"] == "user" and text in m["content"][0]["text"]] == [after[-1]]
    # Text-only modes leave out every image part; the texts stay.
    no_image = build_messages(observation_with_history(3, text=text, image=False), agent)
    assert image_steps(no_image) == []
    assert [m["content"][0]["text"] for m in no_image if m["role"] == "user"] == [
        m["content"][0]["text"] for m in after if m["role"] == "user"]
