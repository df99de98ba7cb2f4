"""Play the Larkspur Library's tasks end to end, everything on 127.0.0.1: the site and its truth, a
browser server (Chromium), the toolkit's runner with a scripted policy, the truth judge, and a
trajectory dataset.

    python -m examples.my_site.play --out out/library --tasks 3
    python -m examples.my_site.play --out out/library-wrong --tasks 3 --wrong

It prints each episode's reward and the success rate. Chromium is Debian's headless shell unless
``WEBGYM_CHROMIUM`` names another binary.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from examples.my_site import kind  # noqa: F401 - defining the kind registers it and its page hooks
from examples.my_site.judge import LibraryJudge
from examples.my_site.policy import Librarian
from examples.my_site.site import LibrarySite
from examples.my_site.tasks import library_tasks
from webgym_data import write_tasks
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.browser.server import ServerSettings, running_server
from webgym_rollout.runner import RunSettings, run
from webgym_rollout.trajectory import read_episodes


# --8<-- [start:play]
async def play(out: Path, *, tasks: int = 3, wrong: bool = False, seed: int = 0) -> list[float]:
    """Roll out `tasks` generated tasks into `out`; the episodes' rewards, in task order."""
    with LibrarySite(seed) as site:
        task_file = out.with_name(f"{out.name}-tasks.jsonl")
        write_tasks(library_tasks(site.url, tasks, seed=seed), task_file)
        # pages may reach the site's host:port, and nothing else (not the truth's port)
        pool = PoolSettings(browsers=1, contexts_per_browser=2, allow_hosts=(site.url.removeprefix("http://"),))
        async with running_server(ServerSettings(port=0, pool=pool)) as (server_url, _):
            settings = RunSettings(tasks=task_file, servers=(server_url,), out=out, progress=False)
            await run(settings, policy=Librarian(wrong=wrong), judge=LibraryJudge(site.truth_url))
    episodes = sorted(read_episodes(out), key=lambda episode: episode.task.task_id)
    return [episode.reward for episode in episodes]
# --8<-- [end:play]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="trajectory folder to write")
    parser.add_argument("--tasks", type=int, default=3, help="how many tasks to generate and play")
    parser.add_argument("--wrong", action="store_true", help="reserve the wrong book (every reward 0)")
    parser.add_argument("--seed", type=int, default=0, help="the catalogue's and the tasks' seed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rewards = asyncio.run(play(args.out, tasks=args.tasks, wrong=args.wrong, seed=args.seed))
    print(f"rewards: {rewards}; success rate {sum(rewards) / len(rewards):.0%}")


if __name__ == "__main__":
    main()
