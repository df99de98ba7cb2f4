"""Policies against a real OpenAI-protocol server on 127.0.0.1 (scripted replies), and the random one."""

from __future__ import annotations

import asyncio
import base64
import dataclasses

import pytest

from tests.webgym_rollout.agent.test_protocol import observation_with_history, png
from webgym_core.endpoint import Endpoint
from webgym_rollout.actions import AgentAction, grid_to_pixels
from webgym_rollout.agent.policies import (
    OpenAIPolicy,
    PixelRandomPolicy,
    Policy,
    PolicyRejected,
    PolicySettings,
    PolicyTimeout,
    PolicyUnavailable,
    RandomPolicy,
    RandomPolicySettings,
    SamplingSettings,
    make_policy,
)
from webgym_rollout.agent.protocol import AgentSettings, Observation, format_response
from webgym_rollout.errors import PolicyError

GOOD_REPLY = format_response(AgentAction("left_click", coordinate=(250, 500)), memory="nothing yet",
                             progress="start", intention="open the menu")


def endpoint(server, **kwargs) -> Endpoint:
    kwargs.setdefault("backoff_s", 0.01)
    return Endpoint(base_url=server.base_url, model="policy-model", api_key="test", **kwargs)


def image_urls(body: dict) -> list[str]:
    return [part["image_url"]["url"] for message in body["messages"] if isinstance(message["content"], list)
            for part in message["content"] if part.get("type") == "image_url"]


async def test_images_go_inline_and_usage_is_recorded(scripted_openai):
    usage = {"prompt_tokens": 1234, "completion_tokens": 56}
    server = scripted_openai([{"content": GOOD_REPLY, "usage": usage}])
    obs = observation_with_history(5)
    sampling = SamplingSettings(temperature=0.7, top_p=0.9, max_tokens=300, sampling_seed=11)
    async with OpenAIPolicy(endpoint(server), sampling=sampling) as policy:
        assert isinstance(policy, Policy)
        output = await policy.act(obs)
        assert policy.usage.prompt_tokens == 1234 and policy.usage.completion_tokens == 56
        assert policy.usage.requests == 1
    assert output.action == AgentAction("left_click", coordinate=(250, 500))
    assert output.parsed.memory == "nothing yet"
    assert (output.prompt_tokens, output.completion_tokens) == (1234, 56)
    assert output.finish_reason == "stop" and output.model == "policy-model"
    body = server.requests[0]
    assert body["model"] == "policy-model"
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.7, 0.9, 300, 11)
    urls = image_urls(body)
    # Four full rounds plus the current screenshot, as base64 PNG data URLs (no file paths).
    assert len(urls) == 5
    assert all(url.startswith("data:image/png;base64,") for url in urls)
    assert base64.b64decode(urls[-1].split(",", 1)[1]) == obs.screenshot
    assert "file://" not in str(body)
    # The stored messages hold placeholders for the same images.
    assert "data:image" not in output.messages_json
    assert '"type": "image", "step": 5' in output.messages_json


async def test_the_policy_version_and_token_logprobs_are_kept(scripted_openai):
    server = scripted_openai([{"content": GOOD_REPLY, "model": "checkpoint-v7", "logprobs": [-0.5, -0.25]}])
    async with OpenAIPolicy(endpoint(server)) as policy:
        output = await policy.act(observation_with_history(0))
    assert server.requests[0]["logprobs"] is True
    # The version the reply's model name gives, read once where the reply arrives.
    assert output.policy_version == 7 and output.logprobs == (-0.5, -0.25)
    server = scripted_openai([GOOD_REPLY])
    async with OpenAIPolicy(endpoint(server), sampling=SamplingSettings(logprobs=False)) as policy:
        output = await policy.act(observation_with_history(0))
    assert "logprobs" not in server.requests[0] and output.logprobs == ()
    assert output.policy_version is None  # the model name the reply carries names no version


def test_policy_settings_build_the_policy_they_describe():
    assert isinstance(make_policy(PolicySettings()), RandomPolicy)
    assert isinstance(make_policy(PolicySettings(kind="pixel_random")), PixelRandomPolicy)
    with pytest.raises(ValueError, match="base_url: the openai policy needs"):
        PolicySettings(kind="openai")
    policy = make_policy(PolicySettings(kind="openai", endpoint=Endpoint(base_url="http://127.0.0.1:9/v1",
                                                                        model="m"),
                                        sampling=SamplingSettings(temperature=0.0)))
    assert isinstance(policy, OpenAIPolicy) and policy.model_id == "m" and policy.sampling.temperature == 0.0


