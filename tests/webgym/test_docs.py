"""The documentation site (mkdocs.yml, docs/) and README.md, its front page.

- `mkdocs build --strict` passes, and fails on a broken link, anchor, README snippet or API name;
- README.md stays a front page: at most 300 lines, the two commands first, links that name files;
- every Python block after a ``<!-- runs -->`` comment in docs/ runs as written, in a fresh folder,
  and prints what the ``<!-- prints -->`` block after it shows;
- every command line of an ``Example:`` block of a command's --help, and every ``webgym*`` command
  line of README.md and docs/, parses with the command's own options (click's `make_context`, with
  `resilient_parsing` off; nothing is run).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from tests.conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"
_spec = importlib.util.spec_from_file_location("cli_reference", REPO_ROOT / "scripts" / "cli_reference.py")
cli_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cli_reference)
PROGRAMS: dict[str, click.Group] = dict(cli_reference.GROUPS)


# ------------------------------------------------------------------------------------ the site build

def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
        check=False)


def test_the_site_builds_strictly_with_every_page_and_public_name(tmp_path):
    import webgym_core
    import webgym_data
    import webgym_rl
    import webgym_rollout
    import webgym_sites

    site = tmp_path / "site"
    done = _mkdocs_build(REPO_ROOT / "mkdocs.yml", site)
    assert done.returncode == 0, done.stdout + done.stderr
    for page in DOCS.rglob("*.md"):
        built = site / page.relative_to(DOCS).with_suffix("") / "index.html"
        if page.name == "index.md":
            built = site / page.relative_to(DOCS).parent / "index.html"
        assert built.is_file(), f"{page.relative_to(REPO_ROOT)} was not built"
    # The README sections the site includes are there: the data path on the home page, the WebEnv
    # example in the rollout guide.
    assert "WebEnv.reset / step / close" in (site / "index.html").read_text(encoding="utf-8")
    assert "running_server" in (site / "guides" / "rollout" / "index.html").read_text(encoding="utf-8")
    # Each package root's public classes and functions are on its API page (from their docstrings:
    # one without a docstring is left out, and so missed here). A name that is also a submodule's
    # (webgym_rl.train) is documented as the submodule, which the pages do not show.
    for package, page in ((webgym_core, "core"), (webgym_data, "data"), (webgym_sites, "sites"),
                          (webgym_rollout, "rollout"), (webgym_rl, "rl")):
        html = (site / "reference" / "api" / page / "index.html").read_text(encoding="utf-8")
        names = [name for name in package.__all__ if callable(getattr(package, name))
                 and importlib.util.find_spec(f"{package.__name__}.{name}") is None]
        missing = [name for name in names if f'id="{package.__name__}.{name}"' not in html]
        assert names and missing == [], f"reference/api/{page}.md does not document {missing}"


@pytest.mark.parametrize("page, complaint", [
    ("See [the guide](no-such-page.md).\n", "no-such-page.md"),
    ("See [below](#no-such-heading).\n", "no-such-heading"),
    ('--8<-- "README.md:no-such-section"\n', "no-such-section"),
    ("::: webgym_rollout.NoSuchName\n", "NoSuchName"),
], ids=["link", "anchor", "snippet", "api-name"])
def test_a_broken_reference_fails_the_strict_build(tmp_path, page, complaint):
    """The same settings as mkdocs.yml, on a one-page site holding one broken reference."""
    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# Home\n\n## A heading\n\n{page}", encoding="utf-8")
    config.update(docs_dir=str(docs), nav=["index.md"],
                  hooks=[str(REPO_ROOT / hook) for hook in config.get("hooks", [])])
    for extension in config["markdown_extensions"]:
        if isinstance(extension, dict) and "pymdownx.snippets" in extension:
            extension["pymdownx.snippets"]["base_path"] = [str(REPO_ROOT)]
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            plugin["mkdocstrings"]["handlers"]["python"]["paths"] = [str(REPO_ROOT)]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")

    done = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert complaint in done.stdout + done.stderr


# ------------------------------------------------------------------------------------ README

def test_readme_is_a_front_page_that_starts_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move the detail into docs/"
    start = next(i for i, line in enumerate(lines) if line.startswith("```"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    commands = [line.split("#")[0].strip() for line in lines[start + 1:end]]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    # CI runs the README's test command.
    assert "exec bash scripts/test.sh" in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_readme_links_name_files_and_reach_every_guide():
    text = README.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
    broken = [t for t in targets if not (REPO_ROOT / t.split("#")[0]).is_file()]
    assert broken == [], f"README.md links to missing files: {broken}"
    linked = {t.split("#")[0] for t in targets}
    guides = {p.relative_to(REPO_ROOT).as_posix() for p in (DOCS / "guides").glob("*.md")}
    assert guides and guides <= linked, f"README.md does not link {sorted(guides - linked)}"


# ------------------------------------------------------------------------------------ runnable examples

RUNS = re.compile(r"^<!-- runs -->\n```python\n(.*?)```\n(?:\n<!-- prints -->\n```text\n(.*?)```\n)?",
                  re.DOTALL | re.MULTILINE)


def _runnable_blocks() -> list[tuple[str, str, str | None]]:
    blocks = []
    for page in sorted(DOCS.rglob("*.md")):
        found = RUNS.findall(page.read_text(encoding="utf-8"))
        blocks += [(f"{page.relative_to(DOCS)}#{i}", code, printed or None) for i, (code, printed) in
                   enumerate(found)]
    return blocks


def test_the_docs_mark_their_runnable_examples():
    blocks = _runnable_blocks()
    assert len(blocks) >= 5
    assert sum(printed is not None for _, _, printed in blocks) >= 5
    for page in DOCS.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        markers = re.findall(r"^<!-- (runs|prints) -->$", text, re.MULTILINE)
        found = RUNS.findall(text)
        expected = [kind for _, printed in found for kind in (["runs", "prints"] if printed else ["runs"])]
        assert markers == expected, f"{page}: a marker not followed by its python / text block"


@pytest.mark.parametrize("where, code, printed",
                         [pytest.param(*block, id=block[0]) for block in _runnable_blocks()])
def test_a_docs_example_runs_as_written(where, code, printed, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{where}:\n{done.stdout}{done.stderr}"
    if printed is not None:
        assert done.stdout == printed, f"{where} prints something else"


# ------------------------------------------------------------------------------------ command lines

_FILE_SUFFIXES = {".yaml", ".yml", ".json", ".jsonl", ".csv", ".parquet", ".html", ".txt"}
_SHELL_STOPS = {"&", "&&", "|", "||", ";", ">", ">>", "<"}


def _joined(lines: list[str]) -> list[str]:
    """Lines with their backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            out.append(pending + line)
            pending = ""
    return out


