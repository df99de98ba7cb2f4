"""DeepShop: 150 shopping tasks on one site (Amazon), WebVoyager-like JSONL with shopping attributes.

Rows: ``web_name, id, ques, web, attribute, filter, sort, category, difficulty`` (the public file is
``data/deepshop_test.jsonl`` of the DeepShop repository). ``attribute``, ``filter`` and ``sort`` say
what the found product must be, which filters apply and how the results are ordered; the string
"None" means the task has no such part. Each present part is one of the task's `seed_criteria` and,
until an LLM writes the rubric (``webgym-data build --rubrics all``), one fact group of one fact
(``rubric_source = "seed"``). Markdown emphasis (``**Trail tent**``) is removed.

A few rows of the public file are garbled: parts interleaved with each other, headings of the
generator left in ("**Product attribute**:"), a part reduced to "**". `garbled_parts` finds them; such
a row is kept, flagged in ``source.metadata["garbled"]`` (the parts that look garbled), and gets no
rubric from the seed (a fact mixing two requirements cannot be checked), only its `seed_criteria`.

The seed's ``difficulty`` (easy / medium / hard) is the task's `seed_difficulty_level`, so it sets
the difficulty level until an LLM rubric exists (then the fact count does); it also stays in
``source.metadata`` with ``category``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from webgym_data.importers.webvoyager import WebVoyagerImporter
from webgym_data.schema import FactGroup, seed_difficulty_label

__all__ = ["PARTS", "DeepShopImporter", "clean_part", "garbled_parts"]

PARTS = {
    "attribute": ("Product attributes", "The product found matches: {}"),
    "filter": ("Filters", "The product found meets the filter conditions: {}"),
    "sort": ("Sorting", "The product is chosen by the asked order: {}"),
}
"""The seed's rubric parts: ``field -> (fact group description, fact template)``."""
_ABSENT = {"", "none", "n/a", "null"}
_EMPHASIS = re.compile(r"\*+")
# Signs of a garbled part (seen in the public file): the generator's own headings left in the text;
# a list dash glued to the previous word or opening the part ("book- Comprehensive", "- Nike"); a
# phrase of four words that repeats, or a word doubled (two parts interleaved).
_HEADING = re.compile(r"(product attributes?|filter conditions?|sort(?:ing)? (?:conditions?|preferences?|"
                      r"criteria|order))\s*\**\s*:", re.IGNORECASE)
_DASH = re.compile(r"(?:^|\w)- \S")
_WORD = re.compile(r"[\w$.%+-]+")


def clean_part(value: Any) -> str:
    """A part's text without Markdown emphasis, whitespace collapsed; ``""`` when absent ("None")."""
    if not isinstance(value, str):
        return ""
    text = " ".join(_EMPHASIS.sub("", value).split())
    return "" if text.lower() in _ABSENT else text


def _repeats_a_phrase(text: str, words: int = 4) -> bool:
    """A phrase of `words` words occurs twice, or a word twice in a row ("Max Max", "with with")."""
    tokens = [t.lower().strip(".") for t in _WORD.findall(text)]
    if any(a == b and a.isalpha() for a, b in zip(tokens, tokens[1:], strict=False)):
        return True
    seen: set[tuple[str, ...]] = set()
    for i in range(len(tokens) - words + 1):
        gram = tuple(tokens[i:i + words])
        if gram in seen:
            return True
        seen.add(gram)
    return False


def garbled_parts(record: Mapping[str, Any]) -> list[str]:
    """The parts (attribute, filter, sort) of a DeepShop row whose text looks garbled."""
    garbled = []
    for name in PARTS:
        raw = record.get(name)
        if not isinstance(raw, str) or raw.strip().lower() in _ABSENT:
            continue
        text = clean_part(raw)
        if (not any(c.isalpha() for c in text) or _HEADING.search(raw) or _DASH.search(text)
                or _repeats_a_phrase(text)):
            garbled.append(name)
    return garbled


class DeepShopImporter(WebVoyagerImporter):
    name = "deepshop"
    benchmark_name = "deepshop"
    hub_id = "DeepShop/DeepShop"
    license_id = "cc-by-4.0"
    # The upstream file is data/deepshop_test.jsonl; any of these in a seeds folder is found.
    default_paths = ("deepshop", "DeepShop")
    upstream_files = ("deepshop_test.jsonl", "deepshop.jsonl")
    folder_files = ("deepshop*.jsonl", "data/deepshop*.jsonl")

    def extra_fields(self, record: Mapping[str, Any]) -> dict[str, Any]:
        parts = {name: clean_part(record.get(name)) for name in PARTS}
        garbled = garbled_parts(record)
        criteria = [f"{name}: {text}" for name, text in parts.items() if text]
        groups = () if garbled else tuple(
            FactGroup(name, PARTS[name][0], (PARTS[name][1].format(text),))
            for name, text in parts.items() if text)
        metadata = {name: record[name] for name in (*PARTS, "category", "difficulty")
                    if record.get(name) not in (None, "")}
        if garbled:
            metadata["garbled"] = garbled
        return {"metadata": metadata, "seed_criteria": criteria, "evaluator_reference": groups,
                "rubric_source": "seed",
                "seed_difficulty_level": seed_difficulty_label(record.get("difficulty"))}
