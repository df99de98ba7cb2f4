"""The agent: what a policy is shown and what it may do.

The action space is defined once in `webgym_rollout.actions` (the prompt text, the tool schema and
the parser come from it; it moved out of this package in 0.3.0 because a trajectory step holds a
typed action); `protocol` the observation a policy sees at each step and how its reply is read (prompt
variants, history, memory); `policies` the policies themselves (``await policy.act(observation)``:
the DOM-aware and pixel random policies, the OpenAI-protocol client of a served model). May import
`webgym_core`, `webgym_data`, `webgym_sites` (the expert's plans), the action space
(`webgym_rollout.actions`), the trajectory contract and `webgym_rollout.errors` only: a policy sees
observations, never a browser.

The names of `protocol` are re-exported here, so imports written for the former module
`webgym_rollout.agent` keep working. ``Round`` (an earlier step as the context showed it) is gone:
the history is the episode's `Step`s; the name builds a `Step`, with a DeprecationWarning, for one
release.
"""

from typing import Any

from webgym_rollout.agent import protocol as _protocol
from webgym_rollout.agent.protocol import (
    VARIANTS,
    AgentSettings,
    Observation,
    ParsedResponse,
    build_messages,
    format_response,
    image_data_url,
    inline_images,
    observation_images,
    parse_response,
    strip_think,
    system_prompt,
)

__all__ = [
    "AgentSettings",
    "Observation",
    "ParsedResponse",
    "VARIANTS",
    "build_messages",
    "format_response",
    "image_data_url",
    "inline_images",
    "observation_images",
    "parse_response",
    "strip_think",
    "system_prompt",
]


def __getattr__(name: str) -> Any:
    if name == "Round":
        return _protocol.Round  # warns
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
