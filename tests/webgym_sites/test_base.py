"""The sites' shared base: a redirect target read from a request is taken only as a path of this
server, fit for a Location header (no other host, no header of its own, no byte outside Latin-1)."""

from __future__ import annotations

import pytest

from webgym_sites.base import same_site_path


@pytest.mark.parametrize(("target", "path"), [
    ("/account", "/account"),
    ("/search?q=lamp&page=2#top", "/search?q=lamp&page=2#top"),
    ("/wiki/São_Paulo", "/wiki/S%C3%A3o_Paulo"),
    ("/東京?x=€", "/%E6%9D%B1%E4%BA%AC?x=%E2%82%AC"),
    ("/a%0D%0Ab", "/a%0D%0Ab"),  # escapes stay escapes: text in the header, never a line break
])
def test_a_path_of_this_server_passes_as_ascii(target, path):
    assert same_site_path(target) == path
    assert same_site_path(target).isascii()


@pytest.mark.parametrize("target", [
    "//evil.test/", "/\\evil.test/", "https://evil.test/", "javascript:alert(1)", "account", "",
    "/a\r\nSet-Cookie: x=1", "/a\nb", "/a b", "/a\tb", "/a\x00", "/a\x85b", "/\ud800",
])
def test_anything_else_is_refused(target):
    assert same_site_path(target) is None
