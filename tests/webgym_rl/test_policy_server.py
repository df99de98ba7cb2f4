"""Tests for the webgym_rl/policy_server package through its HTTP API: a real server on 127.0.0.1, the
real openai client (and the few internals a request cannot reach: codec, weights, generation)."""

from __future__ import annotations

import asyncio
import base64
import errno
import gc
import io
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from click.testing import CliRunner
from PIL import Image

from tests.support.models import tiny_model_dir
from webgym_rl.cli import main as rl_main
from webgym_rl.modeling import load_model, load_processor
from webgym_rl.policy_server import (
    PolicyServerError,
    PolicyServerSettings,
    PolicyUnauthorized,
    SharedMemoryUnavailable,
    WeightsPushFailed,
    WeightsRejected,
    create_app,
    push_weights,
    running_policy_server,
)
from webgym_rl.policy_server.app import check_bind
from webgym_rl.policy_server.codec import safetensors_bytes, write_safetensors_file


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


async def test_a_foreign_host_or_origin_is_refused_and_counted(server, tiny_dir):
    """DNS rebinding (a foreign Host) gets 421, a web page's request (Origin, Sec-Fetch-Site) 403, in
    the OpenAI error shape, before any route runs; /metrics counts them; our own clients pass."""
    root = server.removesuffix("/v1")
    port = int(root.rsplit(":", 1)[1])
    reload = {"model": str(tiny_dir)}
    async with httpx.AsyncClient(trust_env=False) as http:
        before = (await http.get(f"{root}/health")).json()
        for host in (f"evil.example:{port}", f"127.0.0.1:{port + 1}", f"127.0.0.2:{port}"):
            refused = await http.post(f"{root}/reload", json=reload, headers={"Host": host})
            assert refused.status_code == 421 and refused.json()["error"]["code"] == "misdirected", host
        shm = {"shm": "/dev/shm/webgym-weights-x.safetensors"}
        for headers in ({"Origin": "http://127.0.0.1:8400"}, {"Origin": "null"},
                        {"Sec-Fetch-Site": "cross-site"}):
            refused = await http.post(f"{root}/weights", json=shm, headers=headers)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "foreign_origin", headers
        for host in (f"localhost:{port}", f"[::1]:{port}"):
            assert (await http.get(f"{root}/health", headers={"Host": host})).status_code == 200
        after = (await http.get(f"{root}/health")).json()
        metrics = (await http.get(f"{root}/metrics")).text
    assert after["reloads"] == before["reloads"] and after["weight_pushes"] == before["weight_pushes"]
    assert 'webgym_policy_callers_refused_total{kind="misdirected"} 3' in metrics
    assert 'webgym_policy_callers_refused_total{kind="foreign_origin"} 3' in metrics
    assert "webgym_policy_http_requests_total " in metrics and "webgym_policy_version 0" in metrics
    client = openai.AsyncOpenAI(base_url=server, api_key="unused", max_retries=0)
    assert [m.id for m in (await client.models.list()).data] == ["tiny"]  # the OpenAI client passes


def _png_claiming(width: int, height: int) -> bytes:
    """A 1 x 1 PNG whose header claims `width` x `height` pixels (CRC fixed up)."""
    import zlib

    buffer = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buffer, "PNG")
    raw = bytearray(buffer.getvalue())
    raw[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
    raw[29:33] = zlib.crc32(bytes(raw[12:29])).to_bytes(4, "big")
    return bytes(raw)


def _image_message(raw: bytes) -> list[dict]:
    url = f"data:image/png;base64,{base64.b64encode(raw).decode()}"
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]


def _wide_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (3000, 1)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(("change", "status", "named"), [
    ({"seed": -2**63 - 1}, 400, "seed"),
    ({"seed": 2**64}, 400, "seed"),
    ({"messages": _image_message(_wide_png())}, 400, "the model's processor cannot take them"),
    ({"messages": _image_message(_png_claiming(100_000, 100_000))}, 400, "decompression bomb"),
    ({"temperature": 1e-167}, 200, ""),  # greedy, as below 1e-5 in vLLM (sampling would divide by ~0)
])
async def test_requests_the_fuzzer_found_get_an_answer_not_a_500(server, change, status, named):
    """Found by tests/webgym_rollout/test_policy_server_fuzz.py: each of these answered HTTP 500."""
    body = {"model": "tiny", "messages": _messages(_data_url((9, 9, 9))), "max_tokens": 2, **change}
    async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
        answer = await http.post(f"{server}/chat/completions", json=body)
    assert answer.status_code == status, answer.text
    if status == 400:
        assert named in answer.json()["error"]["message"]


async def test_bodies_the_fuzzer_found_get_the_openai_error_shape(server):
    """A safetensors header nested past the JSON parser's depth answered 500; a body that is not JSON
    answered FastAPI's own {"detail": ...}: both are 400s in the OpenAI shape now."""
    root = server.removesuffix("/v1")
    deep = b"[" * 50_000
    async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
        nested = await http.post(f"{root}/weights", content=len(deep).to_bytes(8, "little") + deep,
                                 headers=_OCTETS)
        garbled = await http.post(f"{server}/chat/completions", content=b"\xff{",
                                  headers={"Content-Type": "application/json"})
        missing = await http.get(f"{root}/no/such/route")
    assert nested.status_code == 400 and "nested too deep" in nested.json()["error"]["message"]
    assert garbled.status_code == 400 and garbled.json()["error"]["code"] == "bad_chat_request"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_caller_settings_are_flags_and_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="^server_names: 'a b'"):
        PolicyServerSettings(model="m", server_names=("a b",))
    with pytest.raises(ValueError, match="^allowed_origins: 'dash.example'"):
        PolicyServerSettings(model="m", allowed_origins=("dash.example",))
    help_text = CliRunner().invoke(rl_main, ["serve-policy", "--help"]).output
    assert "--server-names" in help_text and "--allowed-origins" in help_text


@pytest.mark.parametrize("host, token, allowed", [
    ("127.0.0.1", None, True), ("127.0.0.2", None, True), ("localhost", None, True), ("::1", None, True),
    ("0.0.0.0", None, False), ("10.1.2.3", None, False), ("0.0.0.0", "t", True),
])
def test_non_loopback_bind_needs_a_token(host, token, allowed):
    settings = PolicyServerSettings(model="unused", host=host, token=token)
    if allowed:
        check_bind(settings)
    else:
        with pytest.raises(PolicyServerError, match="--token"):
            check_bind(settings)


