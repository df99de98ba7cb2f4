"""``webgym-rollout view OUT``: a static HTML report of a trajectory dataset.

The page opens with an index: a table of the episodes (task, benchmark, difficulty, reward, status,
steps), each linking to its section below, sortable by any column (click its heading) and
filtered by benchmark, difficulty level, status, outcome and a text search. A small inline script
does the sorting and filtering; without it the table and its links still work. Then per episode:
the task, status, reward, final answer and the judge's verdicts; per step: the screenshot with the
click point marked, the action (or the parse/action error) with what its numbers are (a point on the
model's 0-1000 grid and the pixel of the screenshot it falls on; an element's number in the list
the policy was shown), the memory, the URL and title, the text
observation the policy was shown (folded; observation modes axtree and elements) and the raw reply
(folded). The page's title says what the episodes are (`render_report`'s ``title``; by default the
folder's name). Screenshots are written as files next to the HTML (``report_files/``), so the
report opens from disk or any static file server.
"""

from __future__ import annotations

import html
import io
import logging
from pathlib import Path
from typing import Any

import click

from webgym_rollout.actions import GRID_SIZE, ActionParseError, AgentAction, grid_to_pixels
from webgym_rollout.trajectory.contract import Episode, Step, TrajectoryError
from webgym_rollout.trajectory.reader import read_episodes, read_manifest

__all__ = ["render_report", "view_command"]

