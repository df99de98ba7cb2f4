"""The exception tree of `webgym_rl`: catch at the level you can handle.

Every public exception class of `webgym_rl` is defined here (checked by
``tests/webgym_rl/test_errors.py``); the modules that raise one import it from here and still
export it (``from webgym_rl.modeling import CheckpointError`` works).

::

    WebgymRLError                            the root of every error webgym_rl raises
     ├── TrainingError (RuntimeError)        the trainer (`webgym_rl.train`)
     │    ├── TrainSettingsError (ValueError) a setting out of range or missing (names the field)
     │    └── ResumeError                    --resume without a complete checkpoint that matches
     ├── TrainingDataError (ValueError)      trajectory data the trainer cannot use (`webgym_rl.samples`);
     │    │                                  names the source, shard or column
     │    ├── MissingColumnError             a shard lacks a column the trainer reads
     │    ├── NoTrainingDataError            nothing left to train on (empty, reward-free, all filtered)
     │    └── ExportError                    a kept step ``webgym-rl export`` cannot write as a
     │                                       conversation, or an output folder holding an earlier
     │                                       export (`webgym_rl.export`; names the source, row and step)
     ├── CollationError (ValueError)         a sample that cannot be encoded (`webgym_rl.collate`)
     │    ├── PromptPrefixError              the tokenised prompt is not a prefix of prompt + response
     │    └── TokenMismatchError             the trainer's tokens are not the ones the policy sampled
     │                                       from (prompt ids, or ids vs log-probabilities; names the
     │                                       episode and step)
     ├── MergeError (ValueError)             a LoRA adapter that does not fit its base model or cannot
     │                                       be merged (`webgym_rl.merge`)
     ├── PushError (ValueError)              a checkpoint or value that cannot be pushed (`webgym_rl.hub`)
     ├── ModelingError (ValueError)          a checkpoint that cannot be loaded as a Qwen-VL policy
     │    │                                  (`webgym_rl.modeling`; also a RolloutError, as it was when
     │    │                                  the module lived in webgym_rollout); names it
     │    ├── UnknownFamilyError             a family name or a checkpoint config we do not support
     │    └── CheckpointError                a folder or Hub id without the files a checkpoint needs
     ├── PolicyServerError                   the CPU policy server (`webgym_rl.policy_server`; also a
     │    │                                  `webgym_rollout.errors.PolicyError`); HTTP 500
     │    ├── BadChatRequest                 a malformed request: bad image data URL, unknown model
     │    │                                  name, empty messages, n > 1, stream (HTTP 400; names the
     │    │                                  field)
     │    ├── PolicyUnauthorized             missing or wrong bearer token (HTTP 401)
     │    ├── ReloadFailed                   /reload could not load the checkpoint (HTTP 400; the old
     │    │    │                             model keeps serving)
     │    │    └── WeightsRejected           /weights: not safetensors, or a missing, unexpected,
     │    │         │                        mis-shaped or mis-typed tensor, or a file the server does
     │    │         │                        not read (HTTP 400; names the first bad key, or shm)
     │    │         └── SharedMemoryUnavailable  the server sees no such file (it does not share the
     │    │                                  client's /dev/shm), or the client cannot write one
     │    └── WeightsPushFailed              `push_weights`: the server could not be reached, timed
     │                                       out or failed (HTTP 5xx); transient, may be retried
     └── LoopError (RuntimeError)            the online loop (`webgym_rl.loop`)
          ├── LoopSettingsError (ValueError) a bad setting (names the field or flag)
          ├── LoopStateError                 OUT/loop_state.json is unreadable or belongs to another run
          ├── PolicyEndpointError            the policy endpoint could not be started, reached or reloaded
          └── PhaseFailed                    a phase failed (names the round and phase; the cause is
                                             chained)

Settings read from the command line or YAML are checked by `webgym_core.settings`, which reports
an invalid value as `webgym_core.SettingsError` (also a ValueError) naming the YAML key and the
flag.
"""

from __future__ import annotations

from pathlib import Path

from webgym_rollout.errors import PolicyError, RolloutError

