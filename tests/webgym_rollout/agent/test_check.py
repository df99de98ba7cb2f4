"""``webgym-rollout check-endpoint``: one real prompt to an OpenAI-protocol stand-in on 127.0.0.1."""

from __future__ import annotations

import json
import socket

from click.testing import CliRunner

from webgym_rollout.actions import AgentAction, pixels_to_grid
from webgym_rollout.agent.check import PROBE_BUTTON, check_endpoint_command, probe_observation
from webgym_rollout.agent.protocol import build_messages, format_response, system_prompt
from webgym_rollout.cli import main

CENTRE = pixels_to_grid(PROBE_BUTTON[0] + PROBE_BUTTON[2] / 2, PROBE_BUTTON[1] + PROBE_BUTTON[3] / 2,
                        (320, 240))
ON_BUTTON = format_response(AgentAction("left_click", coordinate=CENTRE), memory="-", progress="start",
                            intention="press Submit")


def invoke(*args: str):
    return CliRunner().invoke(main, ["check-endpoint", *args])


def test_a_reply_that_parses_passes_and_the_request_is_a_runs_request(scripted_openai):
    server = scripted_openai([{"content": ON_BUTTON, "logprobs": [-0.5, -0.25]}])
    done = invoke(server.base_url, "--model", "my-vlm")
    assert done.exit_code == 0, done.output
    assert "reply parses: yes, left_click" in done.output
    assert "the click lands on the button" in done.output
    assert "log-probabilities returned: yes" in done.output
    assert "token ids returned: no" in done.output  # the stand-in returns none
    body = server.requests[0]
    assert body["model"] == "my-vlm" and body["temperature"] == 0
    # The prompt a run builds (memory variant), with the probe's screenshot inlined as a data URL.
    assert body["messages"][0] == {"role": "system", "content": system_prompt("memory")}
    text = build_messages(probe_observation())[-1]["content"][0]["text"]
    parts = body["messages"][-1]["content"]
    assert parts[0] == {"type": "text", "text": text}
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert body["return_token_ids"] is True and body["top_k"] == -1  # vLLM's extensions, as a run sends


def test_a_malformed_reply_fails_with_the_parsers_reason(scripted_openai):
    server = scripted_openai(["I would click the Submit button."])
    done = invoke(server.base_url, "--model", "my-vlm", "--variant", "compact")
    assert done.exit_code == 1
    assert "reply parses: no: the reply has no <tool_call> block" in done.output
    assert "no-op" in done.output
    assert server.requests[0]["messages"][0]["content"] == system_prompt("compact")


def test_a_call_moved_into_tool_calls_by_a_tool_parser_parses_the_same(scripted_openai):
    """vLLM with --enable-auto-tool-choice --tool-call-parser hermes, on a request that lists tools,
    moves the call out of the text: the client writes it back as a <tool_call> block."""
    arguments = json.dumps({"action": "left_click", "coordinate": [100, 100]})
    server = scripted_openai([{"content": "Action: click.", "tool_calls": [("computer_use", arguments)]}])
    done = invoke(server.base_url, "--model", "my-vlm")
    assert done.exit_code == 0, done.output
    assert "reply parses: yes, left_click" in done.output
    assert "the click lands off the button" in done.output


def test_an_unknown_model_is_named_and_fails(scripted_openai):
    server = scripted_openai([{"status": 404}])
    done = invoke(server.base_url, "--model", "no-such-model")
    assert done.exit_code == 1
    assert "the endpoint did not answer" in done.output and "404" in done.output


def test_an_unreachable_endpoint_is_named_and_fails():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = CliRunner().invoke(check_endpoint_command, [f"http://127.0.0.1:{port}/v1", "--model", "m",
                                                       "--timeout-s", "5"])
    assert done.exit_code == 1
    assert "the endpoint did not answer" in done.output and f"127.0.0.1:{port}" in done.output


def test_the_probe_page_shows_its_button_where_the_check_expects_it():
    from io import BytesIO

    from PIL import Image

    image = Image.open(BytesIO(probe_observation().screenshot)).convert("RGB")
    x, y, width, height = PROBE_BUTTON
    assert image.size == (320, 240)
    assert image.getpixel((x + 5, y + 5)) == (224, 224, 224)  # the button's fill
    assert image.getpixel((x - 5, y - 5)) == (255, 255, 255)  # the page around it
