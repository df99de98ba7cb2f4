"""Recording a page's network traffic, and serving a page from a recording, on the browser server.

Both live on the page's own DevTools session, beside the CDP ``Fetch`` interception that
`webgym_rollout.browser.navigation` installs on every page for the URL guard. Not in the egress
proxy: it tunnels HTTPS without opening it. Not Playwright's HAR recording: it is per context and
written when the context closes, while the pool reuses contexts across sessions; and
``route_from_har`` matches a request to one response, not to the sequence a page got.

- `TrafficRecorder` follows the page's ``Network`` events: the request (method, URL, body), each
  hop of a redirect (status and ``location``), the response (status, headers) and, once it has
  finished loading, its body (``Network.getResponseBody``), kept content-addressed (SHA-256).
  Nothing is paused: a first version paused every response at the ``Fetch`` response stage to read
  its body, which put two DevTools round trips on the page's critical path per response and cost
  8-13 % of the steps/s (benchmarks/record_replay.py, mean of two runs of 4 rounds); reading the
  bodies after the fact measured 3-9 % (median of back-to-back pairs).
  The runner reads the index (``GET /sessions/{id}/recording``) and only the bodies it does not
  hold yet (``POST /sessions/{id}/recording/bodies``) before it closes the session.
- `TrafficReplayer` answers every request the URL guard allows with ``Fetch.fulfillRequest`` from
  the recording: matched on method, URL and the SHA-256 of its body; a POST whose body differs
  from every recorded one (a timestamp, a token) takes the next response of the same method and
  URL. The same request made several times gets the recorded responses in their recorded order
  (the last one repeats), so a page that changed between two visits changes the same way again. A
  request the recording lacks fails (``net::ERR_INTERNET_DISCONNECTED``) unless
  `ReplayOptions.live_fallback` lets it through to the network (where the egress proxy still
  applies); either way it is listed in `RecordingIndex.misses`. WebSockets are not recorded, and a
  replayed page's WebSockets are refused (`webgym_rollout.browser.navigation.guard_context`).

Both sessions disable the HTTP cache (``Network.setCacheDisabled``): the pool reuses contexts, and
a response cached by an earlier session would be missing from a recording, or answer a replay.
`BodyStore` holds the bodies a client uploaded for replays (``PUT /bodies/{sha256}``), bounded in
bytes, least recently used first out.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections import OrderedDict, defaultdict
from typing import Any

from playwright.async_api import CDPSession
from playwright.async_api import Error as PlaywrightError

from webgym_rollout.browser.protocol import RecordedExchange, RecordingIndex, ReplayOptions
from webgym_rollout.errors import InvalidRequest

__all__ = ["BodyStore", "TrafficRecorder", "TrafficReplayer", "post_sha256"]

log = logging.getLogger(__name__)

# Headers that describe the transfer, not the body we hold (decoded, whole): never replayed.
_TRANSFER_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection",
                               "keep-alive"})


def post_sha256(request: dict[str, Any]) -> str:
    """SHA-256 of a paused request's body ("" without one), as recorder and replayer both see it."""
    entries = request.get("postDataEntries")
    if entries:
        data = b"".join(base64.b64decode(e.get("bytes", "")) for e in entries)
    elif request.get("postData") is not None:
        data = str(request["postData"]).encode()
    else:
        return ""
    return hashlib.sha256(data).hexdigest()


