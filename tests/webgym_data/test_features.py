"""feature_of: the dataset feature of a dataclass field's type (the task and trajectory rows'
Features are derived with it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import pytest
from datasets import Image, List, Value

from webgym_data.features import feature_of


class Colour(Enum):
    RED = "red"


@dataclass
class Inner:
    name: str
    count: int = field(default=0, metadata={"dtype": "int64"})


@dataclass
class Outer:
    flag: bool
    score: float
    colour: Colour
    inner: Inner
    items: tuple[Inner, ...]
    tags: list[str]
    maybe: int | None = None
    shot: bytes = field(default=b"", metadata={"feature": "image"})


def test_each_type_has_its_feature():
    assert feature_of(Outer) == {
        "flag": Value("bool"), "score": Value("float32"), "colour": Value("string"),
        "inner": {"name": Value("string"), "count": Value("int64")},
        "items": List({"name": Value("string"), "count": Value("int64")}),
        "tags": List(Value("string")), "maybe": Value("int32"), "shot": Image(),
    }


def test_a_type_no_feature_holds_is_refused():
    with pytest.raises(TypeError, match="no dataset feature for type"):
        feature_of(dict[str, int])
