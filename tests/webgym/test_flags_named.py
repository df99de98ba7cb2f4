"""Every ``--flag`` that a --help text or a docs page (docs/**/*.md, README.md) names exists on the
command it is named with.

A mention belongs to the last command named before it in the same passage (a sentence, list item,
or option of a --help) (``webgym-rollout run``, or a bare sub-command in code such as `` `run` `` or
`` `run ... --truth-url` ``); in a command's own --help, to that command until the passage names
another. A mention after another program (``mkdocs build
--strict``, ``pip install``) is not ours and is left alone; one with no command named before it must
be an option of some command. The generated CLI reference is --help itself, checked as such.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import click
import pytest

from tests.conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("cli_reference", REPO_ROOT / "scripts" / "cli_reference.py")
cli_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cli_reference)

FOREIGN = ("mkdocs", "pip", "pytest", "python", "python3", "vllm", "vLLM", "git", "bash", "huggingface-cli",
           "hf", "ruff", "lint-imports", "accelerate", "torchrun", "ray", "chromium", "Chromium", "curl",
           "docker", "apt-get", "uv", "trl", "TRL", "playwright", "nvidia-smi")
# A flag, or a family of them (``--pool-*``); not a value (``--extra-args=--x``, ``host:--port``).
FLAG = re.compile(r"(?<![\w=:-])--[a-z][a-z0-9-]*[a-z0-9](?:-\*)?")


def _all_commands() -> dict[str, tuple[str, ...]]:
    """``"webgym-rl loop"`` -> its flags (both spellings of a boolean), for every command and group."""
    table = {}
    for program, root, path in cli_reference.commands():
        ctx = click.Context(root, info_name=program)
        command: click.Command = root
        for name in path:
            command = command.get_command(ctx, name)  # type: ignore[attr-defined]
        flags = {"--help"}
        for param in command.params:
            flags.update(o for o in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ()))
                         if o.startswith("--"))
        table[" ".join((program, *path))] = tuple(sorted(flags))
    return table


COMMANDS = _all_commands()
PROGRAMS = [program for program, _ in cli_reference.GROUPS]
SUB_NAMES = {name.split(" ", 1)[1].split(" ")[0] for name in COMMANDS if " " in name}
# A command as text names it: "webgym-rollout fleet up", "webgym-rl loop", or a bare sub-command in
# code (`run`, `run --resume`, `loop`), or another program.
COMMAND_NAME = re.compile(
    r"(?<![\w/-])(?P<full>(?:" + "|".join(sorted(map(re.escape, PROGRAMS), key=len, reverse=True))
    + r")(?:\s+[a-z][a-z-]*){0,2})"
    + r"|`(?P<bare>" + "|".join(sorted(map(re.escape, SUB_NAMES), key=len, reverse=True)) + r")(?=[` ])"
    + r"|(?<![\w/.-])(?P<foreign>" + "|".join(map(re.escape, FOREIGN)) + r"|[\w/.-]+\.(?:py|sh))(?=[\s`'])")


def _owners(match: re.Match[str]) -> tuple[str, ...] | None:
    """The commands a command name may mean (a bare `push` is three); None for another program,
    () for a program's name without one of its commands (``pip install 'webgym[all]'``)."""
    if match.group("foreign"):
        return None
    if match.group("bare"):
        return tuple(name for name in COMMANDS if name.split(" ")[1:2] == [match.group("bare")])
    words = match.group("full").split()
    while " ".join(words) not in COMMANDS:  # "webgym-data build out" -> its known prefix
        words.pop()
    if len(words) == 1 and not match.string.startswith(" -", match.start("full") + len(words[0])):
        return ()
    return (" ".join(words),)


def _passages(text: str) -> list[str]:
    """`text` cut where what it says about one command ends: at a blank line, a sentence's end, a
    list item, and each option of a --help (a line starting ``  -``) or command of a group's."""
    text = re.sub(r"(?<=\w-)\n\s+(?=\w)", "", text)  # a word --help wrapped at its hyphen, joined
    passages = re.split(r"\n\s*\n|(?<=\.)\s+(?=[A-Z`])|\n(?=\s*- )|\n(?=  -)|\n(?=  [a-z][a-z-]*  )", text)
    return [p for p in passages if p and p.strip()]


ANY = ("*",)
"""The owners of a mention in a docs paragraph that names no command: any command's flag will do."""


