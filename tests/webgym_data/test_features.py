"""feature_of: the dataset feature of a dataclass field's type (the task and trajectory rows'
Features are derived with it); arrow_of: its Arrow type and feature dict without `datasets`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import pytest
from datasets import Features, Image, List, Value

from webgym_data.features import arrow_of, feature_of
from webgym_data.schema import task_arrow_schema, task_features


class Colour(Enum):
    RED = "red"


@dataclass
class Inner:
    name: str
    count: int = field(default=0, metadata={"dtype": "int64"})


@dataclass
class Plain:
    """Every kind of field but an image, which has no Arrow form without `datasets`."""

    flag: bool
    score: float
    colour: Colour
    inner: Inner
    items: tuple[Inner, ...]
    tags: list[str]
    maybe: int | None = None


@dataclass
class Outer(Plain):
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


def test_arrow_of_gives_the_arrow_type_and_the_feature_dict_that_datasets_gives():
    arrow, feature = arrow_of(Plain)
    features = Features(feature_of(Plain))
    assert feature == features.to_dict()
    assert arrow == features.type
    with pytest.raises(TypeError, match="image"):
        arrow_of(Outer)
    with pytest.raises(TypeError, match="no dataset feature for type"):
        arrow_of(dict[str, int])


def test_the_task_arrow_schema_is_the_features_schema_metadata_and_all():
    schema = task_arrow_schema()
    assert schema.equals(task_features().arrow_schema, check_metadata=True)
    assert Features.from_arrow_schema(schema) == task_features()