def test_a_shortcut_is_named_with_the_expert_and_must_be_known():
    assert PolicySettings(kind="expert", shortcut="spray_numbers").shortcut == "spray_numbers"
    known = "list_everything, spray_numbers, do_everything"
    with pytest.raises(ValueError, match=rf"^shortcut: unknown shortcut 'spray'; expected one of {known}$"):
        PolicySettings(kind="expert", shortcut="spray")
    with pytest.raises(ValueError, match=r"^shortcut: a shortcut is played by the scripted expert \(--policy "
                                         r"expert --policy-shortcut do_everything\), not by the random "
                                         r"policy$"):
        PolicySettings(kind="random", shortcut="do_everything")


async def test_transient_server_errors_are_retried(scripted_openai):
    server = scripted_openai([{"status": 500}, {"status": 503}, GOOD_REPLY])
    async with OpenAIPolicy(endpoint(server, max_retries=3)) as policy:
        output = await policy.act(observation_with_history(0))
        assert policy.usage.retries == 2 and policy.usage.requests == 3
    assert output.action is not None
    assert len(server.requests) == 3


async def test_retries_run_out_into_a_typed_error_naming_the_endpoint(scripted_openai):
    server = scripted_openai([{"status": 500}])
    async with OpenAIPolicy(endpoint(server, max_retries=1)) as policy:
        with pytest.raises(PolicyUnavailable, match=server.base_url.replace(".", r"\.")) as caught:
            await policy.act(observation_with_history(0))
        assert policy.usage.failures == 1
    assert isinstance(caught.value, PolicyError)
    assert len(server.requests) == 2


async def test_a_rejected_request_is_not_retried(scripted_openai):
    server = scripted_openai([{"status": 400}, GOOD_REPLY])
    async with OpenAIPolicy(endpoint(server, max_retries=3)) as policy:
        with pytest.raises(PolicyRejected, match="HTTP 400"):
            await policy.act(observation_with_history(0))
    assert len(server.requests) == 1


async def test_a_slow_endpoint_times_out(scripted_openai):
    server = scripted_openai([{"content": GOOD_REPLY, "delay_s": 1.0}])
    async with OpenAIPolicy(endpoint(server, timeout_s=0.2, max_retries=1)) as policy:
        with pytest.raises(PolicyTimeout):
            await policy.act(observation_with_history(0))
    assert len(server.requests) == 2


async def test_connection_refused_is_unavailable(unused_port):
    config = Endpoint(base_url=f"http://127.0.0.1:{unused_port}/v1", model="m", max_retries=0)
    async with OpenAIPolicy(config) as policy:
        with pytest.raises(PolicyUnavailable, match="connection failed"):
            await policy.act(observation_with_history(0))


async def test_an_unparseable_reply_is_data_not_an_error(scripted_openai):
    cut = {"content": "<tool_call>{", "finish_reason": "length"}
    server = scripted_openai(["I am not sure what to do.", cut])
    async with OpenAIPolicy(endpoint(server)) as policy:
        first = await policy.act(observation_with_history(0))
        second = await policy.act(observation_with_history(0))
    assert first.action is None and "no <tool_call>" in first.parsed.error
    assert second.action is None and second.finish_reason == "length"
    assert first.response == "I am not sure what to do."


async def test_concurrency_is_bounded(scripted_openai):
    server = scripted_openai([{"content": GOOD_REPLY, "delay_s": 0.2}])
    async with OpenAIPolicy(endpoint(server, max_concurrency=2)) as policy:
        outputs = await asyncio.gather(*(policy.act(observation_with_history(0)) for _ in range(6)))
    assert all(o.action is not None for o in outputs)
    assert len(server.requests) == 6
    assert server.max_in_flight <= 2


async def test_the_vanilla_variant_is_sent_and_read(scripted_openai):
    reply = format_response(AgentAction("go_back"), variant="vanilla", progress="p", intention="i")
    server = scripted_openai([reply])
    async with OpenAIPolicy(endpoint(server), agent=AgentSettings(variant="vanilla")) as policy:
        output = await policy.act(observation_with_history(2))
    assert output.action == AgentAction("go_back")
    assert "Memory:" not in server.requests[0]["messages"][0]["content"]


ELEMENTS = (
    {"x": 10, "y": 60, "width": 60, "height": 20, "tag": "button", "role": "button", "text": "Submit"},
    {"x": 90, "y": 60, "width": 50, "height": 20, "tag": "a", "role": "link", "text": "Cancel"},
    {"x": 0, "y": 0, "width": 160, "height": 50, "tag": "div", "role": "", "text": "Click on Submit."},
)


def random_observation(step: int = 0, episode_id: str = "ep-1", elements=ELEMENTS) -> Observation:
    return Observation(instruction="Click on the Submit button.", screenshot=png("white", (160, 210)),
                       viewport=(160, 210), step=step, elements=elements, episode_id=episode_id)


