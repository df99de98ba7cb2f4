"""Fixtures of the browser tests: pages that misbehave on purpose (see fault_pages.py), and no DNS."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.webgym_rollout.fault_pages import FaultPages


@pytest.fixture(scope="session", autouse=True)
def _no_dns() -> Iterator[None]:
    """No test looks a name up: the egress proxy's default resolver fails closed here (a test that
    needs names passes its own `MappingResolver`), so a name that slipped into a test, or a request
    Chromium makes on its own, is refused instead of reaching a DNS server."""
    from webgym_rollout.browser import egress

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(egress, "system_resolver", egress.MappingResolver({}))
        yield


@pytest.fixture(scope="module")
def faults() -> Iterator[str]:
    """Base URL of the fault pages (hangs, crashes, slow loads) on 127.0.0.1."""
    with FaultPages() as pages:
        yield pages.url
