"""Settings dataclasses as CLI flags and YAML keys: every knob is defined once.

An entry point's settings are a dataclass with a docstring under each field. A group of settings
that several entry points share is a dataclass too, held as a field (``LoopSettings.policy`` is a
`PolicySettings`, whose ``endpoint`` is an `Endpoint`): composed, never copied. From that one
definition come

- the YAML keys of ``--config FILE``: the nesting of the dataclasses, where a `flat` group's
  fields sit beside its parent's (``concurrency: 8``, ``policy: {base_url: ..., temperature: 0}``),
  and a group with a ``kind`` may be given as just its kind (``judge: rubric``);
- the CLI flags: the field names on the path joined by dashes (``--policy-base-url``). A group
  declared with `flat` adds no prefix (``--concurrency``, not ``--rollout-concurrency``), and a
  group's field named ``kind`` is spelled by the group's own name (``--policy random``);
- each flag's help: the field's docstring, with its default; a command declared with
  ``cls=SettingsCommand`` lists its flags in --help by the settings group they belong to.

Flags override the YAML file, which overrides the defaults; the dataclass's ``__post_init__``
checks the result and names the field first in its message (``"max_retries: must be >= 0"``), so
that the error can name the YAML key and the flag. A field with ``metadata={"cli": False}`` has
no flag (an API key, say) but can be set in YAML; ``metadata={"env": "NAME"}`` lets a flag fall
back to an environment variable (a token). Supported field types: str, int, float, bool, Path,
Literal, Enum, ``X | None``, list / tuple of those, and ``dict[str, X]`` (flags take ``KEY=VALUE``)::

    @click.command()
    @settings_options(RunSettings)
    def run_command(config, **flags):
        settings = load_settings(RunSettings, config, flags)

Errors are `SettingsError` (a ValueError) naming the YAML key, its file and the flag: an unknown
key (with the known key it most likely meant), a value of the wrong type (the type expected and the
value given), a group given as something other than a mapping, a file that is not YAML (its line
and column), a key given twice, a top level that is not a mapping. An empty file sets nothing.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import enum
import functools
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import click

from webgym_core.errors import SettingsError

__all__ = ["ManyValues", "SettingsCommand", "SettingsOption", "field_docs", "flag_for", "flat",
           "load_settings", "read_settings_file", "settings_from_dict", "settings_options",
           "settings_to_dict"]


def flat(factory: Callable[[], Any]) -> Any:
    """A field holding a settings group whose flags and YAML keys get no prefix: ``rollout:
    RolloutSettings = flat(RolloutSettings)`` gives ``--concurrency`` and the YAML key ``concurrency``."""
    return field(default_factory=factory, metadata={"flat": True})


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass `cls` (whitespace collapsed), by field name.
    Read once per class (parsing the source is not free, and the help of a command asks often)."""
    body = ast.parse(inspect.getsource(cls)).body[0].body  # type: ignore[attr-defined]
    return {node.target.id: " ".join(str(following.value.value).split())
            for node, following in zip(body, body[1:], strict=False)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)}


# ------------------------------------------------------------------------------------- the leaves

@dataclass(frozen=True)
class _Leaf:
    """One settable value: where it sits in the nesting and how the CLI spells it."""

    path: tuple[str, ...]
    yaml_key: str
    """The dotted key as YAML files spell it (flat groups left out), e.g. ``policy.temperature``."""
    flag: str
    kind: Any
    doc: str
    default: Any
    cli: bool
    env: str | None = None
    """An environment variable the flag falls back to (``metadata={"env": "NAME"}``)."""
    section: str = ""
    """The group of settings the flag belongs to in help texts: the settings class of the command's
    field holding it (``Policy options (PolicySettings)``); "" for the command's own fields."""

    @property
    def key(self) -> str:
        return ".".join(self.path)

    @property
    def dest(self) -> str:
        return "__".join(self.path)


def _unwrap_optional(kind: Any) -> tuple[Any, bool]:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return kind, False


def _is_group(kind: Any) -> bool:
    return isinstance(kind, type) and is_dataclass(kind)


