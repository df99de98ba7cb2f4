"""webgym_rl.errors: one exception root, and the tree its docstring draws is the real one."""

from __future__ import annotations

import importlib

import pytest

from tests.support.error_trees import check_defined_in_errors, check_drawn_tree
from webgym_rl import errors
from webgym_rollout.errors import PolicyError, RolloutError

MOVED = {  # where these were defined before errors.py held them all: those imports keep working
    "webgym_rl.modeling": ["CheckpointError", "ModelingError", "UnknownFamilyError"],
    "webgym_rl.policy_server": ["BadChatRequest", "PolicyServerError", "PolicyUnauthorized", "ReloadFailed",
                                "SharedMemoryUnavailable", "WeightsPushFailed", "WeightsRejected"],
}


def test_every_error_raised_by_webgym_rl_is_under_its_root():
    public = check_defined_in_errors("webgym_rl", errors.WebgymRLError, exempt={})
    moved = {name for names in MOVED.values() for name in names}
    assert set(public) >= moved | {
        "TrainingError", "TrainSettingsError", "ResumeError", "TrainingDataError", "MissingColumnError",
        "NoTrainingDataError", "CollationError", "PromptPrefixError", "MergeError", "PushError", "LoopError",
        "LoopSettingsError", "LoopStateError", "PolicyEndpointError", "PhaseFailed"}


def test_the_docstring_draws_the_real_tree():
    check_drawn_tree(errors, errors.WebgymRLError)


def test_the_value_errors_stay_value_errors():
    for cls in (errors.TrainingDataError, errors.CollationError, errors.TrainSettingsError,
                errors.LoopSettingsError, errors.MergeError, errors.PushError, errors.ModelingError):
        assert issubclass(cls, ValueError), cls
    assert issubclass(errors.MissingColumnError, errors.TrainingDataError)
    assert issubclass(errors.PhaseFailed, errors.LoopError)
    assert issubclass(errors.ResumeError, errors.TrainingError)


def test_the_moved_classes_keep_the_bases_callers_catch():
    # A model that does not load was a RolloutError when modeling lived in webgym_rollout; the policy
    # server's errors are failures of a policy endpoint, as the rollout's client sees them.
    assert issubclass(errors.CheckpointError, RolloutError) and issubclass(errors.CheckpointError, ValueError)
    for name in MOVED["webgym_rl.policy_server"]:
        assert issubclass(getattr(errors, name), PolicyError), name
    with pytest.raises(PolicyError):
        raise errors.SharedMemoryUnavailable("no such file", param="shm")


@pytest.mark.parametrize(("module", "names"), MOVED.items())
def test_the_modules_that_defined_a_class_still_export_it(module, names):
    imported = importlib.import_module(module)
    for name in names:
        assert getattr(imported, name) is getattr(errors, name)
        assert name in imported.__all__


def test_phase_failed_names_the_round_and_phase(tmp_path):
    failed = errors.PhaseFailed(3, "train", ValueError("boom\n  here"), tmp_path)
    assert (failed.round, failed.phase) == (3, "train")
    assert str(failed).startswith("round 3, phase 'train' failed: ValueError: boom here.")
    assert str(tmp_path) in str(failed)
