"""The HTML report renders in a real headless Chromium: the episode index (sorting, filters, links),
episodes, steps, images, click marks, verdicts."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from tests.webgym_rollout.trajectory.test_writer import make_episode
from webgym_data.schema import Task
from webgym_rollout.actions import AgentAction
from webgym_rollout.report.viewer import render_report, view_command
from webgym_rollout.trajectory.contract import EpisodeStatus, Verdict
from webgym_rollout.trajectory.writer import TrajectoryWriter


def write_run(out):
    with TrajectoryWriter(out, max_shard_episodes=1) as writer:
        writer.add(make_episode("t0", n_steps=3, reward=1.0, size=(200, 100)))
        bad = make_episode("t1", n_steps=2, reward=0.0, size=(200, 100))
        bad.task = dataclasses.replace(bad.task, task_name="<script>window.hacked = true</script> find it")
        bad.verdicts = [Verdict("answer_grounded", False, "claims $80, not shown")]
        writer.add(bad)


@pytest.mark.browser
async def test_the_report_renders_in_chromium(tmp_path, chromium, serve_folder):
    out = tmp_path / "run"
    write_run(out)
    report = render_report(out)
    assert report == out / "report.html"
    base = serve_folder(out)
    context = await chromium.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = await context.new_page()
        await page.goto(f"{base}/report.html")
        await page.wait_for_load_state("load")
        assert await page.locator("section.episode").count() == 2
        assert await page.locator("section.episode").nth(0).locator(".step").count() == 3
        assert await page.locator("section.episode").nth(1).locator(".step").count() == 2
        # Every screenshot really loaded (decoded, with its pixel size).
        sizes = await page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
        assert len(sizes) == 5 and all(s == [True, 200, 100] for s in sizes)
        # The click point [250, 500] on the grid sits at 25% / 50% of the displayed screenshot.
        shot = page.locator("section.episode").nth(0).locator(".step").nth(0).locator(".shot")
        box = await shot.locator("img").bounding_box()
        mark = await shot.locator(".click").bounding_box()
        centre = (mark["x"] + mark["width"] / 2, mark["y"] + mark["height"] / 2)
        assert abs(centre[0] - (box["x"] + 0.25 * box["width"])) <= 3
        assert abs(centre[1] - (box["y"] + 0.5 * box["height"])) <= 3
        # A step whose reply did not parse shows the error and no click mark.
        second = page.locator("section.episode").nth(0).locator(".step").nth(1)
        assert await second.locator(".click").count() == 0
        assert "no <tool_call>" in await second.locator(".error").inner_text()
        assert "memory 0" in await page.locator(".memory").first.inner_text()
        # Verdicts, and text from the data shown as text, never run as script.
        failed = page.locator("section.episode").nth(1).locator(".verdict.fail")
        assert "claims $80, not shown" in await failed.inner_text()
        assert await page.evaluate("window.hacked === undefined")
        assert "<script>" in await page.locator("section.episode").nth(1).locator("h2").inner_text()
        assert "50.0%" in await page.locator(".summary").inner_text()
        # No separate instruction recorded: the report says the agent was given the task's text.
        table = page.locator("section.episode").nth(0).locator("table")
        assert "instruction\t(task)" in await table.inner_text()
    finally:
        await context.close()


def test_view_command_writes_the_report_where_asked(tmp_path):
    out = tmp_path / "run"
    write_run(out)
    target = tmp_path / "elsewhere" / "r.html"
    result = CliRunner().invoke(view_command, [str(out), "--html", str(target), "--limit", "1"])
    assert result.exit_code == 0, result.output
    text = target.read_text()
    assert text.count("class='episode'") == 1
    assert len(list((tmp_path / "elsewhere" / "r_files").iterdir())) == 3
    missing = CliRunner().invoke(view_command, [str(tmp_path)])
    assert missing.exit_code != 0 and "manifest.json does not exist" in missing.output


def write_indexed_run(out):
    """Four episodes that differ in benchmark, difficulty, reward, status and steps."""
    specs = [  # task_id, benchmark, facts, reward, status, steps
        ("a", "deepshop", 2, 1.0, EpisodeStatus.OK, 3),
        ("b", "gaia-web", 8, 0.0, EpisodeStatus.TIMEOUT, 5),
        ("c", "deepshop", 5, 0.0, EpisodeStatus.BROWSER_CRASHED, 1),
        ("d", "gaia-web", 1, 1.0, EpisodeStatus.OK, 2),
    ]
    with TrajectoryWriter(out) as writer:
        for task_id, benchmark, facts, reward, status, steps in specs:
            episode = make_episode(task_id, n_steps=steps, reward=reward, size=(40, 30))
            rubric = [{"id": "1", "description": "d", "facts": [f"f{i}" for i in range(facts)]}]
            episode.task = Task.from_row({**episode.task.to_row(), "benchmark_name": benchmark,
                                          "task_name": f"Find item {task_id.upper()}",
                                          "evaluator_reference": rubric})
            episode.status = status
            writer.add(episode)


@pytest.mark.browser
async def test_the_index_sorts_filters_and_links(tmp_path, chromium):
    out = tmp_path / "run"
    write_indexed_run(out)
    report = render_report(out)
    context = await chromium.new_context(viewport={"width": 1200, "height": 800})
    try:
        page = await context.new_page()
        await page.goto(report.as_uri())  # from disk
        await page.wait_for_load_state("load")

        async def order() -> list[str]:
            return await page.eval_on_selector_all(
                "table.index tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.n)")

        assert await order() == ["0", "1", "2", "3"]
        cells = await page.eval_on_selector_all("table.index tbody tr:first-child td",
                                                "cells => cells.map(c => c.innerText)")
        assert cells == ["0", "Find item A", "deepshop", "easy (2)", "1", "ok", "3"]
        # Sorting: steps ascending, then descending; difficulty sorts by the number of facts.
        await page.click("table.index th:has-text('steps') button")
        assert await order() == ["2", "3", "0", "1"]
        assert await page.get_attribute("table.index th:has-text('steps')", "aria-sort") == "ascending"
        await page.click("table.index th:has-text('steps') button")
        assert await order() == ["1", "0", "3", "2"]
        await page.click("table.index th:has-text('difficulty') button")
        assert await order() == ["3", "0", "2", "1"]
        await page.click("table.index th:has-text('task') button")
        assert await order() == ["0", "1", "2", "3"]
        # Filters combine; the count follows. Difficulty levels are offered easiest first.
        levels = await page.eval_on_selector_all("#filter-level option", "os => os.map(o => o.value)")
        assert levels == ["", "easy", "medium", "hard"]
        await page.select_option("#filter-benchmark", "deepshop")
        assert sorted(await order()) == ["0", "2"]
        await page.select_option("#filter-outcome", "success")
        assert await order() == ["0"]
        assert await page.inner_text("#shown") == "1 of 4 episodes shown"
        await page.select_option("#filter-benchmark", "")
        assert sorted(await order()) == ["0", "3"]
        await page.select_option("#filter-outcome", "")
        await page.select_option("#filter-status", "error:browser_crashed")
        assert await order() == ["2"]
        await page.select_option("#filter-status", "")
        await page.select_option("#filter-level", "hard")
        assert await order() == ["1"]
        await page.select_option("#filter-level", "")
        await page.fill("#filter-text", "item d")
        assert await order() == ["3"]
        # Each row links to its episode's section.
        await page.click("table.index a[href='#episode-3']")
        assert await page.evaluate("location.hash") == "#episode-3"
        assert await page.locator("#episode-3 h2").inner_text() == "Find item D"
        assert await page.locator("#episode-3 .step").count() == 2
    finally:
        await context.close()


def test_the_index_is_there_without_script(tmp_path):
    out = tmp_path / "run"
    write_indexed_run(out)
    text = render_report(out).read_text()
    # The table and its links are plain HTML; only the filter controls wait for the script.
    assert text.count("<a href='#episode-") == 4
    assert "<div class='filters' hidden>" in text


def test_a_steps_text_observation_is_shown_folded_and_as_text(tmp_path):
    out = tmp_path / "run"
    episode = make_episode("t0", n_steps=2, reward=1.0, size=(200, 100))
    episode.steps[0].observation_text = 'Interactive elements:\n[1] button "<b>Go</b>" (id=go)'
    with TrajectoryWriter(out) as writer:
        writer.add(episode)
    text = render_report(out).read_text()
    assert text.count("<details class='observation'>") == 1  # the second step was shown none
    assert "[1] button &quot;&lt;b&gt;Go&lt;/b&gt;&quot; (id=go)" in text


def test_an_actions_numbers_are_explained_grid_point_pixel_or_element(tmp_path):
    out = tmp_path / "run"
    episode = make_episode("t0", n_steps=3, reward=1.0, size=(320, 240))
    episode.steps[1].action = AgentAction("click_element", element=3).to_json()
    episode.steps[1].action_error = ""
    episode.steps[2].action = AgentAction("left_click", coordinate=(450, 771)).to_json()
    episode.steps[2].screenshot = b""  # no screenshot: the grid is named, no pixel is made up
    with TrajectoryWriter(out) as writer:
        writer.add(episode)
    text = render_report(out).read_text()
    # [250, 500] of a 320x240 screenshot is pixel (80, 120); the page says so next to the action.
    assert ("[250, 500] is a point on the model&#x27;s 0-1000 grid, pixel (80, 120) of this 320x240 "
            "screenshot") in text
    assert "[3] is the element&#x27;s number in the list of elements the policy was shown" in text
    assert "[450, 771] is a point on the model&#x27;s 0-1000 grid</div>" in text
    assert "0-1000 grid over the screenshot" in text  # the page's note on coordinates


def test_the_title_says_what_the_episodes_are(tmp_path):
    out = tmp_path / "eval"
    write_run(out)
    text = render_report(out, title="Round 1: the policy's own rollouts").read_text()
    assert "<title>Round 1: the policy&#x27;s own rollouts</title>" in text
    assert "<h1>Round 1: the policy&#x27;s own rollouts</h1>" in text and "WebGym trajectories" not in text
    assert "<h1>WebGym trajectories: eval</h1>" in render_report(out).read_text()  # the default