logger = logging.getLogger(__name__)

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
.episode { border-top: 2px solid #888; margin-top: 2em; padding-top: .5em; }
.meta td { padding: 0 1em 0 0; vertical-align: top; }
.verdict.pass::before { content: "\\2714  "; color: #1a7f37; }
.verdict.fail::before { content: "\\2718  "; color: #cf222e; }
.steps { display: flex; flex-wrap: wrap; gap: 1em; }
.step { width: 420px; border: 1px solid #ddd; padding: .5em; }
.shot { position: relative; display: inline-block; line-height: 0; }
.shot img { width: 400px; height: auto; border: 1px solid #ccc; }
.click { position: absolute; width: 14px; height: 14px; margin: -8px 0 0 -8px; border-radius: 50%;
         border: 2px solid #cf222e; background: rgba(207, 34, 46, .35); pointer-events: none; }
.error { color: #cf222e; }
.memory { color: #555; white-space: pre-wrap; }
.same { color: #888; font-style: italic; }
.coords { color: #555; font-size: 12px; }
pre { white-space: pre-wrap; font-size: 12px; background: #f6f8fa; padding: .5em; }
.filters { margin: .5em 0; display: flex; flex-wrap: wrap; gap: .6em; align-items: center; }
table.index { border-collapse: collapse; }
table.index th, table.index td { border-bottom: 1px solid #ddd; padding: 2px 12px 2px 0; text-align: left; }
table.index td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.index th button { font: inherit; font-weight: 600; border: 0; background: none; padding: 0;
                        cursor: pointer; }
table.index th[aria-sort=ascending] button::after { content: " \\25B2"; }
table.index th[aria-sort=descending] button::after { content: " \\25BC"; }
"""

# Sorting and filtering of the index. Reads only data-* attributes and sets `hidden`; never writes
# markup, so text from the data cannot become script.
_INDEX_SCRIPT = """
(function () {
  const table = document.querySelector("table.index");
  if (!table) return;
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const controls = document.querySelector(".filters");
  const shown = document.getElementById("shown");
  controls.hidden = false;
  function value(row, key) { return row.cells[Number(key)].dataset.value; }
  table.querySelectorAll("th[data-column]").forEach(function (th) {
    th.querySelector("button").addEventListener("click", function () {
      const up = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th[data-column]").forEach(function (o) { o.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      const numeric = th.dataset.type === "number";
      const sign = up ? 1 : -1;
      const sorted = rows.slice().sort(function (a, b) {
        const x = value(a, th.dataset.column), y = value(b, th.dataset.column);
        const order = numeric ? Number(x) - Number(y) : x.localeCompare(y);
        return sign * order || Number(a.dataset.n) - Number(b.dataset.n);
      });
      sorted.forEach(function (row) { body.appendChild(row); });
    });
  });
  function filter() {
    const text = document.getElementById("filter-text").value.trim().toLowerCase();
    const wanted = {};
    controls.querySelectorAll("select").forEach(function (s) { wanted[s.dataset.key] = s.value; });
    let count = 0;
    rows.forEach(function (row) {
      let keep = !text || row.dataset.task.includes(text);
      for (const key in wanted) { if (wanted[key] && row.dataset[key] !== wanted[key]) keep = false; }
      row.hidden = !keep;
      count += keep;
    });
    shown.textContent = count + " of " + rows.length + " episodes shown";
  }
  controls.addEventListener("input", filter);
  controls.addEventListener("change", filter);
})();
"""


_COORDINATES = (f"Coordinates in actions ([x, y]) are on the model's 0-{GRID_SIZE} grid over the screenshot: "
                f"[0, 0] is its top-left corner, [{GRID_SIZE}, {GRID_SIZE}] its bottom-right; pixel x = "
                f"x * width / {GRID_SIZE}, pixel y = y * height / {GRID_SIZE}. Each step names the pixel of "
                "its screenshot and marks it with a red circle.")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _extension(data: bytes) -> str:
    if data[:3] == b"\xff\xd8\xff":
        return "jpg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "png"


def _image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a screenshot's image bytes; None when they are not an image."""
    from PIL import Image, UnidentifiedImageError  # optional: pillow

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def _action_note(action: AgentAction, screenshot: bytes) -> str:
    """What the numbers of an action are: a grid point and its pixel on this screenshot, or an
    element's number ("" for an action without either)."""
    if action.coordinate is not None:
        size = _image_size(screenshot) if screenshot else None
        x, y = action.coordinate
        text = f"[{x}, {y}] is a point on the model's 0-{GRID_SIZE} grid"
        if size is not None:
            x, y = grid_to_pixels(action.coordinate, size)
            text += f", pixel ({x}, {y}) of this {size[0]}x{size[1]} screenshot"
        return f"<div class='coords' data-grid='{_e(list(action.coordinate))}'>{_e(text)}</div>"
    if action.element is not None:
        text = (f"[{action.element}] is the element's number in the list of elements the policy was shown "
                "(the text observation)")
        return f"<div class='coords' data-element='{action.element}'>{_e(text)}</div>"
    return ""


def _step_html(step: Step, image_src: str | None) -> str:
    marker, action_line = "", ""
    if step.action:
        try:
            action = step.parsed_action
        except ActionParseError:
            action_line = f"<div class='action'>{_e(step.action)}</div>"
        else:
            action_line = (f"<div class='action'><b>{_e(action.describe(200))}</b></div>"
                           f"{_action_note(action, step.screenshot)}")
            if action.coordinate is not None:
                left, top = (100 * c / GRID_SIZE for c in action.coordinate)
                x, y = action.coordinate
                marker = (f"<span class='click' data-x='{x}' data-y='{y}' "
                          f"style='left:{left:.2f}%;top:{top:.2f}%'></span>")
    parts = [f"<div class='step' data-step='{step.index}'>", f"<div>Step {step.index}</div>"]
    if image_src:
        parts.append(f"<div class='shot'><img src='{_e(image_src)}' alt='step {step.index}'>{marker}</div>")
    parts.append(action_line or "<div class='action'>(no action)</div>")
    if step.action_error:
        parts.append(f"<div class='error'>{_e(step.action_error)}</div>")
    if step.same_as_next:
        parts.append("<div class='same'>screen unchanged by this step</div>")
    if step.memory:
        parts.append(f"<div class='memory'>Memory: {_e(step.memory)}</div>")
    parts.append(f"<div class='where'>{_e(step.title)} &mdash; {_e(step.url)}</div>")
    if step.observation_text:
        parts.append(f"<details class='observation'><summary>text observation</summary>"
                     f"<pre>{_e(step.observation_text)}</pre></details>")
    parts.append(f"<details><summary>reply</summary><pre>{_e(step.response)}</pre></details>")
    parts.append("</div>")
    return "".join(parts)


def _episode_html(episode: Episode, number: int, assets: Path) -> str:
    steps_html = []
    for step in episode.steps:
        src = None
        if step.screenshot:
            name = f"ep{number:04d}-step{step.index:03d}.{_extension(step.screenshot)}"
            (assets / name).write_bytes(step.screenshot)
            src = f"{assets.name}/{name}"
        steps_html.append(_step_html(step, src))
    verdicts = "".join(
        f"<li class='verdict {'pass' if v.passed else 'fail'}'><b>{_e(v.criterion)}</b>: {_e(v.reason)}</li>"
        for v in episode.verdicts)
    task = episode.task
    meta = [("task", task.task_name), ("instruction", episode.instruction or "(task)"),
            ("task id", task.task_id), ("start", task.start_url), ("status", episode.status.value),
            ("reward", episode.reward), ("steps", episode.num_steps), ("answer", episode.answer or "(none)"),
            ("policy", episode.policy_model), ("judge", episode.judge_model)]
    return (f"<section class='episode' id='episode-{number}' data-episode-id='{_e(episode.episode_id)}' "
            f"data-reward='{_e(episode.reward)}'><h2>{_e(task.task_name)}</h2>"
            "<table class='meta'>" + "".join(f"<tr><td>{k}</td><td>{_e(v)}</td></tr>" for k, v in meta)
            + "</table>"
            f"<ul class='verdicts'>{verdicts or '<li>(no verdicts)</li>'}</ul>"
            f"<div class='steps'>{''.join(steps_html)}</div></section>")


# The index's columns: (heading, sorts as numbers); the row cells below follow this order.
_INDEX_COLUMNS = (("#", True), ("task", False), ("benchmark", False), ("difficulty", True), ("reward", True),
                  ("status", False), ("steps", True))


def _index_row(episode: Episode, number: int) -> dict[str, Any]:
    task = episode.task
    return {"n": number, "task": task.task_name, "benchmark": task.benchmark_name,
            "level": task.difficulty_level, "difficulty": task.difficulty, "reward": episode.reward,
            "status": episode.status.value, "steps": episode.num_steps,
            "outcome": "success" if episode.success else "failure"}


_LEVEL_ORDER = {"easy": 0, "medium": 1, "hard": 2, "unknown": 3}


def _select(key: str, label: str, values: list[str]) -> str:
    ordered = sorted(set(values), key=lambda v: (_LEVEL_ORDER.get(v, len(_LEVEL_ORDER)), v))
    options = "".join(f"<option value='{_e(v)}'>{_e(v)}</option>" for v in ordered)
    return (f"<label>{_e(label)} <select id='filter-{key}' data-key='{key}'>"
            f"<option value=''>all</option>{options}</select></label>")


def _index_html(rows: list[dict[str, Any]]) -> str:
    """The episode table: one row per episode linking to its section, with sort keys and filter
    values in data-* attributes for the inline script."""
    head = "".join(f"<th data-column='{i}' data-type='{'number' if numeric else 'text'}'>"
                   f"<button type='button'>{_e(heading)}</button></th>"
                   for i, (heading, numeric) in enumerate(_INDEX_COLUMNS))
    body = []
    for row in rows:
        cells = [
            f"<td class='num' data-value='{row['n']}'>{row['n']}</td>",
            f"<td data-value='{_e(row['task'])}'><a href='#episode-{row['n']}'>{_e(row['task'])}</a></td>",
            f"<td data-value='{_e(row['benchmark'])}'>{_e(row['benchmark'])}</td>",
            f"<td class='num' data-value='{row['difficulty']}'>{_e(row['level'])} ({row['difficulty']})</td>",
            f"<td class='num' data-value='{row['reward']}'>{row['reward']:g}</td>",
            f"<td data-value='{_e(row['status'])}'>{_e(row['status'])}</td>",
            f"<td class='num' data-value='{row['steps']}'>{row['steps']}</td>",
        ]
        body.append(f"<tr data-n='{row['n']}' data-task='{_e(str(row['task']).lower())}' "
                    f"data-benchmark='{_e(row['benchmark'])}' data-level='{_e(row['level'])}' "
                    f"data-status='{_e(row['status'])}' data-outcome='{row['outcome']}'>"
                    f"{''.join(cells)}</tr>")
    filters = ("<div class='filters' hidden><label>task <input type='search' id='filter-text' "
               "placeholder='words in the task'></label>"
               + _select("benchmark", "benchmark", [r["benchmark"] for r in rows])
               + _select("level", "difficulty", [r["level"] for r in rows])
               + _select("status", "status", [r["status"] for r in rows])
               + _select("outcome", "outcome", [r["outcome"] for r in rows])
               + f"<span id='shown'>{len(rows)} of {len(rows)} episodes shown</span></div>")
    return (f"<section id='index'><h2>Episodes</h2>{filters}<table class='index'><thead><tr>{head}</tr>"
            f"</thead><tbody>{''.join(body)}</tbody></table></section>")


def render_report(out_dir: str | Path, html_path: str | Path | None = None, *,
                  limit: int | None = None, title: str | None = None) -> Path:
    """Write the HTML report of the dataset in `out_dir` (default ``OUT/report.html``); returns its path.
    `title` is the page's title and heading: what the episodes are (e.g. "Round 1: the policy's own
    rollouts, 24 training tasks x 4 attempts"); by default "WebGym trajectories: " and the folder's
    name."""
    out_dir = Path(out_dir)
    html_path = Path(html_path) if html_path else out_dir / "report.html"
    assets = html_path.with_name(f"{html_path.stem}_files")
    assets.mkdir(parents=True, exist_ok=True)
    read_manifest(out_dir)  # a rollout folder: say so plainly when it is not one
    sections, index, n, successes = [], [], 0, 0
    for episode in read_episodes(out_dir):
        if limit is not None and n >= limit:
            break
        sections.append(_episode_html(episode, n, assets))
        index.append(_index_row(episode, n))
        n += 1
        successes += episode.success
    title = title or f"WebGym trajectories: {out_dir.name}"
    rate = f"{successes / n:.1%}" if n else "n/a"
    page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{_e(title)}</h1>"
            f"<p class='summary' data-episodes='{n}'>{n} episodes, success rate {rate}</p>"
            f"<p class='note'>{_e(_COORDINATES)}</p>"
            + _index_html(index) + "".join(sections) + f"<script>{_INDEX_SCRIPT}</script></body></html>")
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(page, encoding="utf-8")
    logger.info("wrote %s (%d episodes)", html_path, n)
    return html_path


@click.command("view")
@click.argument("out", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the report (default: OUT/report.html; images go beside it).")
@click.option("--limit", type=int, default=None, help="Show at most this many episodes.")
def view_command(out: Path, html_file: Path | None, limit: int | None) -> None:
    """Write a static HTML report of the trajectory dataset in OUT.

    \b
    Example:
      webgym-rollout view out/trajectories/iter-0000 --html /tmp/report.html --limit 50
    """
    try:
        path = render_report(out, html_file, limit=limit)
    except TrajectoryError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"wrote {path}")