def test_cli_help_and_refusals(tmp_path):
    runner = CliRunner()
    result = runner.invoke(rl_main, ["serve-policy", "--help"])
    assert result.exit_code == 0 and "Example:" in result.output and "/reload" in result.output
    # Refused before any model is loaded or any socket bound.
    exposed = runner.invoke(rl_main, ["serve-policy", "--model", str(tmp_path), "--host", "0.0.0.0"])
    assert exposed.exit_code != 0 and "--token" in exposed.output
    missing = runner.invoke(rl_main, ["serve-policy", "--model", str(tmp_path), "--port", "0"])
    assert missing.exit_code != 0 and "config.json" in missing.output


def test_flags_come_from_the_settings_and_the_token_from_the_environment(monkeypatch, tmp_path):
    """One flag per PolicyServerSettings field (its docstring as help); --token falls back to env."""
    from dataclasses import fields

    from webgym_core.settings import flag_for
    from webgym_rl.pixels import ImageSettings

    help_text = CliRunner().invoke(rl_main, ["serve-policy", "--help"]).output
    for item in fields(PolicyServerSettings):
        if item.name == "images":  # a flat group: its fields are flags of their own
            assert all(flag_for(ImageSettings, f.name) in help_text for f in fields(ImageSettings))
            continue
        assert flag_for(PolicyServerSettings, item.name) in help_text, item.name
    assert "latency" not in help_text and "WEBGYM_POLICY_TOKEN" in help_text
    seen = {}

    def fake_create_app(settings):
        seen["settings"] = settings
        raise OSError("stop here")

    monkeypatch.setattr("webgym_rl.policy_server.cli.create_app", fake_create_app)
    monkeypatch.setenv("WEBGYM_POLICY_TOKEN", "from-env")
    config = tmp_path / "serve.yaml"
    config.write_text("max_new_tokens: 7\ndtype: float32\n")
    result = CliRunner().invoke(rl_main, ["serve-policy", "--config", str(config), "--model", "m",
                                               "--host", "0.0.0.0", "--max-new-tokens", "9"])
    assert result.exit_code == 1 and "stop here" in result.output
    settings = seen["settings"]
    assert (settings.token, settings.host, settings.max_new_tokens, settings.dtype) == (
        "from-env", "0.0.0.0", 9, "float32")
    bad = CliRunner().invoke(rl_main, ["serve-policy", "--model", "m", "--max-new-tokens", "0"])
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


# --------------------------------------------------------------------------------------------
# POST /weights and push_weights: new weights from memory (an HTTP body or a shared-memory file)


def _reply(reply) -> tuple:
    """What a reply says, minus its id and time: the text, the finish, the log-probabilities, the
    usage and the fingerprint (equal tuples: byte-identical answers)."""
    return reply.system_fingerprint, reply.choices[0].model_dump(), reply.usage.model_dump()


_OCTETS = {"content-type": "application/octet-stream"}


@pytest.fixture
def shm_dir(monkeypatch) -> Iterator[Path]:
    """A private stand-in for /dev/shm (a fresh folder on the same tmpfs) for client and server,
    which run in this process: a test can say exactly which weights files are left."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    folder = Path(tempfile.mkdtemp(prefix="webgym-test-", dir="/dev/shm"))
    for side in ("client", "weights"):
        monkeypatch.setattr(f"webgym_rl.policy_server.{side}.SHM_DIR", str(folder))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _mapped(folder: Path) -> set[str]:
    """The weights files of `folder` this process has mapped now (the server runs in this process;
    a file whose name was removed is listed with " (deleted)")."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return {line.split(maxsplit=5)[5] for line in lines if f"{folder}/webgym-weights-" in line}


def _mapped_soon(folder: Path, count: int) -> set[str]:
    """`_mapped(folder)` once it lists `count` files (the server frees replaced weights on another
    thread just after answering), or as it is after 5 s."""
    import time

    deadline = time.monotonic() + 5
    while len(mapped := _mapped(folder)) != count and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return mapped


def _tied_checkpoint(out: Path, seed: int) -> Path:
    """A tiny checkpoint whose output layer is tied to its input embeddings (shared storage)."""
    import torch
    from transformers import AutoModelForImageTextToText

    base = tiny_model_dir("qwen2_vl")
    config = load_model(base).config
    config.tie_word_embeddings = config.text_config.tie_word_embeddings = True
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config = load_model(base).generation_config
    model.save_pretrained(out)
    load_processor(base).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def two_weights(tiny_dir) -> tuple[dict, dict]:
    """The state dicts of the served checkpoint and of a second one (`tiny_model_dir` seed 1)."""
    return load_model(tiny_dir).state_dict(), load_model(tiny_model_dir("qwen2_vl", seed=1)).state_dict()


def _pushing_server(tiny_dir) -> PolicyServerSettings:
    return PolicyServerSettings(model=str(tiny_dir), port=0, max_new_tokens=6, served_model_name="tiny")


def _scored_request(color: tuple[int, int, int]) -> dict:
    """A greedy request whose reply and log-probabilities tell two sets of weights apart."""
    return dict(model="tiny", messages=_messages(_data_url(color)), temperature=0, max_tokens=6,
                logprobs=True, top_logprobs=3)


