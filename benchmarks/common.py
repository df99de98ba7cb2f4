"""Helpers the benchmark scripts share (they run as scripts, so this folder is on sys.path)."""

from __future__ import annotations

import socket
import subprocess

import psutil

__all__ = ["free_port", "stop", "tree_cpu_s", "tree_rss_mb"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tree(pid: int) -> list[psutil.Process]:
    """Process `pid` and all its descendants (empty when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` and all its descendants."""
    total = 0.0
    for proc in _tree(pid):
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def tree_rss_mb(pid: int) -> float:
    """Resident memory of process `pid` and its descendants, in MiB."""
    total = 0
    for proc in _tree(pid):
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def stop(process: subprocess.Popen, timeout_s: float = 30) -> None:
    """Terminate `process`, and kill it if it has not exited within `timeout_s`."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
