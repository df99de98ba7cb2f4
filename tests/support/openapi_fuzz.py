"""Drive a local HTTP server from its own OpenAPI schema (schemathesis + hypothesis): the fuzz tests of
the browser server and the CPU policy server share this loop and differ in what they draw and check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

__all__ = ["fuzz_operations", "http_session"]


def http_session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # never a proxy from the environment
    return session


def fuzz_operations(http: requests.Session, base_url: str, mode: GenerationMode, examples: int, *,
                    strategy_for: Callable[[Any], Any], send: Callable[[Any], None]) -> int:
    """Send `examples` requests of `mode` to every operation of the schema at ``base_url/openapi.json``,
    drawn from ``strategy_for(operation)``; `send(case)` makes and checks each call. Returns the number
    of calls. A route with nothing to get wrong (GET /health) has no negative example: skipped."""
    schema = schemathesis.openapi.from_dict(http.get(f"{base_url}/openapi.json", timeout=10).json())
    calls = 0
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy_for(operation))
        def call(case) -> None:
            nonlocal calls
            send(case)
            calls += 1

        try:
            call()
        except Unsatisfiable:
            assert mode == GenerationMode.NEGATIVE, operation.label
    return calls