@pytest.mark.parametrize("transport", ["http", "shm"])
async def test_pushed_weights_answer_like_a_reload_of_their_checkpoint(tiny_dir, two_weights, shm_dir,
                                                                       transport):
    """Pushing the state dict of a second checkpoint gives the replies /reload of that folder gives,
    byte for byte, with the pushed version as fingerprint; the processor and root stay. Shared
    memory: no file is left, and each push's mapping goes when the next push or a /reload replaces
    its weights."""
    other = tiny_model_dir("qwen2_vl", seed=1)
    weights = two_weights[1]
    kw = _scored_request((200, 120, 30))
    with running_policy_server(_pushing_server(tiny_dir)) as base_url:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        root = base_url.removesuffix("/v1")
        before = await client.chat.completions.create(**kw)
        assert before.system_fingerprint == "v0"

        pushed = push_weights(base_url, weights, version=3, transport=transport)
        assert (pushed.version, pushed.previous_version, pushed.tensors) == (3, 0, len(weights))
        assert pushed.transport == transport and (pushed.client_write_s is None) == (transport == "http")
        assert pushed.received_bytes == len(safetensors_bytes(weights))
        assert pushed.checkpoint == str(tiny_dir)
        assert list(shm_dir.iterdir()) == []
        after = await client.chat.completions.create(**kw)
        assert after.system_fingerprint == "v3"
        assert _reply(after)[1] != _reply(before)[1]
        mapped = _mapped(shm_dir)
        assert len(mapped) == (transport == "shm") and all(m.endswith(" (deleted)") for m in mapped)

        async with httpx.AsyncClient(timeout=60) as http:
            reload = await http.post(f"{root}/reload", json={"model": str(other), "version": 3})
            assert reload.status_code == 200, reload.text
            reloaded = await client.chat.completions.create(**kw)
            assert _reply(reloaded) == _reply(after)
            assert _mapped_soon(shm_dir, 0) == set()  # the reload dropped the pushed weights, mapping too
            # And back from memory: the first weights' replies exactly; no version given: the next one.
            back = push_weights(root, load_model(tiny_dir).state_dict(), transport=transport)
            assert (back.version, back.previous_version) == (4, 3)
            again = await client.chat.completions.create(**kw)
            assert _reply(again)[1:] == _reply(before)[1:] and again.system_fingerprint == "v4"
            last = push_weights(root, weights, transport=transport)
            assert last.version == 5
            assert _reply(await client.chat.completions.create(**kw))[1:] == _reply(after)[1:]
            assert len(_mapped_soon(shm_dir, transport == "shm")) == (transport == "shm")  # v4's went with v4
            health = (await http.get(f"{root}/health")).json()
            assert (health["version"], health["weight_pushes"], health["reloads"]) == (5, 3, 1)
            models = await client.models.list()
            assert models.data[0].model_extra["root"] == str(other)  # the /reload's; a push keeps it
        assert list(shm_dir.iterdir()) == []


def test_auto_uses_shared_memory_on_loopback_and_falls_back_to_http(tiny_dir, shm_dir, monkeypatch):
    """transport="auto": a loopback server gets the file in the real /dev/shm; when the handover
    cannot work (the server sees no file, or the client cannot write one) the same push goes as an
    HTTP body, and no file is left; transport="shm" raises instead."""
    from webgym_rl.policy_server import client, service
    from webgym_rl.policy_server import weights as server

    weights = load_model(tiny_model_dir("qwen2_vl", seed=1)).state_dict()
    settings = PolicyServerSettings(model=str(tiny_dir), port=0, served_model_name="tiny")
    with running_policy_server(settings) as base_url:
        with monkeypatch.context() as real:
            real.setattr(client, "SHM_DIR", "/dev/shm")
            real.setattr(server, "SHM_DIR", "/dev/shm")
            assert push_weights(base_url, weights).transport == "shm"

        def not_here(path: str, limit: int, kept=None):
            raise SharedMemoryUnavailable(f"shm {path!r} does not exist for the server", param="shm")

        with monkeypatch.context() as elsewhere:  # as for a server in another container
            elsewhere.setattr(service, "map_shared_weights", not_here)
            with pytest.raises(SharedMemoryUnavailable, match="refused the weights: shm '.*' does not exist"):
                push_weights(base_url, weights, transport="shm")
            assert push_weights(base_url, weights).transport == "http"

        def full(path: str, state_dict, metadata=None) -> int:
            Path(path).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")

        with monkeypatch.context() as no_room:
            no_room.setattr(client, "write_safetensors_file", full)
            with pytest.raises(SharedMemoryUnavailable, match="cannot write the weights to .*No space left"):
                push_weights(base_url, weights, transport="shm")
            pushed = push_weights(base_url, weights)
            assert (pushed.transport, pushed.version) == ("http", 3)
        assert push_weights(base_url, weights, transport="http").transport == "http"
    assert list(shm_dir.iterdir()) == []


async def test_reused_buffers_answer_like_the_checkpoint_of_the_same_weights(tiny_dir, two_weights, shm_dir):
    """reuse_buffers=True: the pushes go into two files kept in shared memory (the same two names
    throughout, the server leaves them), each later push copied into the one not served; every
    push then answers exactly (text, log-probabilities) as the checkpoint of the same weights. A
    push without it removes the kept files."""
    other = tiny_model_dir("qwen2_vl", seed=1)
    first, second = two_weights
    kw = _scored_request((200, 120, 30))
    with running_policy_server(_pushing_server(tiny_dir)) as base_url:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        expected = {"first": _reply(await client.chat.completions.create(**kw))[1:]}
        async with httpx.AsyncClient(timeout=60) as http:
            reload = await http.post(base_url.removesuffix("/v1") + "/reload", json={"model": str(other)})
            assert reload.status_code == 200, reload.text
        expected["second"] = _reply(await client.chat.completions.create(**kw))[1:]
        assert expected["second"] != expected["first"]
        names = []
        # Kept file 0 gets second, file 1 first; then each is written again with the other weights.
        for version, which in enumerate(["second", "first", "first", "second"], start=2):
            pushed = push_weights(base_url, second if which == "second" else first, version=version,
                                  transport="shm", reuse_buffers=True)
            assert (pushed.version, pushed.transport) == (version, "shm")
            reply = await client.chat.completions.create(**kw)
            assert reply.system_fingerprint == f"v{version}" and _reply(reply)[1:] == expected[which]
            names.append(sorted(path.name for path in shm_dir.iterdir()))
        assert [len(listed) for listed in names] == [1, 2, 2, 2] and names[1] == names[2] == names[3]
        push_weights(base_url, first, version=6, transport="shm")
        assert list(shm_dir.iterdir()) == []
        assert _reply(await client.chat.completions.create(**kw))[1:] == expected["first"]


