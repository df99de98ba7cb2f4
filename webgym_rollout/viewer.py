"""``webgym-rollout view OUT``: a static HTML report of a trajectory dataset.

Per episode: the task, status, reward, final answer and the judge's verdicts; per step: the
screenshot with the click point marked, the action (or the parse/action error), the memory, the
URL and title, and the raw reply (folded). Screenshots are written as files next to the HTML
(``report_files/``), so the report opens from disk or any static file server, with no script.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any

import click

from webgym_rollout.actions import GRID_SIZE, ActionParseError, AgentAction
from webgym_rollout.trajectory import Episode, Step, TrajectoryError, read_episodes, read_manifest

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
pre { white-space: pre-wrap; font-size: 12px; background: #f6f8fa; padding: .5em; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _extension(data: bytes) -> str:
    if data[:3] == b"\xff\xd8\xff":
        return "jpg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "png"


def _step_html(step: Step, image_src: str | None) -> str:
    marker, action_line = "", ""
    if step.action:
        try:
            action = AgentAction.from_json(step.action)
        except ActionParseError:
            action_line = f"<div class='action'>{_e(step.action)}</div>"
        else:
            action_line = f"<div class='action'><b>{_e(action.describe(200))}</b></div>"
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


def render_report(out_dir: str | Path, html_path: str | Path | None = None, *,
                  limit: int | None = None) -> Path:
    """Write the HTML report of the dataset in `out_dir` (default ``OUT/report.html``); returns its path."""
    out_dir = Path(out_dir)
    html_path = Path(html_path) if html_path else out_dir / "report.html"
    assets = html_path.with_name(f"{html_path.stem}_files")
    assets.mkdir(parents=True, exist_ok=True)
    read_manifest(out_dir)  # a rollout folder: say so plainly when it is not one
    sections, n, successes = [], 0, 0
    for episode in read_episodes(out_dir):
        if limit is not None and n >= limit:
            break
        sections.append(_episode_html(episode, n, assets))
        n += 1
        successes += episode.success
    title = f"WebGym trajectories: {out_dir.name}"
    rate = f"{successes / n:.1%}" if n else "n/a"
    page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{_e(title)}</h1>"
            f"<p class='summary' data-episodes='{n}'>{n} episodes, success rate {rate}</p>"
            + "".join(sections) + "</body></html>")
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