async def test_random_policy_clicks_interactive_elements_and_types_instruction_words():
    policy = RandomPolicy(RandomPolicySettings(seed=3, type_probability=0.3))
    assert isinstance(policy, Policy)
    clicks, typed = [], []
    for step in range(60):
        output = await policy.act(random_observation(step))
        assert output.action is not None and output.parsed.error == ""
        if output.action.name == "left_click":
            clicks.append(grid_to_pixels(output.action.coordinate, (160, 210)))
        elif output.action.name == "type":
            typed.append(output.action.text)
        assert output.messages[0]["role"] == "system"
    assert clicks and typed
    # Clicks land on the button or the link (never on the plain div), at their centres.
    assert set(clicks) <= {(40, 70), (115, 70)}
    assert len(set(clicks)) == 2
    words = {"Click", "on", "the", "Submit", "button"}
    assert all(set(text.split()) <= words for text in typed)


async def test_random_policy_is_seeded_and_independent_of_call_order():
    policy = RandomPolicy(RandomPolicySettings(seed=5))
    forward = [(await policy.act(random_observation(s))).response for s in range(8)]
    backward = [(await policy.act(random_observation(s))).response for s in reversed(range(8))]
    assert forward == backward[::-1]
    other_episode = [(await policy.act(random_observation(s, "ep-2"))).response for s in range(8)]
    other_seed = [(await RandomPolicy(RandomPolicySettings(seed=6)).act(random_observation(s))).response
                  for s in range(8)]
    assert other_episode != forward and other_seed != forward


async def test_random_policy_without_elements_scrolls_or_types():
    policy = RandomPolicy(RandomPolicySettings(seed=1))
    names = {(await policy.act(random_observation(s, elements=()))).action.name for s in range(20)}
    assert names <= {"scroll", "type"} and "scroll" in names


FORM = (
    {"x": 10, "y": 20, "width": 100, "height": 20, "tag": "input", "role": "textbox", "text": ""},
    {"x": 10, "y": 50, "width": 100, "height": 20, "tag": "select", "role": "combobox", "text": "Ada Grace"},
    {"x": 10, "y": 80, "width": 60, "height": 20, "tag": "button", "role": "button", "text": "Submit"},
)


@pytest.mark.parametrize("offered", ["numbered", "agent"])
async def test_random_policy_acts_by_element_number_where_element_actions_are_offered(offered):
    agent = AgentSettings(element_actions=offered == "agent")
    policy = RandomPolicy(RandomPolicySettings(seed=2, type_probability=0.3), agent=agent)
    seen: dict[str, set] = {}
    for step in range(80):
        observation = dataclasses.replace(random_observation(step, elements=FORM),
                                          numbered=offered == "numbered")
        output = await policy.act(observation)
        action = output.action
        assert output.parsed.error == "" and action is not None
        assert "click_element" in output.messages[0]["content"]  # the prompt offered them
        seen.setdefault(action.name, set()).add(
            (action.element, action.text or action.option or ""))
    assert set(seen) <= {"click_element", "type_element", "select_element", "scroll"}
    # Text goes into the text field only, instruction words; options are words of the drop-down.
    assert {element for element, _ in seen["type_element"]} == {1}
    words = {"Click", "on", "the", "Submit", "button"}
    assert all(set(text.split()) <= words for _, text in seen["type_element"])
    assert seen["select_element"] <= {(2, "Ada"), (2, "Grace")} and len(seen["select_element"]) == 2
    assert {element for element, _ in seen["click_element"]} == {1, 3}
    # Without element actions the same policy clicks coordinates.
    plain = await policy.act(random_observation(0, elements=FORM))
    assert offered == "agent" or plain.action.name in {"left_click", "type", "scroll"}


def test_a_call_returned_as_native_tool_calls_is_put_back_into_the_text():
    from openai.types.chat import ChatCompletionMessage

    from webgym_core.completion import ChatReply
    from webgym_rollout.agent.policies import _reply_text
    from webgym_rollout.agent.protocol import parse_response

    def reply(message: dict) -> ChatReply:
        return ChatReply.read({"choices": [{"message": ChatCompletionMessage.model_validate(message)}]},
                              url="http://127.0.0.1:1/v1")

    text = _reply_text(reply({
        "role": "assistant", "content": "Memory: m\nAction: go back",
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "computer_use", "arguments": '{"action": "go_back"}'}}]}))
    assert text.startswith("Memory: m")
    assert parse_response(text).action == AgentAction("go_back")
    assert _reply_text(reply({"role": "assistant", "content": GOOD_REPLY})) == GOOD_REPLY


