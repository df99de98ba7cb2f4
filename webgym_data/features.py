"""The Hugging Face `datasets.Features` of a dataclass, derived from its fields' types: one rule
for the task rows (`webgym_data.schema.task_features`) and the trajectory rows
(`webgym_rollout.trajectory.contract.trajectory_features`).

A field's metadata may name its feature: ``{"dtype": "int64"}`` (a `datasets.Value` of that type,
where the default for an int is int32) or ``{"feature": "image"}`` (a `datasets.Image`). Otherwise
the type decides: bool, int, float and str are Values (bool, int32, float32, string), an Enum a
string, a list or tuple a `datasets.List` of its item, a dataclass a struct of its fields, and
``X | None`` the feature of X. (``datasets`` is imported where a feature is made: it is an extra.)
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any

__all__ = ["feature_of"]

_SIMPLE = {bool: "bool", int: "int32", float: "float32", str: "string"}


def feature_of(kind: Any, metadata: Mapping[str, Any] | None = None) -> Any:
    """The dataset feature of a value of type `kind` (a field's `metadata` may name it: see the
    module docstring); TypeError for a type no feature holds."""
    from datasets import Image, List, Value  # optional: datasets

    metadata = metadata or {}
    if metadata.get("feature") == "image":
        return Image()
    if metadata.get("dtype"):
        return Value(metadata["dtype"])
    origin = typing.get_origin(kind)
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return feature_of(args[0], metadata)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return Value("string")
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return {item.name: feature_of(hints[item.name], item.metadata) for item in dataclasses.fields(kind)}
    if origin in (list, tuple):
        return List(feature_of(args[0]))
    if kind in _SIMPLE:
        return Value(_SIMPLE[kind])
    raise TypeError(f"no dataset feature for type {kind!r}")
