"""Servers the interop tests run as child processes, and how they check and kill them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import httpx
import psutil

from tests.conftest import free_port


def ports_answer(*urls: str) -> list[bool]:
    """Whether each URL answers HTTP at all (any status)."""
    answers = []
    for url in urls:
        try:
            httpx.get(url, timeout=2, trust_env=False)
            answers.append(True)
        except httpx.TransportError:
            answers.append(False)
    return answers


def wait_until_healthy(url: str, process: subprocess.Popen, what: str, timeout_s: float = 120) -> None:
    """Wait until ``url/health`` answers; fail naming `what` if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while ports_answer(f"{url}/health") != [True]:
        assert process.poll() is None and time.monotonic() < deadline, f"{what} did not start"
        time.sleep(0.2)


@contextlib.contextmanager
def browser_server_process(chromium_path: str, sites_hostport: str, contexts: int = 2):
    """``webgym-rollout serve`` as a child process (its own session) on a free port; yields (url, process)."""
    port = free_port()
    command = [sys.executable, "-c", "from webgym_rollout.cli import main; main()", "serve", "--port",
               str(port), "--allow-hosts", sites_hostport, "--browsers", "1", "--contexts-per-browser",
               str(contexts), "--executable-path", chromium_path]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process, "the browser server")
        yield url, process
    finally:
        family = [process]
        with contextlib.suppress(psutil.NoSuchProcess):
            family += psutil.Process(process.pid).children(recursive=True)
        for member in family:
            with contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess):
                member.kill()
        process.wait(timeout=30)


def kill_process_family(process: subprocess.Popen) -> None:
    """SIGKILL a child started in its own session and every process under it, then reap it."""
    family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    os.killpg(process.pid, signal.SIGKILL)
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    process.wait(timeout=30)
