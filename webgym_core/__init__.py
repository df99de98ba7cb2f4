"""webgym_core: what every WebGym package shares, and nothing else.

- `webgym_core.settings`: settings dataclasses as CLI flags and YAML keys (one definition per knob);
- `webgym_core.endpoint`: `Endpoint` (where an OpenAI-compatible model is served, how hard to try)
  and `ChatClient`, the one retry client behind the data LLM, the policy and the judge;
- `webgym_core.completion`: `ChatReply`, a chat completion's reply read and checked once, and
  `clean_text` (lone surrogates out: text every file can store);
- `webgym_core.cli`: the lazy command groups of the ``webgym-*`` commands (``-v`` before or after
  the sub-command) and the options the ``push`` commands share;
- `webgym_core.files`: atomic file writes; `webgym_core.cards`: the dataset and model card templates;
- `webgym_core.sources`: `looks_like_path` (a name never sent to the Hub) and `url_problem` (a server
  URL without its scheme).

The packages depend one way: webgym_core <- webgym_data <- webgym_rollout <- webgym_rl <- webgym.
"""

from webgym_core.cards import CARDS_DIR, render_card
from webgym_core.completion import ChatReply, clean_text
from webgym_core.endpoint import ChatClient, Endpoint, EndpointErrors, Usage
from webgym_core.errors import (
    CoreError,
    EndpointError,
    EndpointRejected,
    EndpointReplyInvalid,
    EndpointTimeout,
    EndpointUnavailable,
    SettingsError,
)
from webgym_core.settings import SettingsCommand, flat, load_settings, settings_options, settings_to_dict
from webgym_core.sources import looks_like_path, url_problem

__version__ = "0.2.0"

__all__ = [
    "CARDS_DIR",
    "ChatClient",
    "ChatReply",
    "CoreError",
    "Endpoint",
    "EndpointError",
    "EndpointErrors",
    "EndpointRejected",
    "EndpointReplyInvalid",
    "EndpointTimeout",
    "EndpointUnavailable",
    "SettingsCommand",
    "SettingsError",
    "Usage",
    "clean_text",
    "flat",
    "load_settings",
    "looks_like_path",
    "render_card",
    "settings_options",
    "settings_to_dict",
    "url_problem",
]
