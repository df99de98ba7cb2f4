"""Regenerate the "CLI reference" section of README.md from the commands' own --help.

    .venv/bin/python scripts/cli_reference.py          # rewrite README.md in place
    .venv/bin/python scripts/cli_reference.py --check  # exit 1 if README.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.testing import CliRunner

import webgym.cli
import webgym_data.cli
import webgym_rl.cli
import webgym_rollout.cli

BEGIN, END = "<!-- cli-reference:begin -->", "<!-- cli-reference:end -->"
GROUPS = [("webgym", webgym.cli.main), ("webgym-data", webgym_data.cli.main),
          ("webgym-rollout", webgym_rollout.cli.main), ("webgym-rl", webgym_rl.cli.main)]


def render() -> str:
    runner = CliRunner()
    parts = [BEGIN]
    for name, group in GROUPS:
        result = runner.invoke(group, ["--help"], prog_name=name, terminal_width=100)
        parts.append(f"### `{name}`\n\n```text\n{result.output.rstrip()}\n```\n")
        for command in group.list_commands(click.Context(group)):
            sub = runner.invoke(group, [command, "--help"], prog_name=name, terminal_width=100)
            if sub.exit_code != 0:
                raise SystemExit(f"{name} {command} --help failed:\n{sub.output}")
            parts.append(f"#### `{name} {command}`\n\n```text\n{sub.output.rstrip()}\n```\n")
    parts.append(END)
    return "\n".join(parts)


def main() -> int:
    readme = Path(__file__).resolve().parents[1] / "README.md"
    text = readme.read_text(encoding="utf-8")
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    updated = text[:start] + render() + text[stop:]
    if "--check" in sys.argv:
        return 0 if updated == text else 1
    readme.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
