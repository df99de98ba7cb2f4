"""The egress decision (pure: no DNS, no network): addresses, URLs, resolved names, the origin
(the blocklist's key) and the allowlist entries the blocklist never counts."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webgym_rollout.browser.guard import (
    AllowlistError,
    UrlGuard,
    address_reason,
    ip_literal,
    is_loopback_host,
    origin_of,
)
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.errors import NavigationRefused, RolloutError

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
    "http://0xa9fea9fe/",  # 169.254.169.254 in hex
    "http://2852039166/latest/meta-data/",  # 169.254.169.254 as one number
    "http://0251.0376.0251.0376/",  # 169.254.169.254 in octal
    "http://167772161/",  # 10.0.0.1 as one number
    "http://[64:ff9b::a00:1]/",  # NAT64 form of 10.0.0.1
    "http://[::ffff:a00:1]/",  # IPv4-mapped 10.0.0.1
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


# The decision on an address, as the egress proxy makes it after resolving a name.
REFUSED_ADDRESSES = {
    "169.254.169.254": "link-local",  # cloud instance metadata
    "10.0.0.1": "private",
    "10.255.255.254": "private",
    "172.16.0.1": "private",
    "172.31.255.254": "private",
    "192.168.1.1": "private",
    "100.64.0.1": "CGNAT",
    "100.127.255.254": "CGNAT",
    "127.0.0.2": "loopback",
    "0.0.0.0": "reserved",
    "224.0.0.1": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.255": "reserved",
    "::1": "loopback",
    "::": "reserved",
    "fc00::1": "private",
    "fdff:ffff::1": "private",
    "fe80::1": "link-local",
    "febf::1": "link-local",
    "fec0::1": "site-local",
    "ff02::1": "multicast",
    "::ffff:10.0.0.1": "IPv4-mapped",
    "::ffff:127.0.0.1": "IPv4-mapped",
    "64:ff9b::a00:1": "NAT64",  # 10.0.0.1 behind NAT64
    "64:ff9b::a9fe:a9fe": "NAT64",  # 169.254.169.254 behind NAT64
    "64:ff9b:1::a00:1": "NAT64",  # the local-use NAT64 prefix
    "2002:a00:1::1": "6to4",  # 10.0.0.1 in a 6to4 address
}


@pytest.mark.parametrize(("address", "kind"), REFUSED_ADDRESSES.items())
def test_non_public_addresses_are_refused_and_named(address, kind):
    why = address_reason(ipaddress.ip_address(address))
    assert why is not None and kind in why


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111",
                                     "64:ff9b::808:808", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address):
    """A translated address that carries a public IPv4 address is public (NAT64 networks work)."""
    assert address_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(("spelled", "address"), [
    ("2852039166", "169.254.169.254"), ("0xa9fea9fe", "169.254.169.254"),
    ("0xA9.0xFE.0xA9.0xFE", "169.254.169.254"), ("0251.0376.0251.0376", "169.254.169.254"),
    ("167772161", "10.0.0.1"), ("10.1", "10.0.0.1"),
    ("0x7f.1", "127.0.0.1"), ("[::ffff:10.0.0.1]", "::ffff:10.0.0.1"), ("example.com", None), ("1e", None)])
def test_ip_literal_reads_the_legacy_forms_browsers_accept(spelled, address):
    assert ip_literal(spelled) == (ipaddress.ip_address(address) if address else None)
    if address is not None:  # and the guard refuses each of them as a host
        assert UrlGuard().host_reason(spelled, 80) is not None


def test_connect_decision_on_resolved_addresses():
    """The proxy resolves a name, then decides on the address it will connect to."""
    guard = UrlGuard(["127.0.0.1:8400", "intranet.test"])
    assert guard.host_reason("public.test", 80) is None  # a name: its address decides
    why = guard.connect_reason("public.test", 80, ipaddress.ip_address("169.254.169.254"))
    assert why is not None and "public.test resolves to 169.254.169.254" in why
    assert guard.connect_reason("public.test", 443, ipaddress.ip_address("93.184.216.34")) is None
    # An allowlisted name may go where it resolves to (a private address: an intranet site); an
    # allowlisted address is opened only for URLs that spell it: a public name resolving to it is
    # refused (DNS rebinding).
    assert guard.connect_reason("intranet.test", 80, ipaddress.ip_address("10.1.2.3")) is None
    assert guard.connect_reason("127.0.0.1", 8400, ipaddress.ip_address("127.0.0.1")) is None
    assert guard.connect_reason("rebind.test", 8400, ipaddress.ip_address("127.0.0.1")) is not None
    assert guard.connect_reason("127.0.0.1", 8401, ipaddress.ip_address("127.0.0.1")) is not None


def test_a_refused_scheme_says_so_and_names_no_flag():
    with pytest.raises(NavigationRefused) as scheme:
        UrlGuard().check("file:///etc/passwd")
    assert "scheme 'file' is not allowed" in str(scheme.value) and "--allow-hosts" not in str(scheme.value)
    with pytest.raises(NavigationRefused) as host:
        UrlGuard().check("http://10.0.0.1/")
    assert "--allow-hosts" in str(host.value)


def test_allowlist_opens_exactly_the_listed_hosts():
    guard = UrlGuard(["127.0.0.1:5000", "localhost:8400", "*.corp.internal", "[::1]:8401"])
    assert guard.allows("http://127.0.0.1:5000/x")
    assert not guard.allows("http://127.0.0.1:5001/x")
    assert not guard.allows("http://127.0.0.2:5000/x")
    assert guard.allows("http://[::1]:8401/") and not guard.allows("http://[::1]:8400/")
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


def test_origin_of():
    assert origin_of("https://www.Example.com/a?b#c") == "https://www.example.com"
    assert origin_of("https://example.com:443/") == "https://example.com"
    assert origin_of("http://127.0.0.1:8400/x") == "http://127.0.0.1:8400"
    assert origin_of("http://[::1]:8400/x") == "http://[::1]:8400"
    assert origin_of("about:blank") == "about:blank"


def test_the_blocklist_is_never_told_about_an_allowlisted_host_port():
    """The site server (a host:port entry) answers every session: the blocklist never counts it.
    A name without a port opens intranet sites, which fail like web sites do: counted."""
    guard = UrlGuard(["127.0.0.1:8400", "sites.test:8401", "*.corp.example"])
    assert guard.allowlisted_port("http://127.0.0.1:8400/shop/search?min_price=inf")
    assert guard.allowlisted_port("http://SITES.test:8401/")
    assert not guard.allowlisted_port("http://127.0.0.1:8401/")  # another port of the host
    assert not guard.allowlisted_port("http://sites.test/")  # port 80
    assert not guard.allowlisted_port("http://wiki.corp.example/")  # opened by name, not host:port
    assert not guard.allowlisted_port("https://example.com/")
    assert not guard.allowlisted_port("http://127.0.0.1:99999/") and not guard.allowlisted_port("about:blank")


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("10.0.0.1", False), ("example.org", False), ("", False)])
def test_is_loopback_host(host, loopback):
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(("entry", "why"), [
    ("127.0.0.1", "address 127.0.0.1 is loopback"), ("127.0.0.2", "loopback"), ("::1", "loopback"),
    ("[::1]", "loopback"), ("localhost", "'localhost' names this machine"),
    ("*.localhost", "names this machine"), ("app.localhost", "names this machine"),
    ("10.0.0.5", "private"), ("192.168.1.1", "private"), ("169.254.169.254", "link-local"),
    ("0.0.0.0", "reserved"), ("2130706433", "127.0.0.1 is loopback"), ("0x7f.1", "loopback"),
    ("fe80::1", "link-local"), ("[::ffff:127.0.0.1]", "carries 127.0.0.1"),
])
def test_a_whole_local_host_is_a_configuration_error_naming_the_entry(entry, why):
    """Allowlist a host:port, never a whole host: every other port of this machine is a control plane
    (the browser server's API, the policy server, Ray)."""
    with pytest.raises(AllowlistError) as caught:
        UrlGuard(["127.0.0.1:8400", entry])
    message = str(caught.value)
    assert message.startswith(f"allow_hosts: {entry!r} would open every port") and why in message
    assert "host:port" in message and ":8400 for a site on port 8400" in message
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, RolloutError)
    with pytest.raises(ValueError, match=f"^allow_hosts: {re.escape(repr(entry))}"):
        PoolSettings(allow_hosts=(entry,))  # refused with the settings, before any browser starts


