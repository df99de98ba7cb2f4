"""What the scripted expert does on a generated site task: a plan of `Move`s, from the task's own truth.

A generated task keeps in ``source.metadata["params"]`` what a session that does it right does (the
products and options, the search, the form fields, the account, the answer). Each site's task module
turns those into a plan: a list of high-level moves, which `webgym_rollout.agent.expert.ExpertPolicy`
plays through the ordinary action space (clicks on element centres, typing, choosing options,
navigating), finding each target among the observation's elements by its ``id`` or ``name``
attribute (`Element.name`), scrolling when it is not in view::

    Goto("/shop/product/p0042")           navigate to this path on the task's site server
    Fill("email", "a@b.test")             click the field, select what it holds, type the text
    Fill("city", "York", submit=True)     ... and press Enter (submits its form)
    Choose("option-colour", "Blue")       choose an option (its visible text or value) of a <select>
    Press("add-button")                   click the element with this id or name
    Press("colour", text="blue")          ... the one of that name whose text (or value) is this
    Answer("$12.95")                      end the episode with this answer

`webgym_sites.generate.expert_plan(task)` finds the site's planner by the task's
``metadata["site"]``. The expert is a demonstration source: it reads the truth the generator wrote,
which no agent sees.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Answer", "Choose", "Fill", "Goto", "Move", "Press"]


@dataclass(frozen=True)
class Goto:
    """Navigate to `path` (with its query) on the site server the task's start URL names."""

    path: str


@dataclass(frozen=True)
class Fill:
    """Click the field whose id or name is `field`, select its content, type `text` (Enter if `submit`)."""

    field: str
    text: str
    submit: bool = False


@dataclass(frozen=True)
class Choose:
    """Choose `option` (visible text or value) in the ``<select>`` whose id or name is `field`."""

    field: str
    option: str


@dataclass(frozen=True)
class Press:
    """Click the element whose id or name is `target` (and, with `text`, whose text or value is it)."""

    target: str
    text: str = ""


@dataclass(frozen=True)
class Answer:
    """Finish with `text` as the final answer."""

    text: str


Move = Goto | Fill | Choose | Press | Answer
