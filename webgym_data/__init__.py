"""webgym_data: build, extend and version the WebGym task set as Hugging Face datasets.

The core API, importable from here (the modules say the rest)::

    from webgym_data import Task, FactGroup, load_tasks, read_task_set, write_tasks, WebgymDataError

    tasks = load_tasks("tasks.jsonl", skip_invalid=True)   # a TaskList: the valid tasks ...
    tasks.invalid                                          # ... and the skipped rows' errors

`webgym_data.schema` is the task contract, `webgym_data.loading` the one task reader; the build
pipeline is `webgym_data.build` (``webgym-data build``). Every error raised here is a
`WebgymDataError`; `webgym_data.errors` draws the exception tree.
"""

from webgym_data.loading import (
    InvalidTasksError,
    NotATaskSetError,
    TaskList,
    TaskSourceError,
    load_tasks,
    read_task_set,
    task_shards,
    write_tasks,
)
from webgym_data.schema import (
    MAX_INSTRUCTION_CHARS,
    SCHEMA_VERSION,
    FactGroup,
    Task,
    TaskSource,
    TaskValidationError,
    WebgymDataError,
    task_features,
)

__version__ = "0.2.0"

__all__ = [
    "MAX_INSTRUCTION_CHARS",
    "SCHEMA_VERSION",
    "FactGroup",
    "InvalidTasksError",
    "NotATaskSetError",
    "Task",
    "TaskList",
    "TaskSource",
    "TaskSourceError",
    "TaskValidationError",
    "WebgymDataError",
    "load_tasks",
    "read_task_set",
    "task_features",
    "task_shards",
    "write_tasks",
]
