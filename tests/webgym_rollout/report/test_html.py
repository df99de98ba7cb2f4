"""The evaluation report: Wilson intervals, breakdowns, paired comparisons, charts in Chromium, the
learning curve, the command."""

from __future__ import annotations

import io
import json
import re

import pytest
from click.testing import CliRunner
from PIL import Image

from webgym_data.schema import Task
from webgym_rollout.report.charts import PALETTE, CurvePoint, write_learning_curve
from webgym_rollout.report.html import (
    _COLUMNS,
    ReportSettings,
    build_report,
    format_summary,
    report_command,
    write_report,
)
from webgym_rollout.report.rates import sign_test, wilson_interval
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Step, trajectory_features
from webgym_rollout.trajectory.reader import TrajectorySet
from webgym_rollout.trajectory.writer import TrajectoryWriter

# task_id -> (facts in its rubric, benchmark, domain, website): facts set the difficulty level
# (easy 1-3, medium 4-6, hard 7+).
TASKS = {
    "t0": (2, "deepshop", "shopping", "https://shop.test"),
    "t1": (2, "deepshop", "shopping", "https://shop.test"),
    "t2": (5, "deepshop", "shopping", "https://shop.test"),
    "t3": (5, "mind2web-live", "travel", "https://trains.test"),
    "t4": (8, "mind2web-live", "travel", "https://trains.test"),
    "t5": (8, "mind2web-live", "travel", "https://hotels.test"),
    "t6": (1, "gaia-web", "", "https://wiki.test"),
    "t7": (1, "gaia-web", "", "https://wiki.test"),
    "t8": (1, "gaia-web", "", "https://wiki.test"),
}
# Outcomes per run: (task_id, status, success, steps). "before" beats "after" on t1, t2, t3, loses
# t4, ties t0 (both succeed) and t5 (both fail); t6 failed on infrastructure in "before", t8 was
# blocked in "after", t7 is only in "before" and t6 only counts in "after".
BEFORE = [("t0", "ok", True, 3), ("t1", "ok", True, 4), ("t2", "ok", True, 4), ("t3", "ok", True, 6),
          ("t4", "ok", False, 5), ("t5", "timeout", False, 10), ("t6", "error:browser_crashed", False, 1),
          ("t7", "ok", True, 2)]
AFTER = [("t0", "ok", True, 2), ("t1", "ok", False, 3), ("t2", "timeout", False, 10), ("t3", "ok", False, 4),
         ("t4", "ok", True, 7), ("t5", "ok", False, 3), ("t6", "ok", True, 2), ("t8", "blocked", False, 0)]


def task(task_id: str) -> Task:
    facts, benchmark, domain, website = TASKS[task_id]
    return Task.from_row({
        "task_id": task_id, "task_name": f"Task {task_id}: find the price", "website": website,
        "benchmark_name": benchmark, "domain": domain,
        "evaluator_reference": [{"id": "1", "description": "facts",
                                 "facts": [f"f{i}" for i in range(facts)]}]})


def episode(task_id: str, status: str = "ok", success: bool = False, steps: int = 2, *, attempt: int = 0,
            split: str = "test") -> Episode:
    return Episode(task=task(task_id), episode_id=f"{task_id}-{attempt}-{split}", attempt=attempt,
                   split=split, reward=1.0 if success else 0.0, status=EpisodeStatus(status),
                   steps=[Step(index=j, response=f"step {j}") for j in range(steps)])


def write_run(out, outcomes, **kwargs) -> None:
    with TrajectoryWriter(out, max_shard_episodes=3) as writer:
        for task_id, status, success, steps in outcomes:
            writer.add(episode(task_id, status, success, steps, **kwargs))