@pytest.mark.parametrize("entry", ["127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1:http", ":8400",
                                   "[::1", "[::1]x", "[::1]:", "*", "http://127.0.0.1:8400/", "a b:80"])
def test_a_malformed_entry_is_refused_naming_it(entry):
    with pytest.raises(AllowlistError, match=f"^allow_hosts: {re.escape(repr(entry))}"):
        UrlGuard([entry])


def test_a_host_port_entry_and_names_stay_allowed():
    guard = UrlGuard(["127.0.0.1:8400", "localhost:8400", "[::1]:8400", "intranet.example", "*.example",
                      "93.184.216.34", "intranet.example:9000"])
    assert guard.allows("http://127.0.0.1:8400/") and guard.allows("http://localhost:8400/")
    assert guard.allows("http://[::1]:8400/") and not guard.allows("http://[::1]:8401/")


@pytest.mark.parametrize("address", ["127.0.0.1", "127.9.9.9", "::1", "0.0.0.0", "::", "169.254.169.254",
                                     "fe80::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254"])
def test_a_name_without_a_port_never_opens_this_machine_or_its_link(address):
    """A name allowlisted without a port is resolved and checked: private addresses (an intranet
    site) pass, but a name whose DNS answer is loopback, unspecified or link-local does not."""
    guard = UrlGuard(["intranet.example", "*.corp.example", "pinned.example:8400"])
    resolved = ipaddress.ip_address(address)
    for host in ("intranet.example", "wiki.corp.example"):
        why = guard.connect_reason(host, 8400, resolved)
        assert why is not None and f"allowlist {host}:8400" in why
    assert guard.connect_reason("pinned.example", 8400, resolved) is None  # named with its port: opened
    assert guard.connect_reason("pinned.example", 8401, resolved) is not None
    assert guard.connect_reason("intranet.example", 80, ipaddress.ip_address("10.1.2.3")) is None


@settings(max_examples=200, deadline=None)
@given(st.ip_addresses(v=4), st.integers(min_value=1, max_value=65535))
def test_only_public_addresses_may_be_allowlisted_without_a_port(address, port):
    if address_reason(address) is None:
        UrlGuard([str(address)])
    else:
        with pytest.raises(AllowlistError):
            UrlGuard([str(address)])
    guard = UrlGuard([f"{address}:{port}"])  # with its port, any address may be
    assert guard.allowlisted(str(address), port) and not guard.allowlisted(str(address), port % 65535 + 1)