__all__ = [
    "BadChatRequest",
    "CheckpointError",
    "CollationError",
    "ExportError",
    "LoopError",
    "LoopSettingsError",
    "LoopStateError",
    "MergeError",
    "MissingColumnError",
    "ModelingError",
    "NoTrainingDataError",
    "PhaseFailed",
    "PolicyEndpointError",
    "PolicyServerError",
    "PolicyUnauthorized",
    "PromptPrefixError",
    "TokenMismatchError",
    "PushError",
    "ReloadFailed",
    "ResumeError",
    "SharedMemoryUnavailable",
    "TrainSettingsError",
    "TrainingDataError",
    "TrainingError",
    "UnknownFamilyError",
    "WebgymRLError",
    "WeightsPushFailed",
    "WeightsRejected",
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


class ExportError(TrainingDataError):
    """A kept step that cannot be written as a conversation for another trainer (a message part that
    is neither text nor an image, messages that are not JSON), or an output folder that holds an
    earlier export; the message names the source, row and step, or the folder."""


class CollationError(WebgymRLError, ValueError):
    """A sample that cannot be turned into model inputs."""


class PromptPrefixError(CollationError):
    """The prompt tokenised alone is not a prefix of the prompt + response tokens."""


class TokenMismatchError(CollationError):
    """The tokens the trainer would train on are not the ones the policy sampled from: its prompt
    tokenises to other ids than the endpoint reported, or a step's token ids and log-probabilities
    differ in number. Names the episode and step; never a silent fallback."""


# --------------------------------------------------------------------------------- checkpoints

class MergeError(WebgymRLError, ValueError):
    """A LoRA adapter checkpoint that does not fit its base model or cannot be folded into it (names
    the folder)."""


class PushError(WebgymRLError, ValueError):
    """The checkpoint or the push settings are unusable; the message says which file or value."""


# ------------------------------------------------------------------------ models, policy server

class ModelingError(WebgymRLError, RolloutError, ValueError):
    """A checkpoint that cannot be loaded as a Qwen-VL policy; the message names it."""

    kind = "modeling_error"


class UnknownFamilyError(ModelingError):
    """A model family (or a checkpoint's `model_type`) that is not Qwen2-VL, Qwen2.5-VL or Qwen3-VL."""

    kind = "unknown_family"


class CheckpointError(ModelingError):
    """A checkpoint folder or Hub id that lacks the files a processor or model needs."""

    kind = "checkpoint_error"


class PolicyServerError(WebgymRLError, PolicyError):
    """Base of the policy server's errors."""

    kind = "policy_server_error"
    status_code = 500


class BadChatRequest(PolicyServerError):
    """A chat request the server cannot answer as sent; the message names the field."""

    kind = "bad_chat_request"
    status_code = 400

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class PolicyUnauthorized(PolicyServerError):
    """A request without the right bearer token (HTTP 401)."""

    kind = "unauthorized"
    status_code = 401


class ReloadFailed(PolicyServerError):
    """``/reload`` could not load the new checkpoint; the old one keeps serving."""

    kind = "reload_failed"
    status_code = 400


class WeightsRejected(ReloadFailed):
    """A ``/weights`` body that is not safetensors or does not match the served model's
    ``state_dict()``; the message names the first bad key (`param`), expected vs received. The old
    weights keep serving, untouched."""

    kind = "weights_rejected"
    status_code = 400

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class SharedMemoryUnavailable(WeightsRejected):
    """The shared-memory handover cannot work here: the server finds no such file (it does not
    share the client's /dev/shm: another machine or container), or the client could not write one
    (/dev/shm missing or full). Nothing was changed; `push_weights` in its ``auto`` mode then sends
    the weights as an HTTP body instead."""

    kind = "shm_unavailable"
    status_code = 400


class WeightsPushFailed(PolicyServerError):
    """`push_weights` could not deliver: no connection, a timeout, or a server failure (HTTP 5xx).
    Transient: the weights were not judged, so the same push may be retried."""

    kind = "weights_push_failed"
    status_code = 502


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
