"""webgym_core.settings: one dataclass per concern, composed; flags and YAML keys come from it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import click
import pytest
from click.testing import CliRunner

from webgym_core.endpoint import Endpoint
from webgym_core.settings import (
    SettingsError,
    field_docs,
    flag_for,
    flat,
    load_settings,
    settings_from_dict,
    settings_options,
    settings_to_dict,
)


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    """Sampling temperature,
    over two lines."""
    top_p: float = 1.0
    """Nucleus mass."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature: must be >= 0, got {self.temperature}")


@dataclass(frozen=True)
class Policy:
    kind: Literal["random", "openai"] = "random"
    """Which policy."""
    endpoint: Endpoint = flat(Endpoint)
    sampling: Sampling = flat(Sampling)


@dataclass(frozen=True)
class Schedule:
    concurrency: int = 8
    """Episodes at once."""
    mode: Mode = Mode.FAST
    """How fast."""


@dataclass(frozen=True)
class Run:
    tasks: Path | None = None
    """Task file."""
    servers: tuple[str, ...] = ()
    """Server URLs."""
    horizons: tuple[int, int, int] = (10, 20, 30)
    """Step budgets."""
    limits: dict[str, int] = field(default_factory=lambda: {"create": 4})
    """Per-kind limits."""
    resume: bool = False
    """Resume."""
    token: str | None = field(default=None, metadata={"env": "DEMO_TOKEN"})
    """A token."""
    schedule: Schedule = flat(Schedule)
    policy: Policy = field(default_factory=lambda: Policy(endpoint=Endpoint(model="default-model")))


def _command(seen: dict):
    @click.command()
    @settings_options(Run)
    def command(config, **flags):
        seen["settings"] = load_settings(Run, config, flags)

    return command


def test_flags_come_from_the_nested_fields():
    runner = CliRunner()
    help_text = runner.invoke(_command({}), ["--help"], terminal_width=200).output
    for flag in ("--tasks", "--servers", "--horizons", "--limits", "--resume / --no-resume", "--concurrency",
                 "--mode [fast|slow]", "--policy [random|openai]", "--policy-base-url", "--policy-model",
                 "--policy-temperature", "--policy-top-p", "--config"):
        assert flag in help_text, flag
    assert "--policy-api-key " not in help_text  # metadata cli=False: secrets are no flags
    assert "Sampling temperature, over two lines. [default: 1.0]" in help_text
    assert "[default: default-model]" in help_text  # the group's own default, not Endpoint's
    assert "(env DEMO_TOKEN)" in help_text
    assert flag_for(Run, "policy.endpoint.base_url") == "--policy-base-url"
    assert flag_for(Run, "schedule.concurrency") == "--concurrency"


def test_flags_override_yaml_which_overrides_defaults(tmp_path, monkeypatch):
    config = tmp_path / "run.yaml"
    config.write_text("concurrency: 3\nservers: http://a\nmode: slow\n"
                      "policy:\n  kind: openai\n  base_url: http://yaml/v1\n  temperature: 0.5\n"
                      "  max-retries: 1\n")
    seen: dict = {}
    monkeypatch.setenv("DEMO_TOKEN", "from-env")
    result = CliRunner().invoke(_command(seen), [
        "--config", str(config), "--policy-temperature", "0", "--horizons", "1", "2", "3", "--servers", "http://b",
        "http://c", "--limits", "navigate=2", "--resume", "--tasks", "t.jsonl"])
    assert result.exit_code == 0, result.output
    run = seen["settings"]
    assert run.tasks == Path("t.jsonl") and run.servers == ("http://b", "http://c") and run.resume
    assert run.horizons == (1, 2, 3) and run.limits == {"navigate": 2} and run.token == "from-env"
    assert run.schedule == Schedule(concurrency=3, mode=Mode.SLOW)
    assert run.policy.kind == "openai" and run.policy.sampling == Sampling(temperature=0.0)
    assert run.policy.endpoint == Endpoint(base_url="http://yaml/v1", model="default-model", max_retries=1)
    # the YAML keys of flat groups sit beside their parent's, as the flags do; the dump reads back
    dumped = settings_to_dict(run)
    assert dumped["concurrency"] == 3 and dumped["policy"]["temperature"] == 0.0 and dumped["mode"] == "slow"
    assert settings_from_dict(Run, dumped) == run
    # a group with a kind may be given as its kind alone, as the flag does
    assert settings_from_dict(Run, {"policy": "openai"}).policy.kind == "openai"


def test_errors_name_the_key_the_file_and_the_flag(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("policy:\n  temprature: 0.5\n")
    with pytest.raises(SettingsError,
                       match=r"bad\.yaml: policy\.temprature: unknown setting \(known here: .*temperature"):
        load_settings(Run, config)
    config.write_text("policy:\n  temperature: hot\n")
    with pytest.raises(SettingsError,
                       match=r"policy\.temperature \(--policy-temperature\): expected float, got 'hot'"):
        load_settings(Run, config)
    with pytest.raises(SettingsError, match=r"policy\.temperature \(--policy-temperature\): must be >= 0"):
        load_settings(Run, None, {"policy__sampling__temperature": -1.0})
    with pytest.raises(SettingsError, match=r"horizons \(--horizons\): expected 3 values, got 2"):
        load_settings(Run, None, {"horizons": (1, 2)})
    with pytest.raises(SettingsError, match=r"mode \(--mode\): 'medium' is not one of 'fast', 'slow'"):
        load_settings(Run, None, {"schedule__mode": "medium"})
    with pytest.raises(SettingsError, match=r"limits \(--limits\): expected KEY=VALUE, got 'navigate'"):
        load_settings(Run, None, {"limits": ("navigate",)})
    config.write_text("- a list\n")
    with pytest.raises(SettingsError, match="expected a mapping"):
        load_settings(Run, config)
    result = CliRunner().invoke(_command({}), ["--mode", "medium"])
    assert result.exit_code == 2  # click refuses a value outside the choices itself


@dataclass
class Leaf:
    x: int = 0
    """x."""


@dataclass
class Clash:
    first: Leaf = flat(Leaf)
    second: Leaf = flat(Leaf)


def test_two_groups_on_one_flag_are_refused_when_the_command_is_built():
    with pytest.raises(TypeError, match="first.x and second.x both map to --x"):
        settings_options(Clash)


def test_field_docs_are_the_docstrings_under_the_fields():
    assert field_docs(Sampling) == {"temperature": "Sampling temperature, over two lines.",
                                    "top_p": "Nucleus mass."}