def _field_default(item: dataclasses.Field) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return dataclasses.MISSING


_ACRONYMS = frozenset({"llm", "lora", "grpo", "url"})


def _section(name: str, kind: type) -> str:
    """The help section of the flags of field `name` holding settings class `kind`
    (``Eval sampler options (SamplerSettings)``, ``LLM options (LLMSettings)``)."""
    words = " ".join(word.upper() if word in _ACRONYMS else word for word in name.split("_"))
    return f"{words[0].upper()}{words[1:]} options ({kind.__name__})"


def _leaves(cls: type, path: tuple[str, ...] = (), prefix: tuple[str, ...] = (),
            defaults: Any = None, section: str = "") -> Iterator[_Leaf]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for item in fields(cls):
        kind, _ = _unwrap_optional(hints[item.name])
        default = getattr(defaults, item.name) if defaults is not None else _field_default(item)
        if _is_group(kind):
            group_prefix = prefix if item.metadata.get("flat") else (*prefix, item.name)
            yield from _leaves(kind, (*path, item.name), group_prefix,
                               default if default is not dataclasses.MISSING else None,
                               section or _section(item.name, kind))
            continue
        words = prefix if item.name == "kind" and prefix else (*prefix, item.name)
        yield _Leaf(path=(*path, item.name), yaml_key=".".join((*prefix, item.name)),
                    flag="--" + "-".join(words).replace("_", "-"),
                    kind=hints[item.name], doc=docs.get(item.name, ""), default=default,
                    cli=item.metadata.get("cli", True), env=item.metadata.get("env"), section=section)


def flag_for(cls: type, key: str) -> str:
    """The CLI flag of the setting at dotted field path `key`
    (``"policy.endpoint.base_url"`` -> ``--policy-base-url``)."""
    for leaf in _leaves(cls):
        if leaf.key == key:
            return leaf.flag
    raise KeyError(f"{cls.__name__} has no setting {key!r}")


# ------------------------------------------------------------------------------------- coercion

def _describe(kind: Any) -> str:
    kind, optional = _unwrap_optional(kind)
    name = getattr(kind, "__name__", None) or str(kind).replace("typing.", "")
    if typing.get_origin(kind) is typing.Literal:
        name = "one of " + ", ".join(repr(a) for a in typing.get_args(kind))
    return f"{name} or null" if optional else name


def _coerce(value: Any, kind: Any, where: str) -> Any:
    """`value` (from YAML or a flag) as a value of `kind`; raises SettingsError naming `where`."""
    kind, optional = _unwrap_optional(kind)
    if value is None:
        if optional:
            return None
        raise SettingsError(f"{where}: a value is required (expected {_describe(kind)})")
    origin = typing.get_origin(kind)

    def fail() -> SettingsError:
        return SettingsError(f"{where}: expected {_describe(kind)}, got {_shown(value, 200)}")

    if kind is Any:
        return value
    if origin is typing.Literal or (isinstance(kind, type) and issubclass(kind, enum.Enum)):
        return _coerce_choice(value, kind, where)
    if kind in _SCALARS:
        return _coerce_scalar(value, kind, fail)
    if origin in (list, tuple):
        return _coerce_sequence(value, kind, where, fail)
    if origin is dict:
        return _coerce_mapping(value, kind, where, fail)
    if isinstance(kind, type) and isinstance(value, kind):
        return value
    raise fail()


