"""webgym_data.importers for the seeds without a file in ../shared/seeds: files written here in their
documented formats (BrowseComp encrypted CSV, DeepShop/PAE JSONL, InSTA parquet) and the generic importer."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
from pathlib import Path

import pytest
from datasets import Dataset

from webgym_data.importers import MappingError, get_importer, import_seed
from webgym_data.schema import TaskValidationError

CANARY = "BENCHMARK DATA SHOULD NEVER APPEAR IN TEST CORPORA.  canary GUID test-0000"  # two spaces on purpose


def _encrypt(text: str, canary: str) -> str:
    # Written independently of the importer: key = sha256(canary), repeated over the bytes.
    key = hashlib.sha256(canary.encode()).digest()
    data = text.encode()
    return base64.b64encode(bytes(b ^ key[i % len(key)] for i, b in enumerate(data))).decode()


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _write_browsecomp(path: Path, rows: list[tuple[str, str, str]], canary: str = CANARY) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["problem", "answer", "problem_topic", "canary"])
        writer.writeheader()
        for problem, answer, topic in rows:
            writer.writerow({"problem": _encrypt(problem, canary), "answer": _encrypt(answer, canary),
                             "problem_topic": topic, "canary": canary})
    return path


def test_browsecomp_decrypts_in_memory(tmp_path):
    rows = [("Which café opened in 1901 on the street named after a poet? Name it.", "Café Ünter", "Art"),
            ("What is the 12-letter surname of the author who ...", "Abernathy-Lo", "Science & technology")]
    path = _write_browsecomp(tmp_path / "browse_comp_test_set.csv", rows)
    assert "Abernathy" not in path.read_text()  # the file itself is encrypted

    result = import_seed("browsecomp", tmp_path)  # the folder is found by the file name
    assert [t.task_name for t in result.tasks] == [" ".join(r[0].split()) for r in rows]
    assert [t.definite_answer for t in result.tasks] == ["Café Ünter", "Abernathy-Lo"]
    topics = [t.source.metadata_dict()["problem_topic"] for t in result.tasks]
    assert topics == ["Art", "Science & technology"]
    assert {t.benchmark_name for t in result.tasks} == {"browsecomp"}
    assert "canary" not in result.tasks[0].source.metadata


def test_browsecomp_with_a_wrong_canary_names_the_row_and_field(tmp_path):
    path = _write_browsecomp(tmp_path / "bc.csv", [("A question?", "yes", "x")])
    text = path.read_text().replace(CANARY, "some other canary")
    path.write_text(text)
    with pytest.raises(TaskValidationError) as caught:
        import_seed("browsecomp", path)
    assert caught.value.file == str(path) and caught.value.row == 0 and caught.value.field == "problem"


def _deepshop_row(number: int, ques: str, *, attribute: str = "None", filter: str = "None",  # noqa: A002
                  sort: str = "None", difficulty: str = "easy", category: str = "Fashion") -> dict:
    """A row in DeepShop's format (written here; the real file is read in test_importers_seeds)."""
    return {"web_name": "Amazon", "id": f"Amazon--{number}", "ques": ques,
            "web": "https://www.amazon.com/?language=en_US&currency=USD", "attribute": attribute,
            "filter": filter, "sort": sort, "category": category, "difficulty": difficulty}


