"""Task kinds: the environment string picks the class; unknown strings are refused by name."""

from __future__ import annotations

import pytest

from webgym_data.schema import Task
from webgym_rollout.errors import InvalidRequest
from webgym_rollout.settings import EnvSettings
from webgym_rollout.tasks.kind import WebTask, kind_class, kind_names, task_kind
from webgym_rollout.tasks.miniwob import MiniWobTask
from webgym_rollout.tasks.site_kind import SiteTask


def test_environment_strings_pick_the_kind():
    assert kind_class("web") == (WebTask, "") and kind_class("") == (WebTask, "")
    assert kind_class("miniwob:click-button") == (MiniWobTask, "click-button")
    assert kind_class("site:shop") == (SiteTask, "shop")
    assert kind_names() == ["miniwob:<task>", "site:<task>", "web"]
    for bad in ("miniwob:", "gym:click", "miniwob:../etc", "browser", "web:x", "site:"):
        known = "'miniwob:<task>', 'site:<task>', 'web'"
        with pytest.raises(InvalidRequest, match=f"unknown environment '{bad}'.*{known}"):
            kind_class(bad)


def test_a_web_task_opens_its_start_url_and_has_a_horizon_per_difficulty():
    def task(facts: int) -> Task:
        facts_ = [f"fact {i}" for i in range(facts)]
        groups = [{"id": "1", "description": "d", "facts": facts_}] if facts else []
        return Task.from_row({"task_name": "Find a red shoe", "website": "shop.example",
                              "start_url": "https://shop.example/search", "evaluator_reference": groups})

    settings = EnvSettings(viewport="800x600")
    kind = task_kind(task(2))
    assert isinstance(kind, WebTask) and kind.environment == "web"
    kind.check(settings)  # a web task needs no site server
    request = kind.session_request(settings, seed=None)
    assert (request.start_url, request.viewport, request.environment) == (
        "https://shop.example/search", (800, 600), "web")
    assert [task_kind(task(n)).horizon(settings, "train") for n in (1, 5, 9)] == [10, 20, 30]
    assert [task_kind(task(n)).horizon(settings, "test") for n in (2, 6, 7)] == [30, 50, 70]
    # A budget set for the kind overrides the difficulty tables; one set for another kind does not.
    assert task_kind(task(9)).horizon(EnvSettings(horizons={"web": 4}), "test") == 4
    assert task_kind(task(9)).horizon(EnvSettings(horizons={"miniwob": 4}), "test") == 70


def test_a_task_of_unknown_difficulty_gets_the_longest_budget_of_its_split():
    bare = Task.from_row({"task_name": "Find a red shoe", "website": "shop.example"})
    assert bare.difficulty_level == "unknown"
    settings = EnvSettings()
    assert task_kind(bare).horizon(settings, "train") == 30
    assert task_kind(bare).horizon(settings, "test") == 70
    # "Longest", not "the third entry": a table whose hard budget is not the largest still gives the most.
    odd = EnvSettings(train_horizons=(12, 40, 25), test_horizons=(5, 6, 7))
    assert task_kind(bare).horizon(odd, "train") == 40 and task_kind(bare).horizon(odd, "test") == 7
    # A seed's own label is a difficulty level: its budget, not the longest.
    labelled = Task.from_row({"task_name": "Find a red shoe", "website": "shop.example",
                              "seed_difficulty_level": "medium"})
    assert task_kind(labelled).horizon(settings, "train") == 20
