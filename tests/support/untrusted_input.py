"""Hypothesis strategies for what a model, a server or a file may send: the fuzz tests of every
parser of outside text draw from these (a parser must return a result or its module's one
documented reply-invalid error, never crash).

- `ODD_TEXT`: any text, including control and format characters, combining marks and lone
  surrogates (what JSON's ``"\\ud800"`` decodes to);
- `JSON_VALUES`: any JSON value as Python holds it: None, booleans, integers (up to 400 digits),
  floats (NaN and the infinities too), text, and lists and objects of those;
- `deeply_nested(depth)`: JSON text nested `depth` levels, lists and objects mixed;
- `json_text(values)`: the values as JSON text (NaN and Infinity the way Python writes them).
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

__all__ = ["JSON_VALUES", "ODD_TEXT", "deeply_nested", "json_text"]

_ODD_CHARACTERS = st.characters(codec=None, categories=["Cs", "Cc", "Cf", "Mn", "Zs", "So", "Lo"])
# Lone surrogates are joined in as pieces of their own: drawn as characters among all the odd ones
# (hypothesis merges alphabets), they would be rare.
ODD_TEXT = st.text() | st.lists(st.text(_ODD_CHARACTERS, max_size=8)
                                | st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"]),
                                max_size=4).map("".join)

_SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-10**400, max_value=10**400)
            | st.floats() | st.just(float("nan")) | st.just(float("inf")) | ODD_TEXT)

JSON_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ODD_TEXT, inner, max_size=4),
    max_leaves=16)


def deeply_nested(depth: int) -> str:
    """JSON text of lists and objects nested `depth` levels (deeper than the recursion limit when
    `depth` is large): ``[{"a": [{"a": ... }]}]``."""
    return '[{"a": ' * (depth // 2) + "1" + "}]" * (depth // 2)


def json_text(values: st.SearchStrategy = JSON_VALUES) -> st.SearchStrategy[str]:
    """`values` written as JSON text."""
    return values.map(json.dumps)