async def test_a_failed_reused_push_leaves_the_old_weights_serving(tiny_dir, two_weights, shm_dir,
                                                                   monkeypatch):
    """A reused push whose copy fails half way (the file written over with garbage first), or that
    the server refuses, leaves the weights serving untouched: the client never writes into the file
    served from. Both kept files are then dropped, and the next push starts afresh and is right."""
    import torch

    from webgym_rl.policy_server import client as push_client

    first, second = two_weights
    kw = _scored_request((30, 120, 200))
    with running_policy_server(_pushing_server(tiny_dir)) as base_url:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        before = _reply(await client.chat.completions.create(**kw))
        push_weights(base_url, second, version=1, transport="shm", reuse_buffers=True)
        push_weights(base_url, first, version=2, transport="shm", reuse_buffers=True)  # serves file 1
        assert _reply(await client.chat.completions.create(**kw))[1:] == before[1:]

        def garbage_then_fail(buffer, header, tensors) -> None:
            buffer[:] = b"\xff" * len(buffer)
            raise RuntimeError("interrupted")

        with monkeypatch.context() as failing:
            failing.setattr(push_client, "fill_safetensors_buffer", garbage_then_fail)
            with pytest.raises(RuntimeError, match="interrupted"):
                push_weights(base_url, second, version=3, transport="shm", reuse_buffers=True)
        assert list(shm_dir.iterdir()) == []
        kept = _reply(await client.chat.completions.create(**kw))
        assert kept[0] == "v2" and kept[1:] == before[1:]
        push_weights(base_url, second, version=3, transport="shm", reuse_buffers=True)
        bad = {**first, next(iter(first)): torch.zeros(2)}
        with pytest.raises(WeightsRejected, match="expected F32"):
            push_weights(base_url, bad, version=4, transport="shm", reuse_buffers=True)
        assert list(shm_dir.iterdir()) == []
        assert _reply(await client.chat.completions.create(**kw))[0] == "v3"
        push_weights(base_url, first, version=4, transport="shm", reuse_buffers=True)
        assert _reply(await client.chat.completions.create(**kw))[1:] == before[1:]


def test_a_kept_file_is_mapped_once_and_a_new_file_under_its_name_is_not_taken_for_it(shm_dir):
    """The server's `KeptMappings`: a kept file named again is found mapped (the same mapping,
    showing what the client wrote since); a new file under the same name is mapped afresh, and a
    mapping whose name is gone is let go."""
    from webgym_rl.policy_server.weights import KeptMappings, map_shared_weights

    path = f"{shm_dir}/webgym-weights-kept.safetensors"
    write_safetensors_file(path, {"w": _tensor([1.0, 2.0])})
    kept = KeptMappings()
    first, identity = map_shared_weights(path, 2**20, kept)
    again, same = map_shared_weights(path, 2**20, kept)
    assert again is first and same == identity
    with open(path, "r+b") as file:  # the client writes the next weights into the same file
        file.seek(len(first) - 4)
        file.write(b"\x00\x00\x40\x40")
    assert bytes(again[-4:]) == b"\x00\x00\x40\x40"
    os.unlink(path)
    write_safetensors_file(path, {"w": _tensor([5.0, 6.0])})
    fresh, other = map_shared_weights(path, 2**20, kept)
    assert fresh is not first and other != identity and first.closed
    assert bytes(fresh[-8:]) == bytes(_tensor([5.0, 6.0]).numpy())
    os.unlink(path)
    assert kept.get(path, other, len(fresh)) is None and fresh.closed


def test_the_kept_files_of_a_killed_process_are_removed_by_the_next_one(tiny_dir, shm_dir):
    """A kept file whose process is gone (killed before its exit could remove it) is removed when
    another process creates a kept file; a living process's is left, and so is any other file."""
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    stale = shm_dir / f"webgym-weights-keep-{int(gone.stdout)}-0123abcd.safetensors"
    living = shm_dir / f"webgym-weights-keep-{os.getppid()}-0123abcd.safetensors"
    other = shm_dir / "webgym-weights-0123abcd.safetensors"
    for path in (stale, living, other):
        path.write_bytes(b"old")
    settings = PolicyServerSettings(model=str(tiny_dir), port=0, served_model_name="tiny")
    with running_policy_server(settings) as base_url:
        push_weights(base_url, load_model(tiny_dir).state_dict(), transport="shm", reuse_buffers=True)
        left = {path.name for path in shm_dir.iterdir()}
        assert stale.name not in left and {living.name, other.name} <= left and len(left) == 3


def _tensor(values: list[float]):
    import torch

    return torch.tensor(values, dtype=torch.float32)


def _bad_bodies(weights: dict) -> list[tuple[str, bytes | dict, str, str | None]]:
    """(case, body or state dict, words the error must contain, the key it must name)."""
    import torch

    keys = list(weights)
    first, last = keys[0], keys[-1]
    missing = {k: v for k, v in weights.items() if k != first}
    unexpected = {**weights, "lm_head.extra": torch.zeros(2)}
    # The last key is bad: a server that copied while checking would already have changed the rest.
    reshaped = {**weights, last: weights[last].reshape(-1)[:-1].clone()}
    retyped = {**weights, last: weights[last].to(torch.bfloat16)}
    expected = f"expected F32 {list(weights[last].shape)}"
    good = safetensors_bytes(weights)
    return [
        ("garbage", b"this is not a safetensors file at all", "not a safetensors file", None),
        ("empty", b"", "not a safetensors file", None),
        ("truncated", good[:1000], "not a safetensors file", None),
        ("missing key", missing, f"missing key {first!r} (expected F32", first),
        ("unexpected key", unexpected, "unexpected key 'lm_head.extra' (F32 [2])", "lm_head.extra"),
        ("wrong shape", reshaped, f"{last!r}: {expected}, received F32 [{weights[last].numel() - 1}]", last),
        ("wrong dtype", retyped, f"{last!r}: {expected}, received BF16 {list(weights[last].shape)}", last),
    ]


