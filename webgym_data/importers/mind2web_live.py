"""Mind2Web-Live (iMeanAI/WebCanvas): live-website tasks judged by key nodes.

Rows: ``index, task, reference_task_length, evaluation``, where ``evaluation`` lists key nodes
``{match_function_name, content: {key?, reference_answer, url, netloc?, path?}}``. Each key node
becomes one readable fact: the task's `seed_criteria`, and, until an LLM writes the rubric
(``webgym-data build --rubrics all``), its one fact group (``rubric_source = "seed"``). The rows
carry no start URL: the website is the scheme and host of the first key node URL that is an http(s)
URL; a row without one is skipped and counted in `ImportResult.unresolved_websites`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webgym_data.importers._base import SeedImporter, Skip, optional_text, require_text, site_url
from webgym_data.schema import FactGroup, Task, TaskValidationError

__all__ = ["Mind2WebLiveImporter", "key_node_fact"]

GROUP_DESCRIPTION = "Key nodes the agent must reach"


def key_node_fact(function: str, content: Mapping[str, Any]) -> str:
    """One readable fact for a Mind2Web-Live key node (its match function and content)."""
    key = optional_text(content, "key")
    answer = optional_text(content, "reference_answer")
    url = optional_text(content, "url")
    element = optional_text(content, "path")
    on_page = f" on {url}" if url else ""
    if function == "url_included_match":
        return f'The agent visits a URL containing "{answer}"' + (f" (for example {url})" if url else "")
    if function == "url_exactly_match":
        if key:
            return f'The agent visits a URL whose parameter "{key}" is "{answer}"' + (
                f" (for example {url})" if url else "")
        return f"The agent visits exactly {answer or url}"
    if function == "url_semantic_match":
        target = f'the URL parameter "{key}"' if key else "the visited URL"
        return f"Judge {target}{on_page}: {answer}"
    if function == "element_path_exactly_match":
        return f'The agent interacts with the element "{answer}"{on_page}'
    if function == "element_value_exactly_match":
        where = f' "{element}"' if element else ""
        return f'A page element{where} shows the value "{answer}"{on_page}'
    if function == "element_value_semantic_match":
        where = f' "{element}"' if element else ""
        return f"Judge the value of the page element{where}{on_page}: {answer}"
    details = ", ".join(f"{k}={v}" for k, v in (("key", key), ("reference", answer), ("url", url)) if v)
    return f"{function}: {details}"


class Mind2WebLiveImporter(SeedImporter):
    name = "mind2web_live"
    benchmark_name = "mind2web-live"
    hub_id = "iMeanAI/Mind2Web-Live"  # holds the 438-task train split as well
    license_id = "cc-by-4.0"
    default_paths = ("mind2web_live", "Mind2Web-Live", "WebCanvas/data/example")
    upstream_files = ("mind2web-live_*.json",)
    folder_files = ("mind2web-live_*.json", "example_*.json")

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        task_name = require_text(record, "task", file=file, row=row)
        evaluation = record.get("evaluation")
        if not isinstance(evaluation, list):
            raise TaskValidationError(f"must be a list of key nodes, got {type(evaluation).__name__}",
                                      file=file, row=row, field="evaluation")
        facts: list[str] = []
        functions: list[str] = []
        website = ""
        for position, node in enumerate(evaluation):
            field = f"evaluation[{position}]"
            if not isinstance(node, Mapping) or not isinstance(node.get("content"), Mapping):
                raise TaskValidationError("must be an object with match_function_name and content",
                                          file=file, row=row, field=field)
            function = optional_text(node, "match_function_name")
            if not function:
                raise TaskValidationError("is required", file=file, row=row,
                                          field=f"{field}.match_function_name")
            content = node["content"]
            fact = key_node_fact(function, content)
            if fact not in facts:  # repeated key nodes would inflate the difficulty
                facts.append(fact)
            functions.append(function)
            website = website or site_url(optional_text(content, "url"))
        if not website:
            raise Skip("no http(s) URL in any evaluation key node to derive the website from",
                       unresolved_website=True)
        return self.make_task(
            file=file, row=row, task_name=task_name, task_name_field="task", website=website,
            evaluator_reference=(FactGroup("key_nodes", GROUP_DESCRIPTION, tuple(facts)),) if facts else (),
            seed_criteria=facts, rubric_source="seed",
            metadata={"seed_index": record.get("index"),
                      "reference_task_length": record.get("reference_task_length"),
                      "match_functions": functions},
        )
