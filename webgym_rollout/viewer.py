"""``webgym-rollout view OUT``: a static HTML report of a trajectory dataset.

Per episode: the task, status, reward, final answer and the judge's verdicts; per step: the
screenshot with the click point marked, the action (or the parse/action error), the memory, the
URL and title, and the raw reply (folded). Screenshots are written as files next to the HTML
(``report_files/``), so the report opens from disk or any static file server, with no script.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from webgym_rollout.actions import GRID_SIZE, ActionParseError, AgentAction
from webgym_rollout.dataset import TrajectoryDatasetError, read_manifest

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


def _episodes(out_dir: Path, limit: int | None) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    count = 0
    for shard in read_manifest(out_dir)["shards"]:
        for batch in pq.ParquetFile(out_dir / shard["path"]).iter_batches(batch_size=8):
            for row in batch.to_pylist():
                if limit is not None and count >= limit:
                    return
                count += 1
                yield row


def _step_html(step: Mapping[str, Any], image_src: str | None) -> str:
    marker, action_line = "", ""
    if step.get("action"):
        try:
            action = AgentAction.from_json(step["action"])
        except ActionParseError:
            action_line = f"<div class='action'>{_e(step['action'])}</div>"
        else:
            action_line = f"<div class='action'><b>{_e(action.describe(200))}</b></div>"
            if action.coordinate is not None:
                left, top = (100 * c / GRID_SIZE for c in action.coordinate)
                x, y = action.coordinate
                marker = (f"<span class='click' data-x='{x}' data-y='{y}' "
                          f"style='left:{left:.2f}%;top:{top:.2f}%'></span>")
    parts = [f"<div class='step' data-step='{_e(step.get('index'))}'>",
             f"<div>Step {_e(step.get('index'))}</div>"]
    if image_src:
        parts.append(f"<div class='shot'><img src='{_e(image_src)}' alt='step {_e(step.get('index'))}'>"
                     f"{marker}</div>")
    parts.append(action_line or "<div class='action'>(no action)</div>")
    if step.get("action_error"):
        parts.append(f"<div class='error'>{_e(step['action_error'])}</div>")
    if step.get("same_as_next"):
        parts.append("<div class='same'>screen unchanged by this step</div>")
    if step.get("memory"):
        parts.append(f"<div class='memory'>Memory: {_e(step['memory'])}</div>")
    parts.append(f"<div class='where'>{_e(step.get('title'))} &mdash; {_e(step.get('url'))}</div>")
    parts.append(f"<details><summary>reply</summary><pre>{_e(step.get('response'))}</pre></details>")
    parts.append("</div>")
    return "".join(parts)


def render_report(out_dir: str | Path, html_path: str | Path | None = None, *,
                  limit: int | None = None) -> Path:
    """Write the HTML report of the dataset in `out_dir` (default ``OUT/report.html``); returns its path."""
    out_dir = Path(out_dir)
    html_path = Path(html_path) if html_path else out_dir / "report.html"
    assets = html_path.with_name(f"{html_path.stem}_files")
    assets.mkdir(parents=True, exist_ok=True)
    sections, n, successes = [], 0, 0
    for episode in _episodes(out_dir, limit):
        number = n
        n += 1
        successes += (episode.get("reward") or 0) >= 1
        steps_html = []
        for step in episode.get("steps") or []:
            shot = step.get("screenshot") or {}
            data = shot.get("bytes") if isinstance(shot, Mapping) else None
            src = None
            if data:
                name = f"ep{number:04d}-step{int(step.get('index') or 0):03d}.{_extension(data)}"
                (assets / name).write_bytes(data)
                src = f"{assets.name}/{name}"
            steps_html.append(_step_html(step, src))
        verdicts = "".join(
            f"<li class='verdict {'pass' if v.get('passed') else 'fail'}'><b>{_e(v.get('criterion'))}</b>: "
            f"{_e(v.get('reason'))}</li>" for v in episode.get("verdicts") or [])
        meta = [("task", episode.get("task_name")), ("instruction", episode.get("instruction") or "(task)"),
                ("task id", episode.get("task_id")),
                ("start", episode.get("start_url")), ("status", episode.get("status")),
                ("reward", episode.get("reward")), ("steps", episode.get("num_steps")),
                ("answer", episode.get("answer") or "(none)"), ("policy", episode.get("policy_model")),
                ("judge", episode.get("judge_model"))]
        sections.append(
            f"<section class='episode' id='episode-{number}' "
            f"data-episode-id='{_e(episode.get('episode_id'))}' data-reward='{_e(episode.get('reward'))}'>"
            f"<h2>{_e(episode.get('task_name'))}</h2>"
            "<table class='meta'>" + "".join(f"<tr><td>{k}</td><td>{_e(v)}</td></tr>" for k, v in meta)
            + "</table>"
            f"<ul class='verdicts'>{verdicts or '<li>(no verdicts)</li>'}</ul>"
            f"<div class='steps'>{''.join(steps_html)}</div></section>")
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
    except TrajectoryDatasetError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"wrote {path}")
