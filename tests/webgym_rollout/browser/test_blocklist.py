"""SiteBlocklist with an injected clock: failures counted per site (start pages, a session counts
once) and per session (navigations), apart; exempt origins never counted; what it blocked and why."""

from __future__ import annotations

import pytest

from webgym_rollout.browser.blocklist import SiteBlocklist
from webgym_rollout.errors import SiteBlocked


def _blocklist(**settings) -> tuple[SiteBlocklist, list[float]]:
    now = [0.0]
    return SiteBlocklist(clock=lambda: now[0], **settings), now


def _start(blocklist: SiteBlocklist, url: str, session: str, kind: str = "timeout", reason: str = "") -> bool:
    """`session`'s start page `url` failed."""
    return blocklist.record_failure(url, reason or kind, kind=kind, session=session, start=True)


def _navigation(blocklist: SiteBlocklist, url: str, session: str, kind: str = "timeout",
                reason: str = "") -> bool:
    """A navigation of `session` to `url` failed."""
    return blocklist.record_failure(url, reason or kind, kind=kind, session=session)


def test_start_pages_that_fail_in_several_sessions_block_the_site_until_it_expires():
    blocklist, now = _blocklist(threshold=3, window_s=60, ttl_s=100)
    assert not _start(blocklist, "https://slow.example/a", "s1")
    now[0] = 70.0  # the first failure left the window
    assert not _start(blocklist, "https://slow.example/b", "s2")
    assert not _start(blocklist, "https://slow.example:443/c", "s3")
    blocklist.check("https://slow.example/")  # two sessions in the window: not blocked yet
    assert _start(blocklist, "https://slow.example/d", "s4", "block_page", "captcha page")
    with pytest.raises(SiteBlocked, match="https://slow.example is blocked for another 100 s"):
        blocklist.check("https://slow.example/other")
    with pytest.raises(SiteBlocked, match="start page failed in 3 sessions, last: captcha page"):
        blocklist.check("https://slow.example/other", session="s9")  # every session, new ones too
    blocklist.check("https://fast.example/")
    blocklist.check("http://slow.example/")  # another scheme is another origin
    blocklist.check("https://www.slow.example/")  # and so is another host
    [entry] = blocklist.entries()
    assert (entry.origin, entry.kind) == ("https://slow.example", "block_page")
    now[0] = 70.0 + 101
    blocklist.check("https://slow.example/")
    assert blocklist.entries() == []


def test_one_session_counts_once_for_the_site():
    """The same session failing its start page again (a retried load) is one session's evidence."""
    blocklist, _ = _blocklist(threshold=2)
    for _ in range(5):
        assert not _start(blocklist, "https://a.example/", "s1", "network")
    blocklist.check("https://a.example/")
    assert _start(blocklist, "https://a.example/", "s2", "network")


def test_an_agents_failures_block_the_origin_for_its_session_only():
    blocklist, _ = _blocklist(threshold=3)
    for n in range(3):
        assert _navigation(blocklist, "https://down.example/x", "a", "network", f"net::ERR_{n}") == (n == 2)
    with pytest.raises(SiteBlocked, match=r"blocked for session a \(3 failures in session a, last: "
                                          r"net::ERR_2\).*other sessions may still load it"):
        blocklist.check("https://down.example/y", session="a")
    blocklist.check("https://down.example/y", session="b")  # another session: not blocked
    blocklist.check("https://down.example/y")  # a new session's start page: not blocked
    assert blocklist.entries() == [] and blocklist.stats().session_blocks == 1
    # Failures of many sessions' navigations never add up to a block of the site.
    for session in "cdefgh":
        _navigation(blocklist, "https://down.example/", session)
    blocklist.check("https://down.example/", session="i")
    assert blocklist.entries() == []
    blocklist.forget("a")  # the session ended: its block goes with it
    blocklist.check("https://down.example/y", session="a")
    assert blocklist.stats().session_blocks == 0


