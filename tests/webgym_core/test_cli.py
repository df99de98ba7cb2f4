"""webgym_core.cli: the push options every push command spells alike (old spellings deprecated), and
the group's -v taken after the sub-command too."""

from __future__ import annotations

import logging

import click
import pytest
from click.testing import CliRunner

from webgym_core.cli import LazyGroup, hub_push_options, setup_logging


@click.command("push")
@click.argument("repo_id")
@hub_push_options
def push(repo_id: str, revision: str | None, token: str | None, commit_message: str | None,
         private: bool) -> None:
    click.echo(f"{repo_id} revision={revision} token={token} message={commit_message} private={private}")


@click.command("probe")
def probe() -> None:
    """Prints the root logger's level."""
    click.echo(logging.getLevelName(logging.getLogger().level))


@click.group(cls=LazyGroup, lazy_commands={"probe": (f"{__name__}:probe", "Print the log level.")})
@click.option("-v", "--verbose", count=True)
def group(verbose: int) -> None:
    setup_logging(verbose)


@pytest.fixture
def root_level():
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


def test_the_push_options_pass_their_values(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    result = CliRunner().invoke(push, ["o/r", "--revision", "dev", "--token", "hf_a", "--commit-message",
                                       "first", "--private"])
    assert result.exit_code == 0, result.output
    assert result.output == "o/r revision=dev token=hf_a message=first private=True\n"
    result = CliRunner().invoke(push, ["o/r"])
    assert result.output == "o/r revision=None token=None message=None private=False\n"


def test_the_token_falls_back_to_hf_token(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    assert "token=hf_env " in CliRunner().invoke(push, ["o/r"]).output


@pytest.mark.parametrize(("old", "value", "shown"), [
    ("--branch", "dev", "revision=dev"),
    ("--message", "first", "message=first"),
    ("--token-env", "MY_HUB_TOKEN", "token=hf_mine"),
])
def test_the_old_spellings_still_work_and_warn(monkeypatch, old, value, shown):
    monkeypatch.setenv("HF_TOKEN", "hf_default")
    monkeypatch.setenv("MY_HUB_TOKEN", "hf_mine")
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated"):
        result = CliRunner().invoke(push, ["o/r", old, value])
    assert result.exit_code == 0, result.output
    assert shown in result.stdout
    new = {"--branch": "--revision", "--message": "--commit-message", "--token-env": "--token"}[old]
    assert f"{old} is deprecated and goes in 0.4; use {new}" in result.stderr


def test_the_old_spellings_are_not_listed_in_help():
    text = CliRunner().invoke(push, ["--help"]).output
    assert "--revision" in text and "--commit-message" in text
    assert "--branch" not in text and "--token-env" not in text and "--message " not in text


def test_an_option_and_its_old_spelling_together_are_refused():
    with pytest.warns(DeprecationWarning):
        result = CliRunner().invoke(push, ["o/r", "--revision", "a", "--branch", "b"])
    assert result.exit_code == 2
    assert "give --revision or its old spelling --branch, not both" in result.output


@pytest.mark.parametrize(("args", "level"), [
    (["probe"], "WARNING"),
    (["-v", "probe"], "INFO"),
    (["probe", "-v"], "INFO"),
    (["probe", "--verbose"], "INFO"),
    (["-v", "probe", "-v"], "DEBUG"),
    (["probe", "-vv"], "DEBUG"),
])
def test_v_is_taken_before_and_after_the_sub_command(root_level, args, level):
    result = CliRunner().invoke(group, args)
    assert result.exit_code == 0, result.output
    assert result.output == f"{level}\n"


def test_the_sub_command_itself_is_left_as_it_was():
    CliRunner().invoke(group, ["probe", "-v"])
    assert [p.name for p in probe.params] == []
    assert "-v, --verbose" in CliRunner().invoke(group, ["probe", "--help"]).output