async def test_bad_weights_are_refused_and_the_old_ones_keep_serving(tiny_dir, shm_dir):
    """Each bad body or file gets a 400 naming what is wrong (the first bad key, expected vs
    received), and the replies afterwards are identical to those before: nothing was copied or
    mapped in; no refused file is left in shared memory."""
    weights = load_model(tiny_model_dir("qwen2_vl", seed=1)).state_dict()
    settings = PolicyServerSettings(model=str(tiny_dir), port=0, max_new_tokens=6, served_model_name="tiny")
    kw = dict(model="tiny", messages=_messages(_data_url((40, 160, 220))), temperature=0, max_tokens=6,
              logprobs=True, top_logprobs=3)
    with running_policy_server(settings) as base_url:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        root = base_url.removesuffix("/v1")
        before = _reply(await client.chat.completions.create(**kw))
        async with httpx.AsyncClient(timeout=60) as http:
            for case, body, words, key in _bad_bodies(weights):
                if isinstance(body, dict):  # through the client: a typed error naming the URL and key
                    for transport in ("shm", "http"):
                        with pytest.raises(WeightsRejected) as info:
                            push_weights(base_url, body, version=9, transport=transport)
                        assert f"{root}/weights refused the weights" in str(info.value), case
                        assert words in str(info.value) and info.value.param == key, (case, str(info.value))
                        assert list(shm_dir.iterdir()) == [], (case, transport)
                    body = safetensors_bytes(body)
                answer = await http.post(f"{root}/weights", content=body, headers=_OCTETS)
                if body:  # the same bytes as a shared-memory file, named by a request
                    shm = shm_dir / "webgym-weights-bad.safetensors"
                    shm.write_bytes(body)
                    shm.chmod(0o600)
                    named = await http.post(f"{root}/weights", json={"shm": str(shm)})
                    assert named.status_code == 400, (case, named.text)
                    assert shm.exists(), case  # a refused file stays: its writer removes it
                    message = named.json()["error"]["message"]
                    assert named.json()["error"]["param"] == key, (case, named.text)
                    assert words.replace("the body", "") in message and str(shm) in message, (case, message)
                    shm.unlink()
                    gc.collect()
                    assert _mapped(shm_dir) == set(), case  # refused: unmapped at once
                assert answer.status_code == 400, (case, answer.text)
                error = answer.json()["error"]
                assert error["code"] == "weights_rejected" and error["param"] == key, (case, error)
                assert words in error["message"] and "v0" in error["message"], (case, error["message"])
                assert _reply(await client.chat.completions.create(**kw)) == before, case
            health = (await http.get(f"{root}/health")).json()
            assert (health["version"], health["weight_pushes"]) == (0, 0)
            bad_version = await http.post(f"{root}/weights", params={"version": -1},
                                          content=safetensors_bytes(weights), headers=_OCTETS)
            assert bad_version.status_code == 400 and "version" in bad_version.text
            # A body a web page could send without a CORS preflight (text/plain, no type) is refused.
            for headers in ({"content-type": "text/plain"}, {}):
                plain = await http.post(f"{root}/weights", content=safetensors_bytes(weights),
                                        headers=headers)
                assert plain.status_code == 400, plain.text
                assert plain.json()["error"]["param"] == "content-type", plain.text
            assert _reply(await client.chat.completions.create(**kw)) == before
        # Good weights still go in afterwards, also as written by safetensors itself.
        from safetensors.torch import save

        async with httpx.AsyncClient(timeout=60) as http:
            answer = await http.post(f"{root}/weights", content=save(weights), headers=_OCTETS)
            assert answer.status_code == 200 and answer.json()["version"] == 1, answer.text
        assert push_weights(base_url, weights).version == 2
        assert _reply(await client.chat.completions.create(**kw))[1] != before[1]
    assert list(shm_dir.iterdir()) == []


async def test_shm_paths_the_server_does_not_read_are_refused(tiny_dir, shm_dir, tmp_path):
    """Only a regular file of the server's user, named SHM_DIR/webgym-weights-<name>.safetensors,
    with one link and no write permission for others, is mapped: everything else gets a 400 naming
    ``shm``, nothing is read or removed, and the old weights keep serving."""
    good = safetensors_bytes(load_model(tiny_model_dir("qwen2_vl", seed=1)).state_dict())
    outside = tmp_path / "webgym-weights-outside.safetensors"
    outside.write_bytes(good)
    link = shm_dir / "webgym-weights-link.safetensors"
    link.symlink_to(outside)
    hard = shm_dir / "webgym-weights-hard.safetensors"
    hard.write_bytes(good)
    (shm_dir / "hard-link.safetensors").hardlink_to(hard)
    shared = shm_dir / "webgym-weights-shared.safetensors"
    shared.write_bytes(good)
    shared.chmod(0o666)
    folder = shm_dir / "webgym-weights-folder.safetensors"
    folder.mkdir()
    other_name = shm_dir / "weights.safetensors"
    other_name.write_bytes(good)
    cases = [
        (str(outside), "is not a file this server reads"),
        (str(other_name), "is not a file this server reads"),
        (f"{shm_dir}/../{shm_dir.name}/webgym-weights-hard.safetensors", "is not a file this server reads"),
        (f"{shm_dir}/sub/webgym-weights-x.safetensors", "is not a file this server reads"),
        (f"{shm_dir}/webgym-weights-x.safetensors/../../etc", "is not a file this server reads"),
        ("webgym-weights-hard.safetensors", "is not a file this server reads"),
        (str(link), "is a symbolic link"),
        (str(hard), "has 2 hard links"),
        (str(shared), "is writable by others (mode 666)"),
        (str(folder), "cannot be opened: Is a directory"),
        (str(shm_dir / "webgym-weights-missing.safetensors"), "does not exist for the server"),
    ]
    files = sorted(shm_dir.iterdir())
    settings = PolicyServerSettings(model=str(tiny_dir), port=0, max_new_tokens=4, served_model_name="tiny")
    kw = dict(model="tiny", messages=_messages(_data_url((10, 200, 90))), temperature=0, max_tokens=4,
              logprobs=True)
    with running_policy_server(settings) as base_url:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        root = base_url.removesuffix("/v1")
        before = _reply(await client.chat.completions.create(**kw))
        async with httpx.AsyncClient(timeout=60) as http:
            for path, words in cases:
                answer = await http.post(f"{root}/weights", json={"shm": path, "version": 7})
                assert answer.status_code == 400, (path, answer.text)
                error = answer.json()["error"]
                assert error["param"] == "shm" and words in error["message"], (path, error)
                code = "shm_unavailable" if "missing" in path else "weights_rejected"
                assert error["code"] == code, (path, error)
            for body, param in (({"shm": str(hard), "extra": 1}, "extra"), ({"path": str(hard)}, "shm"),
                                ({"shm": str(hard), "version": -1}, "version")):
                answer = await http.post(f"{root}/weights", json=body)
                assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
            disagree = await http.post(f"{root}/weights", params={"version": 2},
                                       json={"shm": "x", "version": 3})
            assert disagree.status_code == 400 and "disagree" in disagree.text
            health = (await http.get(f"{root}/health")).json()
            assert (health["version"], health["weight_pushes"]) == (0, 0)
        assert _reply(await client.chat.completions.create(**kw)) == before
    assert sorted(shm_dir.iterdir()) == files and outside.read_bytes() == good
    gc.collect()
    assert _mapped(shm_dir) == set()


