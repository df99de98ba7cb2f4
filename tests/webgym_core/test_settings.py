"""webgym_core.settings: one dataclass per concern, composed; flags and YAML keys come from it."""

from __future__ import annotations

import enum
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import click
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webgym_core.endpoint import Endpoint
from webgym_core.settings import (
    SettingsCommand,
    SettingsError,
    _leaves,
    _unwrap_optional,
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


def test_a_settings_command_lists_its_flags_by_settings_group():
    @click.command(cls=SettingsCommand)
    @click.option("--dry-run", is_flag=True, help="Plan only.")
    @settings_options(Run)
    def command(config, dry_run, **flags):
        pass

    text = CliRunner().invoke(command, ["--help"], terminal_width=200).output
    titles = [line[:-1] for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    # the command's own settings (and options) first, then each group in the order of its field
    assert titles == ["Options", "Schedule options (Schedule)", "Policy options (Policy)"]
    own, schedule, policy = (text.split(f"\n{title}:\n")[1].split("\n\n")[0] for title in titles)
    assert "--dry-run" in own and "--tasks" in own and "--config" in own and "--help" in own
    assert "--concurrency" in schedule and "--mode" in schedule and "--policy" not in schedule
    # a group's nested groups (Endpoint, Sampling) stay in the group that holds them
    assert "--policy-base-url" in policy and "--policy-top-p" in policy and "--tasks" not in policy
    # the grouping is for reading: every flag still parses as before
    assert CliRunner().invoke(command, ["--concurrency", "2", "--policy-top-p", "0.5"]).exit_code == 0


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
                       match=r"bad\.yaml: policy\.temprature: unknown setting; did you mean 'temperature'\? "
                             r"\(known here: .*temperature"):
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


# ------------------------------------------------------------------------- untrusted YAML (fuzzed)
# A settings file either gives settings or a `SettingsError` that names the file and the key (and,
# for a file that is not YAML, the line). Never a bare yaml, Unicode, overflow or recursion error.

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
REQUIRED = {"tasks": "t.jsonl", "model": "m", "out": "out"}  # LoopSettings has no default for these


def _real_settings():
    from webgym_rl.loop.settings import LoopSettings
    from webgym_rollout.runner import RolloutSettings

    return [(LoopSettings, REQUIRED), (RolloutSettings, {}), (Run, {})]


def _value_for(kind) -> st.SearchStrategy:
    """Values of a setting's type, as YAML would give them (some out of the setting's range)."""
    inner, optional = _unwrap_optional(kind)
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if inner is bool:
        found = st.booleans()
    elif inner is int:
        found = st.integers(min_value=-3, max_value=100)
    elif inner is float:
        found = st.floats(min_value=-2, max_value=1e6, allow_nan=False)
    elif inner in (str, Path):
        found = st.text(max_size=8)
    elif origin is typing.Literal:
        found = st.sampled_from(args)
    elif isinstance(inner, type) and issubclass(inner, enum.Enum):
        found = st.sampled_from([member.value for member in inner])
    elif origin in (list, tuple) and (not args or args[-1] is Ellipsis or origin is list):
        found = st.lists(_value_for(args[0] if args else str), max_size=3)
    elif origin is tuple:
        found = st.tuples(*(_value_for(a) for a in args)).map(list)
    elif origin is dict:
        found = st.dictionaries(st.text(min_size=1, max_size=5), _value_for(args[1]), max_size=2)
    else:  # Any
        found = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5)
    return st.none() | found if optional else found


def _nested(key: str, value) -> dict:
    """``{"a": {"b": value}}`` for the YAML key ``a.b``."""
    *groups, name = key.split(".")
    node = {name: value}
    for group in reversed(groups):
        node = {group: node}
    return node


def _merge_into(into: dict, update: dict) -> dict:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge_into(into[key], value)
        else:
            into[key] = value
    return into


@st.composite
def real_settings_files(draw, values: bool = True):
    """``(cls, document, leaf)``: a real settings class and a YAML document that sets one of its
    keys (with a value of its type, or with junk) on top of the required ones."""
    cls, required = draw(st.sampled_from(_real_settings()))
    leaf = draw(st.sampled_from([leaf for leaf in _leaves(cls) if leaf.cli]))
    value = draw(_value_for(leaf.kind) if values else JUNK)
    return cls, _merge_into(dict(required), _nested(leaf.yaml_key, value)), leaf


JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**320, max_value=10**330)
    | st.floats() | st.text(max_size=6) | st.sampled_from(["random", "epoch", "1", "true", "~"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)


def _yaml_file(folder: Path, document) -> Path:
    path = folder / "settings.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    return path


@FUZZ
@given(case=real_settings_files())
def test_real_settings_written_as_yaml_read_back_equal(case, tmp_path_factory):
    cls, document, leaf = case
    path = _yaml_file(tmp_path_factory.mktemp("yaml"), document)
    try:
        loaded = load_settings(cls, path)
    except SettingsError as error:  # a value out of the setting's range: named, with its file
        assert str(error).startswith(str(path)), str(error)
        return
    dumped = settings_to_dict(loaded)
    again = _yaml_file(tmp_path_factory.mktemp("again"), dumped)
    assert load_settings(cls, again) == loaded == settings_from_dict(cls, dumped)


@FUZZ
@given(case=real_settings_files(values=False))
def test_junk_at_a_real_key_is_settings_or_an_error_naming_file_and_key(case, tmp_path_factory):
    cls, document, leaf = case
    path = _yaml_file(tmp_path_factory.mktemp("yaml"), document)
    try:
        load_settings(cls, path)
    except SettingsError as error:
        message = str(error)
        assert message.startswith(str(path)), message
        assert leaf.yaml_key.split(".")[-1] in message or leaf.yaml_key.split(".")[0] in message, message


@FUZZ
@given(key=st.sampled_from(sorted({leaf.yaml_key.split(".")[0] for leaf in _leaves(Run)})),
       edit=st.tuples(st.integers(min_value=0, max_value=20), st.sampled_from("abxz_-")),
       how=st.sampled_from(["insert", "replace", "delete"]))
def test_an_unknown_key_is_named_with_its_file_and_the_key_it_most_likely_meant(key, edit, how, tmp_path):
    position, letter = edit
    position = min(position, len(key) - 1)
    typo = {"insert": key[:position] + letter + key[position:],
            "replace": key[:position] + letter + key[position + 1:],
            "delete": key[:position] + key[position + 1:]}[how]
    known = {leaf.yaml_key.split(".")[0] for leaf in _leaves(Run)}
    if typo.replace("-", "_") in known or not typo:
        return
    path = tmp_path / "typo.yaml"
    path.write_text(f"{typo}: 1\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(Run, path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {typo.replace('-', '_')}: unknown setting"), message
    if "did you mean" in message:
        suggested = message.split("did you mean '")[1].split("'")[0]
        assert suggested in known
    if len(key) >= 6:  # one letter off a long key: a suggestion is always made
        assert "did you mean" in message, message


@FUZZ
@given(text=st.text(max_size=40) | st.binary(max_size=40))
def test_any_file_content_is_settings_or_an_error_naming_the_file(text, tmp_path_factory):
    path = tmp_path_factory.mktemp("raw") / "any.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        loaded = load_settings(Sampling, path)
    except SettingsError as error:
        message = str(error)
        assert str(path) in message, message
        assert "Traceback" not in message
        return
    assert isinstance(loaded, Sampling)


@FUZZ
@given(value=JUNK.filter(lambda v: v is not None and not isinstance(v, dict)))
def test_a_top_level_that_is_not_a_mapping_is_refused(value, tmp_path_factory):
    path = _yaml_file(tmp_path_factory.mktemp("top"), value)
    with pytest.raises(SettingsError, match=r"expected a mapping of setting: value, got") as caught:
        load_settings(Run, path)
    assert str(caught.value).startswith(f"{path}: ")


@FUZZ
@given(value=JUNK.filter(lambda v: not isinstance(v, dict | str) and v is not None))
def test_a_group_given_as_anything_but_a_mapping_names_the_group(value, tmp_path_factory):
    path = _yaml_file(tmp_path_factory.mktemp("group"), {"policy": value})
    with pytest.raises(SettingsError, match=rf"^{re.escape(str(path))}: policy: expected a mapping of Pol"):
        load_settings(Run, path)


@pytest.mark.parametrize(("text", "message"), [
    ("policy:\n  temperature: [1, 2\nmode: slow\n",
     r", line 3, column 5: not valid YAML: .*flow sequence at line 2"),
    ("concurrency: 1\n  mode: slow\n", r", line 2, column 7: not valid YAML: mapping values are not allowed"),
    ("concurrency: 1\nconcurrency: 2\n", r", line 2, column 1: not valid YAML: key 'concurrency' given twice "
                                         r"\(first on line 1\)"),
    ("policy: {temperature: 1, temperature: 2}\n", r", line 1, column 26: .*key 'temperature' given twice"),
    ("concurrency: " + "9" * 5000 + "\n", r": not valid YAML: Exceeds the limit"),
    ("servers: " + "[" * 3000 + "]" * 3000 + "\n", r": not valid YAML: nested too deeply"),
    ("concurrency: !!python/object:os.system ['ls']\n", r", line 1, column 14: not valid YAML: could not"),
    ("false\n", r": expected a mapping of setting: value, got bool False"),
    ("0\n", r": expected a mapping of setting: value, got int 0"),
])
def test_yaml_that_is_not_settings_names_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=re.escape(str(path)) + message):
        load_settings(Run, path)


