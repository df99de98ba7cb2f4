"""webgym_rl.loop_state: the state file records the settings, refuses another run, keeps no secrets."""

from __future__ import annotations

import json

import pytest

from tests.webgym_rl.loops import loop_settings
from webgym_core.settings import settings_from_dict
from webgym_rl.errors import LoopStateError
from webgym_rl.loop import LoopSettings
from webgym_rl.loop_state import IDENTITY, STATE_FILE, load_state, save_state


def test_a_new_folder_gets_a_state_with_the_identity_and_the_settings(tmp_path):
    settings = loop_settings(tmp_path, tmp_path / "model", policy={"api_key": "sk-secret"},
                             browser_token="t0ken", attempts=3)
    state = load_state(settings)
    assert state["iterations"] == {} and state["last_error"] is None and state["version"] == 1
    assert set(state["identity"]) == set(IDENTITY)
    assert (state["identity"]["objective"], state["identity"]["attempts"]) == ("filtered_bc", 3)
    (tmp_path / "loop").mkdir()
    path = save_state(settings, state)
    assert path == tmp_path / "loop" / STATE_FILE
    text = path.read_text()
    assert "sk-secret" not in text and "t0ken" not in text
    # The recorded settings read back as the same settings (secrets aside).
    recorded = json.loads(text)["settings"]
    recorded["policy"]["api_key"], recorded["browser_token"] = None, None
    again = settings_from_dict(LoopSettings, recorded)
    assert again.rollout == settings.rollout and again.training == settings.training
    assert again.policy.sampling == settings.policy.sampling and again.pool.browsers == settings.pool.browsers


def test_a_rerun_resumes_with_other_settings_but_not_with_another_identity(tmp_path):
    settings = loop_settings(tmp_path, tmp_path / "model")
    (tmp_path / "loop").mkdir()
    state = load_state(settings)
    state["iterations"]["0"] = {"rollout": {"episodes": 4}}
    save_state(settings, state)
    more = loop_settings(tmp_path, tmp_path / "model", iterations=5, learning_rate=0.5)
    resumed = load_state(more)
    assert resumed["iterations"] == {"0": {"rollout": {"episodes": 4}}}
    assert resumed["settings"]["learning_rate"] == 0.5
    for change, name in (({"objective": "reinforce"}, "objective"), ({"attempts": 2}, "attempts"),
                         ({"sampler": {"kinds": ["web"]}}, "sampler")):
        with pytest.raises(LoopStateError, match=f"belongs to a run with {name}="):
            load_state(loop_settings(tmp_path, tmp_path / "model", **change))


def test_a_broken_or_foreign_state_is_refused(tmp_path):
    settings = loop_settings(tmp_path, tmp_path / "model")
    out = tmp_path / "loop"
    (out / "iter-0000").mkdir(parents=True)
    with pytest.raises(LoopStateError, match="holds iteration folders but no loop_state.json"):
        load_state(settings)
    (out / STATE_FILE).write_text("{not json")
    with pytest.raises(LoopStateError, match="is unreadable"):
        load_state(settings)
    (out / STATE_FILE).write_text('{"version": 7}')
    with pytest.raises(LoopStateError, match="not a webgym-rl loop state"):
        load_state(settings)
