"""Tests for webgym_rollout/policy_server.py: a real server on 127.0.0.1, the real openai client."""

from __future__ import annotations

import asyncio
import base64
import io
from pathlib import Path

import httpx
import openai
import pytest
from click.testing import CliRunner
from PIL import Image

from tests.models import tiny_model_dir
from webgym_rollout.cli import main as rollout_main
from webgym_rollout.modeling import load_processor
from webgym_rollout.policy_server import (
    PolicyServerError,
    PolicyServerSettings,
    _check_bind,
    running_policy_server,
)


def _data_url(color: tuple[int, int, int], size: tuple[int, int] = (224, 224), fmt: str = "PNG") -> str:
    image = Image.new("RGB", size, color)
    for x in range(0, min(size), 5):  # some structure so patches differ
        image.putpixel((x, x), (255 - color[0], 255 - color[1], 0))
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(buffer.getvalue()).decode()}"


def _messages(url: str, text: str = "Click the button") -> list[dict]:
    return [
        {"role": "system", "content": "You are a web agent."},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                     {"type": "text", "text": text}]},
    ]


@pytest.fixture(scope="module")
def tiny_dir() -> Path:
    return tiny_model_dir("qwen2_vl")


@pytest.fixture(scope="module")
def server(tiny_dir):
    settings = PolicyServerSettings(model=str(tiny_dir), port=0, max_new_tokens=12, served_model_name="tiny")
    with running_policy_server(settings) as base_url:
        yield base_url


@pytest.fixture
def client(server):
    return openai.AsyncOpenAI(base_url=server, api_key="unused", max_retries=0, timeout=60)


async def _greedy(client, url: str, **kw):
    return await client.chat.completions.create(
        model="tiny", messages=_messages(url), temperature=0, max_tokens=kw.pop("max_tokens", 6),
        logprobs=True, top_logprobs=5, **kw)


