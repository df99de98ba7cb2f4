"""webgym.errors: one exception root, and the tree its docstring draws is the real one."""

from __future__ import annotations

import pytest

from tests.support.error_trees import check_defined_in_errors, check_drawn_tree
from webgym import demo, errors


def test_every_exception_class_of_the_package_is_in_errors_under_the_root():
    assert set(check_defined_in_errors("webgym", errors.WebgymError, exempt={})) >= {"DemoError"}


def test_the_docstring_draws_the_real_tree():
    check_drawn_tree(errors, errors.WebgymError)


def test_demo_error_stays_a_runtime_error_and_the_demo_still_exports_it():
    assert demo.DemoError is errors.DemoError and "DemoError" in demo.__all__
    with pytest.raises(RuntimeError):
        raise demo.DemoError("a stage failed")
