"""Fixtures shared by the whole suite. Each one starts a real part: Chromium, an HTTP server.

Markers: ``slow`` (long-running), ``browser`` (needs Chromium), ``gpu`` (skipped without CUDA).
Async tests run on one session-wide event loop (see setup.cfg), so the session-scoped Chromium
can be used from any async test.
"""

from __future__ import annotations

import os

# Before torch is imported anywhere: the two cores are shared with the browsers.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Nothing in the suite may reach the internet: make the Hub clients fail fast instead of trying.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import contextlib
import functools
import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from webgym_rollout.browser.pool import CHROMIUM_ARGS, DEFAULT_CHROMIUM

CHROMIUM_PATH = os.environ.get("WEBGYM_CHROMIUM", DEFAULT_CHROMIUM)
REPO_ROOT = Path(__file__).resolve().parents[1]
SEEDS_DIR = Path(os.environ.get("WEBGYM_SEEDS", REPO_ROOT.parent / "shared" / "seeds"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@pytest.fixture
def unused_port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def seeds_dir() -> Path:
    """The third-party seed files in ../shared/seeds (read-only; never copied into the repo)."""
    if not SEEDS_DIR.is_dir():
        pytest.fail(f"seed folder {SEEDS_DIR} is missing; set WEBGYM_SEEDS")
    return SEEDS_DIR


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        pass


@contextlib.contextmanager
def serve_directory(root: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `root` over HTTP on `host` and a free port; yields the base URL (no trailing /)."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=lambda: server.serve_forever(poll_interval=0.05), name=f"http:{root}",
                              daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def serve_folder() -> Iterator[Callable[..., str]]:
    """``serve_folder(path, host="127.0.0.1") -> base_url``; every server stops after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda root, host="127.0.0.1": stack.enter_context(serve_directory(Path(root), host))


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not os.access(CHROMIUM_PATH, os.X_OK):
        pytest.fail(f"{CHROMIUM_PATH} is missing: run scripts/setup.sh "
                    "(it apt-get installs chromium-headless-shell)")
    return CHROMIUM_PATH


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def chromium(chromium_path: str):
    """One real headless Chromium (Playwright async API) for the whole session.

    Tests open their own context (``await chromium.new_context()``) and close it when done.
    """
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_path,
                                                  args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
def scripted_openai():
    """``scripted_openai(replies, **kw) -> ScriptedOpenAI``: a real OpenAI-protocol server on
    127.0.0.1 answering from a script (see tests/support/scripted_openai.py); stopped after the test."""
    from tests.support.scripted_openai import ScriptedOpenAI

    with contextlib.ExitStack() as stack:
        yield lambda replies=(), **kwargs: stack.enter_context(ScriptedOpenAI(replies, **kwargs))


# Session-scoped tiny Qwen-VL checkpoints (built once per session, read-only).
from tests.support.accelerate_state import fresh_accelerate_state  # noqa: E402,F401  (TRL in-process)
from tests.support.local_hub import local_hub  # noqa: E402,F401  (olah, offline Hub on 127.0.0.1)
from tests.support.models import tiny_qwen2_vl, tiny_qwen3_vl  # noqa: E402,F401


@pytest.fixture(scope="session")
def sites():
    """The local site server (MiniWoB++ and sandbox pages) on 127.0.0.1, for the whole session."""
    from webgym_rollout.tasks.sites import SiteServer

    with SiteServer() as server:
        yield server


@pytest.fixture(scope="session")
def sites_url(sites) -> str:
    """The site server's base URL."""
    return sites.base_url