DEEPSHOP_ROWS = [
    _deepshop_row(1, "Find a waterproof hiking backpack under $80 rated 4 stars or more.",
                  attribute="Waterproof hiking backpack under $80", filter="Backpack rated 4 stars or more",
                  difficulty="medium", category="Sports"),
    _deepshop_row(2, "Find the cheapest USB-C hub with 4 ports.", attribute="USB-C hub with 4 ports",
                  sort="USB-C hub sorted by lowest price", difficulty="Easy", category="Electronics"),
    # Markdown emphasis is only markup, not a garbled part.
    _deepshop_row(3, "Find the 'Trailblazer 2' tent for two with free returns, newest first.",
                  attribute="**Trailblazer 2 tent** for two people",
                  filter="**Trailblazer 2 tent** with free returns",
                  sort="*Trailblazer 2* sorted by newest arrival", difficulty="hard"),
    # Garbled the ways the public file's are: the generator's headings left in, a part reduced to
    # "**", two parts interleaved (a glued list dash, a repeated phrase, a doubled word).
    _deepshop_row(4, "Find a linen summer shirt in size L under $40 with 4.5 stars and free shipping.",
                  attribute="**Product attribute**: Linen summer shirt- **Linen shirt in size L, under $40**",
                  filter="**", sort="**Linen shirt with a customerFilter conditions**: rated 4.5 stars",
                  difficulty="hard"),
    _deepshop_row(5, "Find a ceramic teapot of at least 1 liter under $30 sorted by rating.",
                  attribute="Ceramic teapot of at least 1 liter Ceramic teapot of at least 1 liter under $30",
                  filter="Teapot teapot rated highly", sort="Sorted by rating", difficulty="hard"),
]


def test_deepshop_parts_become_fact_groups_and_the_seed_label_sets_the_level(tmp_path):
    path = _write_jsonl(tmp_path / "deepshop_test.jsonl", DEEPSHOP_ROWS)
    result = import_seed("deepshop", path)
    assert result.skipped == [] and len(result.tasks) == 5           # garbled rows are kept
    first, second, third = result.tasks[:3]
    # One group of one fact per part that is not "None"; the rubric is the seed's reading.
    assert [(g.id, g.facts) for g in first.evaluator_reference] == [
        ("attribute", ("The product found matches: Waterproof hiking backpack under $80",)),
        ("filter", ("The product found meets the filter conditions: Backpack rated 4 stars or more",))]
    assert [g.id for g in second.evaluator_reference] == ["attribute", "sort"]
    assert first.rubric_source == "seed" and first.seed_criteria == (
        "attribute: Waterproof hiking backpack under $80", "filter: Backpack rated 4 stars or more")
    # The seed's label is the level while the rubric is the seed's (2 facts alone would say "easy").
    assert (first.difficulty, first.seed_difficulty_level, first.difficulty_level) == (2, "medium", "medium")
    assert second.difficulty_level == "easy" and third.difficulty_level == "hard"
    assert third.seed_criteria == ("attribute: Trailblazer 2 tent for two people",
                                   "filter: Trailblazer 2 tent with free returns",
                                   "sort: Trailblazer 2 sorted by newest arrival")
    # The raw seed fields, the label among them, stay in the provenance.
    assert first.source.metadata_dict() == {
        "web_name": "Amazon", "seed_id": "Amazon--1", "attribute": "Waterproof hiking backpack under $80",
        "filter": "Backpack rated 4 stars or more", "sort": "None", "category": "Sports",
        "difficulty": "medium"}
    assert "garbled" not in third.source.metadata_dict()


def test_deepshop_garbled_rows_are_flagged_kept_and_get_no_seed_rubric(tmp_path):
    path = _write_jsonl(tmp_path / "deepshop_test.jsonl", DEEPSHOP_ROWS)
    headings, interleaved = import_seed("deepshop", path).tasks[3:]
    assert headings.source.metadata_dict()["garbled"] == ["attribute", "filter", "sort"]
    assert interleaved.source.metadata_dict()["garbled"] == ["attribute", "filter"]
    for task in (headings, interleaved):
        assert task.evaluator_reference == () and task.rubric_source == ""
        assert task.seed_criteria                                 # still reference material for an LLM
        assert task.difficulty_level == "hard"                    # the label, not "unknown"
    assert "filter: " not in " ".join(headings.seed_criteria)   # "**" was nothing


