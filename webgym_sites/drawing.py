"""What every site's task generator shares: a template's `Draw`, the row it becomes, the draw loop.

A site's task module (`shop_tasks`, `travel_tasks`, `reference_tasks`) has templates, functions
``(rng, site data) -> Draw | None`` (None: this draw has no single right answer, draw again), and
calls `draw_tasks`, which takes the templates in turn (so the levels come out in equal shares),
skips repeats and turns each draw into a row of the task schema with `SiteRows.row`: the rubric's
fact groups, one machine check per fact in ``source.metadata["checks"]``
(`webgym_sites.goals`), the truth the expert plays in ``params``, the definite
answer of an information-seeking task, a ``site:<name>`` environment and the site's own website
name (`website_of`). `answer_fact` writes the fact that the answer gives one value, with the
candidates a grader knows (the other values the task's pages offer).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webgym_data.schema import FactGroup, Task, TaskSource, make_task_id
from webgym_sites.answers import read_value
from webgym_sites.base import website_of

__all__ = ["DEFAULT_BASE_URL", "Draw", "Fact", "SiteRows", "answer_fact", "draw_tasks"]

DEFAULT_BASE_URL = "http://127.0.0.1:8400"
"""Where ``webgym-rollout serve-sites`` listens by default; generated rows' start URLs are under it."""
Fact = tuple[str, dict[str, Any]]
"""A fact's text and its check."""


def answer_fact(text: str, kind: str, value: str, candidates: Iterable[str] = ()) -> Fact:
    """The fact `text` that the answer gives `value`, a value of `kind` written as the site writes it
    (`webgym_sites.answers`), and none of `candidates`: the other values of that
    kind the task's pages offer (`SiteRows.row` leaves out repeats and the values the task asks)."""
    return text, {"type": "answer_value", "kind": kind, "value": value, "candidates": list(candidates)}


def _wrong_only(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`checks` with each answer fact's candidates cut to the wrong answers: once each, and none that
    one of the task's answer facts asks for (a death year is no wrong birth year when both are asked)."""
    asked = {read_value(c["kind"], c["value"]) for c in checks if c["type"] == "answer_value"}
    kept = []
    for check in checks:
        if check["type"] == "answer_value":
            seen, candidates = set(asked), []
            for text in check["candidates"]:
                value = read_value(check["kind"], text)
                if value not in seen:
                    seen.add(value)
                    candidates.append(text)
            check = check | {"candidates": candidates}
        kept.append(check)
    return kept


@dataclass
class Draw:
    """One template's draw: the instruction, the fact groups with their checks, the truth, the
    right answer (information-seeking tasks), where it starts and its subdomain."""

    template: str
    instruction: str
    groups: list[tuple[str, list[Fact]]]
    """(group description, its facts) in rubric order."""
    params: dict[str, Any]
    """What a session that does the task right does: the expert's truth."""
    answer: str = ""
    start: str = "/"
    """The start page, below the site's mount."""
    subdomain: str = ""


@dataclass(frozen=True)
class SiteRows:
    """How one site's draws become task rows."""

    site: str
    """The site's mount and environment argument (``shop``)."""
    benchmark: str
    domain: str

    def row(self, draw: Draw, *, seed: int, base_url: str, index: int) -> Task:
        """The task row of `draw` for the site served with `seed` at `base_url`."""
        groups = tuple(FactGroup(id=str(number), description=description,
                                 facts=tuple(text for text, _ in facts))
                       for number, (description, facts) in enumerate(draw.groups, 1))
        checks = _wrong_only([check for _, facts in draw.groups for _, check in facts])
        metadata = {"site": self.site, f"{self.site}_seed": seed, "template": draw.template,
                    "params": draw.params, "checks": checks}
        return Task(task_id=make_task_id(self.benchmark, str(seed), draw.instruction),
                    task_name=draw.instruction, website=website_of(self.site),
                    start_url=f"{base_url.rstrip('/')}/{self.site}{draw.start}",
                    environment=f"site:{self.site}",
                    benchmark_name=self.benchmark, domain=self.domain, subdomain=draw.subdomain,
                    evaluator_reference=groups, definite_answer=draw.answer, instruction_source="template",
                    rubric_source="given",
                    source=TaskSource(importer=f"{self.site}_tasks", file="", row=index,
                                      metadata=json.dumps(metadata, sort_keys=True)))


def draw_tasks(rows: SiteRows, templates: Mapping[str, Callable[[random.Random, Any], Draw | None]],
               data: Any, count: int, *, seed: int, data_seed: int, base_url: str,
               subdomain: Callable[[Draw], str] | None = None) -> list[Task]:
    """`count` distinct tasks of `rows.site` (its data `data`, drawn from `data_seed`), drawn with
    `seed` from `templates` in turn; start URLs under `base_url` (``http://host:port``).
    `subdomain` names a draw's subdomain when its template does not."""
    if count < 0:
        raise ValueError(f"count: must be >= 0, got {count}")
    rng = random.Random(f"{rows.site}-tasks:{seed}:{data_seed}")
    drawers = list(templates.values())
    tasks: list[Task] = []
    seen: set[str] = set()
    attempts = 0
    while len(tasks) < count:
        attempts += 1
        if attempts > 50 * count + 100:
            raise RuntimeError(f"could not draw {count} distinct {rows.site} tasks (got {len(tasks)})")
        draw = drawers[len(tasks) % len(drawers)](rng, data)
        if draw is None:
            continue
        if subdomain is not None:
            draw.subdomain = subdomain(draw)
        task = rows.row(draw, seed=data_seed, base_url=base_url, index=len(tasks))
        if task.task_id not in seen:
            seen.add(task.task_id)
            tasks.append(task)
    return tasks
