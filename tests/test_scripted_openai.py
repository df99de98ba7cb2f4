"""The scripted OpenAI server used by the LLM tests answers the real `openai` client as scripted."""

from __future__ import annotations

import asyncio

import openai
import pytest


async def test_replies_in_order_then_repeat_last(scripted_openai):
    llm = scripted_openai(["one", {"content": "two", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}])
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    texts, usages = [], []
    for _ in range(3):
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        texts.append(reply.choices[0].message.content)
        usages.append(reply.usage.prompt_tokens)
    assert texts == ["one", "two", "two"]
    assert usages[1:] == [7, 7]
    assert [r["messages"][0]["content"] for r in llm.requests] == ["hi"] * 3
    models = await client.models.list()
    assert [m.id for m in models.data] == ["scripted-model"]


async def test_error_status_reaches_the_client(scripted_openai):
    llm = scripted_openai([{"status": 500}])
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


async def test_concurrent_requests_are_counted(scripted_openai):
    llm = scripted_openai([{"content": "slow", "delay_s": 0.3}])
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    await asyncio.gather(*[
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": str(i)}])
        for i in range(3)])
    assert llm.max_in_flight == 3