@pytest.mark.parametrize("transport", ["http", "shm"])
async def test_weights_need_the_token_when_set(tiny_dir, shm_dir, transport):
    weights = load_model(tiny_model_dir("qwen2_vl", seed=1)).state_dict()
    settings = PolicyServerSettings(model=str(tiny_dir), port=0, token="s3cret", served_model_name="tiny")
    with running_policy_server(settings) as base_url:
        for token in (None, "wrong"):
            with pytest.raises(PolicyUnauthorized, match="bearer token"):
                push_weights(base_url, weights, token=token, transport=transport)
        assert list(shm_dir.iterdir()) == []
        # Without the token the server does not even look at the file.
        shm = shm_dir / "webgym-weights-untouched.safetensors"
        shm.write_bytes(safetensors_bytes(weights))
        shm.chmod(0o600)
        async with httpx.AsyncClient() as http:
            answer = await http.post(base_url.removesuffix("/v1") + "/weights", json={"shm": str(shm)})
        assert answer.status_code == 401 and shm.exists()
        shm.unlink()
        assert push_weights(base_url, weights, token="s3cret", transport=transport).version == 1
        client = openai.AsyncOpenAI(base_url=base_url, api_key="s3cret", max_retries=0)
        reply = await client.chat.completions.create(model="tiny", messages=_messages(_data_url((9, 9, 9))),
                                                     max_tokens=2, temperature=0)
        assert reply.system_fingerprint == "v1"
        async with httpx.AsyncClient() as http:
            health = (await http.get(base_url.removesuffix("/v1") + "/health")).json()
        assert (health["version"], health["weight_pushes"]) == (1, 1)
    assert list(shm_dir.iterdir()) == []


@pytest.mark.parametrize("transport", ["http", "shm"])
def test_push_to_no_server_names_the_url(shm_dir, transport):
    import torch

    from tests.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(WeightsPushFailed, match=f"to {url.removesuffix('/v1')}/weights failed: ConnectError"):
        push_weights(url, {"w": torch.zeros(2)}, timeout_s=5, transport=transport)
    assert list(shm_dir.iterdir()) == []


def test_the_client_writes_safetensors_that_safetensors_reads(shm_dir):
    """push_weights writes the format itself (no copy of the model, tied tensors allowed, which
    safetensors.torch.save refuses), as a body and as a file: safetensors reads back every key,
    dtype and value."""
    import torch
    from safetensors.torch import load, save

    weight = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    tied = {"embed.weight": weight, "lm_head.weight": weight}
    with pytest.raises(RuntimeError, match="share memory"):
        save(tied)
    state = {**tied, "proj.weight": weight.t(), "norm.weight": torch.linspace(-1, 1, 5, dtype=torch.bfloat16),
             "mask": torch.tensor([True, False]), "step": torch.tensor(7), "empty": torch.zeros(0, 3),
             "param": torch.nn.Parameter(torch.ones(2, 2))}
    path = shm_dir / "webgym-weights-check.safetensors"
    assert write_safetensors_file(str(path), state) == path.stat().st_size
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == safetensors_bytes(state)
    with pytest.raises(FileExistsError):  # never written through an existing file or link
        write_safetensors_file(str(path), state)
    loaded = load(safetensors_bytes(state))
    assert set(loaded) == set(state)
    for key, tensor in state.items():
        assert loaded[key].dtype == tensor.dtype and torch.equal(loaded[key], tensor.detach()), key


@pytest.mark.parametrize("transport", ["http", "shm"])
async def test_tied_weights_land_in_the_shared_tensor(tmp_path, shm_dir, transport):
    """A model with tied embeddings: its state_dict() names the shared tensor twice; the push
    carries both and the replies equal those of /reload of the pushed model's folder; on the server
    the two names still share one tensor (in the mapped file, for shared memory)."""
    import torch

    served = _tied_checkpoint(tmp_path / "tied-0", seed=0)
    other = _tied_checkpoint(tmp_path / "tied-1", seed=1)
    weights = load_model(other).state_dict()
    embeddings = weights["model.language_model.embed_tokens.weight"]
    assert weights["lm_head.weight"].data_ptr() == embeddings.data_ptr()
    settings = PolicyServerSettings(model=str(served), port=0, max_new_tokens=6, served_model_name="tiny")
    app = create_app(settings)
    service = app.state.service
    chat = dict(model="tiny", messages=_messages(_data_url((90, 10, 140))), temperature=0, max_tokens=6,
                logprobs=True, top_logprobs=3)
    try:
        transport_ = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport_, base_url="http://127.0.0.1", timeout=60) as http:
            before = (await http.post("/v1/chat/completions", json=chat)).json()
            if transport == "shm":
                path = shm_dir / "webgym-weights-tied.safetensors"
                write_safetensors_file(str(path), weights)
                answer = await http.post("/weights", json={"shm": str(path)})
                assert not path.exists()  # taken: the server removed the name
            else:
                answer = await http.post("/weights", content=safetensors_bytes(weights), headers=_OCTETS)
            assert answer.status_code == 200 and answer.json()["tensors"] == len(weights), answer.text
            model = service.policy.model
            assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
            served_state = model.state_dict()
            for key in weights:
                assert torch.equal(served_state[key], weights[key]), key
            assert len(_mapped(shm_dir)) == (transport == "shm")
            if transport == "shm":  # zero copy: the served tensor lies in the mapped file
                pointer = model.lm_head.weight.data_ptr()
                maps = Path("/proc/self/maps").read_text().splitlines()
                spans = [line.split()[0].split("-") for line in maps if f"{shm_dir}/webgym-weights-" in line]
                assert any(int(start, 16) <= pointer < int(end, 16) for start, end in spans)
            pushed = (await http.post("/v1/chat/completions", json=chat)).json()
            assert pushed["system_fingerprint"] == "v1" and pushed["choices"] != before["choices"]
            reload = await http.post("/reload", json={"model": str(other), "version": 1})
            assert reload.status_code == 200, reload.text
            reloaded = (await http.post("/v1/chat/completions", json=chat)).json()
            assert reloaded["choices"] == pushed["choices"]
    finally:
        service.close()


