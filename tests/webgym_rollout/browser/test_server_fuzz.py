"""Fuzzing the browser server's HTTP API from its own OpenAPI schema (schemathesis over hypothesis):
valid and invalid requests to every route, with made-up session ids and with a real session on a
real page. No request may get a 500 (an error the server did not type), every error is a JSON
``ErrorBody``, and the server keeps serving (``/health`` answers, its browser is alive) afterwards.
Bounded: a fixed number of examples per route, no example database."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections.abc import Iterator

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.support.openapi_fuzz import fuzz_operations, http_session
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.browser.protocol import ErrorBody
from webgym_rollout.browser.server import ServerSettings, running_server

pytestmark = pytest.mark.browser

_EXAMPLES = 25
"""Examples per route and generation mode."""
_TYPED_5XX = {502, 503, 504}
"""Server errors with a meaning (a browser or page failed, a slot is missing, a timeout)."""


@contextlib.contextmanager
def _server_thread(settings: ServerSettings) -> Iterator[tuple[str, object]]:
    """`running_server` on an event loop of its own thread: schemathesis calls it synchronously."""
    ready, found = threading.Event(), {}

    async def main() -> None:
        stop = asyncio.Event()
        found["stop"] = (asyncio.get_running_loop(), stop)
        async with running_server(settings) as (url, pool):
            found.update(url=url, pool=pool)
            ready.set()
            await stop.wait()

    def run() -> None:
        try:
            asyncio.run(main())
        finally:
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(120) and "url" in found, "the browser server did not start"
    try:
        yield found["url"], found["pool"]
    finally:
        loop, stop = found["stop"]
        loop.call_soon_threadsafe(stop.set)
        thread.join(60)


@pytest.fixture(scope="module")
def live(chromium_path, sites):
    pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=3,
                        allow_hosts=(f"{sites.host}:{sites.port}",), create_timeout_s=5.0,
                        navigate_timeout_s=3.0, action_timeout_s=3.0, max_queue=8)
    with _server_thread(ServerSettings(port=0, pool=pool)) as (url, server_pool):
        yield url, server_pool


def _check(case, response) -> None:
    status = response.status_code
    head = response.content[:300].decode("utf-8", "replace")
    where = f"{case.as_curl_command()}\n-> {status}: {head}"
    assert status < 500 or status in _TYPED_5XX, where
    if status >= 400:
        try:
            ErrorBody.model_validate_json(response.content)  # typed, whatever went wrong
        except ValueError as exc:
            raise AssertionError(f"not an ErrorBody: {where}") from exc


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_request_to_the_browser_server_gets_a_500_and_it_keeps_serving(live, sites, mode):
    url, pool = live
    http = http_session()
    page = f"{sites.base_url}/sandbox/form.html"

    def strategy_for(operation):
        strategies = [operation.as_strategy(mode)]
        if "{session_id}" in operation.path and operation.method.upper() != "DELETE":
            # A real session on a real page, recreated when an earlier example ended it.
            strategies.append(operation.as_strategy(mode, path_parameters={"session_id": "live"}))
        return st.one_of(strategies)

    def send(case) -> None:
        if case.path_parameters and case.path_parameters.get("session_id") == "live":
            case.path_parameters["session_id"] = _live_session(http, url, page)
        _check(case, case.call(base_url=url, session=http, timeout=60))

    calls = fuzz_operations(http, url, mode, _EXAMPLES, strategy_for=strategy_for, send=send)
    assert calls >= 5 * _EXAMPLES
    health = http.get(f"{url}/health", timeout=10)
    assert health.status_code == 200 and health.json()["browsers"] == 1
    assert http.post(f"{url}/sessions", json={"start_url": page}, timeout=30).status_code == 200


_LIVE: dict[str, str] = {}


def _live_session(http: requests.Session, url: str, page: str) -> str:
    """The id of a session on `page` that is still open (a new one when the last one was closed)."""
    sid = _LIVE.get(url)
    if sid is not None:
        alive = http.post(f"{url}/sessions/{sid}/page_info", json={}, timeout=30)
        if alive.status_code == 200:
            return sid
    created = http.post(f"{url}/sessions", json={"start_url": page}, timeout=30)
    assert created.status_code == 200, created.text
    _LIVE[url] = created.json()["session_id"]
    return _LIVE[url]


@settings(max_examples=40, deadline=None, database=None)
@given(body=st.binary(max_size=2048), claimed=st.one_of(st.none(), st.text(max_size=80)))
def test_uploaded_bodies_are_checked_against_their_hash(live, body, claimed):
    """``PUT /bodies/{sha256}`` (raw bytes: not in the schema's request bodies)."""
    url, pool = live
    sha = hashlib.sha256(body).hexdigest()
    name = sha if claimed is None else requests.utils.quote(claimed, safe="") or "x"
    response = http_session().put(f"{url}/bodies/{name}", data=body, timeout=10)
    if claimed is None:
        assert response.status_code == 204 and pool.bodies.missing([sha]) == []
    else:
        assert response.status_code in (404, 405, 422), response.text
        if response.status_code == 422:
            ErrorBody.model_validate_json(response.content)


# Requests the schema alone cannot shape (an action carries exactly the fields its kind needs),
# with values chosen to hurt: far-off coordinates, odd keys, unresolvable and local URLs.
_FLOATS = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)
_TEXT = st.text(max_size=40)
_KEYS = st.one_of(st.sampled_from(["Enter", "Tab", "Control+a", "Shift+Tab", "F5", "Meta", "+", "Alt+F4",
                                   "ArrowDown", "Control+Shift+I"]), st.text(max_size=12))
