"""`webgym_rollout.settings.EnvSettings`: its checks, the step budgets per task kind and the deprecated
``miniwob_horizon``, as flags and YAML keys."""

from __future__ import annotations

import warnings

import pytest

from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings, settings_from_dict, settings_to_dict
from webgym_rollout.settings import EnvSettings


def test_bad_values_name_their_field():
    for values, message in (({"viewport": "wide"}, "viewport: expected WIDTHxHEIGHT"),
                            ({"viewport": "0x10"}, "viewport: both sides must be >= 1"),
                            ({"train_horizons": (1, 0, 3)}, "train_horizons: every horizon must be >= 1"),
                            ({"horizons": {"miniwob": 0}}, "horizons: the budget of 'miniwob' must be >= 1")):
        with pytest.raises(ValueError, match=message):
            EnvSettings(**values)


def test_a_budget_per_kind_is_a_flag_and_a_yaml_key(tmp_path):
    assert load_settings(EnvSettings, None, {"horizons": ("miniwob=2", "web=9")}).horizons == {
        "miniwob": 2, "web": 9}
    config = tmp_path / "env.yaml"
    config.write_text("horizons: {miniwob: 3}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new key warns of nothing
        settings = load_settings(EnvSettings, config)
    assert settings.horizons == {"miniwob": 3}
    assert settings_from_dict(EnvSettings, settings_to_dict(settings)) == settings
    with pytest.raises(SettingsError, match="horizons"):
        load_settings(EnvSettings, None, {"horizons": ("miniwob=two",)})


def test_the_old_miniwob_horizon_still_sets_the_budget_with_a_warning(tmp_path):
    with pytest.warns(DeprecationWarning, match=r"miniwob_horizon .*deprecated: use horizons"):
        settings = EnvSettings(miniwob_horizon=4)
    assert settings.horizons == {"miniwob": 4} and settings.miniwob_horizon is None
    # Written back, it is the new key: reading it again warns no more.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings_from_dict(EnvSettings, settings_to_dict(settings)).horizons == {"miniwob": 4}
    # The YAML key and the flag users have still work; a budget given the new way wins.
    config = tmp_path / "old.yaml"
    config.write_text("miniwob_horizon: 2\n")
    with pytest.warns(DeprecationWarning):
        assert load_settings(EnvSettings, config).horizons == {"miniwob": 2}
    with pytest.warns(DeprecationWarning):
        assert load_settings(EnvSettings, None, {"miniwob_horizon": 5}).horizons == {"miniwob": 5}
    with pytest.warns(DeprecationWarning):
        assert EnvSettings(miniwob_horizon=5, horizons={"miniwob": 7}).horizons == {"miniwob": 7}
    with pytest.raises(ValueError, match="horizons: the budget of 'miniwob' must be >= 1"), \
            pytest.warns(DeprecationWarning):
        EnvSettings(miniwob_horizon=0)
