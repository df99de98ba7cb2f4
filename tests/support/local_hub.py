"""A real Hub-protocol server for tests: `olah` in offline mode on 127.0.0.1, serving git repos.

    with run_local_hub(tmp_path / "hub") as hub:
        hub.publish("dataset", "webgym/tasks", built_folder)
        subprocess.run([...], env=hub.env(tmp_path / "hf-home"))   # HF_ENDPOINT points at the hub

Clients must pass ``revision="main"`` (olah answers 401 without one). `huggingface_hub` reads
``HF_ENDPOINT`` at import, so code under test runs in a child process with `LocalHub.env`. olah's
upstream is set to a closed loopback port, so even a mistaken upstream request stays on 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["LocalHub", "local_hub", "run_local_hub"]

OLAH_CLI = Path(sys.executable).with_name("olah-cli")


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LocalHub:
    """A running olah server in offline mode serving git repos from `mirrors`."""

    endpoint: str
    mirrors: Path

    def publish(self, kind: str, repo_id: str, folder: Path | None = None, *,
                files: dict[str, str] | None = None) -> Path:
        """Commit `folder`'s files (and/or `files`, name -> text) as the `main` branch of
        ``<kind>s/<repo_id>`` (kind: "dataset" or "model")."""
        repo = self.mirrors / f"{kind}s" / repo_id
        if repo.exists():
            shutil.rmtree(repo)
        if folder is not None:
            shutil.copytree(folder, repo)
        repo.mkdir(parents=True, exist_ok=True)
        for name, text in (files or {}).items():
            (repo / name).write_text(text, encoding="utf-8")
        git = ["git", "-C", str(repo), "-c", "user.name=webgym-tests", "-c", "user.email=tests@127.0.0.1"]
        for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "publish"]):
            subprocess.run([*git, *args], check=True, capture_output=True)
        return repo

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        """Environment for a child process that talks to this hub (and nothing else)."""
        return {**os.environ, "HF_ENDPOINT": self.endpoint, "HF_HUB_OFFLINE": "0",
                "HF_DATASETS_OFFLINE": "0", "HF_HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1",
                "NO_PROXY": "127.0.0.1", **extra}


@contextlib.contextmanager
def run_local_hub(root: Path, timeout_s: float = 60) -> Iterator[LocalHub]:
    """Start ``olah-cli`` (offline, mirrors under `root`) on a free 127.0.0.1 port; stop it after."""
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    mirrors = root / "mirrors"
    for kind in ("datasets", "models"):
        (mirrors / kind).mkdir(parents=True, exist_ok=True)
    config = root / "olah.toml"
    config.write_text(
        "[basic]\n"
        f'host = "127.0.0.1"\nport = {port}\n'
        f'repos-path = "{root / "repos"}"\nmirrors-path = ["{mirrors}"]\n'
        'hf-scheme = "http"\nhf-netloc = "127.0.0.2:9"\nhf-lfs-netloc = "127.0.0.2:9"\n'
        f'mirror-scheme = "http"\nmirror-netloc = "127.0.0.1:{port}"\n'
        f'mirror-lfs-netloc = "127.0.0.1:{port}"\n'
        "[accessibility]\noffline = true\n", encoding="utf-8")
    log_path = root / "olah.out"
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(OLAH_CLI), "-c", str(config), "--log-path", str(root / "logs")],
                                   cwd=root, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"olah exited with {process.returncode}: "
                                       f"{log_path.read_text(errors='replace')[-2000:]}")
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"olah did not listen on 127.0.0.1:{port} within {timeout_s} s")
                time.sleep(0.1)
            yield LocalHub(endpoint=f"http://127.0.0.1:{port}", mirrors=mirrors)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def local_hub(tmp_path) -> Iterator[LocalHub]:
    """A real Hub-protocol server (olah, offline) on 127.0.0.1; publish repos with `hub.publish`."""
    with run_local_hub(tmp_path / "hub") as hub:
        yield hub
