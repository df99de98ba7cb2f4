"""The package's surface: its public names import on first use, and it stands below webgym_rollout
(no module of it imports the rollout package, the trainer or a browser)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import webgym_sites

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves_to_its_module():
    for name in webgym_sites.__all__:
        value = getattr(webgym_sites, name)
        assert value.__module__.startswith("webgym_sites."), (name, value.__module__)
    assert sorted(dir(webgym_sites)) == sorted(set(dir(webgym_sites)) | set(webgym_sites.__all__))


def test_importing_the_package_imports_no_site_and_nothing_above_it():
    code = ("import sys, webgym_sites\n"
            "print(sorted(m for m in sys.modules if m.startswith(('webgym_sites.', 'webgym_rollout', "
            "'webgym_rl', 'playwright', 'httpx'))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_no_module_of_the_package_loads_the_rollout_package():
    # Every module, imported in a fresh interpreter: webgym_rollout, webgym_rl and Playwright stay out.
    names = [info.name for info in pkgutil.walk_packages(webgym_sites.__path__, "webgym_sites.")]
    assert {"webgym_sites.shop", "webgym_sites.truth", "webgym_sites.generate"} <= set(names)
    code = (f"import importlib, sys\nfor name in {names!r}: importlib.import_module(name)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'webgym_rollout', 'webgym_rl', 'webgym', "
            "'playwright'}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert importlib.import_module("webgym_sites.generate").site_tasks is webgym_sites.site_tasks
