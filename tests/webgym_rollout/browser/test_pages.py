"""The page-hook registry (`webgym_rollout.browser.pages`): the task kinds fill it, the browser
server reads it, and neither needs the other's module to do so."""

from __future__ import annotations

import pytest

from webgym_rollout.browser import pages
from webgym_rollout.browser.pages import PageHooks, environment_names, load_page_modules, page_hooks
from webgym_rollout.errors import InvalidRequest


@pytest.fixture
def registries():
    """Registries as they are; whatever a test registers is gone after it."""
    from webgym_rollout.tasks import kind

    hooks, kinds = dict(pages._HOOKS), dict(kind._KINDS)
    yield
    pages._HOOKS.clear()
    pages._HOOKS.update(hooks)
    kind._KINDS.clear()
    kind._KINDS.update(kinds)


def test_web_is_built_in_and_the_shipped_kinds_register_when_imported():
    import webgym_rollout.tasks  # noqa: F401  (what PoolSettings.page_modules imports by default)

    assert page_hooks("web") == (PageHooks, "") and page_hooks("") == (PageHooks, "")
    hooks, argument = page_hooks("miniwob:click-button")
    assert hooks.name == "miniwob" and argument == "click-button" and hooks.clip is not None
    assert environment_names() == ["miniwob:<task>", "site:<task>", "web"]


@pytest.mark.parametrize("bad", ["web:x", "miniwob", "miniwob:../x", "nosuch:thing", "nosuch"])
def test_an_environment_no_kind_serves_is_refused_with_the_known_ones(bad):
    with pytest.raises(InvalidRequest, match=r"unknown environment .*expected one of .*'web'"):
        page_hooks(bad)


def test_a_kind_defined_elsewhere_brings_its_page_hooks(registries):
    from webgym_rollout.tasks.kind import TaskKind, kind_class, kind_names

    class ToyPage(PageHooks):
        name = "toy"
        takes_argument = True
        clip = {"x": 0, "y": 0, "width": 10, "height": 10}

    class ToyTask(TaskKind):
        name = "toy"
        page = ToyPage

    assert page_hooks("toy:level-1") == (ToyPage, "level-1")  # what the browser server resolves
    assert kind_class("toy:level-1") == (ToyTask, "level-1")  # what the environment resolves
    assert "toy:<task>" in environment_names() and "toy:<task>" in kind_names()

    with pytest.raises(TypeError, match="must be the kind's name 'other'"):
        class Mismatched(TaskKind):
            name = "other"
            page = ToyPage


def test_a_page_module_that_cannot_be_imported_is_named():
    with pytest.raises(InvalidRequest, match="page_modules: cannot import 'no_such_package.kinds'"):
        load_page_modules(["no_such_package.kinds"])
