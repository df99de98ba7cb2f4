"""webgym.clitools: one settings dataclass gives the options, their help and the YAML merge."""

from __future__ import annotations

from dataclasses import dataclass, field

import click
import pytest
from click.testing import CliRunner

from webgym.clitools import field_docs, settings_options, settings_values


class BadSettings(ValueError):
    pass


@dataclass
class Demo:
    name: str = "x"
    """The run's name."""
    steps: int = 3
    """How many steps,
    at most."""
    fast: bool = False
    """Go fast."""
    data: list[str] = field(default_factory=list)
    """Input folders."""
    mode: str = "a"
    """Which mode."""


def test_field_docs_are_the_docstrings_under_the_fields():
    assert field_docs(Demo) == {"name": "The run's name.", "steps": "How many steps, at most.",
                                "fast": "Go fast.", "data": "Input folders.", "mode": "Which mode."}


def test_flags_override_yaml_which_overrides_defaults(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("steps: 7\nname: from-yaml\n")
    flags = {"name": "from-flag", "steps": None, "data": ()}  # None / empty: flag not given
    values = settings_values(Demo, config, flags, error=BadSettings)
    assert Demo(**values) == Demo(name="from-flag", steps=7)


def test_unknown_names_and_bad_files_raise_the_given_error(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("stepz: 7\n")
    with pytest.raises(BadSettings, match="unknown setting 'stepz'"):
        settings_values(Demo, config, {}, error=BadSettings)
    config.write_text("- a list\n")
    with pytest.raises(BadSettings, match="expected a mapping"):
        settings_values(Demo, config, {}, error=BadSettings)
    with pytest.raises(BadSettings, match="unknown setting 'nope'"):
        settings_values(Demo, None, {"nope": 1}, error=BadSettings)


def test_options_from_the_dataclass_parse_every_kind():
    seen = {}

    @click.command()
    @settings_options(Demo, choices={"mode": ("a", "b")})
    def command(**flags):
        seen.update(flags)

    runner = CliRunner()
    result = runner.invoke(command, ["--steps", "5", "--fast", "--data", "d1", "d2", "--data", "d3",
                                     "--mode", "b"])
    assert result.exit_code == 0, result.output
    assert seen == {"name": None, "steps": 5, "fast": True, "data": ("d1", "d2", "d3"), "mode": "b"}
    assert runner.invoke(command, ["--mode", "c"]).exit_code == 2
    assert "How many steps, at most." in runner.invoke(command, ["--help"]).output