def mentions(text: str, default: tuple[str, ...]) -> Iterator[tuple[str, tuple[str, ...] | None]]:
    """(flag, the commands it may belong to) of each ``--flag`` in `text`, passage by passage;
    `default` where the passage names no command before it (None: another program's)."""
    for passage in _passages(text):
        owners: tuple[str, ...] | None = default
        line = re.match(r"  ([a-z][a-z-]*)  ", passage)
        if line and f"{default[0]} {line.group(1)}" in COMMANDS:  # a group's list of its commands
            owners = (f"{default[0]} {line.group(1)}",)
        events = sorted([(m.start(), "command", m) for m in COMMAND_NAME.finditer(passage)]
                        + [(m.start(), "flag", m) for m in FLAG.finditer(passage)], key=lambda e: e[0])
        for _, kind, match in events:
            if kind == "flag":
                yield match.group(0), owners
            elif (named := _owners(match)) != ():
                owners = named


def _has(flags: Iterable[str], flag: str) -> bool:
    """`flag` is one of `flags`; a family (``--pool-*``) where some flag starts with its prefix."""
    if flag.endswith("-*"):
        return any(f.startswith(flag[:-1]) for f in flags)
    return flag in flags


def wrong(text: str, default: tuple[str, ...] = ANY) -> list[str]:
    """The mentions in `text` of a flag its command lacks."""
    every = {flag for flags in COMMANDS.values() for flag in flags}
    found = []
    for flag, owners in mentions(text, default):
        if owners is None or (owners == ANY and _has(every, flag)):
            continue
        if not any(_has(COMMANDS.get(name, ()), flag) for name in owners):
            found.append(f"{flag} (named with {' / '.join(owners) if owners != ANY else 'no command'})")
    return found


def _help_pages() -> list[tuple[str, str]]:
    return [(" ".join((program, *path)), cli_reference.help_text(root, program, path))
            for program, root, path in cli_reference.commands()]


def _doc_pages() -> list[Path]:
    generated = REPO_ROOT / "docs" / "reference" / "cli"
    return [REPO_ROOT / "README.md",
            *sorted(p for p in (REPO_ROOT / "docs").rglob("*.md") if generated not in p.parents)]


HELP_PAGES = _help_pages()


@pytest.mark.parametrize("command, text", HELP_PAGES, ids=[name for name, _ in HELP_PAGES])
def test_every_flag_a_help_names_is_an_option_of_the_command_named(command, text):
    # An option's help that names a flag names one of its own command (its own paragraph of the help).
    assert wrong(text, (command,)) == []


@pytest.mark.parametrize("page", _doc_pages(), ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_flag_a_docs_page_names_is_an_option_of_the_command_named(page):
    assert wrong(page.read_text(encoding="utf-8")) == []


CASES = {
    "full-name": ("Run `webgym-rollout run --tasks x --no-such-flag`.", (),
                  ["--no-such-flag (named with webgym-rollout run)"]),
    "bare-name": ("`loop --truth-url URL` reads the truth.", (), ["--truth-url (named with webgym-rl loop)"]),
    "other-command": ("`run ... --judge site --truth-url URL`", (), []),
    "help-default": ("Give --judge site --truth-url.", ("webgym-rl loop",),
                     ["--truth-url (named with webgym-rl loop)"]),
    "named-after": ("Give --eval-every 2; see `webgym-rollout run --truth-url`.", ("webgym-rl loop",), []),
    "next-sentence": ("See `webgym-rollout run`. Then --eval-every 2.", ("webgym-rl loop",), []),
    "next-option": ("  --fleet TEXT  As `webgym-rollout fleet up` started it.\n  --eval-every INTEGER  M.",
                    ("webgym-rl loop",), []),
    "group-commands": ("Commands:\n  up      Place one (with --sites).\n  down    Stop (--sites).",
                       ("webgym-rollout fleet",), ["--sites (named with webgym-rollout fleet down)"]),
    "wrapped": ("  --x  (see --pool-\n        browsers).", ("webgym-rl loop",), []),
    "family": ("none = one on 127.0.0.1 (see --pool-*, --nopool-*).", ("webgym-rl loop",),
               ["--nopool-* (named with webgym-rl loop)"]),
    "value": ("as ``--extra-args=--some-flag`` or 127.0.0.1:--truth-port", ("webgym-rl loop",),
              ["--extra-args (named with webgym-rl loop)"]),
    "foreign": ("mkdocs build --strict; vLLM's `--max-loras 2`; `tools/x.py --before abc`", (), []),
    "no-command": ("Use --no-flag-anywhere here.", (), ["--no-flag-anywhere (named with no command)"]),
    "three-pushes": ("`push --revision dev`", (), []),
    "one-push-has-it": ("`push --tag v1`", (), []),
    "not-a-command": ("pip install 'webgym[all]' --upgrade. Then webgym is ready --no-such", (),
                      ["--no-such (named with no command)"]),
}


@pytest.mark.parametrize("text, default, expected", list(CASES.values()), ids=list(CASES))
def test_the_check_tells_a_flag_of_the_command_named_from_one_it_lacks(text, default, expected):
    assert wrong(text, default or ANY) == expected
