"""Regenerate the examples of docs/guides/your-model.md and docs/guides/trajectories.md.

    .venv/bin/python scripts/render_agent_examples.py --capture   # play the episode again (Chromium)
    .venv/bin/python scripts/render_agent_examples.py             # render the texts from what is captured

``--capture`` starts a site server on 127.0.0.1:8400 (the port the guides use, so that the URLs
shown are the ones a reader's run shows) and a browser server (127.0.0.1 only), and plays MiniWoB++
``login-user`` (seed 7) with the runner and a scripted policy that writes each reply in the agent
protocol (`scripted_reply`: the memory variant), judged by the page's own reward. It writes

- ``examples/trajectory-login-user/``: the trajectory dataset, as ``webgym-rollout run`` writes it;
- ``docs/assets/grid-miniwob.png``: the first screenshot, four times enlarged, with the 0-1000 grid
  drawn on and each element's centre marked with its grid coordinate.

Without ``--capture`` it renders from that dataset, with the code of this checkout: the first
step's screenshot (``docs/assets/login-user-step0.png``) and, into ``docs/examples/``, the messages
of the first step as `build_messages` builds them now for each prompt variant (``prompt-*.txt``),
the body a run sends for it (``request.json``, the screenshot's
data URL cut short; sent to a stand-in server on 127.0.0.1 through `OpenAIPolicy`, the run's own
client), one valid reply per variant (``reply-*.txt``, `format_response`) and the dataset's first row
field by field (``trajectory-row.txt``, markdown tables). ``tests/webgym/test_doc_examples.py``
checks that the checked-in files are what this renders, so the pages cannot drift from the code.
"""

from __future__ import annotations

import asyncio
import http.server
import io
import json
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import click

from webgym_core.endpoint import Endpoint
from webgym_core.settings import field_docs
from webgym_data.importers.miniwob import miniwob_task
from webgym_data.schema import Task
from webgym_rollout.actions import AgentAction, pixels_to_grid
from webgym_rollout.agent.policies import OpenAIPolicy, PolicyOutput, scripted_reply
from webgym_rollout.agent.protocol import (
    VARIANTS,
    AgentSettings,
    Observation,
    build_messages,
    format_response,
)
from webgym_rollout.trajectory.contract import Episode, Latency, Step, TokenUsage
from webgym_rollout.trajectory.reader import read_episodes

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "examples" / "trajectory-login-user"
EXAMPLES = ROOT / "docs" / "examples"
GRID_PNG = ROOT / "docs" / "assets" / "grid-miniwob.png"
SCREENSHOT_PNG = ROOT / "docs" / "assets" / "login-user-step0.png"
TASK = miniwob_task("login-user", 7)
# The task columns' meanings (the task contract documents them in its module docstring).
TASK_MEANINGS = {
    "task_id": "The task's id in the task set.",
    "task_name": "The task as the task set states it (a MiniWoB++ row: its name; the page states the "
                 "instruction).",
    "website": "The site of the task: a URL, or the page or local site that serves it.",
    "start_url": "Where the episode starts (the website when not given).",
    "benchmark_name": "The seed set the task comes from.",
    "domain": "The task's domain in the taxonomy (\"\" when not classified).",
    "subdomain": "The task's subdomain in the taxonomy (\"\" when not classified).",
    "difficulty": "Facts in the rubric.",
    "difficulty_level": "easy, medium or hard (or unknown).",
    "evaluator_reference": "The rubric: groups of facts the episode must show.",
    "definite_answer": "The answer, when the task has one exact answer.",
    "parent_task_id": "The task a subtask was decomposed from (\"\" for a task of the seed).",
    "environment": "The task kind that plays it and its argument (`web`, `miniwob:KIND`, a local site).",
    "env_seed": "The environment's seed (MiniWoB++: which episode of the page).",
}
SITES_PORT = 8400
MODEL = "scripted-login"


# ------------------------------------------------------------------------------------ capture (Chromium)

def _centre(element: Any, viewport: tuple[int, int]) -> tuple[int, int]:
    return pixels_to_grid(element.x + element.width / 2, element.y + element.height / 2, viewport)


def login_action(observation: Observation) -> tuple[AgentAction, str]:
    """The login-user plan, one action per step: click the username field, type the username, the
    same for the password, click Login; the values are the instruction's two quoted words."""
    username, password = re.findall(r'"([^"]*)"', observation.instruction)[:2]
    fields_, button = observation.elements[:2], observation.elements[-1]
    plan = [(AgentAction("left_click", coordinate=_centre(fields_[0], observation.viewport)),
             "Click the Username field."),
            (AgentAction("type", text=username), f"Type the username {username!r}."),
            (AgentAction("left_click", coordinate=_centre(fields_[1], observation.viewport)),
             "Click the Password field."),
            (AgentAction("type", text=password), f"Type the password {password!r}."),
            (AgentAction("left_click", coordinate=_centre(button, observation.viewport)), "Press Login.")]
    return plan[min(observation.step, len(plan) - 1)]


