"""webgym_data: build, extend and version the WebGym task set as Hugging Face datasets.

The core API, importable from here (the modules say the rest)::

    from webgym_data import Task, FactGroup, load_tasks, read_task_set, write_tasks, WebgymDataError

`webgym_data.schema` is the task contract, `webgym_data.loading` the one task reader; the build
pipeline is `webgym_data.build` (``webgym-data build``). Every error raised here is a
`WebgymDataError`.
"""

from webgym_data.loading import (
    NotATaskSetError,
    TaskSourceError,
    load_tasks,
    read_task_set,
    task_shards,
    write_tasks,
)
from webgym_data.schema import (
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
    "SCHEMA_VERSION",
    "FactGroup",
    "NotATaskSetError",
    "Task",
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
