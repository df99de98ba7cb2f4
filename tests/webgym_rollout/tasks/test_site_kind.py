"""The local sites' task kind: a fresh session per episode, on the run's site server."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from webgym_rollout.settings import EnvSettings
from webgym_rollout.tasks.kind import task_kind
from webgym_rollout.tasks.site_kind import SiteTask, on_server
from webgym_sites.generate import site_tasks
from webgym_sites.state import valid_session_id


def test_a_site_task_opens_on_the_run_s_server_with_a_fresh_session_each_time():
    task = site_tasks(1, sites=("shop",))[0]
    assert task.environment == "site:shop" and task.start_url.startswith("http://127.0.0.1:8400/shop/")
    settings = EnvSettings(sites_url="http://127.0.0.1:9123")
    first, second = task_kind(task), task_kind(task)
    assert isinstance(first, SiteTask) and first.argument == "shop"
    url = first.session_request(settings, seed=None).start_url
    parts = urlsplit(url)
    assert (parts.netloc, parts.path) == ("127.0.0.1:9123", "/shop/")
    assert parse_qs(parts.query)["session"] == [first.session_id] and valid_session_id(first.session_id)
    assert second.session_id != first.session_id  # a new episode is a new session
    with pytest.raises(ValueError, match="sites_url: .* --sites-url"):  # like MiniWoB, it needs the server
        first.check(EnvSettings())
    assert on_server("http://a:1/x/y?q=1", "http://127.0.0.1:5/") == "http://127.0.0.1:5/x/y?q=1"


def test_a_subtask_gets_the_longest_budget_its_parent_s_work_needs():
    from dataclasses import replace

    task = next(t for t in site_tasks(9, sites=("shop",)) if t.difficulty_level == "easy")
    settings = EnvSettings()
    assert task_kind(task).horizon(settings, "train") == 10
    subtask = replace(task, parent_task_id="parent", task_id="sub")
    assert task_kind(subtask).horizon(settings, "train") == 30
    assert task_kind(subtask).horizon(settings, "test") == 70
    assert task_kind(subtask).horizon(EnvSettings(horizons={"site": 5}), "test") == 5  # set for the kind