async def test_pixel_random_policy_clicks_anywhere_with_well_formed_replies():
    policy = PixelRandomPolicy(RandomPolicySettings(seed=2), agent=AgentSettings(variant="compact"))
    assert isinstance(policy, Policy) and not getattr(policy, "observes_elements", False)
    points = []
    for step in range(200):
        output = await policy.act(random_observation(step, elements=()))
        assert output.action is not None and output.action.name == "left_click" and output.parsed.error == ""
        assert output.response == output.action.to_tool_call()  # compact: the call alone
        points.append(output.action.coordinate)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    assert 0 <= min(xs) < 100 and 900 < max(xs) <= 1000 and 0 <= min(ys) < 100 and 900 < max(ys) <= 1000
    # Each quarter of the grid gets its share of 200 uniform clicks.
    quarters = [sum(1 for x, y in points if (x < 500) == left and (y < 500) == top)
                for left in (True, False) for top in (True, False)]
    assert min(quarters) > 25
    # Seeded by (seed, episode, step), blind to the page: other elements, same clicks.
    again = [(await policy.act(random_observation(s, elements=ELEMENTS))).action.coordinate for s in range(5)]
    assert again == points[:5]
    reseeded = PixelRandomPolicy(RandomPolicySettings(seed=3))
    other = [(await reseeded.act(random_observation(s))).action.coordinate for s in range(5)]
    assert other != points[:5]


# ------------------------------------------- untrusted input: a broken endpoint's replies never crash

def _completion(message: object, **fields: object) -> dict:
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop", **fields}]}


@pytest.mark.parametrize(("body", "message"), [
    ({"choices": []}, "without choices"), ({"choices": "x"}, "without choices"), ([1, 2], "without choices"),
    (None, "without choices"), ({"choices": [5]}, "without a message"),
    (_completion(None), "without a message"),
    (_completion({"content": ["a", {"b": 1}]}), "list, not text"),
    (_completion({"content": 12}), "int, not text"),
    (b"<html>Bad gateway</html>", "not a chat completion"), (b"[" * 100_000, "not a chat completion"),
])
async def test_a_reply_that_is_no_chat_completion_is_an_endpoint_error_naming_the_url(scripted_openai, body,
                                                                                     message):
    server = scripted_openai([{"body": body}])
    async with OpenAIPolicy(endpoint(server, max_retries=0)) as policy:
        with pytest.raises(PolicyUnavailable, match=message) as caught:
            await policy.act(observation_with_history(0))
    assert server.base_url in str(caught.value)


async def test_null_content_is_an_agent_mistake(scripted_openai):
    server = scripted_openai([{"body": _completion({"role": "assistant", "content": None})}])
    async with OpenAIPolicy(endpoint(server)) as policy:
        output = await policy.act(observation_with_history(0))
    assert output.response == "" and output.action is None and "no <tool_call>" in output.parsed.error


async def test_odd_fields_of_a_completion_are_read_as_nothing(scripted_openai):
    logprobs = {"content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": None}]}
    message = {"content": "x \ud800 y\n" + GOOD_REPLY}
    body = {**_completion(message, finish_reason=["stop"], logprobs=logprobs),
            "usage": {"prompt_tokens": "many", "completion_tokens": -3}, "model": {"name": "m"},
            "system_fingerprint": 7}
    server = scripted_openai([{"body": body}])
    async with OpenAIPolicy(endpoint(server)) as policy:
        output = await policy.act(observation_with_history(0))
        assert policy.usage.prompt_tokens == 0
    assert output.action == AgentAction("left_click", coordinate=(250, 500))
    output.response.encode("utf-8")  # the lone surrogate was replaced: the step can be stored
    assert "\ufffd" in output.response
    assert (output.prompt_tokens, output.completion_tokens, output.finish_reason) == (0, 0, "")
    assert output.logprobs == () and output.policy_version is None


@pytest.mark.parametrize("call", [
    {"function": {"name": "computer_use", "arguments": {"action": [1, 2]}}},
    {"function": {"name": ["computer_use"], "arguments": '{"action": "go_back"}'}},
    {"function": {"name": "computer_use", "arguments": "[" * 100_000}},
    {"function": {"name": "computer_use", "arguments": '{"action": "wait", "time": 1' + "0" * 5000 + "}"}},
    {"function": None}, "not a call",
])
async def test_odd_native_tool_calls_are_agent_mistakes(scripted_openai, call):
    server = scripted_openai([{"body": _completion({"content": "Action: x", "tool_calls": [call]})}])
    async with OpenAIPolicy(endpoint(server)) as policy:
        output = await policy.act(observation_with_history(0))
    assert output.action is None and output.parsed.error
    output.response.encode("utf-8")
