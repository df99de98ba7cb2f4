"""What the ``webgym-*`` command groups share: lazy sub-commands, the ``-v`` logging switch and
the options of the ``push`` commands.

`LazyGroup` lists each sub-command with its one-line help without importing the module that
implements it, so ``webgym-rl --help`` does not pay for importing torch. Each sub-command it hands
out also takes the group's ``-v`` (``webgym-rl train ... -v`` as well as ``webgym-rl -v train ...``).

`hub_push_options` gives the three ``push`` commands the same options, spelled as huggingface_hub
spells them (``--revision``, ``--token``, ``--commit-message``, ``--private``); the spellings of
0.2 (``--branch``, ``--token-env``, ``--message``) still work, with a deprecation warning, until 0.4.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any

import click

__all__ = ["PACKAGES", "LazyGroup", "hub_push_options", "setup_logging"]

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
            self.commands[cmd_name] = with_verbose(self.commands[cmd_name])
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
        self.commands[cmd_name] = with_verbose(command)
        return self.commands[cmd_name]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            # The listed one-line help, whether or not the command is loaded: the same text either way.
            if name in self.lazy_commands:
                rows.append((name, self.lazy_commands[name][1]))
            else:
                rows.append((name, self.commands[name].get_short_help_str(limit=70)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def setup_logging(verbose: int) -> None:
    """Log to stderr: warnings by default, info with ``-v``, debug with ``-vv``. A second call (the
    ``-v`` of a sub-command) sets the level again."""
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)


VERBOSE_HELP = "More log output (-v info, -vv debug)."


def _more_verbose(ctx: click.Context, _param: click.Parameter, count: int) -> None:
    # Counted with the group's own -v: ``webgym-rl -v train -v`` is -vv.
    if count:
        setup_logging(count + (ctx.find_root().params.get("verbose") or 0))


def with_verbose(command: click.Command) -> click.Command:
    """A copy of `command` that takes ``-v`` / ``--verbose`` after its name too (sub-commands of a
    group included); `command` itself unchanged, and returned as is where it has a ``-v`` of its own."""
    if any(name in ("-v", "--verbose") for param in command.params for name in getattr(param, "opts", ())):
        return command
    command = copy.copy(command)
    command.params = [*command.params, click.Option(["-v", "--verbose"], count=True, expose_value=False,
                                                     callback=_more_verbose, help=VERBOSE_HELP)]
    if isinstance(command, click.Group):
        command.commands = {name: with_verbose(sub) for name, sub in command.commands.items()}
    return command


# ------------------------------------------------------------------------------------------ push

# The deprecated spellings of the push options: old flag -> (its parameter, the parameter replacing it).
_OLD_PUSH_FLAGS = {"--branch": ("branch", "revision"), "--token-env": ("token_env", "token"),
                   "--message": ("message", "commit_message")}


def _flag(parameter: str) -> str:
    return "--" + parameter.replace("_", "-")


def _deprecated(old: str, new: str) -> None:
    note = f"{old} is deprecated and goes in 0.4; use {new}"
    warnings.warn(note, DeprecationWarning, stacklevel=4)
    click.echo(f"Warning: {note}.", err=True)


def _from_old_flags(given: dict[str, Any]) -> dict[str, Any]:
    """The push options with each deprecated flag's value moved to the option that replaces it."""
    for old, (parameter, new) in _OLD_PUSH_FLAGS.items():
        value = given.pop(parameter)
        if value is None:
            continue
        _deprecated(old, _flag(new))
        if old == "--token-env":  # it named the variable that holds the token
            value = os.environ.get(value) or given[new]
        elif given[new] is not None:
            raise click.UsageError(f"give {_flag(new)} or its old spelling {old}, not both")
        given[new] = value
    return given


def hub_push_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds ``--revision``, ``--token``, ``--commit-message`` and ``--private`` to a push command
    (the function gets ``revision``, ``token``, ``commit_message``, ``private``), and the hidden
    deprecated spellings ``--branch``, ``--token-env NAME`` (the token is read from $NAME) and
    ``--message``, which warn and set the option they stand for."""
    @functools.wraps(command)
    def push(**given: Any) -> Any:
        return command(**_from_old_flags(given))

    options = [
        click.option("--revision", default=None,
                     help="Branch to push to, created when missing [default: main]."),
        click.option("--token", default=None, envvar="HF_TOKEN", show_envvar=True,
                     help="Hub token (default: $HF_TOKEN, else the saved login)."),
        click.option("--commit-message", default=None, help="Message of the commit (default: one naming what "
                     "is pushed)."),
        click.option("--private", is_flag=True, help="Create the repository as private."),
        click.option("--branch", default=None, hidden=True, help="Deprecated: --revision."),
        click.option("--token-env", default=None, hidden=True, help="Deprecated: --token."),
        click.option("--message", default=None, hidden=True, help="Deprecated: --commit-message."),
    ]
    for option in reversed(options):
        push = option(push)
    return push