_ACTIONS = st.one_of(
    st.builds(lambda x, y: {"kind": "click", "x": x, "y": y}, _FLOATS, _FLOATS),
    st.builds(lambda t, e: {"kind": "type", "text": t, "press_enter": e}, _TEXT, st.booleans()),
    st.builds(lambda k: {"kind": "key", "key": k}, _KEYS),
    st.builds(lambda d, a, x, y: {"kind": "scroll", "direction": d, "amount": a, "x": x, "y": y},
              st.sampled_from(["up", "down"]), st.integers(1, 100_000), _FLOATS, _FLOATS),
    st.just({"kind": "go_back"}),
    st.builds(lambda s: {"kind": "wait", "seconds": s}, st.floats(0, 0.2)),
    st.builds(lambda x, y, v: {"kind": "select", "x": x, "y": y, "value": v}, _FLOATS, _FLOATS, _TEXT),
)
_URLS = st.one_of(
    st.from_regex(r"https?://[a-z0-9-]{1,10}\.(com|test|example)(:[0-9]{1,5})?/[a-z0-9/?=&%#]{0,12}",
                  fullmatch=True),
    st.sampled_from(["http://127.0.0.1:1/", "http://[::1]:9/", "http://0/", "http://2130706433:9/",
                     "about:blank", "http://localhost./", "https:///x", "http://a:b@127.0.0.2:9/",
                     "javascript:alert(1)", "data:text/html,hi", "view-source:http://x.test/", "http://%31%32%37.0.0.1:9/"]),
    _TEXT,
)


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(request=st.one_of(
    st.tuples(st.just("execute"), _ACTIONS),
    st.tuples(st.just("act"), st.fixed_dictionaries({"action": _ACTIONS}, optional={
        "screenshot": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
            "format": st.sampled_from(["png", "jpeg"]), "scale": st.floats(0.01, 1.0)})),
        "env_state": st.booleans(), "elements": st.booleans()})),
    st.tuples(st.just("navigate"), st.builds(lambda u: {"url": u}, _URLS)),
    st.tuples(st.just("screenshot"), st.fixed_dictionaries({}, optional={
        "format": st.sampled_from(["png", "jpeg"]), "quality": st.integers(1, 100),
        "scale": st.floats(0.01, 1.0)})),
    st.tuples(st.just("page_info"), st.fixed_dictionaries({"elements": st.booleans()})),
    st.tuples(st.just("env_state"), st.just({})),
    st.tuples(st.just("create"), st.fixed_dictionaries({"start_url": _URLS}, optional={
        "environment": st.one_of(st.sampled_from(["web", "miniwob:click-test", "miniwob:no-such-task",
                                                  "miniwob:", ":", "teleport:x"]), _TEXT),
        "viewport": st.tuples(st.integers(64, 4096), st.integers(64, 4096)),
        "seed": st.integers(-2**70, 2**70), "record": st.booleans()})),
))
def test_well_formed_requests_on_a_live_session_never_get_a_500(live, sites, request):
    url, _pool = live
    http = http_session()
    what, body = request
    if what == "create":
        response = http.post(f"{url}/sessions", json=body, timeout=60)
        if response.status_code == 200:
            http.delete(f"{url}/sessions/{response.json()['session_id']}", timeout=30)
    else:
        sid = _live_session(http, url, f"{sites.base_url}/sandbox/form.html")
        response = http.post(f"{url}/sessions/{sid}/{what}", json=body, timeout=60)
    head = response.content[:300].decode("utf-8", "replace")
    assert response.status_code < 500 or response.status_code in _TYPED_5XX, f"{what} {body} -> {head}"
    if response.status_code >= 400:
        ErrorBody.model_validate_json(response.content)