@pytest.mark.parametrize("transport", ["http", "shm"])
async def test_a_push_waits_for_the_generation_running_and_replies_name_their_weights(tiny_dir, shm_dir,
                                                                                       transport):
    """Deterministic ordering on the one generation worker: a chat accepted before the push runs on
    the old weights and says v0; one accepted after runs on the new weights and says v1."""
    import threading

    settings = PolicyServerSettings(model=str(tiny_dir), port=0, max_new_tokens=6, served_model_name="tiny")
    app = create_app(settings)
    service = app.state.service
    submitted: list[str] = []
    submit = service._worker.submit

    def recording_submit(fn, *args, **kwargs):
        submitted.append(getattr(getattr(fn, "func", fn), "__name__", repr(fn)))  # a partial: its function
        return submit(fn, *args, **kwargs)

    service._worker.submit = recording_submit
    chat = dict(model="tiny", messages=_messages(_data_url((250, 200, 10))), temperature=0, max_tokens=6,
                logprobs=True)
    weights = load_model(tiny_model_dir("qwen2_vl", seed=1)).state_dict()
    if transport == "shm":
        path = shm_dir / "webgym-weights-queued.safetensors"
        write_safetensors_file(str(path), weights)
        request, job = {"json": {"shm": str(path)}}, "point_weights"
    else:
        request, job = {"content": safetensors_bytes(weights), "headers": _OCTETS}, "copy_weights"

    async def until(count: int) -> None:
        for _ in range(2000):
            if len(submitted) >= count:
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"only {submitted} reached the worker")

    try:
        transport_ = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport_, base_url="http://127.0.0.1", timeout=60) as http:
            old = (await http.post("/v1/chat/completions", json=chat)).json()
            gate = threading.Event()
            service._worker.submit(gate.wait)  # the worker is busy: everything after queues in order
            running = asyncio.create_task(http.post("/v1/chat/completions", json=chat))
            await until(3)
            push = asyncio.create_task(http.post("/weights", **request))
            await until(4)
            later = asyncio.create_task(http.post("/v1/chat/completions", json=chat))
            await until(5)
            gate.set()
            running, push, later = (await running).json(), (await push).json(), (await later).json()
            assert submitted == ["_generate_now", "wait", "_generate_now", job, "_generate_now"]
            assert push["version"] == 1 and push["queued_s"] > 0 and push["transport"] == transport
            assert (running["system_fingerprint"], running["choices"]) == ("v0", old["choices"])
            assert later["system_fingerprint"] == "v1" and later["choices"] != old["choices"]
            reloaded = await http.post("/reload", json={"model": str(tiny_model_dir("qwen2_vl", seed=1))})
            assert reloaded.status_code == 200
            assert (await http.post("/v1/chat/completions", json=chat)).json()["choices"] == later["choices"]
    finally:
        service.close()
    assert list(shm_dir.iterdir()) == []


async def test_a_body_larger_than_the_weights_is_refused_unread(tiny_dir, shm_dir, monkeypatch):
    monkeypatch.setattr("webgym_rl.policy_server.service.WEIGHTS_HEADER_ALLOWANCE", 0)
    app = create_app(PolicyServerSettings(model=str(tiny_dir), port=0, served_model_name="tiny"))
    weights = load_model(tiny_dir).state_dict()
    body = safetensors_bytes(weights)  # header + weights > weights alone
    path = shm_dir / "webgym-weights-large.safetensors"
    write_safetensors_file(str(path), weights)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            answer = await http.post("/weights", content=body, headers=_OCTETS)
            named = await http.post("/weights", json={"shm": str(path)})
        assert answer.status_code == 400
        assert f"the body ({len(body)} bytes) is larger than" in answer.json()["error"]["message"]
        assert named.status_code == 400 and f"holds {len(body)} bytes" in named.json()["error"]["message"]
    finally:
        app.state.service.close()


def test_views_stand_in_only_for_whole_aligned_cpu_tensors():
    """Where the served tensors overlap partially, or a slot is not aligned to its element size,
    the server copies from the file instead of pointing at it (`view_groups` says None)."""
    import torch

    from webgym_rl.policy_server.codec import TensorSlot
    from webgym_rl.policy_server.weights import view_groups

    weight = torch.zeros(4, 4)
    tied = {"a": weight, "b": weight, "c": torch.zeros(3)}
    slots = {key: TensorSlot("F32", tuple(t.shape), 8 + 64 * i, 8 + 64 * i + t.numel() * 4)
             for i, (key, t) in enumerate(tied.items())}
    assert view_groups(tied, slots) == [["a", "b"], ["c"]]
    assert view_groups(tied, {**slots, "c": TensorSlot("F32", (3,), 10, 22)}) is None
    assert view_groups({"a": weight, "row": weight[1]}, {"a": slots["a"], "row": slots["c"]}) is None


def test_a_token_id_past_the_tokenizers_vocabulary_gets_an_empty_entry_not_a_500(tiny_qwen2_vl):
    from webgym_rl.policy_server.generation import TokenText

    tokenizer = load_processor(tiny_qwen2_vl).tokenizer
    tokens = TokenText(tokenizer)
    past = len(tokenizer) + 5  # a padded embedding row: the model can sample it, no piece names it
    assert tokens.entry(past, -3.5) == {"token": "", "logprob": -3.5, "bytes": []}
    known = tokenizer.convert_tokens_to_ids("a")
    assert tokens.entry(known, -0.1) == {"token": "a", "logprob": -0.1, "bytes": [97]}


# ------------------------------------------------------------- sampling: token in, token out


def _with_generation_config(source: Path, folder: Path, **values) -> Path:
    """A copy of checkpoint `source` whose generation_config.json also says `values`."""
    import json

    shutil.copytree(source, folder)
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, **values}))
    return folder


