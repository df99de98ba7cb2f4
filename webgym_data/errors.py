"""The exception tree of `webgym_data`: catch at the level you can handle.

Every public exception class of `webgym_data` is defined here (checked by
``tests/webgym_data/test_errors.py``); the modules that raise one import it from here and still
export it (``from webgym_data.loading import NotATaskSetError`` works). Each message names the
file, row, field, setting or URL that is wrong.

::

    WebgymDataError                        the root of every error webgym_data raises
     ├── TaskValidationError (ValueError)  task input that cannot be used (`schema`, `loading`); names
     │    │                                the file, row, line and field (`to_dict` for a report)
     │    ├── InvalidTasksError            every invalid row of a task source at once (`errors`: one
     │    │                                per row; the message lists the first MAX_LISTED_ERRORS)
     │    └── TaskSourceError              the file or folder itself: missing, unreadable, of an
     │         │                           unknown type, or without tasks of the split
     │         └── NotATaskSetError (FileNotFoundError)  a folder that is not a built task set
     ├── RubricError (ValueError)          a malformed rubric value (`schema`, `rubrics.parse_rubric`;
     │                                     `Task.from_row` reports it as a TaskValidationError)
     ├── SeedNotFoundError (FileNotFoundError)  a seed file or folder that does not exist, or a
     │                                     folder without the importer's files (`importers`)
     ├── UnknownImporterError (KeyError)   no importer of that name (lists the known ones)
     ├── ImportSettingsError (ValueError)  ``webgym-data import`` settings that cannot work
     ├── HubImportError                    a Hub dataset could not be loaded (offline, gated, missing)
     ├── MappingError (ValueError)         a generic-importer column mapping names no task field
     ├── LLMError                          the data pipeline's LLM client (`llm`)
     │    ├── LLMUnavailable               endpoint unreachable, or still 5xx/429 or a body that is
     │    │    │                           not JSON after the retries (names the URL)
     │    │    └── LLMTimeout              no answer within the timeout, through every retry
     │    ├── LLMRequestRejected           the endpoint refused the request: 4xx other than 429
     │    ├── LLMReplyInvalid              the replies stayed malformed or invalid after the retries
     │    └── LLMSettingsError (ValueError)  settings that cannot work (a URL without a model)
     ├── EventLoopError (RuntimeError)     a synchronous entry point called inside a running event
     │                                     loop (`llm.run_sync`: await the async twin instead)
     ├── RubricsError (ValueError)         ``webgym-data rubrics`` cannot run as asked (a missing
     │                                     source, output or endpoint)
     ├── DecomposeError (ValueError)       decomposition settings that are invalid (`decompose`)
     ├── SplitError (ValueError)           the split cannot be made as asked: bad settings, or a fixed
     │                                     assignment that breaks the split rules (`split`)
     ├── BuildError (ValueError)           the build cannot run as asked: bad settings, no seeds, a
     │                                     destination that is not an earlier build (`build`)
     └── PushError                         publishing a build to the Hub failed (`versions`; names
                                           the repo and the step)

Exempt (control flow inside one module, never raised to a caller):
``webgym_data.importers._base.Skip``, raised by an importer's ``convert`` to leave a row out (its
reason lands in ``ImportResult.skipped``), and ``webgym_data.llm._InvalidReply``, one reply that
cannot be used (the client asks again).

Settings read from the command line or YAML are checked by `webgym_core.settings`, which reports
an invalid value as `webgym_core.errors.SettingsError` (also a ValueError).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "MAX_LISTED_ERRORS",
    "BuildError",
    "DecomposeError",
    "EventLoopError",
    "HubImportError",
    "ImportSettingsError",
    "InvalidTasksError",
    "LLMError",
    "LLMReplyInvalid",
    "LLMRequestRejected",
    "LLMSettingsError",
    "LLMTimeout",
    "LLMUnavailable",
    "MappingError",
    "NotATaskSetError",
    "PushError",
    "RubricError",
    "RubricsError",
    "SeedNotFoundError",
    "SplitError",
    "TaskSourceError",
    "TaskValidationError",
    "UnknownImporterError",
    "WebgymDataError",
]

MAX_LISTED_ERRORS = 20
"""Invalid rows an `InvalidTasksError` message lists; the rest are counted (all are in ``errors``)."""


class WebgymDataError(Exception):
    """Base class of every error raised by webgym_data."""


# ------------------------------------------------------------------------------ tasks and rubrics

class TaskValidationError(WebgymDataError, ValueError):
    """Task input cannot be used. Says where: source file, row number (0-based), for a text file the
    line number (1-based, as an editor shows it) and field."""

    def __init__(self, message: str, *, file: str | None = None, row: int | None = None,
                 field: str | None = None, line: int | None = None) -> None:
        self.file, self.row, self.field, self.reason, self.line = file, row, field, message, line
        where = []
        if file is not None:
            where.append(str(file))
        if row is not None:
            where.append(f"row {row}")
        if field is not None:
            where.append(f"field '{field}'")
        text = f"{', '.join(where)}: {message}" if where else message
        super().__init__(text if line is None else f"{text} (line {line})")

    def to_dict(self) -> dict[str, Any]:
        """``{file, row, line, field, reason}``, for a report that lists skipped rows (JSON-ready;
        ``line`` is None for a file without lines, such as parquet)."""
        return {"file": self.file, "row": self.row, "line": self.line, "field": self.field,
                "reason": self.reason}


class TaskSourceError(TaskValidationError):
    """A task file or folder cannot be read: missing, unreadable, of an unknown type, or without
    tasks of the asked split."""


class NotATaskSetError(TaskSourceError, FileNotFoundError):
    """A folder is not a built task set (no such folder, or no task shards in it)."""


class InvalidTasksError(TaskValidationError):
    """Rows of a task source are invalid. `errors` holds every one (a `TaskValidationError` naming
    file, row and field); the message lists the first `MAX_LISTED_ERRORS` and counts the rest."""

    def __init__(self, errors: Sequence[TaskValidationError], *, source: str | None = None) -> None:
        self.errors: tuple[TaskValidationError, ...] = tuple(errors)
        if len(self.errors) == 1:
            message = str(self.errors[0])
        else:
            shown = [f"  {error}" for error in self.errors[:MAX_LISTED_ERRORS]]
            if len(self.errors) > MAX_LISTED_ERRORS:
                shown.append(f"  ... and {len(self.errors) - MAX_LISTED_ERRORS} more invalid rows")
            where = f" in {source}" if source else ""
            message = "\n".join([f"{len(self.errors)} invalid task rows{where}:", *shown])
        super().__init__(message)
        # The attributes say where the first bad row is (the message says where each one is).
        first = self.errors[0] if self.errors else TaskValidationError("", file=source)
        self.file, self.row, self.field, self.reason = first.file, first.row, first.field, message


class RubricError(WebgymDataError, ValueError):
    """A rubric (a list of fact groups) is malformed; the message says which item and why."""


# ------------------------------------------------------------------------------------- importers

class SeedNotFoundError(WebgymDataError, FileNotFoundError):
    """A seed file or folder does not exist (or a folder holds none of the importer's files)."""


class UnknownImporterError(WebgymDataError, KeyError):
    """No importer is registered under that name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ImportSettingsError(WebgymDataError, ValueError):
    """``webgym-data import`` cannot run as asked; the message names the setting first."""


class HubImportError(WebgymDataError):
    """A Hub dataset id could not be loaded (offline, gated, missing, or not in the expected format)."""


class MappingError(WebgymDataError, ValueError):
    """A column mapping names a task field that does not exist (or is malformed)."""


# ------------------------------------------------------------------------------------ LLM client

class LLMError(WebgymDataError):
    """Base class of the LLM client's errors."""


class LLMUnavailable(LLMError):
    """The endpoint could not be reached, or kept failing (5xx, 429) after every retry."""

    def __init__(self, message: str) -> None:
        super().__init__(f"LLM endpoint {message}")


class LLMTimeout(LLMUnavailable):
    """The endpoint did not answer within ``endpoint.timeout_s``, through every retry."""


class LLMRequestRejected(LLMError):
    """The endpoint refused the request (4xx other than 429: bad API key, unknown model, ...)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"LLM endpoint {message}")


class LLMReplyInvalid(LLMError):
    """Every attempt gave a reply that was not JSON, was cut off, or failed validation."""

    def __init__(self, purpose: str, cache_key: Sequence[str], attempts: int, reason: str) -> None:
        self.purpose, self.cache_key, self.attempts, self.reason = purpose, tuple(cache_key), attempts, reason
        what = " | ".join(str(part)[:80] for part in cache_key)
        super().__init__(f"{purpose} reply still invalid after {attempts} attempt(s) for [{what}]: {reason}")


class LLMSettingsError(LLMError, ValueError):
    """LLM settings that cannot work; the message names the setting first."""


class EventLoopError(WebgymDataError, RuntimeError):
    """A synchronous entry point was called from inside a running event loop (await its async twin)."""


# ------------------------------------------------------------------------------ pipeline steps

class RubricsError(WebgymDataError, ValueError):
    """``webgym-data rubrics`` cannot run as asked (a missing source, output or endpoint)."""


class DecomposeError(WebgymDataError, ValueError):
    """Decomposition settings are invalid."""


class SplitError(WebgymDataError, ValueError):
    """The split cannot be made as asked."""


class BuildError(WebgymDataError, ValueError):
    """The build cannot run as asked."""


class PushError(WebgymDataError):
    """Publishing to the Hub failed."""
