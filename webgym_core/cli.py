"""What the ``webgym-*`` command groups share: lazy sub-commands and the ``-v`` logging switch.

`LazyGroup` lists each sub-command with its one-line help without importing the module that
implements it, so ``webgym-rl --help`` does not pay for importing torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging

import click

__all__ = ["PACKAGES", "LazyGroup", "setup_logging"]

PACKAGES = frozenset({"webgym", "webgym_core", "webgym_data", "webgym_sites", "webgym_rollout", "webgym_rl"})


class LazyGroup(click.Group):
    """A click group whose commands are ``name -> ("module:attribute", "short help")``."""

    def __init__(self, *args, lazy_commands: dict[str, tuple[str, str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        # A command whose module is not part of this install is not offered at all.
        shipped = {name for name, (target, _) in self.lazy_commands.items()
                   if importlib.util.find_spec(target.split(":")[0]) is not None}
        return sorted(set(super().list_commands(ctx)) | shipped)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in self.list_commands(ctx):
            return None
        target, _ = self.lazy_commands[cmd_name]
        module_name, attribute = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            missing = getattr(exc, "name", None) or str(exc)
            if missing.split(".")[0] in PACKAGES:
                raise click.ClickException(f"'{cmd_name}' is not available: {exc}") from exc
            raise click.ClickException(
                f"'{cmd_name}' cannot load ({missing} is missing); "
                "install the extras it needs, e.g. pip install 'webgym[all]'"
            ) from exc
        command = getattr(module, attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        self.commands[cmd_name] = command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                rows.append((name, self.commands[name].get_short_help_str(limit=70)))
            else:
                rows.append((name, self.lazy_commands[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def setup_logging(verbose: int) -> None:
    """Log to stderr: warnings by default, info with ``-v``, debug with ``-vv``."""
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")