def _example_lines(help_text: str) -> list[str]:
    lines = help_text.splitlines()
    block: list[str] = []
    for i, line in enumerate(lines):
        if line.strip() in ("Example:", "Examples:"):
            for follow in lines[i + 1:]:
                if not follow.strip():
                    break
                block.append(follow)
    return _joined(block)


def _bash_lines(page: Path) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    return [line for block in blocks for line in _joined(block.splitlines())]


def _our_command(line: str) -> tuple[str, list[str]] | None:
    """(program, arguments) of a shell line that runs one of the four CLIs; None for anything else."""
    tokens = shlex.split(line, comments=True)
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
        tokens.pop(0)  # VAR=value before the command
    for i, token in enumerate(tokens):
        if token in _SHELL_STOPS:
            tokens = tokens[:i]
            break
    if not tokens or Path(tokens[0]).name not in PROGRAMS:
        return None
    return Path(tokens[0]).name, tokens[1:]


def _make_paths(args: list[str], folder: Path) -> None:
    """Create the relative paths a command line names, so that arguments declared to exist parse
    (the line's syntax is under test, not its data)."""
    for token in args:
        if token.startswith(("-", "/", "..", "~", "$")) or "://" in token:
            continue
        path = folder / token
        if Path(token).suffix in _FILE_SUFFIXES:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        elif "/" in token:
            path.mkdir(parents=True, exist_ok=True)


def _parse(program: str, args: list[str]) -> None:
    """Parse a command line down to its (sub-)command, as click would before running it."""
    command: click.Command = PROGRAMS[program]
    ctx = click.Context(command, info_name=program)
    name, rest = program, list(args)
    while isinstance(command, click.Group):
        if not rest or rest[0].startswith("-"):
            raise click.UsageError(f"no sub-command of {name} in {args}")
        name = rest.pop(0)
        sub = command.get_command(ctx, name)
        if sub is None:
            raise click.UsageError(f"{name!r} is not a command of {ctx.command_path}")
        if isinstance(sub, click.Group):
            ctx = click.Context(sub, info_name=name, parent=ctx)
        command = sub
    command.make_context(name, rest, parent=ctx, resilient_parsing=False)


def _unparsed(lines: list[tuple[str, str]], tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    parsed, failures = 0, []
    for i, (where, line) in enumerate(lines):
        command = _our_command(line)
        if command is None:
            continue
        folder = tmp_path / f"line-{i}"
        folder.mkdir()
        monkeypatch.chdir(folder)
        _make_paths(command[1], folder)
        try:
            _parse(*command)
        except click.ClickException as exc:
            failures.append(f"{where}: {line.strip()}\n    {exc.format_message()}")
        parsed += 1
    return parsed, failures


def test_every_help_example_parses(tmp_path, monkeypatch):
    lines = [(" ".join((program, *path)) + " --help", line)
             for program, root, path in cli_reference.commands()
             for line in _example_lines(cli_reference.help_text(root, program, path))]
    parsed, failures = _unparsed(lines, tmp_path, monkeypatch)
    assert failures == [], "\n".join(failures)
    assert parsed >= 40  # the extraction found the examples


def test_every_command_line_of_the_docs_parses(tmp_path, monkeypatch):
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    lines = [(page.relative_to(REPO_ROOT).as_posix(), line) for page in pages for line in _bash_lines(page)
             if "..." not in line]  # `run ... --judge rubric` leaves the rest out on purpose
    parsed, failures = _unparsed(lines, tmp_path, monkeypatch)
    assert failures == [], "\n".join(failures)
    assert parsed >= 30
