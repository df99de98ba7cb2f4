"""UrlGuard decisions (pure: no DNS, no network) and the SiteBlocklist with an injected clock."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webgym_rollout.browser.guard import SiteBlocklist, UrlGuard, is_loopback_host, site_of
from webgym_rollout.errors import NavigationRefused, SiteBlocked

REFUSED = [
    "file:///etc/passwd",
    "chrome://settings",
    "data:text/html,<script>alert(1)</script>",
    "javascript:alert(1)",
    "ftp://example.com/file",
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1:8400/",
    "http://127.0.0.2/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/admin",
    "http://100.64.0.1/",
    "http://0.0.0.0/",
    "http://[::1]:8080/",
    "http://[fc00::1]/",
    "http://[fe80::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://2130706433/",  # 127.0.0.1 as one number
    "http://0x7f.1/",  # 127.0.0.1 in hex shorthand
    "http://localhost:3000/",
    "http://api.localhost/",
    "http://metadata.google.internal/",
    "http://intranet/",
    "http:///no-host",
]
ALLOWED = [
    "https://www.example.com/path?q=1",
    "http://93.184.216.34/",
    "https://[2606:4700::1111]/",
    "about:blank",
]


@pytest.mark.parametrize("url", REFUSED)
def test_refused_by_default(url):
    guard = UrlGuard()
    assert guard.reason(url) is not None
    with pytest.raises(NavigationRefused) as caught:
        guard.check(url)
    assert caught.value.url == url and url in str(caught.value)


@pytest.mark.parametrize("url", ALLOWED)
def test_public_urls_allowed(url):
    assert UrlGuard().reason(url) is None


def test_allowlist_opens_exactly_the_listed_hosts():
    guard = UrlGuard(["127.0.0.1", "localhost:8400", "*.corp.internal"])
    assert guard.allows("http://127.0.0.1:5000/x")
    assert not guard.allows("http://127.0.0.2:5000/x")
    assert guard.allows("http://localhost:8400/")
    assert not guard.allows("http://localhost:8401/")
    assert guard.allows("http://wiki.corp.internal/") and guard.allows("http://corp.internal/")
    assert not guard.allows("http://evilcorp.internal/")
    assert not guard.allows("file:///etc/passwd")  # the allowlist never opens other schemes


_PRIVATE_NETS = [
    ipaddress.ip_network(n)
    for n in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")
]


@given(
    st.sampled_from(_PRIVATE_NETS),
    st.integers(min_value=0, max_value=2**24 - 1),
    st.sampled_from(["http", "https", "HTTP"]),
    st.integers(min_value=1, max_value=65535),
)
def test_every_private_ipv4_address_is_refused(net, offset, scheme, port):
    address = net.network_address + (offset % net.num_addresses)
    assert UrlGuard().reason(f"{scheme}://{address}:{port}/") is not None


def test_site_of():
    assert site_of("https://www.Example.com/a") == "example.com"
    assert site_of("http://127.0.0.1:8400/x") == "127.0.0.1"


def test_blocklist_counts_failures_within_window_and_expires():
    now = [0.0]
    blocklist = SiteBlocklist(threshold=3, window_s=60, ttl_s=100, clock=lambda: now[0])
    assert not blocklist.record_failure("https://slow.example/a", "timeout")
    now[0] = 70.0  # the first failure left the window
    assert not blocklist.record_failure("https://slow.example/b", "timeout")
    assert not blocklist.record_failure("https://www.slow.example/c", "timeout")
    blocklist.check("https://slow.example/")  # two failures in the window: not blocked yet
    assert blocklist.record_failure("https://slow.example/d", "captcha page")
    with pytest.raises(SiteBlocked, match="slow.example"):
        blocklist.check("https://slow.example/other")
    blocklist.check("https://fast.example/")
    assert [e.site for e in blocklist.entries()] == ["slow.example"]
    now[0] = 70.0 + 101
    blocklist.check("https://slow.example/")
    assert blocklist.entries() == []


def test_blocklist_success_resets_and_manual_block():
    now = [0.0]
    blocklist = SiteBlocklist(threshold=2, clock=lambda: now[0])
    blocklist.record_failure("https://a.example/", "timeout")
    blocklist.record_success("https://a.example/")
    assert not blocklist.record_failure("https://a.example/", "timeout")
    blocklist.block("https://b.example/", "operator", ttl_s=5)
    with pytest.raises(SiteBlocked):
        blocklist.check("https://b.example/x")
    now[0] = 6
    blocklist.check("https://b.example/x")
    with pytest.raises(ValueError):
        SiteBlocklist(threshold=0)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("10.0.0.1", False), ("example.org", False), ("", False)])
def test_is_loopback_host(host, loopback):
    assert is_loopback_host(host) is loopback
