"""`webgym_rl.settings` (the training settings) and the loop's settings module: each name is found
where its layer keeps it, and the names they had before 0.3.0 still import, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import webgym_rl.loop.settings as loop_settings
import webgym_rl.settings as rl_settings

MOVED = [  # (old module, old name, the object it is now)
    ("webgym_rl.train", "TrainSettings", rl_settings.TrainCommandSettings),
    ("webgym_rl.train", "TrainingSettings", rl_settings.OptimizationSettings),
    ("webgym_rl.train", "GRPOSettings", rl_settings.GRPOSettings),
    ("webgym_rl", "TrainSettings", rl_settings.TrainCommandSettings),
    ("webgym_rl", "TrainingSettings", rl_settings.OptimizationSettings),
    ("webgym_rl.loop.settings", "TrainerSettings", loop_settings.ResidentTrainerSettings),
    ("webgym_rl.loop", "TrainerSettings", loop_settings.ResidentTrainerSettings),
    ("webgym_rl.loop.services", "PolicyEndpointSettings", loop_settings.PolicyEndpointSettings),
]


@pytest.mark.parametrize(("module", "name", "now"), MOVED, ids=[f"{m}.{n}" for m, n, _ in MOVED])
def test_an_old_name_warns_and_gives_the_new_class(module, name, now):
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{name} moved to .*\.{now.__name__}"):
        assert getattr(importlib.import_module(module), name) is now


def test_an_old_from_import_warns_too():
    with pytest.warns(DeprecationWarning, match=r"TrainingSettings moved to webgym_rl\.settings\.Optim"):
        from webgym_rl.train import TrainingSettings
    assert TrainingSettings is rl_settings.OptimizationSettings
    with pytest.raises(ImportError):
        from webgym_rl.train import NoSuchSettings  # noqa: F401


def test_the_new_names_are_exported_and_cost_no_torch():
    code = ("import sys\n"
            "from webgym_rl import OptimizationSettings, TrainCommandSettings\n"
            "from webgym_rl.loop import PolicyEndpointSettings, ResidentTrainerSettings\n"
            "assert OptimizationSettings.__module__ == 'webgym_rl.settings'\n"
            "assert PolicyEndpointSettings.__module__ == 'webgym_rl.loop.settings'\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_loop_holds_the_training_settings_under_their_new_names():
    fields = {f.name: f.type for f in loop_settings.LoopSettings.__dataclass_fields__.values()}
    assert fields["training"] == "OptimizationSettings" and fields["trainer"] == "ResidentTrainerSettings"
    assert fields["policy"] == "PolicyEndpointSettings"