@pytest.fixture
def two_runs(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    write_run(before, BEFORE)
    write_run(after, AFTER)
    return before, after


# ----------------------------------------------------------------------------------- statistics

@pytest.mark.parametrize(("successes", "trials", "low", "high"), [
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, Wilson
    # score method without continuity correction.
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (8, 10, 0.4902, 0.9433),
    (10, 10, 0.7225, 1.0),
])
def test_wilson_interval_matches_published_values(successes, trials, low, high):
    got = wilson_interval(successes, trials)
    assert got == (pytest.approx(low, abs=5e-5), pytest.approx(high, abs=5e-5))


def test_wilson_interval_edges_and_levels():
    assert wilson_interval(0, 0) == (0.0, 1.0)  # nothing known
    # A higher confidence gives a wider interval around the same rate.
    narrow, wide = wilson_interval(30, 100, 0.90), wilson_interval(30, 100, 0.99)
    assert wide[0] < narrow[0] < 0.3 < narrow[1] < wide[1]
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(5, 4)
    with pytest.raises(ValueError, match="confidence"):
        ReportSettings(confidence=1.0)


def test_sign_test_counts_the_uneven_splits():
    assert sign_test(0, 0) is None
    assert sign_test(3, 1) == pytest.approx(10 / 16)  # P(<=1 of 4) = 5/16, two-sided
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(5, 5) == 1.0


def test_report_columns_are_trajectory_columns():
    assert set(_COLUMNS) <= set(trajectory_features())
    assert "steps" not in _COLUMNS  # no screenshot is ever read


# ----------------------------------------------------------------------------------- the figures

def test_report_of_two_runs_counts_rates_breakdowns_and_pairs(two_runs, tmp_path):
    before, after = two_runs
    report = build_report([before, after], ReportSettings(top_websites=2))
    a, b = report.runs
    assert (a.label, b.label) == ("before", "after")
    # Infrastructure failures are counted apart and left out of the rate; a timeout counts as a failure.
    assert (a.episodes, a.errors, a.overall.successes, a.overall.trials) == (8, 1, 5, 7)
    assert (b.episodes, b.errors, b.overall.successes, b.overall.trials) == (8, 1, 3, 7)
    assert a.error_kinds == {"browser_crashed": 1} and b.error_kinds == {"blocked": 1}
    assert (a.overall.low, a.overall.high) == wilson_interval(5, 7)
    assert a.statuses == {"ok": 6, "timeout": 1, "error:browser_crashed": 1}
    # Steps of the successful episodes only.
    assert a.steps_to_success == {2: 1, 3: 1, 4: 2, 6: 1}
    assert b.steps_to_success == {2: 2, 7: 1}

    def rows(run, key):
        return {g.name: (g.success.successes, g.success.trials, g.errors) for g in run.breakdowns[key]}

    assert [g.name for g in a.breakdowns["difficulty_level"]] == ["easy", "medium", "hard"]
    assert rows(a, "difficulty_level") == {"easy": (3, 3, 1), "medium": (2, 2, 0), "hard": (0, 2, 0)}
    assert rows(b, "difficulty_level") == {"easy": (2, 3, 1), "medium": (0, 2, 0), "hard": (1, 2, 0)}
    assert rows(a, "benchmark") == {"deepshop": (3, 3, 0), "mind2web-live": (1, 3, 0), "gaia-web": (1, 1, 1)}
    assert rows(b, "domain")["(none)"] == (1, 1, 1)
    # The websites with the most episodes over both runs (shop 6, trains 4, wiki 4, hotels 2; a tie
    # goes by name), the same two for both runs.
    assert [g.name for g in b.breakdowns["website"]] == ["https://shop.test", "https://trains.test"]
    assert report.websites_total == 4

    (pair,) = report.comparisons
    assert (pair.a, pair.b, pair.shared_tasks) == ("before", "after", 6)
    assert (pair.won, pair.lost, pair.tied, pair.only_a, pair.only_b) == (3, 1, 2, 1, 1)
    assert (pair.a_success.successes, pair.a_success.trials) == (4, 6)
    assert (pair.b_success.successes, pair.b_success.trials) == (2, 6)
    assert pair.p_value == pytest.approx(0.625)
    assert sorted(d.task_id for d in pair.differing) == ["t1", "t2", "t3", "t4"]

    html_path = write_report(report, tmp_path / "report")
    figures = json.loads((tmp_path / "report" / "report.json").read_text())
    assert html_path == tmp_path / "report" / "report.html"
    assert figures["runs"][0]["overall"]["rate"] == pytest.approx(5 / 7)
    assert figures["runs"][1]["breakdowns"]["difficulty_level"][2]["successes"] == 1
    assert figures["runs"][0]["steps_to_success"]["median"] == 4
    assert figures["comparisons"][0]["won"] == 3 and figures["comparisons"][0]["lost"] == 1


def test_split_setting_reads_one_split(tmp_path):
    out = tmp_path / "mixed"
    with TrajectoryWriter(out) as writer:
        writer.add(episode("t0", success=True, split="train"))
        writer.add(episode("t1", success=False, split="train"))
        writer.add(episode("t2", success=True, split="test"))
    test = build_report([out], ReportSettings(split="test")).runs[0]
    assert (test.overall.successes, test.overall.trials) == (1, 1)
    everything = build_report([out]).runs[0]
    assert (everything.overall.successes, everything.overall.trials) == (2, 3)


def test_attempts_are_compared_by_per_task_success_rate(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_run(a, [("t0", "ok", True, 2), ("t1", "ok", True, 2), ("t2", "ok", True, 2)])
    with TrajectoryWriter(a, resume=True) as writer:
        for task_id, status, success in (("t0", "ok", False), ("t1", "ok", True), ("t2", "ok", False),
                                         ("t2", "error:policy_timeout", False)):
            attempt = 1 if status == "ok" else 2
            writer.add(episode(task_id, status, success, attempt=attempt))
    with TrajectoryWriter(b) as writer:
        for attempt, (task_id, success) in enumerate([("t0", True), ("t1", True), ("t1", False), ("t2", True),
                                                       ("t2", False), ("t2", True), ("t2", False)]):
            writer.add(episode(task_id, success=success, attempt=attempt))
    report = build_report([a, b], labels=["A", "B"])
    run_a = report.runs[0]
    # The error attempt is left out: t2 is 1 of 2 in A, t0 1/2, t1 2/2.
    assert run_a.tasks == {"t0": (1, 2), "t1": (2, 2), "t2": (1, 2)}
    assert (run_a.attempts_per_task, report.runs[1].attempts_per_task) == (2, 4)
    (pair,) = report.comparisons
    # t0: 1/2 < 1/1 lost; t1: 2/2 > 1/2 won; t2: 1/2 = 2/4 tied.
    assert (pair.won, pair.lost, pair.tied) == (1, 1, 1)
    assert [(d.task_id, d.a, d.b) for d in pair.differing] == [("t0", (1, 2), (1, 1)), ("t1", (2, 2), (1, 2))]


def test_a_run_of_only_errors(tmp_path, two_runs):
    broken = tmp_path / "broken"
    write_run(broken, [("t0", "error:browser_crashed", False, 1), ("t1", "error:browser_crashed", False, 0),
                       ("t2", "error:judge_timeout", False, 4), ("t3", "blocked", False, 0)])
    report = build_report([broken, two_runs[0]])
    run = report.runs[0]
    assert (run.episodes, run.errors, run.overall.trials, run.overall.rate) == (4, 4, 0, None)
    assert run.error_kinds == {"browser_crashed": 2, "judge_timeout": 1, "blocked": 1}
    assert run.steps_to_success == {} and run.tasks == {}
    assert all(g.success.trials == 0 for g in run.breakdowns["difficulty_level"])
    (pair,) = report.comparisons
    assert (pair.shared_tasks, pair.won, pair.lost, pair.p_value, pair.only_b) == (0, 0, 0, None, 7)
    write_report(report, tmp_path / "report")
    figures = json.loads((tmp_path / "report" / "report.json").read_text())
    assert figures["runs"][0]["overall"] == {"successes": 0, "trials": 0, "rate": None, "low": 0.0,
                                             "high": 1.0}
    assert figures["runs"][0]["steps_to_success"] == {"counts": {}, "mean": None, "median": None}
    # Alone, it still makes a page.
    alone = build_report([broken])
    page = write_report(alone, tmp_path / "alone").read_text()
    assert "n/a" in page and "(no successful episode)" in page and "judge_timeout" in page


def test_a_dataset_source_as_a_hub_id_gives_it(two_runs, tmp_path):
    """A Hub id is read into a `datasets.Dataset`; the report reads it the same way as a folder."""
    import datasets

    before = two_runs[0]
    files = sorted(str(p) for p in (before / "data").glob("*.parquet"))
    loaded = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "c"))
    hub = TrajectorySet("org/before", "0123abcd", "1.2", dataset=loaded)
    report = build_report([hub, two_runs[1]])
    assert report.runs[0].label == "org/before" and report.runs[0].version == "0123abcd"
    assert (report.comparisons[0].won, report.comparisons[0].lost) == (3, 1)