class BodyStore:
    """Bodies by SHA-256, at most `max_bytes` in all (least recently used evicted first)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._bodies: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0

    def __contains__(self, sha: str) -> bool:
        return sha in self._bodies

    def put(self, sha: str, data: bytes) -> None:
        """Keep `data`; raises `InvalidRequest` when it does not hash to `sha` or cannot fit."""
        if hashlib.sha256(data).hexdigest() != sha:
            raise InvalidRequest(f"body {sha}: the uploaded bytes hash to another SHA-256")
        if len(data) > self.max_bytes:
            raise InvalidRequest(f"body {sha}: {len(data)} bytes is more than the server's replay "
                                 f"cache ({self.max_bytes} bytes, --replay-cache-mib)")
        if sha in self._bodies:
            self._bodies.move_to_end(sha)
            return
        self._bodies[sha] = data
        self._size += len(data)
        while self._size > self.max_bytes:
            _, dropped = self._bodies.popitem(last=False)
            self._size -= len(dropped)

    def get(self, sha: str) -> bytes | None:
        data = self._bodies.get(sha)
        if data is not None:
            self._bodies.move_to_end(sha)
        return data

    def missing(self, hashes: list[str]) -> list[str]:
        return [sha for sha in dict.fromkeys(hashes) if sha not in self._bodies]


class TrafficRecorder:
    """Records every response of one page from its DevTools ``Network`` events (see the module
    docstring): nothing is paused, bodies are read once each response has finished loading."""

    def __init__(self) -> None:
        self.exchanges: list[RecordedExchange] = []
        self.bodies: dict[str, bytes] = {}
        self.lost_bodies = 0
        """Responses whose body Chromium no longer held when it was asked for (recorded without)."""
        self._requests: dict[str, dict[str, Any]] = {}
        self._responses: dict[str, dict[str, Any]] = {}
        self._pending: set[asyncio.Task] = set()

    def attach(self, cdp: CDPSession) -> None:
        """Follow the page's ``Network`` events (the caller enables the domain)."""
        self._cdp = cdp
        cdp.on("Network.requestWillBeSent", self._on_request)
        cdp.on("Network.responseReceived", self._on_response)
        cdp.on("Network.loadingFinished", self._on_finished)
        cdp.on("Network.loadingFailed", self._on_failed)

    def _on_request(self, event: dict[str, Any]) -> None:
        request_id = event["requestId"]
        if event.get("redirectResponse") and request_id in self._requests:
            # One hop of a redirect chain: recorded with its status and location, without a body.
            self._append(self._requests[request_id], event["redirectResponse"], event.get("type", ""), b"")
        if event["request"]["url"].startswith(("data:", "blob:")):
            return
        self._requests[request_id] = event["request"]

    def _on_response(self, event: dict[str, Any]) -> None:
        if event["requestId"] in self._requests:
            self._responses[event["requestId"]] = event

    def _on_failed(self, event: dict[str, Any]) -> None:
        self._requests.pop(event["requestId"], None)
        self._responses.pop(event["requestId"], None)

    def _on_finished(self, event: dict[str, Any]) -> None:
        request_id = event["requestId"]
        request, response = self._requests.pop(request_id, None), self._responses.pop(request_id, None)
        if request is None or response is None:
            return
        task = asyncio.ensure_future(self._record(request_id, request, response))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _record(self, request_id: str, request: dict[str, Any], event: dict[str, Any]) -> None:
        body = b""
        status = int(event["response"].get("status") or 0)
        if status != 204 and request.get("method") != "HEAD":
            try:
                reply = await self._cdp.send("Network.getResponseBody", {"requestId": request_id})
            except PlaywrightError:  # evicted, or the page went away
                self.lost_bodies += 1
            else:
                raw = reply.get("body", "")
                body = base64.b64decode(raw) if reply.get("base64Encoded") else raw.encode()
        self._append(request, event["response"], event.get("type", ""), body)

    def _append(self, request: dict[str, Any], response: dict[str, Any], resource_type: str,
                body: bytes) -> None:
        sha = hashlib.sha256(body).hexdigest() if body else ""
        if body:
            self.bodies.setdefault(sha, body)
        # DevTools joins repeated headers (Set-Cookie) with newlines: one pair each again.
        headers = [(name, line) for name, value in (response.get("headers") or {}).items()
                   for line in str(value).split("\n")]
        self.exchanges.append(RecordedExchange(
            method=request.get("method", "GET"), url=request["url"], resource_type=resource_type,
            post_sha256=post_sha256(request), status=int(response.get("status") or 0), headers=headers,
            body_sha256=sha, body_size=len(body)))

    async def index(self, budget_s: float = 2.0) -> RecordingIndex:
        """The exchanges so far, after the bodies being read now (at most `budget_s`)."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=budget_s)
        return RecordingIndex(exchanges=list(self.exchanges))


class TrafficReplayer:
    """Serves one page from a recording (see the module docstring)."""

    def __init__(self, options: ReplayOptions, bodies: BodyStore):
        missing = bodies.missing([e.body_sha256 for e in options.exchanges if e.body_sha256])
        if missing:
            raise InvalidRequest(f"replay: {len(missing)} recorded bodies are not on this server "
                                 f"(first: {missing[0]}); upload them with PUT /bodies/{{sha256}}")
        self.live_fallback = options.live_fallback
        # Held here, not in the store: an eviction must not break a replay under way.
        self._bodies = {e.body_sha256: bodies.get(e.body_sha256) or b""
                        for e in options.exchanges if e.body_sha256}
        self._exchanges = list(options.exchanges)
        self._exact: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        self._loose: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, exchange in enumerate(self._exchanges):
            self._exact[(exchange.method, exchange.url, exchange.post_sha256)].append(i)
            self._loose[(exchange.method, exchange.url)].append(i)
        self._used: set[int] = set()
        self.misses: list[str] = []
        """``METHOD URL`` of the requests the recording did not hold."""
        self.live = 0
        """Misses let through to the network (`live_fallback`)."""

    def take(self, request: dict[str, Any]) -> RecordedExchange | None:
        """The recorded response for `request` (None: not recorded). Requests with the same method,
        URL and body get the recorded responses in order, the last one repeating; a body that was
        never recorded takes those of the same method and URL."""
        method, url = request.get("method", "GET"), request["url"]
        candidates = self._exact.get((method, url, post_sha256(request))) or self._loose.get((method, url))
        if not candidates:
            return None
        chosen = next((i for i in candidates if i not in self._used), candidates[-1])
        self._used.add(chosen)
        return self._exchanges[chosen]

    def fulfill_params(self, request_id: str, exchange: RecordedExchange) -> dict[str, Any]:
        """The ``Fetch.fulfillRequest`` parameters that answer a request with `exchange`."""
        headers = [{"name": name, "value": value} for name, value in exchange.headers
                   if name.lower() not in _TRANSFER_HEADERS]
        body = self._bodies.get(exchange.body_sha256, b"") if exchange.body_sha256 else b""
        params: dict[str, Any] = {"requestId": request_id, "responseCode": exchange.status,
                                  "responseHeaders": headers}
        if body:
            params["body"] = base64.b64encode(body).decode("ascii")
        return params

    def index(self) -> RecordingIndex:
        return RecordingIndex(misses=list(self.misses), live=self.live)
