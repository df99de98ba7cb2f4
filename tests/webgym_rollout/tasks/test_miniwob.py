"""The MiniWoB task kind on a real page: seeding, utterance, rewards; its URL and settings check."""

from __future__ import annotations

import pytest

from webgym_data.schema import Task
from webgym_rollout.settings import EnvSettings
from webgym_rollout.tasks import miniwob
from webgym_rollout.tasks.kind import task_kind
from webgym_rollout.tasks.miniwob import MiniWobPage, MiniWobTask, task_names, task_url, unknown_task
from webgym_rollout.tasks.sites import SiteServer


def _task(seed: int = 3) -> Task:
    return Task.from_row({"task_name": "MiniWoB click-button", "website": "miniwob:click-button",
                          "environment": "miniwob:click-button", "env_seed": seed})


def test_the_kind_needs_the_site_server_and_opens_the_seeded_page():
    kind = task_kind(_task(7))
    assert isinstance(kind, MiniWobTask) and kind.argument == "click-button"
    with pytest.raises(ValueError, match="sites_url: .*site server"):
        kind.session_request(EnvSettings(), seed=7)
    settings = EnvSettings(sites_url="http://127.0.0.1:8400/", viewport="160x210")
    request = kind.session_request(settings, seed=7)
    assert request.start_url == "http://127.0.0.1:8400/miniwob/click-button.html" == task_url(
        "http://127.0.0.1:8400", "click-button")
    assert (request.environment, request.seed, request.viewport) == ("miniwob:click-button", 7, (160, 210))
    # The kind's own step budget, whatever the split and the difficulty tables; the settings may set another.
    assert MiniWobTask.default_horizon == 6
    tables = EnvSettings(train_horizons=(1, 2, 3), test_horizons=(40, 50, 60))
    assert kind.horizon(tables, "train") == kind.horizon(tables, "test") == 6
    assert kind.horizon(EnvSettings(horizons={"miniwob": 4}), "test") == 4
    assert kind.horizon(EnvSettings(horizons={"web": 4}), "test") == 6  # another kind's budget


def _named(name: str) -> Task:
    return Task.from_row({"task_name": f"MiniWoB {name}", "website": f"miniwob:{name}",
                          "environment": f"miniwob:{name}", "env_seed": 1})


def test_a_task_the_miniwob_package_lacks_is_refused_with_the_close_names():
    assert "click-button" in task_names() and "click-tset" not in task_names()
    assert unknown_task("click-button") == ""
    settings = EnvSettings(sites_url="http://127.0.0.1:8400")
    with pytest.raises(ValueError, match="the miniwob package has no task 'click-tset'") as caught:
        task_kind(_named("click-tset")).check(settings)
    assert "did you mean 'miniwob:click-test'" in str(caught.value)
    with pytest.raises(ValueError, match="e.g. 'miniwob:click-button'"):  # nothing close to it
        task_kind(_named("zzzzzz")).check(settings)


def test_without_the_miniwob_package_here_the_site_server_decides(monkeypatch):
    def missing():
        raise ImportError("the 'miniwob' package is missing")

    monkeypatch.setattr(miniwob, "html_dir", missing)
    task_names.cache_clear()
    try:
        assert task_names() == frozenset() and unknown_task("click-tset") == ""
        task_kind(_named("click-tset")).check(EnvSettings(sites_url="http://127.0.0.1:8400"))
    finally:
        task_names.cache_clear()


@pytest.mark.browser
async def test_seeded_episode_state_and_rewards(chromium):
    with SiteServer() as sites:
        context = await chromium.new_context(viewport={"width": 400, "height": 400})
        try:
            page = await context.new_page()
            utterances = []
            for seed in (3, 3, 4, 5, 6):
                await page.goto(task_url(sites.base_url, "click-button"))
                await MiniWobPage.start_page(page, "click-button", seed, max_time_s=30, timeout_s=10)
                state = await MiniWobPage.read_page(page)
                assert state["done"] is False and state["reward"] == 0
                assert state["reason"] == ""  # no reason yet (not the text "undefined")
                utterances.append(state["utterance"])
            assert utterances[0] == utterances[1]  # same seed, same task
            assert len(set(utterances[1:])) > 1  # other seeds, other tasks
            target = utterances[-1].split('"')[1]
            await page.get_by_role("button", name=target, exact=True).first.click()
            state = await MiniWobPage.read_page(page)
            assert state["done"] is True and state["raw_reward"] == 1 and 0 < state["reward"] <= 1
        finally:
            await context.close()


def test_a_page_of_your_own_that_the_site_server_serves_is_played(tmp_path):
    """A site server of your own may add pages of the MiniWoB kind (the tests' bandit does): a name the
    package lacks is refused only when the site server at --sites-url does not answer its page."""
    import functools
    import http.server
    import threading

    (tmp_path / "miniwob").mkdir()
    (tmp_path / "miniwob" / "my-page.html").write_text("<html><body>mine</body></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        task_kind(_named("my-page")).check(EnvSettings(sites_url=url))
        with pytest.raises(ValueError, match=f"nor does the site server at {url} serve it"):
            task_kind(_named("click-tset")).check(EnvSettings(sites_url=url))
    finally:
        server.shutdown()
        server.server_close()