def test_bad_arguments_are_named(two_runs, tmp_path):
    with pytest.raises(ValueError, match="labels: 1 labels given for 2 runs"):
        build_report(list(two_runs), labels=["x"])
    with pytest.raises(ValueError, match="sources"):
        build_report([])
    from webgym_rollout.trajectory.contract import TrajectoryError

    with pytest.raises(TrajectoryError, match="nowhere"):
        build_report([tmp_path / "nowhere"])


# ----------------------------------------------------------------------------------- in Chromium

@pytest.mark.browser
async def test_report_renders_from_disk_in_chromium(two_runs, tmp_path, chromium):
    report = build_report(list(two_runs))
    points = [CurvePoint.from_counts(0, "test", 5, 7), CurvePoint.from_counts(1, "test", 3, 7)]
    html_path = write_report(report, tmp_path / "report", learning_curve=points)
    context = await chromium.new_context(viewport={"width": 1300, "height": 900})
    try:
        page = await context.new_page()
        requests = []
        page.on("request", lambda request: requests.append(request.url))
        await page.goto(html_path.as_uri())
        await page.wait_for_load_state("load")
        assert requests == [html_path.as_uri()]  # nothing else is loaded: it works offline, from disk
        charts = page.locator("svg.chart")
        # overall, learning curve, 4 breakdowns, 2 histograms, 2 error-kind charts
        assert await charts.count() == 10
        for i in range(await charts.count()):
            box = await charts.nth(i).bounding_box()
            assert box is not None and box["width"] > 100 and box["height"] > 40
        # The overall bars are as long as the rates: 5/7 and 3/7 of the same axis.
        bars = page.locator("#overall svg rect.bar")
        widths = [(await bars.nth(i).bounding_box())["width"] for i in range(2)]
        assert widths[1] / widths[0] == pytest.approx(3 / 5, abs=0.01)
        # One bar per (difficulty level, run) with evaluated episodes: 3 levels x 2 runs.
        assert await page.locator("section[data-key='difficulty_level'] rect.bar").count() == 6
        assert await page.locator("section[data-key='website'] tr[data-group]").count() == 4
        # The paired comparison table, with the won and lost counts.
        row = page.locator("table.paired tr.pair[data-a='before'][data-b='after']")
        assert await row.locator("td.shared").inner_text() == "6"
        assert await row.locator("td.won").inner_text() == "3"
        assert await row.locator("td.lost").inner_text() == "1"
        assert await row.locator("td.tied").inner_text() == "2"
        assert await page.locator("table.differing tr.won").count() == 3
        assert await page.locator("table.differing tr.lost").count() == 1
        # The learning curve: one line through both points; failures by kind.
        assert await page.locator("#learning-curve circle.point").count() == 2
        assert await page.locator("#errors rect.bar[data-group='browser_crashed']").count() == 1
        assert await page.locator("#steps rect.bar").count() == 6
        # A run looks the same colour in the table's swatch as in its bar, as rendered on screen.
        seen = {}
        for label in ("before", "after"):
            swatch = Image.open(io.BytesIO(await page.locator(
                f"table.runs span.swatch[data-run='{label}']").screenshot())).convert("RGB")
            bar = Image.open(io.BytesIO(await page.locator(
                f"#overall rect.bar[data-run='{label}']").screenshot())).convert("RGB")
            seen[label] = swatch.getpixel((swatch.width // 2, swatch.height // 2))
            assert seen[label] == bar.getpixel((3, 2))
        assert seen["before"] != seen["after"]
    finally:
        await context.close()


# ----------------------------------------------------------------------------------- learning curve

def test_learning_curve_png_has_the_asked_size(tmp_path):
    points = [(0, "train", 0.1, 0.05, 0.2), {"iteration": 0, "label": "test", "rate": 0.2, "low": 0.1,
                                              "high": 0.35},
              CurvePoint.from_counts(1, "train", 30, 100), CurvePoint.from_counts(1, "test", 12, 40),
              CurvePoint.from_counts(2, "train", 45, 100), CurvePoint.from_counts(2, "test", 18, 40)]
    path = write_learning_curve(points, tmp_path / "curves" / "learning_curve.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(io.BytesIO(data))
    image.load()
    assert image.size == (800, 450)
    # The curves are drawn: both line colours are in the picture.
    colours = {c[:3] for _, c in image.convert("RGBA").getcolors(800 * 450)}
    assert (0x09, 0x69, 0xda) in colours and (0xcf, 0x22, 0x2e) in colours
    small = write_learning_curve(points[:1], tmp_path / "one.png", size=(4, 3), dpi=50)
    assert Image.open(small).size == (200, 150)


def test_learning_curve_points_are_checked():
    with pytest.raises(ValueError, match="trials: no evaluated episode at iteration 3"):
        CurvePoint.from_counts(3, "test", 0, 0)
    with pytest.raises(ValueError, match="rate"):
        CurvePoint(0, "test", 0.5, 0.6, 0.7)
    with pytest.raises(ValueError, match="points"):
        write_learning_curve([], "never.png")


def chart_fills(page: str) -> dict[str, set[str]]:
    """The fill colours of each SVG chart's bars, points and lines, by the chart's title."""
    return {title: set(re.findall(r"class='(?:bar|point)'[^>]*?fill='(#[0-9a-f]{6})'", body))
            | set(re.findall(r"class='curve'[^>]*?stroke='(#[0-9a-f]{6})'", body))
            for title, body in re.findall(r"<svg [^>]*aria-label='([^']*)'(.*?)</svg>", page)}


def swatches(page: str, label: str) -> list[str]:
    return re.findall(rf"<span class='swatch' data-run='{label}' style='background:(#[0-9a-f]{{6}})'", page)


def test_each_run_has_one_colour_in_every_table_and_chart(two_runs, tmp_path):
    report = build_report(list(two_runs))
    # The curve: one line not a run ("train"), and the runs' own points ("before", "after").
    points = [CurvePoint.from_counts(0, "train", 2, 9), CurvePoint.from_counts(1, "train", 4, 9),
              CurvePoint.from_counts(0, "before", 5, 7), CurvePoint.from_counts(1, "after", 3, 7)]
    page = write_report(report, tmp_path / "r", learning_curve=points).read_text()
    colour = {}
    for label in ("before", "after"):
        # runs table, 4 breakdown tables, steps table, statuses table, paired table
        found = swatches(page, label)
        assert len(found) >= 8 and len(set(found)) == 1
        colour[label] = found[0]
        bars = re.findall(rf"<rect class='bar' data-run='{label}'[^>]*?fill='(#[0-9a-f]{{6}})'", page)
        assert len(bars) > 4 and set(bars) == {colour[label]}  # overall and every breakdown chart
    assert colour == {"before": PALETTE[0], "after": PALETTE[1]}
    fills = chart_fills(page)
    assert fills["before: steps of successful episodes"] == {colour["before"]}
    assert fills["after: infrastructure failures by kind"] == {colour["after"]}
    curve = fills["Success rate by iteration"]
    train = re.findall(r"class='curve' data-label='train'[^>]*?stroke='(#[0-9a-f]{6})'", page)
    assert len(train) == 1 and train[0] not in colour.values()  # its own colour
    assert curve == {colour["before"], colour["after"], train[0]}
    for label in ("before", "after"):  # the run's point of the curve is in the run's colour
        assert re.findall(rf"<circle class='point' data-label='{label}'[^>]*?fill='(#[0-9a-f]{{6}})'",
                          page) == [colour[label]]

    # Given colours are kept everywhere; the others take free palette colours.
    page = write_report(report, tmp_path / "given", learning_curve=points,
                        colours={"after": "#000000", "train": PALETTE[0]}).read_text()
    assert set(swatches(page, "after")) == {"#000000"}
    assert set(swatches(page, "before")) == {PALETTE[1]}
    assert chart_fills(page)["after: steps of successful episodes"] == {"#000000"}


# ----------------------------------------------------------------------------------- the command

def test_report_command_prints_and_writes(two_runs, tmp_path):
    out = tmp_path / "out"
    args = [str(p) for p in two_runs] + ["--labels", "old", "new", "--top-websites", "1", "--out", str(out)]
    result = CliRunner().invoke(report_command, args)
    assert result.exit_code == 0, result.output
    assert "old vs new: 6 shared tasks, old won 3, lost 1, tied 2" in result.output
    assert "success 71.4% [35.9-91.8] (5/7)" in result.output
    figures = json.loads((out / "report.json").read_text())
    assert [r["label"] for r in figures["runs"]] == ["old", "new"]
    assert len(figures["runs"][0]["breakdowns"]["website"]) == 1
    assert (out / "report.html").is_file()

    missing = CliRunner().invoke(report_command, [str(tmp_path / "nope"), "--out", str(out)])
    assert missing.exit_code != 0 and "nope" in missing.output
    no_out = CliRunner().invoke(report_command, [str(two_runs[0])])
    assert no_out.exit_code == 2 and "--out" in no_out.output
    negative = CliRunner().invoke(report_command,
                                  [str(two_runs[0]), "--out", str(out), "--top-websites", "-1"])
    assert negative.exit_code == 2 and "top_websites" in negative.output


# ------------------------------------------------------- both rates, and bugs said out loud

BUGGY = [("t0", "ok", True, 3), ("t1", "ok", False, 4), ("t2", "error:internal", False, 2),
         ("t3", "error:browser_crashed", False, 1)]


def test_both_rates_are_reported_and_bugs_are_said_out_loud(two_runs, tmp_path, caplog):
    write_run(tmp_path / "buggy", BUGGY)
    with caplog.at_level("INFO", logger="webgym_rollout.report.html"):
        report = build_report([tmp_path / "buggy", two_runs[0]])
    buggy, clean = report.runs
    assert (buggy.overall.successes, buggy.overall.trials) == (1, 2)  # failures left out
    assert (buggy.overall_with_failures.successes, buggy.overall_with_failures.trials) == (1, 4)
    assert (buggy.overall_with_failures.low, buggy.overall_with_failures.high) == wilson_interval(1, 4)
    assert (buggy.errors, buggy.internal_errors) == (2, 1)
    with_failures = clean.overall_with_failures
    assert (with_failures.successes, with_failures.trials, clean.internal_errors) == (5, 8, 0)
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "buggy: 1 of 4 episodes ended with error:internal: this is a bug, please report it" in \
        warning.getMessage()

    text = format_summary(report)
    assert text.count("WARNING") == 1
    assert "WARNING: 1 of 4 episodes ended with error:internal: this is a bug, please report it" in text
    assert "success with infrastructure failures counted as failures 25.0% " in text
    assert "success with infrastructure failures counted as failures 62.5% " in text  # 5/8

    page = write_report(report, tmp_path / "report").read_text()
    figures = json.loads((tmp_path / "report" / "report.json").read_text())
    assert figures["runs"][0]["internal_errors"] == 1 and figures["runs"][1]["internal_errors"] == 0
    assert figures["runs"][0]["overall_with_failures"]["rate"] == 0.25
    # The banner comes first in the body, before any figure, and names the run with bugs only.
    assert page.index("<div class='bugs' id='bugs'") < page.index("<section id='overall'>")
    assert "<li data-run='buggy'>" in page and "<li data-run='before'>" not in page
    assert "25.0% [" in page and "1/4" in page
    # Without bugs there is no banner and no warning line.
    clean_only = build_report([two_runs[0]])
    assert "WARNING" not in format_summary(clean_only)
    assert "id='bugs'" not in write_report(clean_only, tmp_path / "clean").read_text()


@pytest.mark.browser
async def test_the_bug_banner_is_visible_at_the_top_in_chromium(tmp_path, chromium):
    write_run(tmp_path / "buggy", BUGGY)
    html_path = write_report(build_report([tmp_path / "buggy"]), tmp_path / "report")
    context = await chromium.new_context(viewport={"width": 1300, "height": 900})
    try:
        page = await context.new_page()
        await page.goto(html_path.as_uri())
        banner = page.locator("#bugs")
        assert await banner.is_visible()
        box, table = await banner.bounding_box(), await page.locator("table.runs").bounding_box()
        assert box is not None and table is not None
        assert box["y"] + box["height"] <= table["y"] and box["y"] < 900  # above the figures, on screen
        color = await banner.evaluate("e => getComputedStyle(e).borderTopColor")
        assert color == "rgb(176, 0, 32)"
        assert "please report it" in await banner.inner_text()
        assert await page.locator("table.runs td.internal").inner_text() == "1"
    finally:
        await context.close()


# ----------------------------------------------------------------------------------- judges, titles

def test_two_policies_on_the_same_tasks_get_no_judge_comparison(tmp_path):
    # Episode ids are stable per (task, attempt, iteration): two policies evaluated on the same
    # held-out tasks share them. Their verdicts disagreeing is the policies differing, not the judge.
    for name, policy, started, wins in (("random", "random", 100.0, {"t0"}), ("trained", "tiny", 200.0,
                                                                             {"t0", "t1", "t2"})):
        with TrajectoryWriter(tmp_path / name) as writer:
            for task_id in ("t0", "t1", "t2", "t3"):
                played = episode(task_id, success=task_id in wins)
                played.policy_model, played.started_at, played.judge_model = policy, started, "programmatic"
                writer.add(played)
    report = build_report([tmp_path / "random", tmp_path / "trained"])
    (pair,) = report.comparisons
    assert (pair.shared_tasks, pair.won, pair.lost) == (4, 0, 2)  # still compared task by task
    assert pair.judges is None
    page = write_report(report, tmp_path / "report").read_text()
    assert "id='judges'" not in page and "kappa" not in page and "judges" not in format_summary(report)


def test_the_title_says_what_the_runs_are_and_no_curve_means_no_learning_curve(two_runs, tmp_path):
    report = build_report(list(two_runs), labels=["pixel-random", "DOM-aware random"])
    title = "Held-out evaluation: 8 tasks, 2 policies side by side"
    page = write_report(report, tmp_path / "r", title=title).read_text()
    assert f"<title>{title}</title>" in page and f"<h1>{title}</h1>" in page
    assert "learning-curve" not in page and "Learning curve" not in page
    assert json.loads((tmp_path / "r" / "report.json").read_text())["title"] == title
    default = write_report(report, tmp_path / "d").read_text()
    assert "<h1>WebGym evaluation report: pixel-random, DOM-aware random</h1>" in default


def test_the_curve_can_name_version_0_and_draw_train_and_test_in_panels(two_runs, tmp_path):
    report = build_report([two_runs[1]], labels=["v1"])
    points = [CurvePoint.from_counts(0, "train", 94, 100), CurvePoint.from_counts(1, "test", 5, 8)]
    page = write_report(report, tmp_path / "r", learning_curve=points, x_label="policy version",
                        tick_names={0: "v0 (bootstrap: random)", 1: "v1"},
                        panels={"train": "training rollouts", "test": "held-out evaluation"}).read_text()
    section = page[page.index("<section id='learning-curve'>"):]
    section = section[:section.index("</section>")]
    assert section.count("<svg") == 2  # one panel each: train's 94 % and test's 62.5 % are not one line
    assert ">training rollouts</text>" in section and ">held-out evaluation</text>" in section
    assert section.count(">v0 (bootstrap: random)</text>") == 2 and "polyline" not in section
