"""``webgym-data build``: real seeds in, a Hub-ready folder out (real parquet, real load_dataset)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import datasets
import pytest
import yaml
from click.testing import CliRunner

from webgym_core.endpoint import Endpoint
from webgym_data.build import BuildSettings, build, build_command
from webgym_data.importers import discover_seeds, import_seed
from webgym_data.llm import LLMSettings
from webgym_data.loading import read_task_set
from webgym_data.schema import task_features
from webgym_data.split import SplitSettings, registrable_domain
from webgym_data.taxonomy import TAXONOMY


def load(folder: Path, config: str | None = None, cache: Path | None = None) -> datasets.DatasetDict:
    return datasets.load_dataset(str(folder), config, cache_dir=str(cache) if cache else None)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def synthetic_rows(n_sites: int, per_site: int, *, prefix: str = "task", start: int = 0) -> list[dict]:
    rows = []
    for s in range(start, start + n_sites):
        for i in range(per_site):
            rows.append({
                "task_name": f"{prefix} {i}: find offer {s * 100 + i} and report the price of item {i}",
                "website": f"https://www.site{s}.com",
                "benchmark_name": "synthetic",
                "evaluator_reference": [
                    {"id": "1", "description": "Offer details", "facts": ["price", "rating", "stock"]},
                    {"id": "2", "description": "Cart", "facts": ["added to cart"]},
                ] if i % 2 == 0 else [{"id": "1", "description": "Price", "facts": ["price"]}],
            })
    return rows


def generic(out: Path, source: Path, test_size: int, *, seed: int = 0, **overrides) -> BuildSettings:
    """Offline settings importing one JSONL file with the generic importer."""
    return BuildSettings(out=out, importers=(("generic", str(source)),),
                         split=SplitSettings(test_size=test_size, seed=seed), progress=False, **overrides)


@pytest.fixture(scope="module")
def built(seeds_dir, tmp_path_factory) -> tuple[Path, dict]:
    """One offline build of the real seed files, shared by the read-only tests below."""
    out = tmp_path_factory.mktemp("build") / "tasks"
    report = build(BuildSettings(out=out, seeds=seeds_dir, split=SplitSettings(test_size=150),
                                 progress=False))
    return out, report.manifest


def test_layout_and_both_configs_load(built, tmp_path):
    out, manifest = built
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "data", "manifest.json"]
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]   # no temp folder left
    names = sorted(p.name for p in (out / "data").iterdir())
    prefixes = ("train-seeds-", "train-subtasks-", "test-seeds-", "test-subtasks-")
    assert all(n.startswith(prefixes) and f"-{manifest['build_id']}-" in n for n in names)

    tasks = load(out, cache=tmp_path / "c1")
    seeds = load(out, "seeds", cache=tmp_path / "c2")
    assert set(tasks) == set(seeds) == {"train", "test"}
    assert tasks["train"].features == task_features()
    stats = manifest["stats"]
    assert tasks["train"].num_rows == stats["splits"]["train"] > 0
    assert tasks["test"].num_rows == stats["splits"]["test"] > 0
    n_sub = sum(stats["subtasks"].values())
    assert n_sub > 0
    n_all = tasks["train"].num_rows + tasks["test"].num_rows
    assert seeds["train"].num_rows + seeds["test"].num_rows == n_all - n_sub
    assert all(p == "" for split in seeds.values() for p in split["parent_task_id"])

    # Out of distribution: no site in both splits; subtasks are in their parent's split.
    sites = {s: {registrable_domain(w) for w in tasks[s]["website"]} for s in ("train", "test")}
    assert not sites["train"] & sites["test"]
    for split in ("train", "test"):
        ids = set(tasks[split]["task_id"])
        assert {p for p in tasks[split]["parent_task_id"] if p} <= ids
    assert len(set(tasks["train"]["task_id"]) | set(tasks["test"]["task_id"])) == (
        tasks["train"].num_rows + tasks["test"].num_rows)


def test_counts_match_the_importers_and_the_card(built, seeds_dir):
    out, manifest = built
    discovered = discover_seeds(seeds_dir)
    assert [i["importer"] for i in manifest["inputs"]] == [name for name, _ in discovered]
    for entry, (name, path) in zip(manifest["inputs"], discovered, strict=True):
        result = import_seed(name, path)
        assert entry["tasks"] == len(result.tasks)
        assert entry["skipped"] == len(result.skipped)
        for relative, digest in entry["files"].items():
            assert digest == "sha256:" + hashlib.sha256((seeds_dir / relative).read_bytes()).hexdigest()
    counts = manifest["counts"]
    imported = sum(i["tasks"] for i in manifest["inputs"])
    assert counts["normalise"]["imported"] == imported
    assert counts["rubrics"]["llm"] is False and counts["rubrics"]["missing"] > 0
    # Offline, --rubrics all (the default) keeps the seed rubrics and says so.
    assert counts["rubrics"]["mode"] == "all" and counts["rubrics"]["seed"] > 0

    train, test, _ = read_task_set(out)
    per_seed = Counter((t.benchmark_name, "test" if t in test else "train") for t in [*train, *test])
    card = (out / "README.md").read_text(encoding="utf-8")
    front = yaml.safe_load(card.split("---")[1])
    assert [c["config_name"] for c in front["configs"]] == ["default", "seeds"]
    for benchmark in {b for b, _ in per_seed}:
        n_train, n_test = per_seed[(benchmark, "train")], per_seed[(benchmark, "test")]
        assert f"| {benchmark} | {n_train:,} | {n_test:,} | {n_train + n_test:,} |" in card
    assert manifest["content_hash"] in card
    assert "$" not in card.split("---", 2)[2].replace("$XDG", "")  # every placeholder filled
    assert "`--rubrics all` needs an LLM endpoint: the seed rubrics were kept as imported" in card
    seeded = counts["rubrics"]["seed"]
    assert f"{seeded:,} seed tasks carry a rubric read from their seed's own criteria" in card
    # Subtasks carry template instructions offline, and their rubric is part of the parent's.
    by_id = {t.task_id: t for t in [*train, *test]}
    subtasks = [t for t in by_id.values() if t.parent_task_id]
    assert subtasks and all(t.instruction_source == "template" for t in subtasks)
    for sub in subtasks:
        assert set(sub.evaluator_reference) < set(by_id[sub.parent_task_id].evaluator_reference)
        assert (sub.domain, sub.subdomain) == (by_id[sub.parent_task_id].domain,
                                               by_id[sub.parent_task_id].subdomain)
    assert all(t.domain in TAXONOMY for t in by_id.values())


def test_same_inputs_give_the_same_content_and_a_rebuild_replaces_the_folder(tmp_path):
    seed = write_jsonl(tmp_path / "seed.jsonl", synthetic_rows(40, 3))
    out = tmp_path / "tasks"
    settings = generic(out, seed, 20)
    first = build(settings).manifest
    (out / "data" / "stray.txt").write_text("left from before")
    second = build(settings).manifest
    assert first["content_hash"] == second["content_hash"]
    assert not (out / "data" / "stray.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed.jsonl", "tasks"]
    other_seed = build(generic(tmp_path / "t2", seed, 20, seed=5)).manifest
    assert other_seed["content_hash"] != first["content_hash"]


def test_a_failed_build_leaves_no_half_folder_and_keeps_the_old_one(tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", synthetic_rows(10, 2))
    out = tmp_path / "tasks"
    build(generic(out, good, 4))
    before = {p.name: p.read_bytes() for p in (out / "data").iterdir()}
    bad = write_jsonl(tmp_path / "bad.jsonl", [*synthetic_rows(2, 1), {"task_name": "", "website": "x.com"}])
    result = CliRunner().invoke(build_command, ["--importer", f"generic={good}", "--importer",
                                                f"generic={bad}", "--out", str(out), "--no-progress"])
    assert result.exit_code == 1
    error = result.output.strip()
    assert error.startswith("Error:") and len(error.splitlines()) == 1
    assert "bad.jsonl" in error and "row 2" in error and "task_name" in error
    assert {p.name: p.read_bytes() for p in (out / "data").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "good.jsonl", "tasks"]


@pytest.mark.parametrize(("args", "expected"), [
    (["--importer", "nosuch=x.jsonl"], "unknown importer 'nosuch'"),
    (["--importer", "generic=/nonexistent/tasks.jsonl"], "/nonexistent/tasks.jsonl"),
    (["--seeds", "/nonexistent/seeds"], "/nonexistent/seeds"),
    ([], "no seed sets"),
    (["--extend", "/nonexistent/build"], "/nonexistent/build: not a webgym-data build"),
    (["--llm-base-url", "http://127.0.0.1:9/v1"], "llm.model (--llm-model): required with base_url"),
    (["--importer", "generic=x.jsonl", "--test-size", "-1"], "test_size (--test-size): must be >= 0, got -1"),
    (["--importer", "generic=x.jsonl", "--near-threshold", "2"], "near_threshold (--near-threshold): must"),
    (["--importer", "generic=x.jsonl", "--llm-max-retries", "-1"], "llm.max_retries (--llm-max-retries)"),
])
def test_bad_input_is_one_clear_error_line(tmp_path, args, expected):
    result = CliRunner().invoke(build_command, [*args, "--out", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and expected in lines[0], result.output
    assert not (tmp_path / "out").exists()


def test_refuses_to_overwrite_a_folder_that_is_not_a_build(tmp_path):
    seed = write_jsonl(tmp_path / "seed.jsonl", synthetic_rows(5, 1))
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(build_command, ["--importer", f"generic={seed}", "--out", str(out),
                                                "--no-progress"])
    assert result.exit_code == 1 and "not an earlier webgym-data build" in result.output
    assert (out / "notes.txt").read_text() == "keep me"


def test_llm_endpoint_down_is_one_error_line(tmp_path, unused_port):
    rows = [{"task_name": "find the opening hours", "website": "https://www.museum.org"}]
    seed = write_jsonl(tmp_path / "seed.jsonl", rows)
    result = CliRunner().invoke(build_command, [
        "--importer", f"generic={seed}", "--out", str(tmp_path / "out"), "--no-progress",
        "--llm-base-url", f"http://127.0.0.1:{unused_port}/v1", "--llm-model", "m",
        "--llm-cache-dir", str(tmp_path / "cache"), "--llm-max-retries", "0"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{unused_port}" in lines[0]
    assert not (tmp_path / "out").exists()


def scripted_llm(body: dict) -> str:
    purpose = body["response_format"]["json_schema"]["name"]
    task = body["messages"][-1]["content"]
    if purpose == "rubric":
        return json.dumps({"fact_groups": [
            {"id": "1", "description": "Hours", "facts": ["opening time", "closing time", "days open"]},
            {"id": "2", "description": "Tickets", "facts": ["ticket price"]}]})
    if purpose == "decompose":
        return json.dumps({"instruction": f"Only find the hours ({len(task)})"})
    domain = next(iter(TAXONOMY))
    return json.dumps({"domain": domain, "subdomain": TAXONOMY[domain][0]})


def test_build_with_an_llm_generates_rubrics_instructions_and_taxonomy(tmp_path, scripted_openai):
    rows = [{"task_name": f"find the opening hours of museum {i}", "website": f"https://www.museum{i}.org"}
            for i in range(6)]
    seed = write_jsonl(tmp_path / "seed.jsonl", rows)
    llm = scripted_openai(scripted_llm)
    settings = BuildSettings(out=tmp_path / "out", importers=(("generic", str(seed)),),
                             llm=LLMSettings(endpoint=Endpoint(base_url=llm.base_url, model="scripted-model"),
                                             cache_dir=tmp_path / "cache"),
                             split=SplitSettings(test_size=2), progress=False)
    manifest = build(settings).manifest
    train, test, _ = read_task_set(tmp_path / "out")
    tasks = [*train, *test]
    assert len(tasks) == 12                                   # 6 seeds + one subtask each ("Hours" alone)
    assert manifest["counts"]["rubrics"] | {"usage": None} == {
        "llm": True, "mode": "all", "missing": 0, "seed": 0, "generated": 6, "replaced": 0, "kept_seed": 0,
        "failed": 0, "usage": None}
    subtasks = [t for t in tasks if t.parent_task_id]
    assert len(subtasks) == 6
    assert all(t.instruction_source == "llm" for t in subtasks)
    assert all(t.task_name.startswith("Only find the hours") for t in subtasks)
    assert all(t.difficulty == 3 for t in subtasks)
    domain = next(iter(TAXONOMY))
    assert {(t.domain, t.subdomain) for t in tasks} == {(domain, TAXONOMY[domain][0])}
    purposes = Counter(r["response_format"]["json_schema"]["name"] for r in llm.requests)
    assert purposes == {"rubric": 6, "decompose": 6, "taxonomy": 6}
    # A rebuild (through the CLI, progress bars on) is answered from the LLM cache: no new
    # request, same content.
    result = CliRunner().invoke(build_command, [
        "--importer", f"generic={seed}", "--out", str(tmp_path / "out"), "--test-size", "2",
        "--llm-base-url", llm.base_url, "--llm-model", "scripted-model",
        "--llm-cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert len(llm.requests) == 18
    again = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert again["content_hash"] == manifest["content_hash"]
    assert again["counts"]["rubrics"]["usage"]["cache_hits"] == 6


def test_extend_keeps_ids_and_sites_and_adds_the_new_tasks(tmp_path):
    v1_seed = write_jsonl(tmp_path / "v1.jsonl", synthetic_rows(30, 2))
    v1 = tmp_path / "v1"
    build(generic(v1, v1_seed, 12))
    old_train, old_test, _ = read_task_set(v1)
    test_sites = {registrable_domain(t.website) for t in old_test}
    assert test_sites

    # New tasks: some on sites already in test, some on sites in train, some on new sites.
    new_rows = synthetic_rows(30, 1, prefix="extra") + synthetic_rows(5, 2, prefix="fresh", start=100)
    v2_seed = write_jsonl(tmp_path / "v2.jsonl", [*new_rows, *synthetic_rows(30, 2)[:3]])  # 3 already there
    v2 = tmp_path / "v2"
    manifest = build(generic(v2, v2_seed, 12, extend=v1)).manifest
    new_train, new_test, _ = read_task_set(v2)
    old_rows = {t.task_id: (t, split) for split, ts in (("train", old_train), ("test", old_test)) for t in ts}
    new_rows_by_id = {t.task_id: (t, split) for split, ts in (("train", new_train), ("test", new_test))
                      for t in ts}
    for task_id, row in old_rows.items():
        assert new_rows_by_id[task_id] == row                   # unchanged and in the same split
    added = [t for t_id, (t, _) in new_rows_by_id.items() if t_id not in old_rows]
    assert len([t for t in added if not t.parent_task_id]) == 40
    assert manifest["counts"]["normalise"]["already_in_extended"] == 3
    train_sites = {registrable_domain(t.website) for t in new_train}
    new_test_sites = {registrable_domain(t.website) for t in new_test}
    assert not train_sites & new_test_sites
    assert test_sites <= new_test_sites
    for task in added:
        if registrable_domain(task.website) in test_sites:
            assert new_rows_by_id[task.task_id][1] == "test"
    assert any(registrable_domain(t.website) in test_sites for t in added)
    assert manifest["dataset_version"] == 2 and manifest["extends"]["dataset_version"] == 1
    assert load(v2, cache=tmp_path / "c")["train"].num_rows == len(new_train)


def test_help_has_an_example_and_a_flag_per_setting():
    result = CliRunner().invoke(build_command, ["--help"])
    assert result.exit_code == 0 and "Example:" in result.output
    for flag in ("--config", "--out", "--seeds", "--importer", "--extend", "--llm-base-url", "--llm-model",
                 "--llm-api-key-env", "--llm-max-retries", "--llm-max-concurrency", "--llm-cache-dir",
                 "--no-llm-cache", "--near-threshold", "--large-threshold", "--max-subtasks", "--test-size",
                 "--seed", "--max-test-fraction", "--shard-rows", "--no-progress", "--rubrics [missing|all]"):
        assert flag in result.output, flag
    assert "--llm-api-key " not in result.output        # secrets are never flags


def test_yaml_settings_nest_as_the_dataclasses_and_flags_override_them(tmp_path):
    seed = write_jsonl(tmp_path / "seed.jsonl", synthetic_rows(20, 2))
    config = tmp_path / "build.yaml"
    config.write_text(yaml.safe_dump({
        "out": str(tmp_path / "from-yaml"), "importers": [["generic", str(seed)]],
        "test_size": 6, "seed": 3, "max_subtasks": 0,
        "llm": {"cache_dir": str(tmp_path / "cache"), "max_retries": 1}}))
    result = CliRunner().invoke(build_command, ["--config", str(config), "--seed", "4", "--no-progress"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "from-yaml" / "manifest.json").read_text())
    settings = manifest["settings"]
    assert (settings["test_size"], settings["seed"], settings["max_subtasks"]) == (6, 4, 0)
    assert settings["llm"]["max_retries"] == 1 and "api_key" not in settings["llm"]
    assert "progress" not in settings and manifest["counts"]["decompose"]["subtasks"] == 0
    config.write_text(yaml.safe_dump({"out": str(tmp_path / "x"), "test_sise": 6}))
    result = CliRunner().invoke(build_command, ["--config", str(config)])
    assert result.exit_code == 1 and "test_sise: unknown setting" in result.output


def test_an_empty_test_split_is_left_out_and_the_folder_still_loads(tmp_path):
    seed = write_jsonl(tmp_path / "seed.jsonl", synthetic_rows(4, 2))
    out = tmp_path / "tasks"
    build(generic(out, seed, 0))
    assert not list((out / "data").glob("test-*"))
    for config in (None, "seeds"):
        loaded = load(out, config, cache=tmp_path / f"c-{config}")
        assert set(loaded) == {"train"} and loaded["train"].num_rows > 0


def test_only_tasks_without_a_rubric_count_as_missing_and_are_sent_to_the_llm(tmp_path, scripted_openai):
    from webgym_data.importers.miniwob import write_miniwob_spec

    rows = [{"task_name": f"find the opening hours of museum {i}", "website": f"https://www.museum{i}.org"}
            for i in range(3)]
    seed = write_jsonl(tmp_path / "seed.jsonl", rows)
    spec = write_miniwob_spec(tmp_path / "miniwob.jsonl", ["click-button"], range(4))
    importers = (("generic", str(seed)), ("miniwob", str(spec)))
    offline = build(BuildSettings(out=tmp_path / "offline", importers=importers,
                                  split=SplitSettings(test_size=0), progress=False)).manifest
    assert offline["counts"]["rubrics"]["missing"] == 3           # the MiniWoB rows carry their rubric
    llm = scripted_openai(scripted_llm)
    endpoint = Endpoint(base_url=llm.base_url, model="m")
    online = build(BuildSettings(out=tmp_path / "online", importers=importers, progress=False,
                                 split=SplitSettings(test_size=0),
                                 llm=LLMSettings(endpoint=endpoint, cache=False))).manifest
    asked = [r for r in llm.requests if r["response_format"]["json_schema"]["name"] == "rubric"]
    assert len(asked) == 3 and not any("MiniWoB" in r["messages"][-1]["content"] for r in asked)
    assert online["counts"]["rubrics"] | {"usage": None} == {
        "llm": True, "mode": "all", "missing": 0, "seed": 0, "generated": 3, "replaced": 0, "kept_seed": 0,
        "failed": 0, "usage": None}


def test_tasks_of_unknown_difficulty_go_through_the_whole_data_path(built, seeds_dir, tmp_path):
    out, manifest = built
    train, test, _ = read_task_set(out)
    tasks = [*train, *test]
    unknown = [t for t in tasks if t.difficulty_level == "unknown"]
    # No rubric and no label (GAIA-Web, TravelPlanner, AgentSynth-Web, Mind2Web-2 without a tree):
    # "unknown", never "easy"; Online-Mind2Web's seed labels are levels.
    assert unknown and all(not t.evaluator_reference and not t.seed_difficulty_level for t in unknown)
    assert {t.benchmark_name for t in unknown} >= {"gaia-web", "travelplanner"}
    assert not [t for t in tasks if t.difficulty == 0 and not t.seed_difficulty_level
                and t.difficulty_level != "unknown"]
    om2w = [t for t in tasks if t.benchmark_name == "online-mind2web"]
    assert [t.difficulty_level for t in om2w] == [t.source.metadata_dict()["level"] for t in om2w]
    assert len(om2w) > 250 and {t.difficulty_level for t in om2w} == {"easy", "medium", "hard"}
    # Not decomposed; in both splits' strata; counted by the stats and on the card.
    assert not [t for t in tasks if t.parent_task_id in {u.task_id for u in unknown}]
    levels = manifest["stats"]["difficulty"]
    assert list(levels) == ["easy", "medium", "hard", "unknown"]
    per_split = Counter(("test" if t in test else "train", t.difficulty_level) for t in tasks)
    assert levels["unknown"] == {split: per_split[(split, "unknown")] for split in ("train", "test")}
    n = levels["unknown"]
    assert f"| unknown | {n['train']:,} | {n['test']:,} | {n['train'] + n['test']:,} |" in (
        out / "README.md").read_text()
    # The stored rows say so, for load_tasks and for a plain load_dataset alike.
    loaded = load(out, cache=tmp_path / "c")
    stored = Counter(level for split in loaded.values() for level in split["difficulty_level"])
    assert stored["unknown"] == len(unknown)
    from webgym_data.loading import load_tasks

    assert sum(t.difficulty_level == "unknown" for t in load_tasks(out, split=None)) == len(unknown)


def test_a_seeds_folder_without_seeds_names_what_was_looked_for(tmp_path):
    (tmp_path / "seeds").mkdir()
    (tmp_path / "seeds" / "notes.txt").write_text("nothing")
    result = CliRunner().invoke(build_command, ["--seeds", str(tmp_path / "seeds"),
                                                "--out", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: no seed sets found in {tmp_path / 'seeds'}; looked for insta_v3: ")
    for looked_for in ("deepshop: deepshop/ or DeepShop/", "deepshop_test.jsonl", "Online_Mind2Web.json",
                       "mind2web-live_*.json", "GAIA_web.jsonl", "browse_comp_test_set.csv"):
        assert looked_for in line, looked_for


def test_all_mode_has_the_llm_rewrite_seed_rubrics_with_their_criteria(seeds_dir, tmp_path, scripted_openai):
    from tests.webgym_data.test_importers_formats import DEEPSHOP_ROWS

    deepshop = write_jsonl(tmp_path / "deepshop_test.jsonl", DEEPSHOP_ROWS)
    importers = (("mind2web2", str(seeds_dir / "mind2web2")), ("deepshop", str(deepshop)))
    llm = scripted_openai(scripted_llm)
    settings = BuildSettings(out=tmp_path / "out", importers=importers, progress=False,
                             split=SplitSettings(test_size=0),
                             llm=LLMSettings(endpoint=Endpoint(base_url=llm.base_url, model="m"),
                                             cache=False))
    offline = build(replace(settings, out=tmp_path / "offline", llm=LLMSettings()))
    before = {t.task_id: t for t in offline.train if not t.parent_task_id}
    assert len(llm.requests) == 0
    seeded = [t for t in before.values() if t.rubric_source == "seed"]
    # 4 Mind2Web-2 trees and the 3 DeepShop rows that are not garbled
    assert len(seeded) == offline.manifest["counts"]["rubrics"]["seed"] == 4 + 3

    manifest = build(settings).manifest
    rubric_prompts = [r["messages"][-1]["content"] for r in llm.requests
                      if r["response_format"]["json_schema"]["name"] == "rubric"]
    assert len(rubric_prompts) == 10 + 5                                    # every seed task
    for task in seeded:
        prompt = next(p for p in rubric_prompts if f"Task: {task.task_name}\n" in p)
        assert all(f"- {criterion}" in prompt for criterion in task.seed_criteria[:5])
    assert manifest["counts"]["rubrics"] | {"usage": None} == {
        "llm": True, "mode": "all", "missing": 0, "seed": 0, "generated": 15, "replaced": 7, "kept_seed": 0,
        "failed": 0, "usage": None}
    train, _, _ = read_task_set(tmp_path / "out")
    seeds = [t for t in train if not t.parent_task_id]
    assert {t.rubric_source for t in seeds} == {"llm"}
    for task in seeds:
        assert task.seed_criteria == before[task.task_id].seed_criteria     # kept as reference
        assert task.difficulty_level == "medium"                            # 3 + 1 facts, whatever the label
    # The LLM rubrics have the paper's shape, so every task decomposes (one subtask each here).
    parents = Counter(t.parent_task_id for t in train if t.parent_task_id)
    assert parents == Counter({t.task_id: 1 for t in seeds})
    card = (tmp_path / "out" / "README.md").read_text()
    assert "in place of a rubric read from the seed's criteria" in card


def test_a_build_whose_sites_are_all_too_large_for_the_test_split_says_so(tmp_path):
    from webgym_sites.generate import site_tasks

    seed = tmp_path / "sites.jsonl"
    seed.write_text("".join(json.dumps(task.to_row()) + "\n" for task in site_tasks(5)))
    args = ["--importer", f"local_sites={seed}", "--out", str(tmp_path / "out"), "--no-progress"]
    result = CliRunner().invoke(build_command, args)
    assert result.exit_code == 0, result.output
    assert " + 0 test tasks on 3 website(s)" in result.output
    assert "warning: the test split is empty" in result.output and "--max-test-fraction 0.2" in result.output
    wider = CliRunner().invoke(build_command, [*args, "--test-size", "10", "--max-test-fraction", "0.5"])
    assert wider.exit_code == 0 and "warning" not in wider.output, wider.output
    assert " + 0 test tasks" not in wider.output


def test_the_collector_is_off_during_the_steps_and_on_after_a_build_or_a_failed_one(tmp_path, monkeypatch):
    import gc

    import webgym_data.build as build_module

    seen = []
    real_dedupe = build_module.dedupe

    def dedupe(*args, **kwargs):
        seen.append(gc.isenabled())
        return real_dedupe(*args, **kwargs)

    monkeypatch.setattr(build_module, "dedupe", dedupe)
    seed = write_jsonl(tmp_path / "seed.jsonl", synthetic_rows(4, 2))
    assert gc.isenabled()
    build(generic(tmp_path / "tasks", seed, 2))
    assert seen == [False] and gc.isenabled()
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"task_name": "", "website": "x.com"}])
    with pytest.raises(Exception, match="task_name"):
        build(generic(tmp_path / "other", bad, 2))
    assert gc.isenabled()
    gc.disable()  # a caller that turned it off keeps it off
    try:
        build(generic(tmp_path / "third", seed, 2))
        assert not gc.isenabled()
    finally:
        gc.enable()
