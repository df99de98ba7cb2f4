"""The documentation's diagrams (scripts/diagrams.py, an mkdocs hook): each draws, is the same on a
rebuild, shows what its page says, and is linked from the page it belongs to (the strict docs build in
test_docs.py fails on a diagram that is linked but not drawn)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGES = {"loop-schedules": "guides/loop.md", "cluster-layout": "guides/scaling.md",
         "egress-path": "guides/security.md", "data-path": "index.md"}
LABELS = {"loop-schedules": ["--schedule sync", "--schedule async", "train -> v1", "eval v1"],
          "cluster-layout": ["Ray head :6379", "browser server :8300", "egress proxy"],
          "egress-path": ["egress proxy", "169.254.169.254", "--allow-hosts 127.0.0.1:8400"],
          "data-path": ["webgym-data build", "trajectory", "training sample"]}


@pytest.fixture(scope="module")
def diagrams():
    spec = importlib.util.spec_from_file_location("docs_diagrams", REPO_ROOT / "scripts" / "diagrams.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_diagram_has_a_page(diagrams):
    assert set(diagrams.DIAGRAMS) == set(PAGES)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_a_diagram_draws_its_labels_and_is_the_same_twice(diagrams, name):
    svg = diagrams.render(name).decode()
    assert svg.startswith("<?xml") and "<svg" in svg
    # matplotlib keeps each text as a comment, "--" written "- -" (a comment may not contain "--")
    texts = " ".join(re.findall(r"<!-- (.*?) -->", svg)).replace("- -", "--")
    for label in LABELS[name]:
        assert label.replace(">", "&gt;") in texts, label
    assert diagrams.render(name) == diagrams.render(name)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_its_page_links_it(name):
    page = (REPO_ROOT / "docs" / PAGES[name]).read_text()
    assert f"assets/diagrams/{name}.svg)" in page


def test_the_hook_adds_the_svgs_to_the_site():
    from mkdocs.config import load_config
    from mkdocs.structure.files import Files

    config = load_config(str(REPO_ROOT / "mkdocs.yml"))  # loads scripts/diagrams.py as a hook
    files = config.plugins.on_files(Files([]), config=config)  # as `mkdocs build` calls it
    drawn = sorted(file.src_uri for file in files if file.src_uri.startswith("assets/diagrams/"))
    assert drawn == sorted(f"assets/diagrams/{name}.svg" for name in PAGES)
