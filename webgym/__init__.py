"""webgym: the umbrella of the toolkit: the end-to-end demo (`webgym demo`) and shared CLI plumbing.

The three working packages are `webgym_data`, `webgym_rollout` and `webgym_rl`.
"""

from pathlib import Path

__version__ = "0.1.0"

# The card templates. `webgym/cards` links to the top-level `cards/` folder, so an installed wheel
# carries them too (a path relative to the repository root would not exist there).
CARDS_DIR = Path(__file__).resolve().parent / "cards"
