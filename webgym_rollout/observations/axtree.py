"""The ``axtree`` observation: the page's accessibility tree as text, interactive elements first.

`render_axtree` writes two sections. ``Interactive elements:`` lists the step's elements (ids from 1,
in the element list's order, the ids the element actions take), one ``[id] role "name"`` line each.
``Page:`` then writes the tree (`AxNode`, as ``page_info(elements=True, axtree=True)`` reads it) in
document order, one ``role "name"`` line per node indented two spaces per level, a node that is one
of the elements starting with its ``[id]``. Example::

    Interactive elements:
    [1] textbox "Username"
    [2] button "Log in"
    Page:
    heading "Sign in"
    form
      [1] textbox "Username"
      [2] button "Log in"

The text is cut to a budget of tokens, counted by one fixed rule: a token is 4 characters, so a
budget of N tokens allows 4 * N characters (newlines included). Whole lines are kept, in order, as
long as they and the marker fit; what is left out is replaced by one last line, ``... (K more lines
cut to fit N tokens)``. The elements come first so that a small budget cuts the page's text, not
what the policy can act on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from webgym_rollout.browser.protocol import AxNode, Element

__all__ = ["CHARS_PER_TOKEN", "count_tokens", "render_axtree"]

CHARS_PER_TOKEN = 4
"""The token rule of the budget: this many characters make one token."""
_MAX_INDENT_LEVELS = 16
"""Deeper nodes are indented as this level (deep pages would spend the budget on spaces)."""


def count_tokens(text: str) -> int:
    """The tokens `text` counts for against a budget: its characters / `CHARS_PER_TOKEN`, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


def render_axtree(nodes: Sequence[AxNode], elements: Sequence[Element], *, budget_tokens: int) -> str:
    """The accessibility tree as text (the module docstring shows the format), at most `budget_tokens`
    tokens long by `count_tokens`; a cut leaves a ``... (K more lines cut to fit N tokens)`` line.

    An element's name is its tree node's accessible name when a node points at it, else its text.
    Raises ValueError when the budget is below 1 token.
    """
    if budget_tokens < 1:
        raise ValueError(f"budget_tokens must be at least 1, not {budget_tokens}")
    names = {node.element: node.name for node in nodes if node.element is not None}
    lines = ["Interactive elements:"]
    for number, element in enumerate(elements, start=1):
        name = names.get(number) or element.text
        lines.append(f"[{number}] {_describe(element.role or element.tag, name)}")
    lines.append("Page:")
    for node in nodes:
        known = node.element is not None and 1 <= node.element <= len(elements)
        prefix = f"[{node.element}] " if known else ""
        indent = "  " * min(node.depth, _MAX_INDENT_LEVELS)
        lines.append(f"{indent}{prefix}{_describe(node.role, node.name)}")
    return _fit(lines, budget_tokens)


def _describe(role: str, name: str) -> str:
    return f"{role} {json.dumps(name, ensure_ascii=False)}" if name else role


def _fit(lines: list[str], budget_tokens: int) -> str:
    """The lines joined by newlines, cut (with the marker line) to ``budget_tokens`` tokens."""
    limit = budget_tokens * CHARS_PER_TOKEN
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    kept: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        marker = f"... ({len(lines) - index - 1} more lines cut to fit {budget_tokens} tokens)"
        cost = len(line) + (1 if kept else 0)
        # This line fits only if the marker for the lines after it fits too.
        if used + cost + 1 + len(marker) > limit:
            marker = f"... ({len(lines) - index} more lines cut to fit {budget_tokens} tokens)"
            return "\n".join([*kept, marker])[:limit] if kept else marker[:limit]
        kept.append(line)
        used += cost
    return "\n".join(kept)  # not reached: the whole text did not fit
