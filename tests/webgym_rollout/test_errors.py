"""The exception tree: kinds round-trip, HTTP status codes, which errors are transient."""

from __future__ import annotations

import pytest

from webgym_rollout import errors
from webgym_rollout.errors import (
    TRANSIENT_ERRORS,
    BrowserCrashed,
    BrowserError,
    InvalidRequest,
    JudgeError,
    NavigationRefused,
    OperationTimeout,
    PolicyError,
    RolloutError,
    ServerBusy,
    ServerUnavailable,
    SessionNotFound,
    SiteBlocked,
    Unauthorized,
    error_for_kind,
)

STATUS = {
    BrowserError: 500,
    SessionNotFound: 404,
    BrowserCrashed: 502,
    OperationTimeout: 504,
    NavigationRefused: 403,
    SiteBlocked: 423,
    ServerBusy: 429,
    ServerUnavailable: 503,
    Unauthorized: 401,
    InvalidRequest: 422,
}


def _browser_errors() -> list[type[BrowserError]]:
    exported = (getattr(errors, name) for name in errors.__all__)
    return [cls for cls in exported if isinstance(cls, type) and issubclass(cls, BrowserError)]


def test_every_browser_error_has_its_own_kind_and_round_trips():
    classes = _browser_errors()
    assert set(classes) == set(STATUS)  # a new class needs its status here and in error_for_kind
    assert len({cls.kind for cls in classes}) == len(classes)
    for cls in classes:
        assert error_for_kind(cls.kind) is cls
        assert cls.kind == cls.kind.lower() and " " not in cls.kind
    assert error_for_kind("something_new") is BrowserError
    assert error_for_kind("") is BrowserError


@pytest.mark.parametrize(("cls", "status"), STATUS.items())
def test_status_codes(cls, status):
    assert cls.status_code == status


def test_the_tree():
    for cls in _browser_errors():
        assert issubclass(cls, RolloutError)
    for cls in (PolicyError, JudgeError):
        assert issubclass(cls, RolloutError) and not issubclass(cls, BrowserError)
    assert len({RolloutError.kind, BrowserError.kind, PolicyError.kind, JudgeError.kind}) == 4
    refused = NavigationRefused("refused file:///etc/passwd: scheme", url="file:///etc/passwd")
    assert refused.url == "file:///etc/passwd" and str(refused).startswith("refused file://")
    assert NavigationRefused("no url").url == ""
    assert BrowserCrashed("gone").session_closed is False  # set by the server when it closed the session


def test_only_busy_and_unavailable_are_transient():
    assert set(TRANSIENT_ERRORS) == {ServerBusy, ServerUnavailable}
    for cls in _browser_errors():
        try:
            raise cls("x")
        except TRANSIENT_ERRORS:
            assert cls in (ServerBusy, ServerUnavailable)
        except BrowserError:
            assert cls not in (ServerBusy, ServerUnavailable)