def test_values_that_used_to_crash_or_pass_silently_are_named(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"concurrency: \xff\n")
    with pytest.raises(SettingsError, match=rf"cannot read the settings file {re.escape(str(path))}: 'utf-"):
        load_settings(Run, path)
    path.write_text("policy:\n  temperature: " + "9" * 400 + "\n")
    with pytest.raises(SettingsError, match=r"policy\.temperature \(--policy-temperature\): expected float"):
        load_settings(Run, path)
    path.write_text("policy:\n  temperature: .nan\n")
    with pytest.raises(SettingsError, match=r"policy\.temperature \(--policy-temperature\): expected float"):
        load_settings(Run, path)
    path.write_text("policy: true\n")  # a kind group takes a kind; YAML's true equals 1, not 'random'
    with pytest.raises(SettingsError, match=r"policy"):
        load_settings(Run, path)
    with pytest.raises(SettingsError, match=r"expected a mapping of setting: value, got list"):
        settings_from_dict(Run, [1, 2])
    with pytest.raises(SettingsError, match=r"'schedule\.concurrncy': unknown setting; did you mean "
                                            r"'schedule\.concurrency'\?"):
        load_settings(Run, None, {"schedule__concurrncy": 3})


@dataclass
class Choice:
    level: Literal[0, 1] = 0
    """A numeric choice."""


def test_a_literal_choice_is_matched_by_type_too(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("level: true\n")
    with pytest.raises(SettingsError, match=r"level \(--level\): True is not one of 0, 1"):
        load_settings(Choice, path)
    path.write_text("level: 1\n")
    assert load_settings(Choice, path).level == 1


def test_the_flag_named_is_the_nested_keys_own_not_a_top_level_namesake(tmp_path):
    from webgym_rl.loop.settings import LoopSettings

    path = tmp_path / "loop.yaml"
    path.write_text("tasks: t\nmodel: m\nout: o\npolicy:\n  model: [1]\n")
    with pytest.raises(SettingsError, match=r"policy\.model \(--policy-model\): expected str"):
        load_settings(LoopSettings, path)


def test_an_empty_or_comment_only_file_sets_nothing(tmp_path):
    for text in ("", "# nothing here\n", "\n\n", "---\n"):
        path = tmp_path / "empty.yaml"
        path.write_text(text)
        assert load_settings(Run, path) == Run()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_flag_and_its_yaml_key_set_the_same_value(data, tmp_path_factory):
    from webgym_rollout.runner import RolloutSettings

    cls = data.draw(st.sampled_from([Run, RolloutSettings]))
    scalars = [leaf for leaf in _leaves(cls)
               if leaf.cli and _unwrap_optional(leaf.kind)[0] in (int, float, str)]
    leaf = data.draw(st.sampled_from(scalars))
    value = data.draw(_value_for(_unwrap_optional(leaf.kind)[0]).filter(lambda v: not str(v).startswith("-")))
    seen: dict = {}

    @click.command()
    @settings_options(cls)
    def command(config, **flags):
        seen["settings"] = load_settings(cls, config, flags)

    result = CliRunner().invoke(command, [leaf.flag, str(value)])
    path = _yaml_file(tmp_path_factory.mktemp("flag"), _nested(leaf.yaml_key, value))
    try:
        from_yaml = load_settings(cls, path)
    except SettingsError as error:  # out of range: the flag is refused the same way
        assert result.exit_code != 0 and leaf.yaml_key in str(error)
        return
    assert result.exit_code == 0, result.output
    assert seen["settings"] == from_yaml
