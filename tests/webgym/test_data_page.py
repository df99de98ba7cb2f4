"""docs/guides/data.md ("Getting the data"): its table of the ten seed sets says what the importers
say, and its fetch script (online, so never run here) is valid Python that fetches into the paths
the importers read."""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch

from tests.conftest import REPO_ROOT
from webgym_data.importers import SEED_IMPORTERS, get_importer

PAGE = REPO_ROOT / "docs" / "guides" / "data.md"


def _table_rows() -> dict[str, list[str]]:
    """The seed table's cells by importer name (the fifth column)."""
    rows = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"`\w+`", cells[4]):
            rows[cells[4].strip("`")] = cells
    return rows


def _fetch_script() -> str:
    """The page's python block that downloads (the other one, a partial build, runs in test_docs)."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    (script,) = [block for block in blocks if "snapshot_download" in block]
    return script


def test_the_table_names_each_seed_sets_licence_location_and_path():
    rows = _table_rows()
    assert list(rows) == list(SEED_IMPORTERS)
    for name, (_, tasks, where, licence, _, path) in rows.items():
        importer = get_importer(name)
        assert re.fullmatch(r"[\d,]+", tasks), name
        assert licence.startswith(f"`{importer.license_id}`"), name
        assert importer.location in where or f"`{importer.hub_id}`" in where, name
        assert path.startswith(f"`{importer.default_paths[0]}/`"), name
        for pattern in importer.folder_files:
            assert f"`{pattern}`" in path or f"`{pattern.removeprefix('data/')}`" in path, (name, pattern)


def _assigned(tree: ast.Module, name: str):
    (value,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == [name]]
    return ast.literal_eval(value)


def test_the_fetch_script_is_python_and_fills_the_folders_the_importers_read():
    tree = ast.parse(_fetch_script())  # a syntax error fails here
    by_folder = {get_importer(name).default_paths[0]: get_importer(name) for name in SEED_IMPORTERS}
    hub_sets = _assigned(tree, "hub_sets")
    assert hub_sets
    for folder, (repo_id, _patterns) in hub_sets.items():
        assert by_folder[folder].hub_id == repo_id, folder
    downloads = _assigned(tree, "downloads")
    assert downloads
    for path, url in downloads.items():
        folder, _, file = path.partition("/")
        importer = by_folder[folder]
        assert importer.hub_id is None and url.startswith("https://"), path
        assert any(fnmatch(file, pattern) for pattern in importer.folder_files), path
