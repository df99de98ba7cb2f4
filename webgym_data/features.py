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

__all__ = ["arrow_of", "feature_of"]

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


_ARROW_TYPES = {"bool": "bool_", "int32": "int32", "int64": "int64", "float32": "float32", "string": "string"}


def arrow_of(kind: Any, metadata: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    """The Arrow type of the feature `feature_of` gives for `kind`, and that feature as
    ``Features.to_dict`` writes it (what a parquet file's schema metadata carries), made without
    importing ``datasets`` (about a second of CPU). Values, lists and structs only: TypeError for an
    image or a type no feature holds."""
    import pyarrow as pa  # optional: pyarrow

    metadata = metadata or {}
    if metadata.get("feature"):
        raise TypeError(f"arrow_of: no Arrow form for the {metadata['feature']!r} feature")
    origin = typing.get_origin(kind)
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return arrow_of(args[0], metadata)
    dtype = metadata.get("dtype") or ("string" if isinstance(kind, type) and issubclass(kind, Enum)
                                      else _SIMPLE.get(kind) if isinstance(kind, type) else None)
    if dtype:
        return getattr(pa, _ARROW_TYPES[dtype])(), {"dtype": dtype, "_type": "Value"}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        parts = {item.name: arrow_of(hints[item.name], item.metadata) for item in dataclasses.fields(kind)}
        return (pa.struct([pa.field(name, arrow) for name, (arrow, _) in parts.items()]),
                {name: feature for name, (_, feature) in parts.items()})
    if origin in (list, tuple):
        arrow, feature = arrow_of(args[0])
        return pa.list_(arrow), {"feature": feature, "_type": "List"}
    raise TypeError(f"no dataset feature for type {kind!r}")
