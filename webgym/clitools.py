"""Shared CLI plumbing for the ``webgym-*`` commands.

`LazyGroup` lists each sub-command with its one-line help without importing the module that
implements it, so ``webgym-rl --help`` does not pay for importing torch.

A settings dataclass (one field per knob, a docstring under each field) is the single source of an
entry point's options: `settings_options` makes one click option per field with the field's
docstring as help, and `settings_values` merges defaults, a YAML file and the flags given.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import click

__all__ = ["LazyGroup", "ManyValues", "field_docs", "settings_options", "settings_values"]


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
            if missing.split(".")[0] in {"webgym", "webgym_data", "webgym_rollout", "webgym_rl"}:
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


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass `cls` (whitespace collapsed), by field name."""
    body = ast.parse(inspect.getsource(cls)).body[0].body  # type: ignore[attr-defined]
    return {node.target.id: " ".join(str(following.value.value).split())
            for node, following in zip(body, body[1:], strict=False)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)}


def settings_values(cls: type, yaml_path: str | Path | None, overrides: Mapping[str, Any], *,
                    error: type[Exception]) -> dict[str, Any]:
    """Constructor arguments for `cls`: the YAML file's keys (field names; dashes allowed), then the
    `overrides` that are set (not None, not an empty tuple). Unknown names raise `error`."""
    known = {f.name for f in fields(cls)}
    values: dict[str, Any] = {}
    if yaml_path:
        import yaml

        try:
            loaded = yaml.safe_load(Path(yaml_path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise error(f"cannot read config {yaml_path}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise error(f"{yaml_path}: expected a mapping of setting: value")
        for key, value in loaded.items():
            name = str(key).replace("-", "_")
            if name not in known:
                raise error(f"{yaml_path}: unknown setting '{key}' (known: {', '.join(sorted(known))})")
            values[name] = value
    for name, value in overrides.items():
        if name not in known:
            raise error(f"unknown setting '{name}'")
        if value is None or (isinstance(value, tuple | list) and not value):
            continue
        values[name] = list(value) if isinstance(value, tuple) else value
    return values


class ManyValues(click.Option):
    """A repeatable option that also takes several values after one flag: ``--data A B --data C``."""

    def add_to_parser(self, parser, ctx) -> None:
        super().add_to_parser(parser, ctx)
        # click has no public "nargs='+'" for options; wrap the parser's handler for our flags.
        # If click's internals ever move, the option still works in its repeat-the-flag form.
        for name in self.opts:
            table = getattr(parser, "_long_opt" if name.startswith("--") else "_short_opt", {})
            handler = table.get(name)
            if handler is None or not hasattr(handler, "process"):
                continue
            original = handler.process

            def process(value, state, original=original):
                original(value, state)
                while state.rargs and not state.rargs[0].startswith("-"):
                    original(state.rargs.pop(0), state)

            handler.process = process


def settings_options(cls: type, *, choices: Mapping[str, Sequence[str]] | None = None
                     ) -> Callable[[click.Command], click.Command]:
    """A decorator adding one option per field of dataclass `cls` (``--field-name``, help from the
    field's docstring, default None so that unset flags do not override the YAML file). Booleans
    get ``--x/--no-x``, lists take several values (`ManyValues`), `choices` restricts a field."""
    choices = dict(choices or {})

    def decorate(command):
        docs = field_docs(cls)
        hints = typing.get_type_hints(cls)
        for item in reversed(fields(cls)):
            flag = "--" + item.name.replace("_", "-")
            kind = hints[item.name]
            if isinstance(kind, types.UnionType):  # X | None
                kind = next(a for a in typing.get_args(kind) if a is not type(None))
            help_text = docs.get(item.name, "")
            if kind is bool:
                option = click.option(f"{flag}/--no-{flag[2:]}", default=None, help=help_text)
            elif typing.get_origin(kind) is list:
                option = click.option(flag, cls=ManyValues, multiple=True, metavar="VALUE [VALUE ...]",
                                      help=help_text)
            elif item.name in choices:
                option = click.option(flag, type=click.Choice(list(choices[item.name])), default=None,
                                      help=help_text)
            else:
                option = click.option(flag, type=kind, default=None, help=help_text)
            command = option(command)
        return command

    return decorate
