"""The dataset and model card templates (``cards/`` at the top of the repository).

`webgym_core/cards` links to that folder, so an installed wheel carries the templates too. A
template is Markdown with ``$name`` placeholders (`string.Template`); every placeholder must be given.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["CARDS_DIR", "render_card", "size_category"]

CARDS_DIR = Path(__file__).resolve().parent / "cards"


def render_card(template: str, values: Mapping[str, Any]) -> str:
    """The card `template` (a file name in `CARDS_DIR`, e.g. ``"model_card.md"``) filled with `values`."""
    text = (CARDS_DIR / template).read_text(encoding="utf-8")
    return string.Template(text).substitute(values)


def size_category(n: int) -> str:
    """The Hub's ``size_categories`` tag of a dataset of `n` rows (``n<1K``, ``1K<n<10K``, ...)."""
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if n < limit:
            return label
    return "10M<n<100M"
