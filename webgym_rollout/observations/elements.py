"""The ``elements`` observation: the viewport's interactive elements as a compact list of lines.

One line per element, numbered from 1 in the order of the list (the number an element action
names, and the label set-of-marks draws)::

    [1] textbox "" (id=username)
    [2] button "Login" (id=subbtn)
    [3] link "Next page"

The role (or the tag when the page gives none), the element's text in double quotes (its visible
text, value, label, placeholder or title; cut to `TEXT_CHARS` characters and JSON-escaped, so a
quote or a line break in the page cannot break the line), and ``(id=...)`` with the element's
``id`` or ``name`` attribute when it has one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TEXT_CHARS", "render_elements"]

TEXT_CHARS = 80
"""Longest text quoted for one element; a longer one is cut and ends with ``...``."""


def _get(element: Any, name: str) -> Any:
    return element.get(name, "") if isinstance(element, Mapping) else getattr(element, name, "")


def render_elements(elements: Sequence[Any]) -> str:
    """One line per element of `elements` (`webgym_rollout.browser.protocol.Element`s, or dicts with
    their fields), numbered from 1; "" when there are none."""
    lines = []
    for number, element in enumerate(elements, start=1):
        kind = str(_get(element, "role") or _get(element, "tag") or "element")
        text = " ".join(str(_get(element, "text") or "").split())
        if len(text) > TEXT_CHARS:
            text = text[:TEXT_CHARS - 3] + "..."
        line = f"[{number}] {kind} {json.dumps(text, ensure_ascii=False)}"
        name = str(_get(element, "name") or "")
        if name:
            line += f" (id={name})"
        lines.append(line)
    return "\n".join(lines)
