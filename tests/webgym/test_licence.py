"""The repository's LICENSE is the licence pyproject.toml declares, and CITATION.cff cites the
toolkit and the WebGym paper."""

from __future__ import annotations

import tomllib

import yaml

from tests.conftest import REPO_ROOT


def test_the_license_file_is_the_apache_2_0_text_pyproject_declares():
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"]
    assert declared == {"text": "Apache-2.0"}
    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    # The whole text: its nine sections and the end of its terms, not a stub naming the licence.
    for section in range(1, 10):
        assert f"\n   {section}. " in text, section
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_citation_file_names_the_toolkit_and_the_webgym_paper():
    citation = yaml.safe_load((REPO_ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0"
    assert {"message", "title", "authors"} <= set(citation)
    assert citation["type"] == "software" and citation["license"] == "Apache-2.0"
    (paper,) = citation["references"]
    assert paper["title"].startswith("WebGym: ")
    assert paper["url"] == "https://arxiv.org/abs/2601.02439"
    assert [author["family-names"] for author in paper["authors"]][0] == "Bai"
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "](LICENSE)" in readme and "](CITATION.cff)" in readme