def test_deepshop_is_found_by_its_upstream_names(tmp_path):
    from webgym_data.importers import discover_seeds

    flat = tmp_path / "flat"
    flat.mkdir()
    _write_jsonl(flat / "deepshop_test.jsonl", DEEPSHOP_ROWS)
    assert discover_seeds(flat) == [("deepshop", flat / "deepshop_test.jsonl")]
    clone = tmp_path / "clone"
    (clone / "DeepShop" / "data").mkdir(parents=True)
    _write_jsonl(clone / "DeepShop" / "data" / "deepshop_test.jsonl", DEEPSHOP_ROWS)
    assert discover_seeds(clone) == [("deepshop", clone / "DeepShop")]
    assert len(import_seed("deepshop", clone / "DeepShop").tasks) == 5


def test_an_instruction_over_the_limit_skips_its_row_and_says_why(tmp_path):
    from webgym_data.schema import MAX_INSTRUCTION_CHARS

    rows = [DEEPSHOP_ROWS[0], _deepshop_row(9, "Find " + "very " * MAX_INSTRUCTION_CHARS + "big shoes.")]
    result = import_seed("deepshop", _write_jsonl(tmp_path / "deepshop.jsonl", rows))
    assert len(result.tasks) == 1
    (reason,) = result.skipped
    assert "deepshop.jsonl, row 1: field 'ques' is 20,015 characters long" in reason
    assert "limited to 4,000" in reason


def test_pae_webvoyager_reads_webvoyager_rows_from_a_folder(tmp_path):
    folder = tmp_path / "pae_webvoyager"
    folder.mkdir()
    _write_jsonl(folder / "part-0.jsonl", [
        {"web_name": "Allrecipes", "id": "Allrecipes--0", "ques": "Find a vegan chili recipe.",
         "web": "https://www.allrecipes.com/"}])
    _write_jsonl(folder / "part-1.jsonl", [
        {"web_name": "GitHub", "id": "GitHub--0", "ques": "Find the most starred Rust repo.", "web": "https://github.com/"}])
    result = import_seed("pae_webvoyager", folder)
    assert [t.website for t in result.tasks] == ["https://www.allrecipes.com/", "https://github.com/"]
    assert {t.benchmark_name for t in result.tasks} == {"pae-webvoyager"}
    assert [p.name for p in result.files] == ["part-0.jsonl", "part-1.jsonl"]


def test_insta_v3_parquet_criteria_become_one_fact_group(tmp_path):
    rows = [
        {"website": "stocksnap.io", "instruction": "Find a free photo of a red bicycle and open it.",
         "steps": ["Search 'red bicycle'", "Open the first result"],
         "criteria": ["A search for red bicycle was made", "A photo page is open"]},
        {"website": "example.org", "instruction": "Read the about page.", "steps": [], "criteria": []},
    ]
    Dataset.from_list(rows).to_parquet(str(tmp_path / "train-00000-of-00001.parquet"))
    result = import_seed("insta_v3", tmp_path)
    first, second = result.tasks
    assert first.website == "https://stocksnap.io"
    (group,) = first.evaluator_reference
    assert group.facts == ("A search for red bicycle was made", "A photo page is open")
    assert first.difficulty == 2
    # The criteria are the seed's: an LLM rewrites the rubric with --rubrics all, shown these.
    assert first.rubric_source == "seed" and first.seed_criteria == group.facts
    assert first.source.metadata_dict()["steps"] == rows[0]["steps"]
    assert second.evaluator_reference == () and second.difficulty == 0
    assert (second.rubric_source, second.difficulty_level) == ("", "unknown")


def test_insta_v3_bad_criteria_type_names_the_field(tmp_path):
    Dataset.from_list([{"website": "a.com", "instruction": "Do it.", "steps": [], "criteria": "not a list"}]
                      ).to_parquet(str(tmp_path / "t.parquet"))
    with pytest.raises(TaskValidationError, match="row 0, field 'criteria'"):
        import_seed("insta_v3", tmp_path / "t.parquet")


