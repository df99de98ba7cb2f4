"""The old paths of the local sites (``webgym_rollout.tasks.websites`` and its modules, and
``webgym_rollout.tasks.serving``) still import, for one release, the very same objects as the new
ones, with a DeprecationWarning that names the new path and points at the import that used it."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import webgym_sites
from webgym_rollout.tasks import site_kind

OLD_MODULES = ["accounts", "answers", "base", "catalogue", "checkout", "drawing", "encyclopedia", "facts",
               "generate", "goals", "kind", "plans", "reference", "reference_tasks", "router", "shop",
               "shop_tasks", "shortcuts", "state", "travel", "travel_catalogue", "travel_forms",
               "travel_tasks", "truth"]
"""The modules of ``webgym_rollout.tasks.websites`` before issue 38."""


def _fresh(monkeypatch: pytest.MonkeyPatch, old: str) -> None:
    """Forget `old`, so that the next import runs its module (and warns) again."""
    monkeypatch.delitem(sys.modules, old, raising=False)


def test_the_old_package_holds_no_module_of_its_own():
    # Every site module but the two new ones (errors, and serving, which was tasks.serving) was one of
    # the old package, whose folder keeps only the __init__ that forwards them.
    moved = {path.stem for path in Path(webgym_sites.__file__).parent.glob("*.py")}
    assert set(OLD_MODULES) == (moved - {"__init__", "errors", "serving"}) | {"kind"}
    old = Path(importlib.import_module("webgym_rollout.tasks.websites").__file__).parent
    assert [path.name for path in old.glob("*.py")] == ["__init__.py"]


def test_a_name_the_old_package_never_had_is_not_found():
    with pytest.raises(ModuleNotFoundError, match="webgym_rollout.tasks.websites.errors"):
        importlib.import_module("webgym_rollout.tasks.websites.errors")


@pytest.mark.parametrize("module", OLD_MODULES)
def test_an_old_module_is_the_new_one_with_a_warning(monkeypatch, module):
    old = f"webgym_rollout.tasks.websites.{module}"
    new = "webgym_rollout.tasks.site_kind" if module == "kind" else f"webgym_sites.{module}"
    _fresh(monkeypatch, old)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}; .*goes in 0\.4\.0"):
        imported = importlib.import_module(old)
    assert imported is importlib.import_module(new)


def test_the_warning_points_at_the_import_statement(monkeypatch):
    _fresh(monkeypatch, "webgym_rollout.tasks.websites.shop")
    with pytest.warns(DeprecationWarning) as caught:
        from webgym_rollout.tasks.websites.shop import ShopSite
    assert ShopSite is webgym_sites.ShopSite
    assert caught[0].filename == __file__  # not the shim, nor the import machinery


def test_the_old_names_of_the_package_are_the_new_ones_with_a_warning():
    import webgym_rollout.tasks.websites as old

    with pytest.warns(DeprecationWarning, match="webgym_rollout.tasks.websites.SessionFacts moved to "
                                                "webgym_sites.SessionFacts") as caught:
        facts = old.SessionFacts
    assert facts is webgym_sites.SessionFacts and caught[0].filename == __file__
    with pytest.raises(AttributeError, match="no attribute 'SitesError'"):  # only the old names
        old.SitesError  # noqa: B018


def test_the_site_kind_and_the_server_thread_keep_their_old_paths(monkeypatch):
    _fresh(monkeypatch, "webgym_rollout.tasks.websites.kind")
    _fresh(monkeypatch, "webgym_rollout.tasks.serving")
    with pytest.warns(DeprecationWarning, match="webgym_rollout.tasks.site_kind"):
        from webgym_rollout.tasks.websites.kind import SiteTask
    with pytest.warns(DeprecationWarning, match="webgym_rollout.tasks.serving moved to webgym_sites.serving"):
        from webgym_rollout.tasks.serving import ServerThread
    from webgym_sites.serving import ServerThread as new_thread

    assert SiteTask is site_kind.SiteTask and ServerThread is new_thread


def test_the_toolkit_itself_never_uses_an_old_path():
    # The warnings are for users' code: importing the toolkit's commands and the demo warns nothing.
    modules = ["webgym_sites", "webgym_rollout.tasks", "webgym_rollout.runner", "webgym_rollout.cli",
               "webgym_rollout.fleet", "webgym_rollout.judge.site", "webgym_rollout.agent.expert",
               "webgym.demo"]
    code = ("import warnings\nwarnings.filterwarnings('error', 'webgym.* moved to', DeprecationWarning)\n"
            f"import {', '.join(modules)}\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
