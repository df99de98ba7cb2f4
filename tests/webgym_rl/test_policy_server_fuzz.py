"""Fuzzing the CPU policy server's HTTP API from its own OpenAPI schema (schemathesis over
hypothesis) and from typed chat requests built to hurt (odd roles, stop strings, seeds, images that
are not what they say): no request may get a 500, every error has the OpenAI shape, and the server
keeps answering. A tiny random model, at most two new tokens a reply; bounded examples, no example
database."""

from __future__ import annotations

import base64
import io
import zlib
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from schemathesis import GenerationMode

from tests.support.models import tiny_model_dir
from tests.support.openapi_fuzz import fuzz_operations, http_session
from webgym_rl.policy_server import PolicyServerSettings, running_policy_server

_EXAMPLES = 20
"""Examples per route and generation mode."""
_SERVED = "tiny"


@pytest.fixture(scope="module")
def root() -> Iterator[str]:
    settings = PolicyServerSettings(model=str(tiny_model_dir("qwen2_vl")), port=0, max_new_tokens=2,
                                    served_model_name=_SERVED)
    with running_policy_server(settings) as base_url:
        yield base_url.removesuffix("/v1")


def _check(what: str, response) -> None:
    status = response.status_code
    head = response.content[:300].decode("utf-8", "replace")
    assert status < 500, f"{what}\n-> {status}: {head}"
    if status >= 400:
        error = response.json().get("error")
        assert isinstance(error, dict) and error.get("message") and error.get("code"), f"{what}\n-> {head}"


def _served_model(case):
    """Half the chat requests name the served model, so they get past the name check."""
    if isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = _SERVED
    return case


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_request_to_the_policy_server_gets_a_500_and_it_keeps_serving(root, mode):
    http = http_session()

    def strategy_for(operation):
        strategy = operation.as_strategy(mode)
        if operation.path == "/v1/chat/completions":
            strategy = st.one_of(strategy, strategy.map(_served_model))
        return strategy

    def send(case) -> None:
        _check(case.as_curl_command(), case.call(base_url=root, session=http, timeout=120))

    calls = fuzz_operations(http, root, mode, _EXAMPLES, strategy_for=strategy_for, send=send)
    assert calls >= 3 * _EXAMPLES
    health = http.get(f"{root}/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"


def _image(size: tuple[int, int], fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 90)).save(buffer, fmt)
    return buffer.getvalue()


def _data_url(raw: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64,{base64.b64encode(raw).decode()}"


def _bomb() -> bytes:
    """A PNG whose header claims 100000 x 100000 pixels (a decompression bomb) over a tiny body."""
    raw = bytearray(_image((1, 1)))
    raw[16:24] = (100_000).to_bytes(4, "big") * 2  # IHDR width and height
    raw[29:33] = zlib.crc32(bytes(raw[12:29])).to_bytes(4, "big")  # and the chunk's CRC to match
    return bytes(raw)


_IMAGES = st.sampled_from([
    _data_url(_image((28, 28))), _data_url(_image((1, 1))), _data_url(_image((3000, 1))),
    _data_url(_image((40, 40), "JPEG"), "jpeg"), _data_url(_image((40, 40), "GIF"), "gif"),
    _data_url(b"not an image"), _data_url(_bomb()), "data:image/png;base64,!!!",
    "data:text/plain;base64,aGk=", "http://127.0.0.1:9/x.png", "data:image/png;base64,",
    "file:///etc/passwd", "",
])
_TEXTS = st.text(max_size=60)
_PARTS = st.lists(st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _TEXTS),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, _IMAGES),
), max_size=3)
_MESSAGES = st.lists(st.fixed_dictionaries({
    "role": st.sampled_from(["system", "user", "assistant", "tool"]),
    "content": st.one_of(st.none(), _TEXTS, _PARTS),
}), max_size=4)
_CHAT = st.fixed_dictionaries({"model": st.sampled_from([_SERVED, _SERVED, "other"]), "messages": _MESSAGES},
                              optional={
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.01, 1),
    "max_tokens": st.integers(1, 10**6),
    "seed": st.integers(-2**70, 2**70),
    "stop": st.one_of(_TEXTS, st.lists(_TEXTS, max_size=3)),
    "logprobs": st.booleans(),
    "top_logprobs": st.integers(0, 20),
    "n": st.integers(1, 2),
    "stream": st.booleans(),
})


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(body=_CHAT)
def test_typed_chat_requests_never_get_a_500(root, body):
    response = http_session().post(f"{root}/v1/chat/completions", json=body, timeout=120)
    _check(f"chat {body!r}"[:2000], response)
    if response.status_code == 200:
        assert response.json()["usage"]["completion_tokens"] <= 2


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(body=st.one_of(
    st.binary(max_size=512),
    st.builds(lambda n, tail: n.to_bytes(8, "little") + tail, st.integers(0, 2**64 - 1),
              st.binary(max_size=64)),
    st.builds(lambda header: len(header).to_bytes(8, "little") + header,
              st.sampled_from([b"[" * 50_000, b"{}", b'{"a": 1}', b'{"a": {"dtype": "F32", "shape": [true], '
                               b'"data_offsets": [0, 0]}}', b'{"a": "x"}', b"\xff\xfe", b"null"])),
), version=st.one_of(st.none(), st.integers(-5, 2**70)))
def test_weights_bodies_never_get_a_500(root, body, version):
    """``POST /weights`` takes a raw safetensors body (not in the schema's request bodies)."""
    query = "" if version is None else f"?version={version}"
    response = http_session().post(f"{root}/weights{query}", data=body,
                            headers={"Content-Type": "application/octet-stream"}, timeout=60)
    _check(f"weights {body[:80]!r} version={version}", response)
    assert response.status_code != 200  # none of these is the model's state_dict
