"""The run's live progress display (a `rich` table on a terminal, a log line every 10 s
otherwise), refreshed from `RunStats` and the browser servers' queue depths."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections import Counter

from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.errors import BrowserError
from webgym_rollout.runner.episode import RunStats
from webgym_rollout.runner.report import rate
from webgym_rollout.runner.settings import RunSettings

__all__ = ["watch"]

log = logging.getLogger(__name__)


def _progress_table(stats: RunStats, settings: RunSettings):
    """The live progress: episodes, steps, success rates, bugs, errors and the servers' queues."""
    from rich.markup import escape  # lazy: import time
    from rich.table import Table  # lazy: import time

    table = Table(title=f"webgym-rollout run ({settings.rollout.scheduler}) -> {settings.out}",
                  show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    evaluated = stats.done - sum(stats.errors.values())
    table.add_row("episodes", f"{stats.done}/{stats.total} done, {stats.running} running, "
                              f"{stats.judging} judging")
    table.add_row("steps", f"{stats.steps} ({stats.steps_per_s:.2f} steps/s, {stats.elapsed:.0f} s)")
    table.add_row("success", f"{rate(stats.successes, evaluated)} of evaluated episodes; "
                             f"{rate(stats.successes, stats.done)} with infrastructure failures as failures")
    if stats.internal_errors:
        table.add_row("[bold red]BUGS[/]",
                      f"[bold red]{stats.internal_errors} episodes ended with error:internal: this is a bug, "
                      f"please report it[/] (first: {escape(stats.first_bug)})")
    errors = ", ".join(f"{kind} {n}" for kind, n in stats.errors.most_common()) or "none"
    table.add_row("errors", f"{errors}; session restarts {stats.session_retries}; "
                            f"unparsed replies {stats.parse_errors}")
    queues = ", ".join(f"{kind} {n}" for kind, n in sorted(stats.queue_depths.items())) or "-"
    table.add_row("server queues", queues)
    return table


async def watch(stats: RunStats, settings: RunSettings, client: BrowserClient) -> None:
    """Refresh the live display and poll the servers' queue depths until cancelled."""
    from rich.console import Console  # lazy: import time
    from rich.live import Live  # lazy: import time

    console = Console(stderr=True)
    live = Live(_progress_table(stats, settings), console=console, refresh_per_second=4,
                transient=False) if settings.progress and console.is_terminal else None
    last_poll = last_log = 0.0
    try:
        if live is not None:
            live.start()
        while True:
            if time.monotonic() - last_poll > 2.0:
                last_poll = time.monotonic()
                with contextlib.suppress(BrowserError):
                    depths: Counter = Counter()
                    for health in await client.health():
                        depths.update(health.queue_depths)
                    stats.queue_depths = dict(depths)
            if live is not None:
                live.update(_progress_table(stats, settings))
            elif settings.progress and time.monotonic() - last_log > 10:
                last_log = time.monotonic()
                log.info("%d/%d episodes, %.2f steps/s", stats.done, stats.total, stats.steps_per_s)
            await asyncio.sleep(0.5)
    finally:
        if live is not None:
            live.update(_progress_table(stats, settings))
            live.stop()
        elif settings.progress and not sys.stderr.isatty():
            console.print(_progress_table(stats, settings))
