"""``webgym``: the end-to-end demo of the whole loop on an embedded default."""

from __future__ import annotations

import click

from webgym_core.cli import LazyGroup, setup_logging

COMMANDS = {
    "demo": ("webgym.demo:demo_command",
             "Build tasks, roll out, train a tiny policy, roll out again, report (CPU only)."),
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """The WebGym toolkit: tasks, rollouts and RL for visual web agents.

    \b
    Example:
      webgym demo --out out/demo
    """
    setup_logging(verbose)
