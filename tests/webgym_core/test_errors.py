"""webgym_core.errors: one exception root, and the tree its docstring draws is the real one."""

from __future__ import annotations

import pytest

from tests.support.error_trees import check_defined_in_errors, check_drawn_tree
from webgym_core import errors, failpoints

EXEMPT = {
    "webgym_core.endpoint._Transient":
        "a retry signal inside ChatClient carrying the class to raise once the retries are spent",
}


def test_every_exception_class_of_the_package_is_in_errors_under_the_root():
    public = check_defined_in_errors("webgym_core", errors.CoreError, EXEMPT)
    assert set(public) >= {"SettingsError", "EndpointError", "EndpointUnavailable", "EndpointTimeout",
                           "EndpointRejected", "FailpointError"}


def test_the_docstring_draws_the_real_tree():
    check_drawn_tree(errors, errors.CoreError)


def test_settings_errors_stay_value_errors_and_failpoints_still_export_theirs(monkeypatch):
    assert issubclass(errors.SettingsError, ValueError)
    assert failpoints.FailpointError is errors.FailpointError and "FailpointError" in failpoints.__all__
    monkeypatch.setenv(failpoints.ENV, "test.errors.point=raise")
    with pytest.raises(errors.CoreError, match="failpoint test.errors.point"):
        failpoints.failpoint("test.errors.point")
