"""Regenerate the observation-mode examples of docs/guides/rollout.md from a real MiniWoB++ page.

    .venv/bin/python scripts/render_observation_examples.py   # write docs/assets/som-miniwob.png,
                                                              # print the text examples
    .venv/bin/python scripts/render_observation_examples.py --task click-checkboxes --seed 3 --png /tmp/x.png

Starts a local site server and a browser server (127.0.0.1 only), opens the seeded MiniWoB++ task,
reads the page's elements and accessibility tree with one ``page_info`` call, draws the set-of-marks
image with `draw_marks`, and prints the ``axtree`` text (`render_axtree`) and the element list, as
the rollout guide shows them. Paste the printed text into the guide's "Observation modes" section.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.browser.protocol import Element
from webgym_rollout.browser.server import ServerSettings, running_server
from webgym_rollout.observations import draw_marks, render_axtree
from webgym_rollout.tasks.miniwob import task_url
from webgym_rollout.tasks.sites import SiteServer

DOCS_PNG = Path(__file__).resolve().parents[1] / "docs" / "assets" / "som-miniwob.png"


def element_line(number: int, element: Element) -> str:
    """One element as the ``elements`` mode lists it: ``[3] button "Submit" (id=submit)``."""
    name = f" (id={element.name})" if element.name else ""
    return f"[{number}] {element.role or element.tag} {json.dumps(element.text, ensure_ascii=False)}{name}"


async def render(task: str, seed: int, png: Path, budget_tokens: int) -> str:
    """Write the set-of-marks PNG of `task` to `png`; the text examples, as printed."""
    with SiteServer() as sites:
        pool = PoolSettings(browsers=1, contexts_per_browser=1,
                            allow_hosts=(sites.base_url.removeprefix("http://"),))
        server = running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool))
        async with server as (url, _), BrowserClient(url) as client:
            session = await client.create_session(task_url(sites.base_url, task),
                                                  environment=f"miniwob:{task}", seed=seed)
            try:
                shot = await session.screenshot()
                info = await session.page_info(elements=True, axtree=True)
            finally:
                await session.close()
    png.parent.mkdir(parents=True, exist_ok=True)
    # The MiniWoB screenshot is the task area shot at (0, 0) and scale 1: its size is the viewport frame.
    png.write_bytes(draw_marks(shot.data, info.elements, viewport=(shot.width, shot.height)))
    axtree = render_axtree(info.axtree, info.elements, budget_tokens=budget_tokens)
    elements = "\n".join(element_line(i, e) for i, e in enumerate(info.elements, start=1))
    return f"# {png} ({png.stat().st_size} bytes)\n\n# axtree\n{axtree}\n\n# elements\n{elements}\n"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--task", default="login-user", show_default=True, help="MiniWoB++ task to open.")
@click.option("--seed", default=7, show_default=True, type=int, help="Seed of the task's episode.")
@click.option("--png", default=str(DOCS_PNG), show_default="docs/assets/som-miniwob.png",
              type=click.Path(dir_okay=False), help="Where the set-of-marks PNG goes.")
@click.option("--budget-tokens", default=2000, show_default=True, type=int,
              help="Token budget of the axtree text (4 characters a token).")
def main(task: str, seed: int, png: str, budget_tokens: int) -> None:
    """Draw a set-of-marks PNG of a MiniWoB++ page and print its axtree and elements text."""
    click.echo(asyncio.run(render(task, seed, Path(png), budget_tokens)))


if __name__ == "__main__":
    main()
