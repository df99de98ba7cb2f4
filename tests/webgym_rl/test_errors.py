"""webgym_rl.errors: one exception root, and the tree its docstring draws is the real one."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import webgym_rl
from webgym_rl import errors


def _modules():
    for info in pkgutil.iter_modules(webgym_rl.__path__):
        yield importlib.import_module(f"webgym_rl.{info.name}")


def test_every_error_raised_by_webgym_rl_is_under_its_root():
    found = {}
    for module in _modules():
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__.startswith(
                    "webgym_rl"):
                found[name] = value
    assert set(found) >= {"TrainingError", "TrainSettingsError", "ResumeError", "TrainingDataError",
                          "MissingColumnError", "NoTrainingDataError", "CollationError", "PromptPrefixError",
                          "MergeError", "PushError", "LoopError", "LoopSettingsError", "LoopStateError",
                          "PolicyEndpointError", "PhaseFailed"}
    for name, cls in found.items():
        assert issubclass(cls, errors.WebgymRLError), name
        assert cls.__module__ == "webgym_rl.errors", f"{name} is defined in {cls.__module__}"


def test_the_docstring_draws_every_class_and_the_value_errors_stay_value_errors():
    for name in errors.__all__:
        assert name in errors.__doc__, name
    for cls in (errors.TrainingDataError, errors.CollationError, errors.TrainSettingsError,
                errors.LoopSettingsError, errors.MergeError, errors.PushError):
        assert issubclass(cls, ValueError), cls
    assert issubclass(errors.MissingColumnError, errors.TrainingDataError)
    assert issubclass(errors.PhaseFailed, errors.LoopError)
    assert issubclass(errors.ResumeError, errors.TrainingError)


def test_phase_failed_names_the_round_and_phase(tmp_path):
    failed = errors.PhaseFailed(3, "train", ValueError("boom\n  here"), tmp_path)
    assert (failed.round, failed.phase) == (3, "train")
    assert str(failed).startswith("round 3, phase 'train' failed: ValueError: boom here.")
    assert str(tmp_path) in str(failed)