async def test_image_request_returns_text_and_usage(client, tiny_dir):
    reply = await _greedy(client, _data_url((200, 30, 30)))
    choice = reply.choices[0]
    assert isinstance(choice.message.content, str)
    assert choice.message.role == "assistant"
    assert reply.model == "tiny"
    assert 1 <= reply.usage.completion_tokens <= 6
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert len(choice.logprobs.content) == reply.usage.completion_tokens
    if choice.finish_reason == "length":
        assert reply.usage.completion_tokens == 6
    else:
        assert choice.finish_reason == "stop"
    # Greedy: every chosen token is the most likely one.
    for entry in choice.logprobs.content:
        assert entry.logprob == pytest.approx(max(t.logprob for t in entry.top_logprobs))

    # prompt_tokens is exactly what the processor makes of these messages, image tokens included.
    processor = load_processor(tiny_dir)
    prompt = processor.apply_chat_template(
        [{"role": "system", "content": "You are a web agent."},
         {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Click the button"}]}],
        tokenize=False, add_generation_prompt=True)
    enc = processor(text=[prompt], images=[Image.new("RGB", (224, 224))], return_tensors="pt")
    assert reply.usage.prompt_tokens == enc["input_ids"].shape[1]


async def test_the_image_reaches_the_model(client):
    red = await _greedy(client, _data_url((200, 30, 30)))
    blue = await _greedy(client, _data_url((20, 40, 220)))
    red_again = await _greedy(client, _data_url((200, 30, 30)))
    first = lambda reply: [(t.token, t.logprob) for t in reply.choices[0].logprobs.content[0].top_logprobs]  # noqa: E731
    # Same image: identical distribution; different image, same prompt size: a different one.
    assert first(red) == first(red_again)
    assert red.usage.prompt_tokens == blue.usage.prompt_tokens
    assert first(red) != first(blue)

    small = await _greedy(client, _data_url((200, 30, 30), size=(112, 112)))
    # 224x224 -> 8x8 merged patches (64 tokens); 112x112 -> 4x4 (16 tokens).
    assert red.usage.prompt_tokens - small.usage.prompt_tokens == 64 - 16


async def test_stop_strings_cut_the_reply(client):
    url = _data_url((200, 30, 30))
    full = await _greedy(client, url, max_tokens=8)
    text = full.choices[0].message.content
    assert len(text) >= 3, f"the tiny model's greedy reply is too short to test stop strings: {text!r}"
    stop = text[1:3]
    cut = await _greedy(client, url, max_tokens=8, stop=[stop])
    assert cut.choices[0].message.content == text[:text.find(stop)]
    assert cut.choices[0].finish_reason == "stop"
    # The token bytes add up to the text (byte-level pieces may split UTF-8 characters).
    entries = full.choices[0].logprobs.content
    if full.choices[0].finish_reason == "stop":
        entries = entries[:-1]  # the end-of-turn token is not part of the text
    raw = b"".join(bytes(t.bytes) for t in entries)
    assert raw.decode("utf-8", errors="replace") == text


async def test_sampling_is_reproducible_with_a_seed(client):
    url = _data_url((10, 200, 10))
    kw = dict(model="tiny", messages=_messages(url), temperature=1.0, top_p=0.9, max_tokens=8, seed=1234)
    a = await client.chat.completions.create(**kw)
    b = await client.chat.completions.create(**kw)
    assert a.choices[0].message.content == b.choices[0].message.content


async def test_concurrent_requests_all_answer(client):
    urls = [_data_url((i * 40, 100, 255 - i * 40)) for i in range(4)]
    replies = await asyncio.gather(*(_greedy(client, url, max_tokens=3) for url in urls))
    assert [r.usage.prompt_tokens for r in replies] == [replies[0].usage.prompt_tokens] * 4
    async with httpx.AsyncClient() as http:
        health = (await http.get(client.base_url.join("/health").__str__())).json()
    assert health["requests_served"] >= 4 and health["model"] == "tiny"


async def test_models_endpoint_lists_the_served_name(client, tiny_dir):
    models = await client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert models.data[0].model_extra["root"] == str(tiny_dir)


@pytest.mark.parametrize("change, message", [
    ({"url": "data:image/png;base64,!!notbase64!!"},
     "messages[1].content[0].image_url: the image data URL is not valid base64"),
    ({"url": "data:image/png;base64," + base64.b64encode(b"not a png").decode()},
     "does not hold a readable image"),
    ({"url": "http://127.0.0.2/shot.png"}, "only inline base64 data URLs"),
    ({"url": "file:///tmp/shot.png"}, "only inline base64 data URLs"),
    ({"url": "data:text/plain,hello"}, "malformed image data URL"),
    ({"model": "gpt-4o"}, "unknown model 'gpt-4o'; this server serves 'tiny'"),
    ({"messages": []}, "messages must not be empty"),
    ({"n": 2}, "only n=1"),
    ({"temperature": -1}, "temperature"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "role"),
])
async def test_bad_requests_get_a_clear_400(client, change, message):
    change = dict(change)
    kw = dict(model="tiny", messages=_messages(change.pop("url", _data_url((1, 2, 3)))), max_tokens=2)
    kw.update(change)
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(**kw)
    assert info.value.status_code == 400
    assert message in info.value.message


async def test_reload_swaps_the_checkpoint(tiny_dir, tmp_path):
    other = tiny_model_dir("qwen2_vl", seed=7)
    name = str(tiny_dir)
    settings = PolicyServerSettings(model=name, port=0, max_new_tokens=6)
    kw = dict(model=name, messages=_messages(_data_url((120, 60, 200))), temperature=0, max_tokens=4,
              logprobs=True, top_logprobs=3)
    logprobs = lambda reply: [t.logprob for t in reply.choices[0].logprobs.content]  # noqa: E731
    with running_policy_server(settings) as base_url:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        root = base_url.removesuffix("/v1")
        async with httpx.AsyncClient(timeout=60) as http:
            before = await client.chat.completions.create(**kw)
            bad = await http.post(f"{root}/reload", json={"model": str(tmp_path / "missing")})
            assert bad.status_code == 400
            assert "missing" in bad.json()["error"]["message"]
            assert f"still serving {name!r}" in bad.json()["error"]["message"]

            ok = await http.post(f"{root}/reload", json={"model": str(other)})
            assert ok.status_code == 200, ok.text
            assert ok.json()["previous_checkpoint"] == name and ok.json()["checkpoint"] == str(other)
            after = await client.chat.completions.create(**kw)  # the served name did not change
            models = await client.models.list()
            assert models.data[0].id == name and models.data[0].model_extra["root"] == str(other)
            assert logprobs(before) != logprobs(after)

            # Requests racing a reload all complete, each on one checkpoint or the other.
            *racing, back = await asyncio.gather(
                *(client.chat.completions.create(**kw) for _ in range(3)),
                http.post(f"{root}/reload", json={"model": name}))
            assert back.status_code == 200
            assert all(logprobs(r) in (logprobs(before), logprobs(after)) for r in racing)
            assert logprobs(await client.chat.completions.create(**kw)) == logprobs(before)


async def test_token_is_required_when_set(tiny_dir):
    settings = PolicyServerSettings(model=str(tiny_dir), port=0, token="s3cret", served_model_name="tiny")
    with running_policy_server(settings) as base_url:
        denied = openai.AsyncOpenAI(base_url=base_url, api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await denied.models.list()
        allowed = openai.AsyncOpenAI(base_url=base_url, api_key="s3cret", max_retries=0)
        reply = await allowed.chat.completions.create(model="tiny", messages=_messages(_data_url((9, 9, 9))),
                                                      max_tokens=2, temperature=0)
        assert reply.usage.completion_tokens >= 1
        async with httpx.AsyncClient() as http:  # liveness stays open for probes
            assert (await http.get(base_url.removesuffix("/v1") + "/health")).status_code == 200


@pytest.mark.parametrize("host, token, allowed", [
    ("127.0.0.1", None, True), ("127.0.0.2", None, True), ("localhost", None, True), ("::1", None, True),
    ("0.0.0.0", None, False), ("10.1.2.3", None, False), ("0.0.0.0", "t", True),
])
def test_non_loopback_bind_needs_a_token(host, token, allowed):
    settings = PolicyServerSettings(model="unused", host=host, token=token)
    if allowed:
        _check_bind(settings)
    else:
        with pytest.raises(PolicyServerError, match="--token"):
            _check_bind(settings)


def test_cli_help_and_refusals(tmp_path):
    runner = CliRunner()
    result = runner.invoke(rollout_main, ["serve-policy", "--help"])
    assert result.exit_code == 0 and "Example:" in result.output and "/reload" in result.output
    # Refused before any model is loaded or any socket bound.
    exposed = runner.invoke(rollout_main, ["serve-policy", "--model", str(tmp_path), "--host", "0.0.0.0"])
    assert exposed.exit_code != 0 and "--token" in exposed.output
    missing = runner.invoke(rollout_main, ["serve-policy", "--model", str(tmp_path), "--port", "0"])
    assert missing.exit_code != 0 and "config.json" in missing.output


def test_flags_come_from_the_settings_and_the_token_from_the_environment(monkeypatch, tmp_path):
    """One flag per PolicyServerSettings field (its docstring as help); --token falls back to env."""
    from dataclasses import fields

    from webgym_core.settings import flag_for

    help_text = CliRunner().invoke(rollout_main, ["serve-policy", "--help"]).output
    for item in fields(PolicyServerSettings):
        assert flag_for(PolicyServerSettings, item.name) in help_text, item.name
    assert "latency" not in help_text and "WEBGYM_POLICY_TOKEN" in help_text
    seen = {}

    def fake_create_app(settings):
        seen["settings"] = settings
        raise OSError("stop here")

    monkeypatch.setattr("webgym_rollout.policy_server.create_app", fake_create_app)
    monkeypatch.setenv("WEBGYM_POLICY_TOKEN", "from-env")
    config = tmp_path / "serve.yaml"
    config.write_text("max_new_tokens: 7\ndtype: float32\n")
    result = CliRunner().invoke(rollout_main, ["serve-policy", "--config", str(config), "--model", "m",
                                               "--host", "0.0.0.0", "--max-new-tokens", "9"])
    assert result.exit_code == 1 and "stop here" in result.output
    settings = seen["settings"]
    assert (settings.token, settings.host, settings.max_new_tokens, settings.dtype) == (
        "from-env", "0.0.0.0", 9, "float32")
    bad = CliRunner().invoke(rollout_main, ["serve-policy", "--model", "m", "--max-new-tokens", "0"])
    assert bad.exit_code == 2 and "max_new_tokens (--max-new-tokens): must be >= 1" in bad.output


async def test_replies_name_the_version_and_a_reload_keeps_the_process(tiny_dir):
    """The weights' version is on every reply (system_fingerprint) and on /health; /reload swaps the
    weights in the same process; a request that started before a reload finishes on its weights."""
    import os

    other = tiny_model_dir("qwen2_vl", seed=7)
    settings = PolicyServerSettings(model=str(tiny_dir), port=0, max_new_tokens=6, served_model_name="tiny",
                                    policy_version=4)
    kw = dict(model="tiny", messages=_messages(_data_url((10, 200, 90))), temperature=0, max_tokens=6,
              logprobs=True)
    logprobs = lambda reply: [t.logprob for t in reply.choices[0].logprobs.content]  # noqa: E731
    with running_policy_server(settings) as base_url:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        root = base_url.removesuffix("/v1")
        async with httpx.AsyncClient(timeout=60) as http:
            first = await client.chat.completions.create(**kw)
            assert first.system_fingerprint == "v4"
            health = (await http.get(f"{root}/health")).json()
            assert (health["version"], health["pid"]) == (4, os.getpid())
            # A generation in flight while the reload lands: it answers with the weights it started on.
            racing = asyncio.create_task(client.chat.completions.create(**kw))
            await asyncio.sleep(0)
            reload = await http.post(f"{root}/reload", json={"model": str(other), "version": 5})
            assert reload.status_code == 200 and reload.json()["version"] == 5
            assert reload.json()["previous_version"] == 4
            raced = await racing
            after = await client.chat.completions.create(**kw)
            assert after.system_fingerprint == "v5" and logprobs(after) != logprobs(first)
            # Whichever weights the racing request got, its fingerprint names them.
            assert (raced.system_fingerprint, logprobs(raced)) in [("v4", logprobs(first)),
                                                                   ("v5", logprobs(after))]
            # No version given: the next one.
            assert (await http.post(f"{root}/reload", json={"model": str(tiny_dir)})).json()["version"] == 6
            again = await client.chat.completions.create(**kw)
            assert again.system_fingerprint == "v6" and logprobs(again) == logprobs(first)
            health = (await http.get(f"{root}/health")).json()
            assert (health["version"], health["reloads"], health["pid"]) == (6, 2, os.getpid())
