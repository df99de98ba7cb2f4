"""Fixtures of the browser tests: pages that misbehave on purpose (see fault_pages.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.webgym_rollout.fault_pages import FaultPages


@pytest.fixture(scope="module")
def faults() -> Iterator[str]:
    """Base URL of the fault pages (hangs, crashes, slow loads) on 127.0.0.1."""
    with FaultPages() as pages:
        yield pages.url