def test_an_exempt_origin_is_never_counted():
    """The browser server exempts its allowlist's host:port entries: the local site server."""
    blocklist, _ = _blocklist(threshold=1, exempt=lambda url: url.startswith("http://127.0.0.1:8400/"))
    for session in ("a", "b", "c"):
        for start in (True, False):
            assert not blocklist.record_failure("http://127.0.0.1:8400/shop/search?min_price=inf",
                                                "net::ERR_EMPTY_RESPONSE", kind="network", session=session,
                                                start=start)
    blocklist.check("http://127.0.0.1:8400/shop/", session="a")
    stats = blocklist.stats()
    assert stats.exempt["network"] == 6 and not stats.failures and not stats.blocks
    assert stats.entries == [] and stats.session_blocks == 0
    assert _start(blocklist, "http://127.0.0.1:8401/", "a")


def test_a_success_forgets_the_failures_of_the_site_and_the_session():
    blocklist, _ = _blocklist(threshold=2)
    _start(blocklist, "https://a.example/", "s1")
    _navigation(blocklist, "https://a.example/", "s2")
    blocklist.record_success("https://a.example/ok", "s2")
    assert not _start(blocklist, "https://a.example/", "s3")
    assert not _navigation(blocklist, "https://a.example/", "s2")


def test_counters_say_what_was_counted_and_blocked():
    blocklist, now = _blocklist(threshold=2, ttl_s=50)
    for session in ("a", "b"):
        _start(blocklist, "https://captcha.example/", session, "block_page")
        _navigation(blocklist, "https://down.example/", "c", "network")
    now[0] = 20.0
    stats = blocklist.stats()
    assert stats.failures == {("site", "block_page"): 2, ("session", "network"): 2}
    assert stats.blocks == {("site", "block_page"): 1, ("session", "network"): 1}
    assert [(e.origin, e.kind, e.until - stats.now) for e in stats.entries] == [
        ("https://captcha.example", "block_page", 30.0)]


def test_an_operator_blocks_and_lifts():
    blocklist, now = _blocklist(threshold=1)
    blocklist.block("https://b.example/", "operator", ttl_s=5)
    with pytest.raises(SiteBlocked):
        blocklist.check("https://b.example/x")
    assert blocklist.entry("https://b.example/y").kind == "operator"
    now[0] = 6
    blocklist.check("https://b.example/x")
    _start(blocklist, "http://127.0.0.1:5000/x", "s")
    _navigation(blocklist, "http://127.0.0.1:5000/x", "t")
    assert blocklist.lift("http://127.0.0.1:5001") is None  # not that origin
    lifted = blocklist.lift("http://127.0.0.1:5000/any/path")  # any URL of the origin names it
    assert lifted is not None and lifted.origin == "http://127.0.0.1:5000" and "timeout" in lifted.reason
    blocklist.check("http://127.0.0.1:5000/x", session="t")  # the session's own block is lifted too
    assert blocklist.entries() == [] and blocklist.lift("http://127.0.0.1:5000") is None


def test_blocking_one_local_origin_leaves_the_other_ports_of_its_host():
    blocklist, _ = _blocklist(threshold=3)
    for session in ("a", "b", "c"):
        _start(blocklist, "http://127.0.0.1:5000/loop", session, "network", "net::ERR_TOO_MANY_REDIRECTS")
    with pytest.raises(SiteBlocked, match="http://127.0.0.1:5000 "):
        blocklist.check("http://127.0.0.1:5000/ok")
    blocklist.check("http://127.0.0.1:8400/miniwob/click-test.html")


def test_settings_and_kinds_are_checked():
    with pytest.raises(ValueError, match="^threshold: "):
        SiteBlocklist(threshold=0)
    with pytest.raises(ValueError, match="^kind: 'slow' is not one of timeout, network"):
        SiteBlocklist().record_failure("https://a.example/", "slow", kind="slow", session="s")