class LoginPolicy:
    """A scripted policy for MiniWoB++ login-user that replies in the agent protocol's format."""

    model_id = MODEL
    observes_elements = True

    def __init__(self) -> None:
        self.agent = AgentSettings()
        self.first: Observation | None = None

    async def act(self, observation: Observation) -> PolicyOutput:
        started = time.perf_counter()
        self.first = self.first or observation
        action, intention = login_action(observation)
        return scripted_reply(action, observation, self.agent, self.model_id, started,
                              memory=f"The task: {observation.instruction}", intention=intention)


def draw_grid(png: bytes, elements: list[Any], viewport: tuple[int, int], scale: int = 4) -> bytes:
    """`png` enlarged `scale` times with the 0-1000 grid (a line every 100) and each element's centre
    marked with its grid coordinate."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.open(io.BytesIO(png)).convert("RGB")
    image = image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)
    draw = ImageDraw.Draw(image, "RGBA")
    font = ImageFont.load_default(size=14)
    for value in range(0, 1001, 100):
        x = min(image.width - 1, round(value * image.width / 1000))
        y = min(image.height - 1, round(value * image.height / 1000))
        draw.line((x, 0, x, image.height), fill=(0, 90, 200, 110), width=1)
        draw.line((0, y, image.width, y), fill=(0, 90, 200, 110), width=1)
        if 0 < value < 1000:
            draw.text((x + 2, 2), str(value), fill=(0, 70, 170, 255), font=font)
            draw.text((2, y + 2), str(value), fill=(0, 70, 170, 255), font=font)
    for element in elements:
        gx, gy = _centre(element, viewport)
        cx, cy = gx * image.width / 1000, gy * image.height / 1000
        draw.ellipse((cx - 5, cy - 5, cx + 5, cy + 5), fill=(220, 30, 30, 255))
        label = f"[{gx}, {gy}]"
        left, top, right, bottom = draw.textbbox((cx + 9, cy - 8), label, font=font)
        draw.rectangle((left - 3, top - 3, right + 3, bottom + 3), fill=(255, 255, 255, 230))
        draw.text((cx + 9, cy - 8), label, fill=(200, 0, 0, 255), font=font)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


async def capture_episode() -> None:
    """Play the episode, write the dataset and the grid picture."""
    import shutil

    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server
    from webgym_rollout.runner import RunSettings, run
    from webgym_rollout.settings import EnvSettings
    from webgym_rollout.tasks.sites import SiteServer

    policy = LoginPolicy()
    with SiteServer(port=SITES_PORT) as sites, tempfile.TemporaryDirectory() as scratch:
        tasks = Path(scratch) / "tasks.jsonl"
        tasks.write_text(json.dumps(TASK.to_row()) + "\n", encoding="utf-8")
        pool = PoolSettings(browsers=1, contexts_per_browser=1, allow_hosts=(f"127.0.0.1:{sites.port}",))
        async with running_server(ServerSettings(port=0, pool=pool)) as (url, _):
            shutil.rmtree(DATASET, ignore_errors=True)
            report = await run(RunSettings(tasks=tasks, servers=(url,), out=DATASET, progress=False,
                                           env=EnvSettings(sites_url=sites.base_url)), policy=policy)
    click.echo(f"{report.episodes} episode, {report.steps} steps; {report.success_line()} -> {DATASET}")
    first = policy.first
    GRID_PNG.write_bytes(draw_grid(first.screenshot, list(first.elements), first.viewport))
    click.echo(f"{GRID_PNG} ({GRID_PNG.stat().st_size} bytes)")


# ------------------------------------------------------------------------------------ render (no browser)

def first_episode() -> Episode:
    episodes = list(read_episodes(DATASET))
    if len(episodes) != 1:
        raise click.ClickException(f"{DATASET} holds {len(episodes)} episodes; run --capture")
    return episodes[0]


def first_observation(episode: Episode) -> Observation:
    """The observation of the episode's first step, as the policy was shown it."""
    from PIL import Image

    step = episode.steps[0]
    size = Image.open(io.BytesIO(step.screenshot)).size
    return Observation(instruction=episode.instruction, screenshot=step.screenshot, viewport=size,
                       url=step.url, title=step.title, episode_id=episode.episode_id)


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """Chat messages as a person reads them: each message's role, then its text; images named."""
    out = []
    for message in messages:
        out.append(f"===== {message['role']} =====")
        content = message["content"]
        for part in content if isinstance(content, list) else [{"type": "text", "text": content}]:
            if part["type"] == "text":
                out.append(part["text"])
            else:
                out.append(f"[image: the screenshot of step {part['step']}]")
    return "\n".join(out) + "\n"


