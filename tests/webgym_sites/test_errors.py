"""webgym_sites.errors: one exception root, the tree its docstring draws is the real one, and the
truth errors are still found where they were defined before (webgym_rollout.errors)."""

from __future__ import annotations

import pytest

from tests.support.error_trees import check_defined_in_errors, check_drawn_tree
from webgym_sites import errors, truth


def test_every_exception_class_of_the_package_is_in_errors_under_the_root():
    public = check_defined_in_errors("webgym_sites", errors.SitesError, {})
    assert set(public) == {"SitesError", "TruthUnavailable", "TruthTimeout"}


def test_the_docstring_draws_the_real_tree():
    check_drawn_tree(errors, errors.SitesError)


def test_each_class_keeps_its_own_kind():
    kinds = [cls.kind for cls in (errors.SitesError, errors.TruthUnavailable, errors.TruthTimeout)]
    assert kinds == ["sites_error", "truth_unavailable", "truth_timeout"]


def test_the_old_and_the_raising_module_export_the_same_classes():
    from webgym_rollout import errors as rollout_errors

    for name in ("TruthUnavailable", "TruthTimeout"):
        assert getattr(rollout_errors, name) is getattr(errors, name) is getattr(truth, name)
        assert name in rollout_errors.__all__ and name in truth.__all__
    # Not rollout errors any more: a caller that must catch both says so.
    assert not issubclass(errors.TruthUnavailable, rollout_errors.RolloutError)
    with pytest.raises(errors.SitesError, match="no answer"):
        raise errors.TruthTimeout("http://127.0.0.1:9/facts: no answer within 1 s")