def _coerce_choice(value: Any, kind: Any, where: str) -> Any:
    """`value` as one of a Literal's choices or an Enum's members."""
    if typing.get_origin(kind) is typing.Literal:
        allowed = typing.get_args(kind)
        # By type too: YAML's ``true`` equals 1 and ``1.0`` equals 1, yet neither is the choice ``1``.
        if not any(type(value) is type(choice) and value == choice for choice in allowed):
            raise SettingsError(f"{where}: {value!r} is not one of {', '.join(repr(a) for a in allowed)}")
        return value
    try:
        return kind(value.value if isinstance(value, enum.Enum) else value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise SettingsError(f"{where}: {value!r} is not one of {choices}") from None


_SCALARS = (bool, int, float, str, Path)


def _coerce_scalar(value: Any, kind: type, fail: Callable[[], SettingsError]) -> Any:
    """`value` as a bool, int, float, str or Path: no bool passes for a number, no NaN for a float."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise fail()
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail()
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise fail()
        try:
            number = float(value)
        except OverflowError:  # an integer of 309 digits or more
            raise fail() from None
        if math.isnan(number):  # no setting means "not a number"; every comparison with it is False
            raise fail()
        return number
    if kind is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise fail()
    if isinstance(value, str | Path):
        return Path(value)
    raise fail()


def _coerce_sequence(value: Any, kind: Any, where: str, fail: Callable[[], SettingsError]) -> Any:
    """`value` (one item, or a list) as a list or tuple of `kind`'s items; a fixed-length tuple
    needs exactly its number."""
    origin = typing.get_origin(kind)
    items = [value] if isinstance(value, str | int | float | Path) else value
    if not isinstance(items, list | tuple):
        raise fail()
    args = typing.get_args(kind)
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(items) != len(args):
            raise SettingsError(f"{where}: expected {len(args)} values, got {len(items)}: "
                                f"{list(items)!r}")
        return tuple(_coerce(v, a, f"{where}[{i}]")
                     for i, (v, a) in enumerate(zip(items, args, strict=True)))
    inner = args[0] if args else Any
    converted = [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(items)]
    return tuple(converted) if origin is tuple else converted


def _coerce_mapping(value: Any, kind: Any, where: str, fail: Callable[[], SettingsError]) -> dict:
    """`value` (a mapping, or KEY=VALUE strings from flags) as a dict of `kind`'s values."""
    _, inner = typing.get_args(kind) or (str, Any)
    if isinstance(value, list | tuple):  # from flags: KEY=VALUE strings
        pairs = {}
        for text in value:
            name, sep, raw = str(text).partition("=")
            if not sep or not name:
                raise SettingsError(f"{where}: expected KEY=VALUE, got {text!r}")
            pairs[name] = _parse_scalar(raw, inner, f"{where}[{name}]")
        return pairs
    if not isinstance(value, Mapping):
        raise fail()
    return {str(k): _coerce(v, inner, f"{where}[{k}]") for k, v in value.items()}


def _parse_scalar(text: str, kind: Any, where: str) -> Any:
    """A KEY=VALUE value from the command line as `kind`."""
    kind, _ = _unwrap_optional(kind)
    try:
        if kind is int:
            return int(text)
        if kind is float:
            number = float(text)
            if math.isnan(number):
                raise ValueError(text)
            return number
    except ValueError:
        raise SettingsError(f"{where}: expected {_describe(kind)}, got {text!r}") from None
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{where}: expected true or false, got {text!r}")
    return text


# ------------------------------------------------------------------------------------- building

def _build(cls: type, base: Any, values: Mapping[str, Any], where: str) -> Any:
    """An instance of `cls`: `base` (or the class defaults) with `values` (a nested mapping) applied."""
    hints = typing.get_type_hints(cls)
    known = {item.name: item for item in fields(cls)}
    changes: dict[str, Any] = {}
    for name, value in values.items():
        if name not in known:
            raise _unknown(f"{where}{name}", name, known)
        kind, optional = _unwrap_optional(hints[name])
        if _is_group(kind):
            if value is None and optional:
                changes[name] = None
                continue
            if not isinstance(value, Mapping):
                raise SettingsError(f"{where}{name}: expected a mapping of {kind.__name__} settings, "
                                    f"got {value!r}")
            current = getattr(base, name) if base is not None else _field_default(known[name])
            if current is None or current is dataclasses.MISSING:
                current = None
            inner_where = where if known[name].metadata.get("flat") else f"{where}{name}."
            changes[name] = _build(kind, current, value, inner_where)
        else:
            changes[name] = _coerce(value, hints[name], f"{where}{name}")
    try:
        if base is not None:
            return dataclasses.replace(base, **changes)
        return cls(**changes)
    except SettingsError:
        raise
    except (TypeError, ValueError) as exc:
        # Checks in __post_init__ name their field first ("max_retries: must be >= 0"); put the
        # group's path in front so that the message names the YAML key (and then the flag).
        raise SettingsError(f"{where}{exc}") from exc


def _names_here(cls: type) -> dict[str, tuple[str, ...]]:
    """Key -> field path for the keys one YAML level of `cls` takes: its own fields, and the fields
    of its `flat` groups (recursively), as the flags spell them."""
    names: dict[str, tuple[str, ...]] = {}
    hints = typing.get_type_hints(cls)
    for item in fields(cls):
        kind, _ = _unwrap_optional(hints[item.name])
        if _is_group(kind) and item.metadata.get("flat"):
            for key, path in _names_here(kind).items():
                names.setdefault(key, (item.name, *path))
        names.setdefault(item.name, (item.name,))
    return names


def _unflatten(cls: type, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A YAML mapping written with flat groups merged into their parent, nested as the fields are."""
    names = _names_here(cls)
    nested: dict[str, Any] = {}
    for key, value in values.items():
        key = str(key).replace("-", "_")
        if key not in names:
            raise _unknown(f"{where}{key}", key, [k for k in names if not _is_flat(cls, k)])
        path = names[key]
        owner = cls
        for name in path[:-1]:
            owner = _unwrap_optional(typing.get_type_hints(owner)[name])[0]
        kind, _ = _unwrap_optional(typing.get_type_hints(owner)[path[-1]])
        if _is_group(kind) and isinstance(value, str) and any(f.name == "kind" for f in fields(kind)):
            value = {"kind": value}  # ``judge: rubric``, as the flag ``--judge rubric`` says it
        if _is_group(kind) and isinstance(value, Mapping):
            value = _unflatten(kind, value, f"{where}{key}.")
        node = nested
        for name in path[:-1]:
            node = node.setdefault(name, {})
        if isinstance(value, dict) and isinstance(node.get(path[-1]), dict):
            _merge(node[path[-1]], value)
        else:
            node[path[-1]] = value
    return nested


def _unknown(where: str, key: str, known: typing.Iterable[str]) -> SettingsError:
    """The error for an unknown key: the known key it most likely meant first, then all of them."""
    known = sorted(known)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return SettingsError(f"{where}: unknown setting{hint} (known here: {', '.join(known)})")


def _is_flat(cls: type, name: str) -> bool:
    return any(item.name == name and item.metadata.get("flat") for item in fields(cls))


def settings_from_dict(cls: type, values: Mapping[str, Any], *, source: str = "") -> Any:
    """An instance of `cls` from a mapping as `settings_to_dict` writes it (unknown keys raise)."""
    where = f"{source}: " if source else ""
    if not isinstance(values, Mapping):
        raise SettingsError(f"{where}expected a mapping of setting: value, got {type(values).__name__} "
                            f"{_shown(values)}")
    return _build(cls, None, _unflatten(cls, values, where), where)


def _nest(flat_values: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for path, value in flat_values.items():
        node = nested
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = value
    return nested


def _merge(into: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def load_settings(cls: type, config: str | Path | None = None, flags: Mapping[str, Any] | None = None,
                  **overrides: Any) -> Any:
    """`cls` from its defaults, then the YAML file `config`, then the CLI `flags` that were given
    (a ``None`` or an empty tuple means "not given"), then `overrides` (dotted keys as ``a__b``)."""
    values: dict[str, Any] = {}
    if config:
        _merge(values, _unflatten(cls, read_settings_file(config), f"{config}: "))
    leaves = {leaf.dest: leaf for leaf in _leaves(cls)}
    given: dict[tuple[str, ...], Any] = {}
    for dest, value in {**(flags or {}), **overrides}.items():
        if dest not in leaves:
            key = dest.replace("__", ".")
            raise _unknown(f"{key!r}", key, [leaf.key for leaf in leaves.values()])
        if value is None or (isinstance(value, tuple | list) and not value):
            continue
        given[leaves[dest].path] = list(value) if isinstance(value, tuple) else value
    _merge(values, _nest(given))
    where = f"{config}: " if config else ""
    try:
        return _build(cls, None, values, where)
    except SettingsError as exc:
        raise SettingsError(_with_flag(cls, str(exc))) from exc.__cause__


def read_settings_file(path: str | Path) -> dict[str, Any]:
    """The mapping of settings in YAML file `path` (an empty file: ``{}``). Raises `SettingsError`
    naming the file: unreadable or not UTF-8, not YAML (with the line and column), a key given twice
    in one mapping (with both lines), a top level other than a mapping."""
    import yaml  # lazy: import time

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read the settings file {path}: {exc}") from exc
    try:
        loaded = yaml.load(text, Loader=_settings_loader())  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark, opened = exc.problem_mark or exc.context_mark, exc.context_mark
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        context = ""
        if exc.context and exc.problem:
            since = f" at line {opened.line + 1}" if opened and mark and opened.line != mark.line else ""
            context = f" ({exc.context}{since})"
        raise SettingsError(f"{where}: not valid YAML: {exc.problem or exc.context}{context}") from exc
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: not valid YAML: {exc}") from exc
    except RecursionError:
        raise SettingsError(f"{path}: not valid YAML: nested too deeply") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise SettingsError(f"{path}: not valid YAML: {str(exc).split(';')[0]}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise SettingsError(f"{path}: expected a mapping of setting: value, got {type(loaded).__name__} "
                            f"{_shown(loaded)}")
    return loaded


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


@functools.cache
def _settings_loader() -> type:
    """A YAML SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently: a setting written twice would take whichever came last)."""
    import yaml  # lazy: import time

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
            if isinstance(node, yaml.MappingNode):
                first: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        if key in first:
                            raise yaml.constructor.ConstructorError(
                                None, None, f"key {key!r} given twice (first on line {first[key] + 1})",
                                key_node.start_mark)
                        first[key] = key_node.start_mark.line
                    except TypeError:  # an unhashable key: the base class refuses it, with its place
                        continue
            return super().construct_mapping(node, deep=deep)

    return Loader


def _with_flag(cls: type, message: str) -> str:
    """Add the CLI flag to a message that names a dotted key (``policy.temperature: ...``)."""
    for leaf in _leaves(cls):
        # The whole dotted key: ``model:`` must not match inside ``policy.model:``.
        marker = re.search(rf"(?<![\w.]){re.escape(leaf.yaml_key)}:", message)
        if marker and leaf.cli:
            return f"{message[:marker.start()]}{leaf.yaml_key} ({leaf.flag}):{message[marker.end():]}"
    return message


def settings_to_dict(settings: Any) -> dict[str, Any]:
    """A nested dict of plain values (YAML- and JSON-safe) that `settings_from_dict` reads back."""
    def plain(value: Any) -> Any:
        if is_dataclass(value) and not isinstance(value, type):
            out: dict[str, Any] = {}
            for item in fields(value):
                inner = plain(getattr(value, item.name))
                if item.metadata.get("flat") and isinstance(inner, dict):
                    out.update(inner)
                else:
                    out[item.name] = inner
            return out
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        return value

    return plain(settings)


# ------------------------------------------------------------------------------------------ click

class SettingsOption(click.Option):
    """The option of one setting; `section` names the settings group it belongs to in help texts
    ("" for the command's own settings), which `SettingsCommand` lists under a heading of its own."""

    def __init__(self, *args: Any, section: str = "", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.section = section


class SettingsCommand(click.Command):
    """A command whose --help lists its settings flags by group: the command's own options first,
    then one section per settings group (``Policy options (PolicySettings)``), in the order of the
    fields. Use it for commands with many flags: ``@click.command("loop", cls=SettingsCommand)``."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                sections.setdefault(getattr(param, "section", ""), []).append(record)
        for title, records in sections.items():
            if records:
                with formatter.section(title or "Options"):
                    formatter.write_dl(records)


class ManyValues(SettingsOption):
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


def _click_type(kind: Any) -> Any:
    if typing.get_origin(kind) is typing.Literal:
        return click.Choice([str(a) for a in typing.get_args(kind)])
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return click.Choice([str(m.value) for m in kind])
    if kind is Path:
        return click.Path(path_type=str)
    if kind in (str, int, float):
        return kind
    return str


def _show_default(value: Any) -> str:
    empty = not value and isinstance(value, str | list | tuple | Mapping)
    if value is dataclasses.MISSING or value is None or empty:
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, list | tuple):
        value = " ".join(str(v) for v in value)
    if isinstance(value, Mapping):
        value = " ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f" [default: {value}]"


def _option(leaf: _Leaf) -> Callable[[Any], Any]:
    kind, _ = _unwrap_optional(leaf.kind)
    origin = typing.get_origin(kind)
    help_text = leaf.doc + _show_default(leaf.default)
    option = functools.partial(click.option, cls=SettingsOption, section=leaf.section)
    if kind is bool:
        return option(f"{leaf.flag}/--no-{leaf.flag[2:]}", leaf.dest, default=None, help=help_text)
    if origin in (list, tuple):
        args = typing.get_args(kind)
        inner = args[0] if args else str
        count = "" if origin is list or (args and args[-1] is Ellipsis) else f" ({len(args)} values)"
        return option(leaf.flag, leaf.dest, cls=ManyValues, multiple=True, type=_click_type(inner),
                      metavar="VALUE [VALUE ...]", help=help_text + count)
    if origin is dict:
        return option(leaf.flag, leaf.dest, multiple=True, metavar="KEY=VALUE",
                      help=help_text + " (repeatable)")
    if leaf.env:
        return option(leaf.flag, leaf.dest, type=_click_type(kind), default=None, envvar=leaf.env,
                      help=f"{help_text} (env {leaf.env})")
    return option(leaf.flag, leaf.dest, type=_click_type(kind), default=None, help=help_text)


def _yaml_example(leaves: list[_Leaf]) -> str:
    """How one of `leaves` is written in YAML, e.g. ``policy: {temperature: 1.0}``."""
    candidates = sorted((leaf for leaf in leaves if _is_scalar(leaf.default)),
                        key=lambda leaf: ("." not in leaf.yaml_key, isinstance(leaf.default, str)))
    nested = next((leaf for leaf in candidates if "." in leaf.yaml_key), None)
    if nested is not None:
        *groups, name = nested.yaml_key.split(".")
        return "e.g. " + "".join(f"{g}: {{" for g in groups) + f"{name}: {nested.default}" + "}" * len(groups)
    plain = next(iter(candidates), None)
    return f"e.g. {plain.yaml_key}: {plain.default}" if plain is not None else "keys: the flag names, _ for -"


def _is_scalar(value: Any) -> bool:
    return isinstance(value, int | float | str) and not isinstance(value, bool) and value != ""


def settings_options(cls: type, *, config: bool = True) -> Callable[[Any], Any]:
    """A decorator adding one option per setting of dataclass `cls` (see the module docstring),
    plus ``--config FILE`` (a YAML file of settings) unless `config` is False. Every option
    defaults to None, so an unset flag never overrides the YAML file."""
    leaves = [leaf for leaf in _leaves(cls) if leaf.cli]
    seen: dict[str, str] = {}
    for leaf in leaves:
        if leaf.flag in seen:
            raise TypeError(f"{cls.__name__}: settings {seen[leaf.flag]} and {leaf.key} both map to "
                            f"{leaf.flag}; declare one of their groups without flat()")
        seen[leaf.flag] = leaf.key

    def decorate(command: Any) -> Any:
        for leaf in reversed(leaves):
            command = _option(leaf)(command)
        if config:
            command = click.option(
                "--config", "config", type=click.Path(dir_okay=False, exists=True), default=None,
                help=f"YAML file of these settings ({_yaml_example(leaves)}); flags override it.")(command)
        return command

    return decorate
