"""webgym_core.completion: a chat completion read and checked once, and the one text-cleaning helper."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.untrusted_input import JSON_VALUES, ODD_TEXT
from webgym_core.completion import ChatReply, ToolCall, clean_text
from webgym_core.errors import EndpointError, EndpointReplyInvalid

URL = "http://127.0.0.1:8000/v1"

# A vLLM reply with everything the toolkit reads: the token ids extension included.
FULL = {
    "id": "c1", "object": "chat.completion", "created": 1, "model": "qwen-v3", "system_fingerprint": "v3",
    "choices": [{"index": 0, "finish_reason": "length", "token_ids": [11, 12, 13],
                 "message": {"role": "assistant", "content": "Action: go back",
                             "tool_calls": [{"id": "t", "type": "function",
                                             "function": {"name": "computer_use", "arguments": "{}"}}]},
                 "logprobs": {"content": [{"token": "a", "logprob": -0.5, "bytes": None, "top_logprobs": []},
                                          {"token": "b", "logprob": 0, "bytes": None, "top_logprobs": []},
                                          {"token": "c", "logprob": -2.25, "bytes": None,
                                           "top_logprobs": []}]}}],
    "prompt_token_ids": [1, 2, 3, 4],
    "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
}


def with_choice(**fields: object) -> dict:
    """`FULL` with some fields of its first choice replaced."""
    return {**FULL, "choices": [{**FULL["choices"][0], **fields}]}


def test_clean_text_replaces_each_lone_surrogate_and_keeps_everything_else():
    ascii_text = "plain text"
    assert clean_text(ascii_text) is ascii_text  # no scan, no copy
    assert clean_text("café 😀 日本") == "café 😀 日本"
    assert clean_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"  # one replacement character per surrogate
    # Two lone halves are no pair in a Python string: both go.
    assert clean_text("\ud83d\ude00") == "\ufffd\ufffd"


@settings(max_examples=300, deadline=None)
@given(ODD_TEXT)
def test_clean_text_is_always_storable_and_changes_only_surrogates(text):
    cleaned = clean_text(text)
    cleaned.encode("utf-8")
    assert len(cleaned) == len(text)
    assert all(a == b or (0xD800 <= ord(a) <= 0xDFFF and b == "\ufffd")
               for a, b in zip(text, cleaned, strict=True))


def test_a_full_reply_is_read_with_its_token_ids_logprobs_and_usage():
    reply = ChatReply.read(FULL, url=URL)
    assert (reply.url, reply.text, reply.finish_reason) == (URL, "Action: go back", "length")
    assert reply.tool_calls == (ToolCall(name="computer_use", arguments="{}"),)
    assert reply.logprobs == (-0.5, 0.0, -2.25) and all(isinstance(v, float) for v in reply.logprobs)
    assert (reply.token_ids, reply.prompt_token_ids) == ((11, 12, 13), (1, 2, 3, 4))
    assert (reply.prompt_tokens, reply.completion_tokens) == (4, 3)
    assert (reply.served_model, reply.system_fingerprint) == ("qwen-v3", "v3")
    with pytest.raises(ValueError):  # frozen: what was read is what every caller sees
        reply.text = "other"


def test_what_the_openai_client_parsed_reads_as_the_json_does():
    from openai.types.chat import ChatCompletion

    # ``construct`` is what the client's raw-response ``parse()`` does: no check of any type.
    assert ChatReply.read(ChatCompletion.construct(**FULL), url=URL) == ChatReply.read(FULL, url=URL)


@pytest.mark.parametrize(("body", "missing"), [
    ({"choices": []}, "a completion without choices"), ({"choices": "x"}, "a completion without choices"),
    ({}, "a completion without choices"), (None, "a completion without choices"),
    ([1, 2], "a completion without choices"), ("VERDICT: PASS", "a completion without choices"),
    ({"choices": [5]}, "a choice without a message"),
    (with_choice(message=None), "a choice without a message"),
    (with_choice(message={"content": ["a"]}), "a message whose content is list, not text"),
    (with_choice(message={"content": 12}), "a message whose content is int, not text"),
])
def test_a_body_that_is_no_chat_completion_raises_naming_the_url_and_what_is_missing(body, missing):
    with pytest.raises(EndpointReplyInvalid) as caught:
        ChatReply.read(body, url=URL)
    assert str(caught.value) == f"{URL} returned {missing}"
    assert isinstance(caught.value, EndpointError)


def test_an_invalid_body_still_reports_the_tokens_it_spent():
    with pytest.raises(EndpointReplyInvalid) as caught:
        ChatReply.read({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}, url=URL)
    assert (caught.value.prompt_tokens, caught.value.completion_tokens) == (9, 2)


def test_null_content_is_no_text_but_a_reply():
    reply = ChatReply.read(with_choice(message={"role": "assistant", "content": None}), url=URL)
    assert reply.text is None and reply.tool_calls == ()


@pytest.mark.parametrize(("fields", "read"), [
    ({"finish_reason": ["stop"]}, {"finish_reason": ""}),
    ({"finish_reason": None}, {"finish_reason": ""}),
    ({"logprobs": {"content": [{"logprob": -0.5}, {"logprob": None}]}}, {"logprobs": ()}),
    ({"logprobs": {"content": [{"logprob": -0.5}, {"logprob": True}]}}, {"logprobs": ()}),
    ({"logprobs": {"content": [{"logprob": 10**400}]}}, {"logprobs": ()}),  # beyond any float
    ({"logprobs": {"content": "x"}}, {"logprobs": ()}), ({"logprobs": 3}, {"logprobs": ()}),
    ({"token_ids": [1, -1]}, {"token_ids": ()}), ({"token_ids": [1, 2**31]}, {"token_ids": ()}),
    ({"token_ids": [True]}, {"token_ids": ()}), ({"token_ids": "123"}, {"token_ids": ()}),
    ({"message": {"content": "Action: go back",
                  "tool_calls": [{"function": None}, "not a call", {"function": {}}]}},
     {"tool_calls": (ToolCall(),)}),
    ({"message": {"content": "Action: go back", "tool_calls": {"function": {"name": "f"}}}},
     {"tool_calls": ()}),
])
def test_odd_fields_are_read_as_nothing(fields, read):
    reply = ChatReply.read(with_choice(**fields), url=URL)
    assert {name: getattr(reply, name) for name in read} == read
    assert reply.text == "Action: go back"  # the rest is read as ever


@pytest.mark.parametrize(("top", "read"), [
    ({"usage": {"prompt_tokens": "many", "completion_tokens": -3}}, (0, 0)),
    ({"usage": {"prompt_tokens": True, "completion_tokens": 2.0}}, (0, 0)),
    ({"usage": None}, (0, 0)), ({"usage": {"prompt_tokens": 5}}, (5, 0)),
])
def test_token_counts_that_are_no_counts_are_zero(top, read):
    reply = ChatReply.read({**FULL, **top}, url=URL)
    assert (reply.prompt_tokens, reply.completion_tokens) == read


def test_every_text_of_the_reply_is_cleaned():
    body = {**with_choice(message={"content": "bad \ud800 byte"}, finish_reason="st\udc00p"),
            "model": "m\ud800", "system_fingerprint": "v\udfff", "prompt_token_ids": [1, None]}
    reply = ChatReply.read(body, url=URL)
    assert (reply.text, reply.finish_reason) == ("bad \ufffd byte", "st\ufffdp")
    assert (reply.served_model, reply.system_fingerprint) == ("m\ufffd", "v\ufffd")
    assert reply.prompt_token_ids == ()
    odd = ChatReply.read({**FULL, "model": {"name": "m"}, "system_fingerprint": 7}, url=URL)
    assert (odd.served_model, odd.system_fingerprint) == ("", "")


_CHOICE = st.fixed_dictionaries({}, optional={
    "message": JSON_VALUES | st.fixed_dictionaries({}, optional={"content": JSON_VALUES,
                                                                 "tool_calls": JSON_VALUES}),
    "finish_reason": JSON_VALUES, "token_ids": JSON_VALUES, "logprobs": JSON_VALUES})
_BODY = JSON_VALUES | st.fixed_dictionaries({}, optional={
    "choices": JSON_VALUES | st.lists(_CHOICE | JSON_VALUES, max_size=2), "usage": JSON_VALUES,
    "prompt_token_ids": JSON_VALUES, "model": JSON_VALUES, "system_fingerprint": JSON_VALUES})


@settings(max_examples=400, deadline=None)
@given(_BODY)
def test_any_body_gives_a_storable_reply_or_the_one_documented_error(body):
    try:
        reply = ChatReply.read(body, url=URL)
    except EndpointReplyInvalid as exc:
        assert str(exc).startswith(f"{URL} returned ")
        return
    for text in (reply.text or "", reply.finish_reason, reply.served_model, reply.system_fingerprint):
        text.encode("utf-8")
    assert reply.prompt_tokens >= 0 and reply.completion_tokens >= 0

