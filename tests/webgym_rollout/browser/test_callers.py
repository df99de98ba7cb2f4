"""The Host and Origin checks of the browser server and the policy server (pure: headers in,
decision out; the servers' own tests send real requests)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webgym_rollout.browser.callers import CallerCheck


def _headers(**values: str | list[str]) -> list[tuple[bytes, bytes]]:
    """ASGI headers: (lower-case name, value) bytes pairs; a list value repeats the header."""
    pairs = []
    for name, value in values.items():
        for one in [value] if isinstance(value, str) else value:
            pairs.append((name.replace("_", "-").lower().encode(), one.encode("latin-1")))
    return pairs


def _kind(check: CallerCheck, **values: str | list[str]) -> str | None:
    refusal = check.refusal(_headers(**values))
    return None if refusal is None else refusal.kind


def test_a_loopback_server_answers_its_loopback_names_on_its_port_only():
    check = CallerCheck("127.0.0.1", 8300)
    for host in ("127.0.0.1:8300", "localhost:8300", "[::1]:8300", "LocalHost:8300", "localhost.:8300"):
        assert _kind(check, host=host) is None, host
    for host in ("127.0.0.1:8301", "127.0.0.1", "127.0.0.2:8300", "evil.example:8300", "localhost.evil:8300",
                 "::1:8300", "[::1]", "[::1]:", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:99999", ":8300",
                 "127.0.0.1:8300/x", "user@127.0.0.1:8300", "[::1]x:8300", "127.0.0.1 :8300"):
        refusal = check.refusal(_headers(host=host))
        assert refusal is not None and (refusal.status, refusal.kind) == (421, "misdirected"), host
        assert repr(host[:200]) in refusal.message
    assert _kind(check) == "misdirected"  # no Host at all
    assert _kind(check, host=["127.0.0.1:8300", "evil.example:8300"]) == "misdirected"  # two of them


def test_before_the_port_is_known_any_port_of_its_names_passes():
    check = CallerCheck("::1")  # port 0: bound later, `port` set then
    assert _kind(check, host="[::1]:5000") is None and _kind(check, host="127.0.0.1:5001") is None
    assert _kind(check, host="evil.example:5000") == "misdirected"
    check.port = 5000
    assert _kind(check, host="[::1]:5001") == "misdirected"


def test_a_server_on_one_address_answers_that_address_and_its_configured_names():
    check = CallerCheck("10.0.0.11", 8300, server_names=["browsers.lan", "api.lan:443"])
    assert _kind(check, host="10.0.0.11:8300") is None
    assert _kind(check, host="127.0.0.1:8300") == "misdirected"  # not an address it listens on
    assert _kind(check, host="browsers.lan:1234") is None and _kind(check, host="browsers.lan") is None
    assert _kind(check, host="api.lan:443") is None and _kind(check, host="api.lan:8300") == "misdirected"
    assert _kind(check, host="other.lan:8300") == "misdirected"


def test_a_wildcard_server_answers_any_ip_literal_but_only_configured_names():
    """An IP literal in Host cannot come from DNS rebinding (the page's own origin would be that
    address): on 0.0.0.0 / :: every address of the machine is the server's own."""
    for bind in ("0.0.0.0", "::", "[::]"):
        check = CallerCheck(bind, 8300, server_names=["browsers.lan"])
        for host in ("10.0.0.11:8300", "192.168.1.5:8300", "[fd00::1]:8300", "127.0.0.1:8300",
                     "localhost:8300", "browsers.lan:8300"):
            assert _kind(check, host=host) is None, (bind, host)
        for host in ("10.0.0.11:8301", "evil.example:8300", "browsers.lan.evil.example:8300"):
            assert _kind(check, host=host) == "misdirected", (bind, host)


def test_a_web_pages_request_is_refused_unless_its_origin_is_allowed():
    check = CallerCheck("127.0.0.1", 8300, allowed_origins=["https://dash.example/", "HTTP://Tool.Example:81"])
    own = "127.0.0.1:8300"
    for origin in ("http://127.0.0.1:8400", "null", "https://evil.example", "http://localhost:8300",
                   "https://127.0.0.1:8300", "http://127.0.0.1:8300.evil"):
        refusal = check.refusal(_headers(host=own, origin=origin))
        assert refusal is not None and (refusal.status, refusal.kind) == (403, "foreign_origin"), origin
        assert "--allowed-origins" in refusal.message
    for origin in ("https://dash.example", "http://tool.example:81", "http://127.0.0.1:8300"):
        assert _kind(check, host=own, origin=origin) is None, origin
    assert _kind(check, host=own, origin=["https://dash.example", "https://evil.example"]) == "foreign_origin"
    for site in ("cross-site", "same-site", "Cross-Site"):
        assert _kind(check, host=own, sec_fetch_site=site) == "foreign_origin"
    for site in ("none", "same-origin"):  # typed by the user, or the server's own /docs page
        assert _kind(check, host=own, sec_fetch_site=site) is None
    assert _kind(check, host=own, origin="https://dash.example", sec_fetch_site="cross-site") is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"server_names": ["bad name"]}, "server_names: 'bad name'"),
    ({"server_names": [""]}, "server_names: ''"),
    ({"server_names": ["[::1"]}, "server_names: '[::1'"),
    ({"allowed_origins": ["dash.example"]}, "allowed_origins: 'dash.example'"),
    ({"allowed_origins": ["https://dash.example/x"]}, "allowed_origins: 'https://dash.example/x'"),
])
def test_bad_settings_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        CallerCheck("127.0.0.1", 8300, **kwargs)


_OWN = {"127.0.0.1:8300", "localhost:8300", "[::1]:8300"}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=255), max_size=40))
def test_no_other_host_header_passes(host):
    """Whatever bytes a Host header holds, only the server's own names pass."""
    check = CallerCheck("127.0.0.1", 8300)
    accepted = _kind(check, host=host) is None
    normal = host.strip().lower().replace(".:", ":")
    assert accepted == (normal in _OWN), host
