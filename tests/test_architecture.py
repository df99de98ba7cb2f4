"""The architecture's rules, checked by import-linter (contracts in pyproject.toml): the packages
depend one way, webgym_core <- webgym_data <- webgym_sites <- webgym_rollout <- webgym_rl <- webgym,
the browser server knows nothing of agents, and no two modules of the tree import each other, however
long the circle (type-checking imports counted, as import-linter counts them). No module of webgym_rl imports
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


def import_cycles(graph) -> list[list[str]]:
    """Every import circle of a grimp graph: one list of modules per strongly connected group of two
    or more, each in the order of one circle through all of them when there is one (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def _describe(graph, group: list[str]) -> str:
    lines = [" <-> ".join(group)]
    for importer in group:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & set(group)):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(f"    {importer} -> {imported} (l.{detail['line_number']}: "
                             f"{detail['line_contents']})")
    return "\n".join(lines)


def test_no_two_modules_of_the_tree_import_each_other():
    import grimp

    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False, cache_dir=None)
    assert len(graph.modules) > 100  # the whole tree was read
    cycles = import_cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(_describe(graph, group) for group in cycles)


def test_the_circle_finder_finds_long_and_short_circles():
    import grimp

    graph = grimp.ImportGraph()
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"),  # a three-module circle
                               ("p.c", "p.d"), ("p.e", "p.f"), ("p.f", "p.e"), ("p.g", "p.a")):
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="import x")
    assert import_cycles(graph) == [["p.a", "p.b", "p.c"], ["p.e", "p.f"]]
    graph.remove_import(importer="p.f", imported="p.e")
    graph.remove_import(importer="p.c", imported="p.a")
    assert import_cycles(graph) == []


def test_type_checking_imports_are_counted():
    text = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "exclude_type_checking_imports = true" not in text


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


def unexplained_local_imports(path: Path, text: str) -> list[str]:
    """The imports inside functions of `text` that say nothing of why they are not at the top: no
    comment on their line nor on a comment line just above their run of imports, and not the import
    an ``except ImportError`` guards."""
    import ast

    lines = text.splitlines()
    found = []

    def explained(node: ast.stmt) -> bool:
        if "#" in lines[node.lineno - 1]:
            return True
        above = node.lineno - 2
        while above >= 0 and lines[above].lstrip().startswith(("from ", "import ")):
            if "#" in lines[above]:
                return True
            above -= 1
        return above >= 0 and lines[above].lstrip().startswith("#")

    def walk(body: list[ast.stmt], in_function: bool) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and in_function and not explained(node):
                found.append(f"{path}:{node.lineno}: {lines[node.lineno - 1].strip()}")
            elif isinstance(node, ast.Try) and any(
                    "ImportError" in ast.unparse(handler.type or ast.Name("")) for handler in node.handlers):
                walk([n for n in node.body if not isinstance(n, (ast.Import, ast.ImportFrom))], in_function)
                for handler in node.handlers:
                    walk(handler.body, in_function)
            elif isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
                continue
            else:
                inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                for field in ("body", "orelse", "finalbody", "handlers"):
                    value = getattr(node, field, None)
                    if isinstance(value, list):
                        walk([n for n in value if isinstance(n, ast.stmt)] if field != "handlers" else
                             [s for h in value for s in h.body], inner)

    walk(ast.parse(text).body, False)
    return found


def test_an_import_inside_a_function_says_why_it_is_not_at_the_top():
    found = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            found += unexplained_local_imports(Path(relative), path.read_text(encoding="utf-8"))
    reason = "imports inside functions without a reason (# optional: X / # lazy: ...):\n"
    assert not found, reason + "\n".join(found)


def test_the_local_import_check_sees_an_unexplained_import():
    text = ("def a():\n    import json\n    return json\n\n"
            "def b():\n    # optional: torch\n    import torch\n    from torch import nn\n    return nn\n\n"
            "def c():\n    import yaml  # lazy: import time\n\n"
            "def d():\n    try:\n        import ray\n    except ImportError:\n        import os\n")
    assert unexplained_local_imports(Path("m.py"), text) == ["m.py:2: import json", "m.py:18: import os"]