def _shortened(value: Any) -> Any:
    """`value` with each data URL cut to its first 40 characters and its length."""
    if isinstance(value, dict):
        return {key: _shortened(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shortened(item) for item in value]
    if isinstance(value, str) and value.startswith("data:") and len(value) > 60:
        return f"{value[:40]}... ({len(value)} characters)"
    return value


@contextmanager
def stand_in(reply: str) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A chat-completions server on 127.0.0.1 that records each request body and answers `reply`."""
    bodies: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": reply}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies
    finally:
        server.shutdown()
        server.server_close()


def request_body(observation: Observation, reply: str) -> dict[str, Any]:
    """The body `OpenAIPolicy` sends for `observation` (default sampling, memory variant)."""
    async def send(base_url: str) -> None:
        async with OpenAIPolicy(Endpoint(base_url=base_url, model="qwen3-vl-8b", api_key="EMPTY")) as policy:
            await policy.act(observation)

    with stand_in(reply) as (base_url, bodies):
        asyncio.run(send(base_url))
    body = _shortened(bodies[0])
    for message in body["messages"]:
        if message["role"] == "system":  # shown in full in prompt-memory.txt
            message["content"] = f"{message['content'][:40]}... ({len(message['content'])} characters)"
    return body


def replies(observation: Observation, action: AgentAction) -> dict[str, str]:
    """One valid reply per prompt variant to the first step: `action`, the episode's first (a click on
    the Username field)."""
    intention = "Click the Username field to type the username."
    return {variant: format_response(
        action, variant=variant, memory=f"The task: {observation.instruction} Nothing typed yet.",
        progress="Nothing done yet; the username, the password and Login remain.", intention=intention)
        for variant in VARIANTS}


def _cell(value: Any, limit: int = 70) -> str:
    if isinstance(value, bytes):
        text = f"({len(value)} bytes of PNG)"
    else:
        text = json.dumps(value, ensure_ascii=False)
    text = text if len(text) <= limit else text[:limit] + "..."
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def _meaning(doc: str) -> str:
    first = re.split(r"(?<=\.)\s", doc, maxsplit=1)[0]
    return first.replace("|", "\\|").replace("``", "`")


def _table(title: str, rows: list[tuple[str, Any, str]]) -> str:
    lines = [f"**{title}**", "", "| field | value in this row | what it is |", "|---|---|---|"]
    lines += [f"| `{name}` | {_cell(value)} | {meaning} |" for name, value, meaning in rows]
    return "\n".join(lines) + "\n"


def row_tables(episode: Episode) -> str:
    """The first row of the dataset, field by field: the episode's columns, then its first step's."""
    row = episode.to_row()
    docs = {**field_docs(Task), **TASK_MEANINGS, **field_docs(Episode)}
    docs["num_steps"] = "How many steps `steps` holds."
    docs["steps"] = "The steps, in order (the next table shows the first)."
    episode_rows = [(name, f"({len(value)} steps)" if name == "steps" else value,
                     _meaning(docs.get(name, ""))) for name, value in row.items()]
    step = row["steps"][0]
    step_docs = field_docs(Step)
    step_rows = [(name, episode.steps[0].screenshot if name == "screenshot" else value,
                  _meaning(step_docs.get(name, ""))) for name, value in step.items()]
    parts_docs = {"usage": TokenUsage, "latency": Latency}
    nested = [f"`{name}` holds " + ", ".join(f"`{item.name}`" for item in fields(kind))
              for name, kind in parts_docs.items()]
    return (_table("The episode (one row)", episode_rows) + "\n" + _table("Its first step", step_rows)
            + "\n" + "; ".join(nested) + ".\n")


def render() -> dict[Path, str | bytes]:
    """Every text file of docs/examples/, by path, as this checkout's code renders it, and the first
    step's screenshot as the policy was shown it (docs/assets/login-user-step0.png)."""
    episode = first_episode()
    observation = first_observation(episode)
    out: dict[Path, str | bytes] = {SCREENSHOT_PNG: observation.screenshot}
    examples = replies(observation, episode.steps[0].parsed_action)
    for variant in VARIANTS:
        messages = build_messages(observation, AgentSettings(variant=variant))
        out[EXAMPLES / f"prompt-{variant}.txt"] = prompt_text(messages)
        out[EXAMPLES / f"reply-{variant}.txt"] = examples[variant] + "\n"
    body = request_body(observation, examples["memory"])
    out[EXAMPLES / "request.json"] = json.dumps(body, indent=2, ensure_ascii=False) + "\n"
    out[EXAMPLES / "trajectory-row.txt"] = row_tables(episode)
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--capture", is_flag=True, help="Play the episode again in Chromium first (needs the rollout "
                                              "extra and Playwright's Chromium).")
def main(capture: bool) -> None:
    """Regenerate the examples of the your-model and trajectories guides."""
    if capture:
        asyncio.run(capture_episode())
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    for path, content in render().items():
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        unit = "bytes" if isinstance(content, bytes) else "characters"
        click.echo(f"{path.relative_to(ROOT)} ({len(content)} {unit})")


if __name__ == "__main__":
    main()