def _reference_logprobs(folder: Path, prompt_ids: list[int], token_ids: list[int], image, *,
                        temperature: float = 1.0, top_k: int = 0):
    """Each sampled token's log-probability under ``softmax(logits / T)`` without the four vision
    placeholder tokens (which a reply never holds), cut to the top k (0: no cut), renormalised:
    computed here by one teacher-forced forward pass, not by the server's code."""
    import torch

    processor = load_processor(folder)
    model = load_model(folder).eval()
    pixels = processor.image_processor(images=[image], return_tensors="pt")
    ids = torch.tensor([prompt_ids + token_ids])
    kinds = (ids == processor.image_token_id).long()  # 1 on image tokens: where M-RoPE places the image
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=kinds,
                       **pixels).logits[0].float()
    rows = logits[len(prompt_ids) - 1:-1] / temperature
    vocab = processor.tokenizer.get_vocab()
    vision = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
    placeholders = [vocab[token] for token in vision]
    rows[:, placeholders] = float("-inf")
    if top_k:
        cut = torch.topk(rows, top_k, dim=-1).values[:, -1:]
        rows = rows.masked_fill(rows < cut, float("-inf"))
    return torch.log_softmax(rows, dim=-1).gather(-1, torch.tensor(token_ids)[:, None])[:, 0].tolist()


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
async def test_replies_carry_the_sampled_ids_and_the_logprobs_of_the_distribution_sampled(family, tmp_path):
    """Token in, token out: with ``return_token_ids`` a reply carries the sampled ids (one per
    log-probability) and the prompt's ids (what the processor makes of the messages, image tokens
    included). Each log-probability is the one of the distribution the token was drawn from
    (temperature and top-k applied), computed independently here; the checkpoint's own generation
    config (top_k 2, a repetition penalty) is not applied: the server samples what the request says."""
    folder = _with_generation_config(tiny_model_dir(family), tmp_path / "model", top_k=2, top_p=0.5,
                                     repetition_penalty=3.0, do_sample=True, temperature=0.3)
    url = _data_url((200, 30, 30))
    image = Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))).convert("RGB")
    settings = PolicyServerSettings(model=str(folder), port=0, max_new_tokens=24, served_model_name="tiny")
    with running_policy_server(settings) as base_url:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
        for temperature, top_k in ((1.0, None), (0.7, None), (1.3, 3)):
            extra = {"return_token_ids": True, **({"top_k": top_k} if top_k else {})}
            reply = await client.chat.completions.create(
                model="tiny", messages=_messages(url), temperature=temperature, max_tokens=24, logprobs=True,
                seed=5, extra_body=extra)
            choice = reply.choices[0]
            token_ids, prompt_ids = choice.model_extra["token_ids"], reply.model_extra["prompt_token_ids"]
            logprobs = [entry.logprob for entry in choice.logprobs.content]
            assert len(token_ids) == len(logprobs) == reply.usage.completion_tokens
            assert len(prompt_ids) == reply.usage.prompt_tokens
            expected = _reference_logprobs(folder, prompt_ids, token_ids, image, temperature=temperature,
                                           top_k=top_k or 0)
            worst = max(abs(a - b) for a, b in zip(logprobs, expected, strict=True))
            assert worst < 1e-4, (temperature, top_k, worst)
            # Tokens outside the top 2 (the checkpoint's top_k) and the top 50 (transformers' default)
            # were sampled: neither cut was applied (the vocabulary holds a few hundred tokens).
            if top_k is None and temperature == 1.0:
                for k in (2, 50):
                    cut = _reference_logprobs(folder, prompt_ids, token_ids, image, top_k=k)
                    assert float("-inf") in cut, k
        plain = await client.chat.completions.create(model="tiny", messages=_messages(url), temperature=1.0,
                                                     max_tokens=4)
        assert plain.choices[0].model_extra.get("token_ids") is None
        assert plain.model_extra.get("prompt_token_ids") is None


async def test_a_reply_cut_at_max_tokens_ends_where_it_was_cut(client):
    """``length``: the ids are those generated, no end-of-turn token; ``stop``: the last id is it."""
    url = _data_url((20, 200, 40))
    replies = [await client.chat.completions.create(
        model="tiny", messages=_messages(url), temperature=1.0, max_tokens=3, logprobs=True, seed=seed,
        extra_body={"return_token_ids": True}) for seed in range(6)]
    end = load_processor(tiny_model_dir("qwen2_vl")).tokenizer.convert_tokens_to_ids("<|im_end|>")
    for reply in replies:
        ids, reason = reply.choices[0].model_extra["token_ids"], reply.choices[0].finish_reason
        assert (reason == "length") == (len(ids) == 3 and end not in ids), (ids, reason)
        assert reason == "length" or ids[-1] == end


async def test_weights_made_with_another_image_processor_are_refused(tiny_dir, shm_dir, tmp_path):
    """A push whose header says another image processor (the trainer's pixel bounds differ from the
    server's) is refused naming the field, and so is a /reload of such a checkpoint; the same
    settings go in."""
    from webgym_rl.pixels import ImageSettings, image_processor_config

    weights = load_model(tiny_model_dir("qwen2_vl", seed=1)).state_dict()
    unit = 28  # patch 14 x merge 2
    settings = PolicyServerSettings(model=str(tiny_dir), port=0, max_new_tokens=4, served_model_name="tiny",
                                    images=ImageSettings(min_pixels=4 * unit * unit,
                                                         max_pixels=64 * unit * unit))
    served = image_processor_config(load_processor(tiny_dir, min_pixels=4 * unit * unit,
                                                   max_pixels=64 * unit * unit))
    with running_policy_server(settings) as base_url:
        root = base_url.removesuffix("/v1")
        for transport in ("shm", "http"):
            with pytest.raises(WeightsRejected, match=r"image processor \(max_pixels: 50176 vs 12544"):
                push_weights(base_url, weights, transport=transport,
                             image_processor={**served, "max_pixels": 16 * unit * unit})
        assert push_weights(base_url, weights, image_processor=served).version == 1
        other = tmp_path / "other"
        shutil.copytree(tiny_model_dir("qwen2_vl", seed=1), other)
        async with httpx.AsyncClient(timeout=60) as http:
            # The server's own bounds apply to what it loads; another image mean does not fit.
            processor = load_processor(other)
            processor.image_processor.image_mean = [0.5, 0.5, 0.5]
            processor.save_pretrained(other)
            refused = await http.post(f"{root}/reload", json={"model": str(other)})
            assert refused.status_code == 400, refused.text
            assert "image_mean" in refused.json()["error"]["message"], refused.text
            health = (await http.get(f"{root}/health")).json()
            assert (health["version"], health["checkpoint"]) == (1, str(tiny_dir))
