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


DEEPSHOP_ROWS = [
    {"web_name": "Amazon", "id": "deepshop_0", "ques": "Find a waterproof backpack under $80 with 4+ stars.",
     "web": "https://www.amazon.com/", "attribute": "waterproof", "filter": "price<80", "sort": "",
     "category": "Sports", "difficulty": "medium"},
    {"web_name": "Amazon", "id": "deepshop_1", "ques": "Find the cheapest USB-C hub with 4 ports.",
     "web": "www.amazon.com", "attribute": "", "filter": "", "sort": "price ascending",
     "category": "Electronics", "difficulty": "easy"},
]


def test_deepshop_keeps_difficulty_and_shopping_labels_as_metadata(tmp_path):
    path = _write_jsonl(tmp_path / "deepshop.jsonl", DEEPSHOP_ROWS)
    result = import_seed("deepshop", path)
    first, second = result.tasks
    assert first.source.metadata_dict() == {
        "web_name": "Amazon", "seed_id": "deepshop_0", "attribute": "waterproof", "filter": "price<80",
        "category": "Sports", "difficulty": "medium"}
    assert second.source.metadata_dict()["sort"] == "price ascending"
    assert second.website == "https://www.amazon.com"  # a bare host becomes a URL
    assert first.benchmark_name == "deepshop" and first.difficulty == 0  # seed labels are not fact counts
    assert first.task_id != second.task_id


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
    assert first.source.metadata_dict()["steps"] == rows[0]["steps"]
    assert second.evaluator_reference == () and second.difficulty == 0


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
