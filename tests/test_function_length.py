"""Every library function is under 80 lines: one a maintainer reads at once. Longer ones are split
into helpers named after what each part does; the only exceptions are the data tables listed in
`DATA_TABLES`, where the length is the data and not the logic."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("webgym", "webgym_core", "webgym_data", "webgym_rollout", "webgym_rl", "webgym_sites")
LIMIT = 80
"""Lines of a function, from its ``def`` (decorators excluded) to its last line."""

DATA_TABLES = {
    # The reference site's encyclopedia: one seeded draw after another of countries, cities, rivers,
    # people and companies and the facts that link them (the site's content, written out as data).
    ("encyclopedia.py", "encyclopedia"),
}
"""(file name, function name) of the functions allowed past `LIMIT` because they are data: keyed
by file name, so the entry holds wherever the package that keeps the file moves it."""


def long_functions(root: Path, packages: tuple[str, ...] = PACKAGES, limit: int = LIMIT) -> list[str]:
    """``path:line name (N lines)`` of each function (methods and nested functions included) of
    the packages under `root` longer than `limit` lines, data tables aside."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                lines = node.end_lineno - node.lineno + 1
                if lines > limit and (path.name, node.name) not in DATA_TABLES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_every_library_function_is_under_80_lines():
    found = long_functions(REPO_ROOT)
    assert not found, "split these into helpers by concept:\n" + "\n".join(found)


def test_the_check_finds_a_long_function_and_spares_a_data_table(tmp_path):
    package = tmp_path / "webgym_core"
    package.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT))  # with its def: LIMIT + 1 lines
    (package / "long.py").write_text(f"def too_long():\n{body}\n\ndef short():\n    return 1\n")
    (package / "encyclopedia.py").write_text(f"def encyclopedia():\n{body}")
    nested = "".join(f"        y{i} = {i}\n" for i in range(LIMIT))
    (package / "methods.py").write_text(f"class A:\n    async def method(self):\n{nested}")
    found = long_functions(tmp_path, ("webgym_core",))
    assert found == [f"webgym_core/long.py:1 too_long ({LIMIT + 1} lines)",
                     f"webgym_core/methods.py:2 method ({LIMIT + 1} lines)"]
    # Exactly at the limit passes.
    (package / "long.py").write_text("def at_limit():\n" + body[: body.rindex("    x")])
    method = f"webgym_core/methods.py:2 method ({LIMIT + 1} lines)"
    assert long_functions(tmp_path, ("webgym_core",)) == [method]


def test_the_data_tables_listed_still_exist():
    # An entry whose function was split or removed is dropped from the list, not left to excuse another.
    present = set()
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    present.add((path.name, node.name))
    assert present >= DATA_TABLES
