"""TaskKind.truth_session: the runner asks any kind for the site session whose ground truth it
can read, instead of reading a field only the site kind has."""

from __future__ import annotations

from webgym_data.schema import Task
from webgym_rollout.tasks.kind import task_kind


def _task(environment: str, url: str = "https://example.com/") -> Task:
    return Task(task_id="t", task_name="Do it", website=url, benchmark_name="b", environment=environment)


def test_only_a_site_task_has_a_truth_session():
    assert task_kind(_task("web")).truth_session() == ""
    assert task_kind(_task("miniwob:click-button", "miniwob:click-button")).truth_session() == ""
    site = task_kind(_task("site:shop", "http://127.0.0.1:8400/shop/"))
    assert site.truth_session() and site.truth_session() == site.session_id
    other = task_kind(_task("site:shop", "http://127.0.0.1:8400/shop/"))
    assert other.truth_session() != site.truth_session()  # a session per episode
