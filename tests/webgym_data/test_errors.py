"""webgym_data.errors: one exception root, and the tree its docstring draws is the real one."""

from __future__ import annotations

import importlib

import pytest

from tests.support.error_trees import check_defined_in_errors, check_drawn_tree
from webgym_data import errors

EXEMPT = {
    "webgym_data.importers._base.Skip":
        "raised by an importer's convert to leave a row out; the reason lands in ImportResult.skipped",
    "webgym_data.llm._InvalidReply": "one reply the client cannot use; it asks again",
}

MOVED = {  # where these were defined before errors.py held them all: those imports keep working
    "webgym_data.schema": ["RubricError", "TaskValidationError", "WebgymDataError"],
    "webgym_data.loading": ["InvalidTasksError", "MAX_LISTED_ERRORS", "NotATaskSetError", "TaskSourceError"],
    "webgym_data.llm": ["EventLoopError", "LLMError", "LLMReplyInvalid", "LLMRequestRejected",
                        "LLMSettingsError", "LLMTimeout", "LLMUnavailable"],
    "webgym_data.importers": ["HubImportError", "ImportSettingsError", "MappingError", "SeedNotFoundError",
                              "UnknownImporterError"],
    "webgym_data.importers._base": ["SeedNotFoundError"],
    "webgym_data.importers.generic": ["MappingError"],
    "webgym_data.rubrics": ["RubricsError"],
    "webgym_data.split": ["SplitError"],
    "webgym_data.decompose": ["DecomposeError"],
    "webgym_data.build": ["BuildError"],
    "webgym_data.versions": ["PushError"],
}


def test_every_exception_class_of_the_package_is_in_errors_under_the_root():
    public = check_defined_in_errors("webgym_data", errors.WebgymDataError, EXEMPT)
    assert set(public) >= {name for names in MOVED.values() for name in names if name != "MAX_LISTED_ERRORS"}


def test_the_docstring_draws_the_real_tree():
    check_drawn_tree(errors, errors.WebgymDataError)


def test_the_extra_bases_stay_so_existing_except_clauses_still_catch():
    for cls in (errors.TaskValidationError, errors.RubricError, errors.ImportSettingsError,
                errors.MappingError, errors.LLMSettingsError, errors.RubricsError, errors.DecomposeError,
                errors.SplitError, errors.BuildError):
        assert issubclass(cls, ValueError), cls
    for cls in (errors.SeedNotFoundError, errors.NotATaskSetError):
        assert issubclass(cls, FileNotFoundError), cls
    assert issubclass(errors.UnknownImporterError, KeyError)
    assert issubclass(errors.EventLoopError, RuntimeError)
    assert str(errors.UnknownImporterError("no importer 'x'")) == "no importer 'x'"  # KeyError would quote it


def test_invalid_tasks_error_lists_the_first_rows_and_counts_the_rest():
    rows = [errors.TaskValidationError("missing", file="t.jsonl", row=i, field="task_name", line=i + 1)
            for i in range(errors.MAX_LISTED_ERRORS + 3)]
    caught = errors.InvalidTasksError(rows, source="t.jsonl")
    assert str(caught).startswith(f"{len(rows)} invalid task rows in t.jsonl:")
    assert "... and 3 more invalid rows" in str(caught)
    assert (caught.file, caught.row, caught.field) == ("t.jsonl", 0, "task_name")
    assert rows[1].to_dict() == {"file": "t.jsonl", "row": 1, "line": 2, "field": "task_name",
                                 "reason": "missing"}


@pytest.mark.parametrize(("module", "names"), MOVED.items())
def test_the_modules_that_defined_a_class_still_export_it(module, names):
    imported = importlib.import_module(module)
    for name in names:
        assert getattr(imported, name) is getattr(errors, name)
        assert name in getattr(imported, "__all__", [name])
