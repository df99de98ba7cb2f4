"""Helpers the benchmark scripts share (they run as scripts, so this folder is on sys.path)."""

from __future__ import annotations

import socket

import psutil

__all__ = ["free_port", "tree_cpu_s"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` and all its descendants."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total
