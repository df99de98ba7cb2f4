"""The architecture's rules, checked by import-linter (contracts in pyproject.toml): the packages
depend one way, webgym_core <- webgym_data <- webgym_sites <- webgym_rollout <- webgym_rl <- webgym,
the browser server knows nothing of agents, and webgym_rl has no import circle. No module of webgym_rl imports
another module's private names. Each package re-exports its core API from its __init__."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

PACKAGES = ("webgym_core", "webgym_data", "webgym_sites", "webgym_rollout", "webgym_rl", "webgym")
"""Every package of the toolkit, from the bottom layer up, each a root package of the import contracts."""


def _lint(root: Path) -> subprocess.CompletedProcess:
    """import-linter's own command (installed beside this Python) on the packages under `root`."""
    program = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(program), "--config", "pyproject.toml"], cwd=root, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_import_contracts_hold():
    done = _lint(REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_contract_violation_fails_the_check(tmp_path):
    # The check is real: a module of webgym_rollout that imports webgym_rl breaks the contract.
    _copy(tmp_path)
    (tmp_path / "webgym_rollout" / "upward.py").write_text("import webgym_rl.train\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "webgym_rollout.upward -> webgym_rl.train" in done.stdout


def test_the_contracts_name_every_package():
    import tomllib

    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert set(config["tool"]["importlinter"]["root_packages"]) == set(PACKAGES)
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers" and "containers" not in c)
    assert layers == list(reversed(PACKAGES))  # webgym on top, webgym_core at the bottom
    on_disk = {p.parent.name for p in REPO_ROOT.glob("webgym*/__init__.py")}
    assert on_disk == set(PACKAGES)
    from webgym_core.cli import PACKAGES as toolkit  # a command of these that fails to load is a bug

    assert toolkit == set(PACKAGES)


def test_the_sites_importing_the_rollout_package_fails_the_check(tmp_path):
    # webgym_sites sits below webgym_rollout: the sites may not import the task kinds or the judge.
    _copy(tmp_path)
    (tmp_path / "webgym_sites" / "upward.py").write_text("import webgym_rollout.tasks.kind\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "webgym_sites.upward -> webgym_rollout.tasks.kind" in done.stdout


def _copy(tmp_path: Path) -> None:
    import shutil

    for package in PACKAGES:
        shutil.copytree(REPO_ROOT / package, tmp_path / package, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")


def test_an_import_circle_inside_webgym_rl_fails_the_check(tmp_path):
    _copy(tmp_path)
    # The state module importing the phases, which import the state: a circle.
    state = tmp_path / "webgym_rl" / "loop" / "state.py"
    state.write_text(state.read_text() + "\nimport webgym_rl.loop.phases  # noqa\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "No import circle inside webgym_rl" in done.stdout and "BROKEN" in done.stdout


def test_no_module_of_webgym_rl_imports_another_modules_private_names():
    import ast

    found = []
    for path in sorted((REPO_ROOT / "webgym_rl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("webgym"):
                found += [f"{path.relative_to(REPO_ROOT)}: {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert not found, found


def test_each_package_reexports_its_core_api():
    code = ("from webgym_rollout import WebEnv, BrowserClient, Episode, Step, EpisodeStatus, RubricJudge\n"
            "from webgym_core import Endpoint, ChatClient, load_settings, settings_options\n"
            "import sys\n"
            "heavy = ('torch', 'playwright', 'datasets', 'transformers')\n"
            "print(sorted(m for m in heavy if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # the core API imports none of the heavy libraries
