"""The dataset and model card templates (``cards/`` at the top of the repository).

`webgym_core/cards` links to that folder, so an installed wheel carries the templates too. A
template is Markdown with ``$name`` placeholders (`string.Template`); every placeholder must be given.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["CARDS_DIR", "render_card"]

CARDS_DIR = Path(__file__).resolve().parent / "cards"


def render_card(template: str, values: Mapping[str, Any]) -> str:
    """The card `template` (a file name in `CARDS_DIR`, e.g. ``"model_card.md"``) filled with `values`."""
    text = (CARDS_DIR / template).read_text(encoding="utf-8")
    return string.Template(text).substitute(values)
