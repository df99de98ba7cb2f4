"""The exception tree of `webgym_rl`: catch at the level you can handle.

::

    WebgymRLError
     ├── TrainingError (RuntimeError)        the trainer (`webgym_rl.train`)
     │    ├── TrainSettingsError (ValueError) a setting out of range or missing (names the field)
     │    └── ResumeError                    --resume without a complete checkpoint that matches
     ├── TrainingDataError (ValueError)      trajectory data the trainer cannot use (`webgym_rl.samples`);
     │    │                                  names the source, shard or column
     │    ├── MissingColumnError             a shard lacks a column the trainer reads
     │    └── NoTrainingDataError            nothing left to train on (empty, reward-free, all filtered)
     ├── CollationError (ValueError)         a sample that cannot be encoded (`webgym_rl.collate`)
     │    └── PromptPrefixError              the tokenised prompt is not a prefix of prompt + response
     ├── MergeError (ValueError)             a LoRA adapter that does not fit its base model or cannot
     │                                       be merged (`webgym_rl.merge`)
     ├── PushError (ValueError)              a checkpoint or value that cannot be pushed (`webgym_rl.hub`)
     └── LoopError (RuntimeError)            the online loop (`webgym_rl.loop`)
          ├── LoopSettingsError (ValueError) a bad setting (names the field or flag)
          ├── LoopStateError                 OUT/loop_state.json is unreadable or belongs to another run
          ├── PolicyEndpointError            the policy endpoint could not be started, reached or reloaded
          └── PhaseFailed                    a phase failed (names the round and phase; the cause is
                                             chained)

Settings read from the command line or YAML are checked by `webgym_core.settings`, which reports
an invalid value as `webgym_core.SettingsError` (also a ValueError) naming the YAML key and the
flag. Models that do not load raise `webgym_rollout.modeling.ModelingError` (a `RolloutError`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CollationError",
    "LoopError",
    "LoopSettingsError",
    "LoopStateError",
    "MergeError",
    "MissingColumnError",
    "NoTrainingDataError",
    "PhaseFailed",
    "PolicyEndpointError",
    "PromptPrefixError",
    "PushError",
    "ResumeError",
    "TrainSettingsError",
    "TrainingDataError",
    "TrainingError",
    "WebgymRLError",
]


class WebgymRLError(Exception):
    """Base of every error raised by `webgym_rl`."""


# ------------------------------------------------------------------------------------- training

class TrainingError(WebgymRLError, RuntimeError):
    """Base of the trainer's own errors."""


class TrainSettingsError(TrainingError, ValueError):
    """A training setting that is missing or out of range; the message starts with the field."""


class ResumeError(TrainingError):
    """``--resume`` found no complete checkpoint to continue from, or one from another run."""


class TrainingDataError(WebgymRLError, ValueError):
    """Trajectory data the trainer cannot use; the message names the source, file or column."""


class MissingColumnError(TrainingDataError):
    """A shard lacks a column (or step field) the trainer reads."""


class NoTrainingDataError(TrainingDataError):
    """After reading and filtering, nothing is left to train on."""


class CollationError(WebgymRLError, ValueError):
    """A sample that cannot be turned into model inputs."""


class PromptPrefixError(CollationError):
    """The prompt tokenised alone is not a prefix of the prompt + response tokens."""


# --------------------------------------------------------------------------------- checkpoints

class MergeError(WebgymRLError, ValueError):
    """A LoRA adapter checkpoint that does not fit its base model or cannot be folded into it (names
    the folder)."""


class PushError(WebgymRLError, ValueError):
    """The checkpoint or the push settings are unusable; the message says which file or value."""


# ---------------------------------------------------------------------------------------- loop

class LoopError(WebgymRLError, RuntimeError):
    """Base of the loop's own errors."""


class LoopSettingsError(LoopError, ValueError):
    """A loop setting that is missing, unknown or out of range."""


class LoopStateError(LoopError):
    """The loop folder's state file is unreadable or was written by a run with other settings."""


class PolicyEndpointError(LoopError):
    """The policy endpoint could not be started, reached or reloaded."""


class PhaseFailed(LoopError):
    """One phase of one round failed; earlier rounds are intact and a rerun resumes here."""

    def __init__(self, r: int, phase: str, cause: BaseException, out: Path):
        self.round, self.phase = r, phase
        detail = " ".join(str(cause).split()) or type(cause).__name__
        super().__init__(
            f"round {r}, phase '{phase}' failed: {type(cause).__name__}: {detail}. "
            f"Earlier rounds are intact in {out}; rerun the same command to resume at this phase.")
