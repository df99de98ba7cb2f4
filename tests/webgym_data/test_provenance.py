"""Where a build's tasks come from: the seed sets it used and skipped (output, manifest, card), the
seeds' licences in the card, and the dataset id the card loads from (``--repo-id``, push, or the folder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from huggingface_hub import DatasetCard

from tests.webgym_data.test_importers_formats import DEEPSHOP_ROWS
from tests.webgym_data.test_versions import RecordingHub
from webgym_data.build import BuildSettings, build, build_command
from webgym_data.errors import BuildError
from webgym_data.importers import SEED_IMPORTERS, discover_seeds, get_importer, skipped_seeds
from webgym_data.provenance import license_metadata, seed_set_records, summary_lines
from webgym_data.split import SplitSettings
from webgym_data.versions import push_task_set


def seeds_folder(root: Path, seeds_dir: Path) -> Path:
    """A partial seeds folder: DeepShop (cc-by-4.0) and a few GAIA-Web rows (apache-2.0), an
    insta_v3/ folder holding only notes, nothing of the other seven."""
    seeds = root / "seeds"
    (seeds / "deepshop").mkdir(parents=True)
    (seeds / "deepshop" / "deepshop_test.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in DEEPSHOP_ROWS), encoding="utf-8")
    (seeds / "gaia_web").mkdir()
    gaia = (seeds_dir / "gaia_web" / "GAIA_web.jsonl").read_text(encoding="utf-8").splitlines()[:6]
    (seeds / "gaia_web" / "GAIA_web.jsonl").write_text("\n".join(gaia) + "\n", encoding="utf-8")
    (seeds / "insta_v3").mkdir()
    (seeds / "insta_v3" / "SOURCE.txt").write_text("fetch data-for-agents/insta-150k-v3 here\n")
    return seeds


def front_matter(card: str) -> dict:
    return yaml.safe_load(card.split("---")[1])


@pytest.fixture(scope="module")
def partial_build(seeds_dir, tmp_path_factory):
    """``webgym-data build`` on the partial folder, through the command line; (output, folder)."""
    root = tmp_path_factory.mktemp("provenance")
    seeds = seeds_folder(root, seeds_dir)
    result = CliRunner().invoke(build_command, ["--seeds", str(seeds), "--out", str(root / "tasks"),
                                                "--test-size", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    return result.output, root / "tasks"


def test_skipped_seeds_say_whether_the_folder_is_missing_or_empty(tmp_path, seeds_dir):
    seeds = seeds_folder(tmp_path, seeds_dir)
    skipped = dict(skipped_seeds(seeds))
    assert list(skipped) == [name for name in SEED_IMPORTERS if name not in ("deepshop", "gaia_web")]
    assert skipped["insta_v3"] == "insta_v3/ holds none of *.parquet, data/*.parquet"
    assert skipped["pae_webvoyager"] == "no pae_webvoyager/ folder"
    # A seed read from its upstream file name in the folder itself is found, not skipped.
    assert "online_mind2web" in skipped and "no Online_Mind2Web.json" in skipped["online_mind2web"]
    (seeds / "Online_Mind2Web.json").write_text("[]")
    assert "online_mind2web" not in dict(skipped_seeds(seeds))
    assert skipped_seeds(seeds, discover_seeds(seeds)) == skipped_seeds(seeds)


def test_build_prints_the_seed_sets_it_used_and_those_it_skipped(partial_build):
    output, folder = partial_build
    lines = output.splitlines()
    used = next(line for line in lines if line.startswith("seed sets used: "))
    assert used == f"seed sets used: deepshop ({len(DEEPSHOP_ROWS)} tasks), gaia_web (6 tasks)"
    skipped = next(line for line in lines if line.startswith("seed sets skipped (8): "))
    assert "insta_v3 (insta_v3/ holds none of *.parquet, data/*.parquet)" in skipped
    assert "travelplanner (no travelplanner/ or TravelPlanner/ folder)" in skipped
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [entry["importer"] for entry in manifest["seeds_skipped"]] == [
        name for name in SEED_IMPORTERS if name not in ("deepshop", "gaia_web")]
    assert [record["importer"] for record in manifest["seed_sets"]] == ["deepshop", "gaia_web"]
    assert set(summary_lines(manifest)) == {used, skipped}


def test_the_card_lists_the_seeds_licences_and_the_skipped_sets(partial_build):
    _, folder = partial_build
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert front_matter(card)["license"] == ["apache-2.0", "cc-by-4.0"]
    # The Hub's own card parser reads the same list (a dataset card may list several licences).
    assert DatasetCard(card).data.license == ["apache-2.0", "cc-by-4.0"]
    deepshop, gaia = get_importer("deepshop"), get_importer("gaia_web")
    assert (f"| deepshop | `deepshop` | {len(DEEPSHOP_ROWS)} | `cc-by-4.0` | "
            "<https://huggingface.co/datasets/DeepShop/DeepShop> |") in card
    assert f"| gaia-web | `gaia_web` | 6 | `apache-2.0` ({gaia.license_note}) | <{gaia.home_url}> |" in card
    assert deepshop.location == "https://huggingface.co/datasets/DeepShop/DeepShop"
    assert "- `insta_v3`: insta_v3/ holds none of \\*.parquet, data/\\*.parquet" in card
    assert "- `pae_webvoyager`: no pae_webvoyager/ folder" in card
    assert "license: other" not in card


def test_without_a_repo_id_the_card_loads_the_local_folder(partial_build):
    _, folder = partial_build
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "webgym/tasks" not in card
    assert f'tasks = datasets.load_dataset("{folder}")' in card
    assert f'seeds = datasets.load_dataset("{folder}", "seeds")' in card
    assert "names no Hub dataset id" in card and "--repo-id ORG/NAME" in card


def test_a_repo_id_is_the_id_the_card_loads(tmp_path, seeds_dir):
    seeds = seeds_folder(tmp_path, seeds_dir)
    report = build(BuildSettings(out=tmp_path / "tasks", seeds=seeds, repo_id="my-org/web-tasks",
                                 split=SplitSettings(test_size=2), progress=False))
    card = (report.out / "README.md").read_text(encoding="utf-8")
    assert 'tasks = datasets.load_dataset("my-org/web-tasks")' in card
    assert "[`my-org/web-tasks`](https://huggingface.co/datasets/my-org/web-tasks)" in card
    assert "names no Hub dataset id" not in card and "webgym/tasks" not in card
    assert report.manifest["settings"]["repo_id"] == "my-org/web-tasks"


@pytest.mark.parametrize("repo_id", ["webgym", "a/b/c", "my org/tasks", "/tasks"])
def test_a_malformed_repo_id_is_refused_before_anything_is_read(tmp_path, repo_id):
    with pytest.raises(BuildError, match="repo_id: expected a Hub dataset id ORG/NAME"):
        BuildSettings(out=tmp_path / "tasks", repo_id=repo_id)
    result = CliRunner().invoke(build_command, ["--importer", "generic=none.jsonl", "--out",
                                                str(tmp_path / "t"), "--repo-id", repo_id])
    assert result.exit_code == 1
    assert f"repo_id (--repo-id): expected a Hub dataset id ORG/NAME, got {repo_id!r}" in result.output


def test_push_writes_its_repo_id_into_the_card(partial_build, tmp_path, monkeypatch):
    _, built = partial_build
    folder = tmp_path / "tasks"
    shutil.copytree(built, folder)
    hub = RecordingHub(monkeypatch)
    push_task_set(folder, "someone/tasks", private=True)  # GAIA-Web's tasks: a private repo only
    card = hub.uploaded["README.md"].decode()
    assert 'tasks = datasets.load_dataset("someone/tasks")' in card
    assert "names no Hub dataset id" not in card
    assert card == (folder / "README.md").read_text(encoding="utf-8")
    assert front_matter(card)["license"] == ["apache-2.0", "cc-by-4.0"]


def test_an_extended_build_keeps_the_seed_sets_of_the_build_it_extends(partial_build, tmp_path):
    _, earlier = partial_build
    extra = tmp_path / "mine.jsonl"
    extra.write_text(json.dumps({"task_name": "Find the opening hours of the library on the site",
                                 "website": "https://www.library.example", "benchmark_name": "mine"}) + "\n")
    report = build(BuildSettings(out=tmp_path / "v2", extend=earlier, importers=(("generic", str(extra)),),
                                 split=SplitSettings(test_size=2), progress=False))
    records = report.manifest["seed_sets"]
    assert [r["importer"] for r in records] == ["generic", "deepshop", "gaia_web"]
    assert records[0]["license"] == "unknown" and records[0]["location"] == str(extra)
    card = (report.out / "README.md").read_text(encoding="utf-8")
    assert front_matter(card)["license"] == ["apache-2.0", "cc-by-4.0", "unknown"]


def test_records_sum_the_sources_of_one_importer_and_license_ids_are_sorted_once():
    inputs = [{"importer": "deepshop", "source": "a", "tasks": 2},
              {"importer": "deepshop", "source": "b", "tasks": 3},
              {"importer": "mind2web2", "source": "c", "tasks": 1}]
    records = seed_set_records(inputs)
    assert [(r["importer"], r["tasks"], r["license"]) for r in records] == [
        ("deepshop", 5, "cc-by-4.0"), ("mind2web2", 1, "mit")]
    assert license_metadata(records + records) == "license:\n- cc-by-4.0\n- mit"
    assert license_metadata([]) == "license:\n- unknown"


def test_every_seed_set_names_its_licence_and_where_it_lives():
    for name in SEED_IMPORTERS:
        importer = get_importer(name)
        assert importer.license_id not in ("", "unknown", "other"), name
        assert importer.location.startswith("https://"), name
