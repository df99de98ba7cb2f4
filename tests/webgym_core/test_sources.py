"""webgym_core.sources: which names are local paths (never looked up on the Hub) and what is wrong
with a server URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from webgym_core.sources import looks_like_path, url_problem


@pytest.mark.parametrize("name", ["./nope", "../runs/a", "/data/run", "~/run", ".cache/x", "out/runs/iter-0",
                                  "runs\\iter", "runs/", Path("nope"), Path("org/name")])
def test_paths_are_paths(name):
    assert looks_like_path(name)


@pytest.mark.parametrize("name", ["org/name", "org/name@main", "org/name@refs/pr/1", "gpt2",
                                  "Qwen/Qwen3-VL-8B-Instruct", ""])
def test_hub_ids_are_not(name):
    assert not looks_like_path(name)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8300", "https://browsers.example:443/", "http://[::1]:9"])
def test_good_urls_have_no_problem(url):
    assert url_problem(url) == ""


@pytest.mark.parametrize(("url", "expected"), [
    ("127.0.0.1:18300", "'127.0.0.1:18300' has no scheme; write it as http://127.0.0.1:18300"),
    ("localhost:8300", "'localhost:8300' has no scheme; write it as http://localhost:8300"),
    ("ftp://127.0.0.1:21", "has the scheme 'ftp'; only http:// and https://"),
    ("http://", "is not a server address; write it as http://HOST:PORT"),
    ("http://127.0.0.1:99999", "is not a server address"),
])
def test_bad_urls_are_named_with_the_fix(url, expected):
    assert expected in url_problem(url, what="servers:") and url_problem(url).startswith("URL ")
