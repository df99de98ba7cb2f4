"""The exception tree: one root, every public class in errors.py and drawn in its docstring; kinds
round-trip, HTTP status codes, which errors are transient."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from tests.support.error_trees import check_defined_in_errors, check_drawn_tree
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

EXEMPT = {
    "webgym_rollout.browser.operations._LimitReached":
        "a Playwright call past its own time limit; the operation raises OperationTimeout naming it",
}

MOVED = {  # where these were defined before errors.py held them all: those imports keep working
    "webgym_rollout.browser.http": ["ConnectionBroke"],
    "webgym_rollout.browser.guard": ["AllowlistError"],
    "webgym_rollout.browser.egress": ["ResolutionFailed"],
    "webgym_rollout.actions": ["ActionParseError"],
    "webgym_rollout.agent.policies": ["PolicyRejected", "PolicyTimeout", "PolicyUnavailable"],
    "webgym_rollout.judge.judges": ["JudgeRejected", "JudgeReplyInvalid", "JudgeTimeout", "JudgeUnavailable"],
    "webgym_rollout.judge.calibration": ["LabelError"],
    "webgym_rollout.trajectory.contract": ["ShardSchemaError", "TrajectoryError"],
    "webgym_rollout.trajectory.writer": ["DatasetExists", "EpisodeRepeated", "EpisodeUnstorable"],
    "webgym_rollout.trajectory.hub": ["PushRefused"],
    "webgym_rollout.env": ["EpisodeOver"],
    "webgym_rollout.fleet": ["FleetError"],
}

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


def test_every_exception_class_of_the_package_is_in_errors_under_the_root():
    public = check_defined_in_errors("webgym_rollout", RolloutError, EXEMPT)
    moved = {name for names in MOVED.values() for name in names}
    assert set(public) >= moved | {cls.__name__ for cls in STATUS}


def test_the_docstring_draws_the_real_tree():
    check_drawn_tree(errors, RolloutError)


def test_every_class_has_its_own_kind():
    classes = [value for value in vars(errors).values() if inspect.isclass(value)
               and issubclass(value, RolloutError) and value.__module__ == errors.__name__]
    for cls in classes:
        assert "kind" in vars(cls), f"{cls.__name__} inherits its parent's kind"
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", cls.kind), cls.kind
    assert len({cls.kind for cls in classes}) == len(classes)


def test_the_extra_bases_stay():
    for cls in (errors.AllowlistError, errors.ActionParseError, errors.EpisodeRepeated,
                errors.EpisodeUnstorable):
        assert issubclass(cls, ValueError), cls
    with pytest.raises(OSError, match="cannot resolve intranet.test"):  # the proxy catches OSError
        raise errors.ResolutionFailed("cannot resolve intranet.test: no address")
    shard = errors.ShardSchemaError("bad columns", version="1.3")
    assert (shard.path, shard.version) == (None, "1.3") and isinstance(shard, errors.TrajectoryError)


@pytest.mark.parametrize(("module", "names"), MOVED.items())
def test_the_modules_that_defined_a_class_still_export_it(module, names):
    imported = importlib.import_module(module)
    for name in names:
        assert getattr(imported, name) is getattr(errors, name)
        assert name in imported.__all__
