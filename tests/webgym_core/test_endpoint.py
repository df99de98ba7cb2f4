"""webgym_core.endpoint: the one OpenAI retry client, against a real OpenAI-protocol server on 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest

from tests.webgym_core.test_completion import FULL
from webgym_core.completion import ToolCall
from webgym_core.endpoint import ChatClient, Endpoint, EndpointErrors
from webgym_core.errors import EndpointRejected, EndpointTimeout, EndpointUnavailable

MESSAGES = [{"role": "user", "content": "hello"}]


class MyUnavailable(Exception):
    pass


class MyReplyInvalid(Exception):
    pass


def test_endpoint_settings_check_their_values_and_find_the_key(monkeypatch):
    with pytest.raises(ValueError, match="max_concurrency: must be > 0"):
        Endpoint(max_concurrency=0)
    with pytest.raises(ValueError, match="max_retries: must be >= 0"):
        Endpoint(max_retries=-1)
    assert not Endpoint(base_url="http://x/v1").configured and Endpoint(base_url="u", model="m").configured
    monkeypatch.setenv("MY_KEY", "secret")
    assert Endpoint(api_key_env="MY_KEY").resolved_api_key() == "secret"
    assert Endpoint(api_key="given", api_key_env="MY_KEY").resolved_api_key() == "given"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert Endpoint().resolved_api_key() == "EMPTY"
    with pytest.raises(ValueError, match="no base_url"):
        ChatClient(Endpoint())


async def test_transient_failures_are_retried_and_counted(scripted_openai):
    server = scripted_openai([{"status": 500}, {"status": 429}, {"content": "hi", "usage": {
        "prompt_tokens": 7, "completion_tokens": 2}}])
    client = ChatClient(Endpoint(base_url=server.base_url, model="m", backoff_s=0.01))
    completion = await client.complete(messages=MESSAGES)
    await client.close()
    assert completion.text == "hi"
    assert (client.usage.requests, client.usage.retries, client.usage.failures) == (3, 2, 0)
    assert (client.usage.prompt_tokens, client.usage.completion_tokens) == (7, 2)
    assert server.requests[0]["model"] == "m"  # the endpoint's model unless the request names one


async def test_failures_raise_the_callers_classes(scripted_openai, unused_port):
    server = scripted_openai([{"status": 503}])
    errors = EndpointErrors(unavailable=MyUnavailable)
    client = ChatClient(Endpoint(base_url=server.base_url, model="m", max_retries=1, backoff_s=0.01),
                        errors=errors)
    with pytest.raises(MyUnavailable, match=r"HTTP 503 \(after 2 attempts\)"):
        await client.complete(messages=MESSAGES)
    assert len(server.requests) == 2 and client.usage.failures == 1
    rejected = scripted_openai([{"status": 401}, "never"])
    client = ChatClient(Endpoint(base_url=rejected.base_url, model="m", max_retries=3))
    with pytest.raises(EndpointRejected, match="HTTP 401"):
        await client.complete(messages=MESSAGES)
    assert len(rejected.requests) == 1  # not retried
    slow = scripted_openai([{"content": "late", "delay_s": 1.0}])
    client = ChatClient(Endpoint(base_url=slow.base_url, model="m", timeout_s=0.2, max_retries=0))
    with pytest.raises(EndpointTimeout, match="no answer within 0.2 s"):
        await client.complete(messages=MESSAGES)
    nobody = ChatClient(Endpoint(base_url=f"http://127.0.0.1:{unused_port}/v1", model="m", max_retries=0))
    with pytest.raises(EndpointUnavailable, match="connection failed"):
        await nobody.complete(messages=MESSAGES)


async def test_concurrency_is_bounded_and_the_client_survives_event_loops(scripted_openai):
    server = scripted_openai([{"content": "ok", "delay_s": 0.2}])
    client = ChatClient(Endpoint(base_url=server.base_url, model="m", max_concurrency=2))
    await asyncio.gather(*(client.complete(messages=MESSAGES) for _ in range(5)))
    assert server.max_in_flight <= 2 and len(server.requests) == 5

    def in_another_loop() -> str:
        return asyncio.run(client.complete(messages=MESSAGES)).text or ""

    assert await asyncio.to_thread(in_another_loop) == "ok"


async def test_the_client_returns_the_reply_with_the_token_ids_extension(scripted_openai):
    server = scripted_openai([{"body": FULL}])  # the token ids extension comes through openai's parse
    client = ChatClient(Endpoint(base_url=server.base_url, model="m"))
    reply = await client.complete(messages=MESSAGES)
    await client.close()
    assert reply.url == server.base_url
    assert (reply.token_ids, reply.prompt_token_ids, reply.logprobs) == ((11, 12, 13), (1, 2, 3, 4),
                                                                          (-0.5, 0.0, -2.25))
    assert reply.tool_calls == (ToolCall(name="computer_use", arguments="{}"),)


async def test_an_invalid_body_raises_the_callers_class_at_once_and_its_tokens_count(scripted_openai):
    body = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}}
    server = scripted_openai([{"body": body}])
    client = ChatClient(Endpoint(base_url=server.base_url, model="m", max_retries=3),
                        errors=EndpointErrors(invalid=MyReplyInvalid))
    with pytest.raises(MyReplyInvalid, match="without choices") as caught:
        await client.complete(messages=MESSAGES)
    await client.close()
    assert server.base_url in str(caught.value)
    assert len(server.requests) == 1  # not retried: the server answered, with nothing usable
    assert (client.usage.prompt_tokens, client.usage.completion_tokens, client.usage.failures) == (9, 1, 0)