def test_generic_jsonl_with_a_column_mapping(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [
        {"question": "What is the opening time of the museum?", "url": "museum.example.org", "answer": "9am",
         "topic": "culture"},
    ])
    result = import_seed("generic", path, mapping={"task_name": "question", "website": "url",
                                                   "definite_answer": "answer"}, benchmark_name="my-set")
    (task,) = result.tasks
    assert task.website == "https://museum.example.org" and task.definite_answer == "9am"
    assert task.benchmark_name == "my-set"
    assert task.source.metadata_dict() == {"topic": "culture"}


def test_generic_csv_in_task_format_needs_no_mapping(tmp_path):
    path = tmp_path / "tasks.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["task_id", "task_name", "website", "difficulty", "evaluator_reference"])
        writer.writerow(["keep-me", "Add the cheapest item to the cart.", "https://shop.example.com/", "7",
                         json.dumps([{"id": "g1", "description": "Cart", "facts": ["Item added"]}])])
        writer.writerow(["", "List the opening hours.", "https://shop.example.com/", "2", ""])
    first, second = import_seed("generic", path).tasks
    assert first.task_id == "keep-me"  # a given id is kept
    assert first.difficulty == 1 and first.evaluator_reference[0].facts == ("Item added",)
    assert second.difficulty == 2 and second.task_id != first.task_id


def test_generic_parquet_and_mapping_errors(tmp_path):
    Dataset.from_list([{"q": "Find the docs.", "site": "https://docs.example.com/"}]
                      ).to_parquet(str(tmp_path / "t.parquet"))
    mapping = {"task_name": "q", "website": "site"}
    (task,) = import_seed("generic", tmp_path / "t.parquet", mapping=mapping).tasks
    assert task.task_name == "Find the docs."
    with pytest.raises(MappingError, match="cannot map to title"):
        import_seed("generic", tmp_path / "t.parquet", mapping={"title": "q"})
    with pytest.raises(TaskValidationError) as caught:
        import_seed("generic", tmp_path / "t.parquet", mapping={"task_name": "question", "website": "site"})
    assert caught.value.field == "question" and caught.value.row == 0
    with pytest.raises(MappingError, match="generic"):
        import_seed("deepshop", tmp_path / "t.parquet", mapping={"task_name": "q"})


def test_generic_importer_is_the_registered_one_without_mapping():
    assert get_importer("generic").benchmark_name == "generic"


def test_generic_difficulty_labels_are_seed_labels_in_any_case(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [
        {"task_name": "Find a hotel in Lima.", "website": "hotels.example", "difficulty": "Easy"},
        {"task_name": "Plan a week in Oslo.", "website": "hotels.example", "difficulty": " HARD ",
         "evaluator_reference": [{"id": "1", "description": "Plan", "facts": ["a", "b"]}],
         "seed_criteria": "The plan covers seven days"},
        {"task_name": "Find a hostel in Quito.", "website": "hotels.example", "difficulty": "3"},
    ])
    labelled, graded, counted = import_seed("generic", path).tasks
    # A label: the level, the fact count still unknown, the label kept in the metadata.
    assert (labelled.difficulty, labelled.seed_difficulty_level, labelled.difficulty_level) == (
        0, "easy", "easy")
    assert labelled.source.metadata_dict() == {"difficulty": "Easy"}
    # A rubric column is "given" (kept by --rubrics all); the label still names the level.
    assert (graded.difficulty, graded.difficulty_level, graded.rubric_source) == (2, "hard", "given")
    assert graded.seed_criteria == ("The plan covers seven days",)
    assert (counted.difficulty, counted.seed_difficulty_level, counted.difficulty_level) == (3, "", "easy")


def test_generic_other_difficulty_strings_name_the_accepted_forms(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [
        {"task_name": "Find a hotel.", "website": "hotels.example", "level": "very hard"}])
    with pytest.raises(TaskValidationError, match=r"field 'level': must be a fact count .* or a seed's label "
                                                  r"\(easy, medium, hard, any case\), got 'very hard'"):
        import_seed("generic", path, mapping={"difficulty": "level"})
