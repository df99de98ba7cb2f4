"""webgym_data.llm against a real OpenAI-protocol HTTP server on 127.0.0.1 (tests/support/
scripted_openai.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json

import hypothesis
import pytest

from tests.conftest import free_port
from tests.support.untrusted_input import ODD_TEXT, deeply_nested, json_text
from tests.webgym_data.helpers import llm_settings
from webgym_core.endpoint import ChatClient
from webgym_data.llm import (
    LLMClient,
    LLMReplyInvalid,
    LLMRequestRejected,
    LLMSettings,
    LLMSettingsError,
    LLMTimeout,
    LLMUnavailable,
    Usage,
    gather_all,
)
from webgym_data.schema import WebgymDataError

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
          "additionalProperties": False}


def answer_of(reply):
    """A validator: the reply must be {"answer": <int>}."""
    if not isinstance(reply, dict) or not isinstance(reply.get("answer"), int):
        raise ValueError(f"expected {{'answer': int}}, got {reply!r}")
    return reply["answer"]


def settings(base_url: str, **overrides) -> LLMSettings:
    values = {"model": "test-model", "backoff_s": 0.001, "max_retries": 2, "timeout_s": 10.0}
    values.update(overrides)
    return llm_settings(base_url, **values)


async def ask(client: LLMClient, key: str = "k", *, version: str = "v1", purpose: str = "test"):
    return await client.complete_json(purpose=purpose, prompt_version=version,
                                      messages=[{"role": "user", "content": f"question {key}"}],
                                      schema=SCHEMA, validate=answer_of, cache_key=(key, "site"))


async def test_valid_reply_is_validated_and_request_asks_for_json_schema(scripted_openai):
    server = scripted_openai([{"content": '{"answer": 42}', "usage": {"prompt_tokens": 123,
                                                                        "completion_tokens": 7}}])
    client = LLMClient(settings(server.base_url, temperature=0.5))
    assert await ask(client) == 42
    (body,) = server.requests
    assert body["model"] == "test-model"
    assert body["temperature"] == 0.5
    assert body["messages"] == [{"role": "user", "content": "question k"}]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert (client.usage.requests, client.usage.prompt_tokens, client.usage.completion_tokens) == (1, 123, 7)
    await client.aclose()


@pytest.mark.parametrize("bad", ["this is not JSON", '{"answer": "forty-two"}', "",
                                 {"content": '{"answer": 4', "finish_reason": "length"}])
async def test_malformed_invalid_or_cut_off_reply_is_retried(scripted_openai, bad):
    server = scripted_openai([bad, '{"answer": 7}'])
    client = LLMClient(settings(server.base_url))
    assert await ask(client) == 7
    assert len(server.requests) == 2
    assert client.usage.retries == 1


async def test_reply_that_stays_invalid_raises_typed_error_after_retries(scripted_openai):
    server = scripted_openai(['{"wrong": true}'])
    client = LLMClient(settings(server.base_url, max_retries=3))
    with pytest.raises(LLMReplyInvalid) as caught:
        await ask(client, "the task text")
    assert len(server.requests) == 4   # first attempt + 3 retries
    assert "answer" in caught.value.reason
    assert "the task text" in str(caught.value)
    assert isinstance(caught.value, WebgymDataError)


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_server_errors_and_rate_limits_are_retried(scripted_openai, status):
    server = scripted_openai([{"status": status}, {"status": status}, '{"answer": 1}'])
    client = LLMClient(settings(server.base_url, max_retries=2))
    assert await ask(client) == 1
    assert len(server.requests) == 3


async def test_server_error_that_persists_is_unavailable_naming_the_url(scripted_openai):
    server = scripted_openai([{"status": 502}])
    client = LLMClient(settings(server.base_url, max_retries=1))
    with pytest.raises(LLMUnavailable) as caught:
        await ask(client)
    assert server.base_url in str(caught.value)
    assert "502" in str(caught.value)
    assert len(server.requests) == 2


async def test_client_errors_are_not_retried(scripted_openai):
    server = scripted_openai([{"status": 401}, '{"answer": 1}'])
    client = LLMClient(settings(server.base_url))
    with pytest.raises(LLMRequestRejected) as caught:
        await ask(client)
    assert "HTTP 401" in str(caught.value)
    assert server.base_url in str(caught.value)
    assert len(server.requests) == 1


async def test_endpoint_down_raises_unavailable_with_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"   # nothing listens there
    client = LLMClient(settings(url, max_retries=1))
    with pytest.raises(LLMUnavailable) as caught:
        await ask(client)
    assert url in str(caught.value)
    assert client.usage.requests == 2


async def test_rerun_with_the_same_cache_sends_no_request(scripted_openai, tmp_path):
    server = scripted_openai(lambda body: json.dumps({"answer": len(body["messages"][0]["content"])}))
    first = LLMClient(settings(server.base_url, cache_dir=tmp_path))
    answers = [await ask(first, key) for key in ("a", "bb", "ccc")]
    assert len(server.requests) == 3

    second = LLMClient(settings(server.base_url, cache_dir=tmp_path))
    assert [await ask(second, key) for key in ("a", "bb", "ccc")] == answers
    assert len(server.requests) == 3
    assert (second.usage.requests, second.usage.cache_hits) == (0, 3)

    # The key covers model and prompt version: changing either asks again.
    assert await ask(second, "a", version="v2") == answers[0]
    other_model = LLMClient(settings(server.base_url, cache_dir=tmp_path, model="other"))
    await ask(other_model, "a")
    assert len(server.requests) == 5


async def test_cache_file_is_named_by_sha256_of_key_model_purpose_version(scripted_openai, tmp_path):
    server = scripted_openai(['{"answer": 5}'])
    client = LLMClient(settings(server.base_url, cache_dir=tmp_path))
    await ask(client, "x", purpose="rubric")
    expected = hashlib.sha256(json.dumps([["x", "site"], "test-model", "rubric", "v1"],
                                         separators=(",", ":")).encode()).hexdigest()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p.name for p in files] == [f"{expected}.json"]   # no temp file left behind
    entry = json.loads(files[0].read_text())
    assert entry["reply"] == {"answer": 5}
    assert entry["prompt_version"] == "v1"


async def test_invalid_replies_are_never_cached_and_stale_entries_are_refreshed(scripted_openai, tmp_path):
    server = scripted_openai(['{"answer": 3}'])
    client = LLMClient(settings(server.base_url, cache_dir=tmp_path))
    key = client.cache_file_key(("k", "site"), purpose="test", prompt_version="v1")
    path = tmp_path / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"reply": {"answer": "stale"}}))
    assert await ask(client) == 3
    assert len(server.requests) == 1
    assert json.loads(path.read_text())["reply"] == {"answer": 3}

    path.write_text("{ truncated")  # an unreadable entry is a miss, not a crash
    assert await ask(client) == 3
    assert len(server.requests) == 2


async def test_concurrency_bound_is_respected(scripted_openai):
    server = scripted_openai([{"content": '{"answer": 1}', "delay_s": 0.15}])
    client = LLMClient(settings(server.base_url, max_concurrency=2))
    results = await asyncio.gather(*(ask(client, str(i)) for i in range(6)))
    assert results == [1] * 6
    assert len(server.requests) == 6
    assert server.max_in_flight == 2


async def test_usage_totals_and_cost_follow_the_scripted_usage(scripted_openai):
    replies = [{"content": '{"answer": 1}', "usage": {"prompt_tokens": 1000, "completion_tokens": 200}},
               {"content": "broken", "usage": {"prompt_tokens": 500, "completion_tokens": 100}},
               {"content": '{"answer": 2}', "usage": {"prompt_tokens": 2000, "completion_tokens": 300}}]
    server = scripted_openai(replies)
    client = LLMClient(settings(server.base_url, price_per_1k_input=0.5, price_per_1k_output=2.0))
    assert await ask(client, "one") == 1
    assert await ask(client, "two") == 2   # the broken reply was retried; its tokens are still spent
    usage = client.usage
    assert (usage.requests, usage.retries) == (3, 1)
    assert (usage.prompt_tokens, usage.completion_tokens) == (3500, 600)
    assert usage.cost == pytest.approx(3.5 * 0.5 + 0.6 * 2.0)
    assert "3 requests" in usage.summary()
    assert (usage - Usage(requests=1)).requests == 2


def test_client_works_across_event_loops(scripted_openai):
    # Sync callers run one asyncio.run per batch: the client must not keep loop-bound state.
    server = scripted_openai(['{"answer": 9}'])
    client = LLMClient(settings(server.base_url))
    assert asyncio.run(ask(client, "a")) == 9
    assert asyncio.run(ask(client, "b")) == 9
    assert len(server.requests) == 2


async def test_no_answer_within_the_timeout_is_a_timeout_naming_the_url(scripted_openai):
    server = scripted_openai([{"content": '{"answer": 1}', "delay_s": 1.0}])
    # The late answers meet closed sockets; the test server would print those BrokenPipeErrors.
    server._server.handle_error = lambda request, address: None
    client = LLMClient(settings(server.base_url, timeout_s=0.2, max_retries=1))
    with pytest.raises(LLMTimeout) as caught:
        await ask(client)
    assert isinstance(caught.value, LLMUnavailable)   # callers that catch "unavailable" see it
    assert server.base_url in str(caught.value) and "0.2 s" in str(caught.value)
    assert client.usage.requests == 2


def test_settings_compose_an_endpoint_and_validate(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert settings("http://127.0.0.1:1/v1").endpoint.resolved_api_key() == "EMPTY"
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert settings("http://127.0.0.1:1/v1").endpoint.resolved_api_key() == "from-env"
    assert settings("http://127.0.0.1:1/v1", api_key="given").endpoint.resolved_api_key() == "given"
    with pytest.raises(ValueError, match="max_concurrency"):
        settings("http://127.0.0.1:1/v1", max_concurrency=0)
    with pytest.raises(LLMSettingsError, match="^model: required with base_url"):
        settings("http://127.0.0.1:1/v1", model="")
    assert not LLMSettings().configured   # no URL: no LLM (an offline build)
    with pytest.raises(LLMSettingsError, match="base_url"):
        LLMClient(LLMSettings())
    assert issubclass(LLMSettingsError, WebgymDataError) and issubclass(LLMSettingsError, ValueError)
    # The reply cache: on by default, in $XDG_CACHE_HOME/webgym/llm unless a folder is given.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert LLMSettings().resolved_cache_dir == tmp_path / "xdg" / "webgym" / "llm"
    assert LLMSettings(cache_dir=tmp_path / "c").resolved_cache_dir == tmp_path / "c"
    assert LLMSettings(cache=False, cache_dir=tmp_path / "c").resolved_cache_dir is None


def test_one_retry_client_serves_the_llm(scripted_openai):
    server = scripted_openai([{"status": 503}, '{"answer": 4}'])
    client = LLMClient(settings(server.base_url, max_retries=1))
    assert isinstance(client.chat, ChatClient) and client.chat.endpoint is client.settings.endpoint
    assert asyncio.run(ask(client)) == 4
    assert (client.chat.usage.requests, client.chat.usage.retries) == (2, 1)
    assert (client.usage.requests, client.usage.retries) == (2, 1)


async def test_gather_all_keeps_order_and_raises_the_first_error_alone():
    async def value(v, delay):
        await asyncio.sleep(delay)
        return v

    assert await gather_all([value(1, 0.02), value(2, 0), value(3, 0.01)], progress=True) == [1, 2, 3]

    cancelled = []

    async def slow():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def broken():
        raise LLMUnavailable("http://127.0.0.1:1/v1: down")

    with pytest.raises(LLMUnavailable):
        await gather_all([slow(), broken(), slow()])
    assert cancelled == [True, True]


# ------------------------------------------------------ untrusted input: replies never crash the client

@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(text=ODD_TEXT | json_text() | json_text().map(lambda t: f"```json\n{t}\n```")
                  | ODD_TEXT.map(lambda t: f"```{t}"))
def test_any_reply_text_is_json_or_an_invalid_reply(text):
    from webgym_data.llm import _InvalidReply, _parse_json

    try:
        _parse_json(text)
    except _InvalidReply:
        pass


@pytest.mark.parametrize(("bad", "reason"), [
    ('{"answer": ' + deeply_nested(100_000) + "}", "nested too deeply"),
    ('{"answer": 1' + "0" * 5000 + "}", "not usable JSON"),
    ('{"answer": 3, "note": "\\ud800"}', "not valid Unicode"),  # would be cached, then unwritable
    ({"body": {"choices": "x"}}, "without choices"), ({"body": {"choices": [7]}}, "without a message"),
    ({"body": {"choices": [{"message": {"content": ["a"]}}]}}, "list, not text"),
    ({"body": [1]}, "without choices"), ({"body": {"choices": [{"message": {"content": None}}]}}, "empty"),
])
async def test_hostile_replies_are_invalid_replies_never_crashes(scripted_openai, tmp_path, bad, reason):
    server = scripted_openai([bad])
    client = LLMClient(settings(server.base_url, max_retries=1, cache_dir=tmp_path))
    with pytest.raises(LLMReplyInvalid, match=reason):
        await ask(client)
    assert len(server.requests) == 2
    assert not list(tmp_path.rglob("*.json"))  # nothing cached
    await client.aclose()


async def test_a_body_that_is_not_json_is_unavailable_naming_the_url(scripted_openai):
    server = scripted_openai([{"body": b"<html>502 Bad Gateway</html>"}, '{"answer": 5}'])
    client = LLMClient(settings(server.base_url, max_retries=1))
    assert await ask(client) == 5  # retried like any transient failure
    server = scripted_openai([{"body": b"<html>502 Bad Gateway</html>"}])
    client = LLMClient(settings(server.base_url, max_retries=1))
    with pytest.raises(LLMUnavailable, match="not a chat completion") as caught:
        await ask(client)
    assert server.base_url in str(caught.value)
    await client.aclose()


async def test_odd_usage_fields_count_as_no_tokens(scripted_openai):
    body = {"choices": [{"message": {"content": '{"answer": 2}'}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": "lots", "completion_tokens": [1]}}
    server = scripted_openai([{"body": body}])
    client = LLMClient(settings(server.base_url))
    assert await ask(client) == 2
    assert (client.usage.prompt_tokens, client.usage.completion_tokens) == (0, 0)
    await client.aclose()
