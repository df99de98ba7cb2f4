"""The agent: what a policy is shown and what it may do.

`actions` defines the action space once (the prompt text, the tool schema and the parser come from
it); `protocol` the observation a policy sees at each step and how its reply is read (prompt
variants, history, memory); `policies` the policies themselves (``await policy.act(observation)``:
the DOM-aware and pixel random policies, the OpenAI-protocol client of a served model). May import
`webgym_core`, `webgym_data`, `webgym_sites` (the expert's plans) and `webgym_rollout.errors` only:
a policy sees observations, never a browser.

The names of `protocol` are re-exported here, so imports written for the former module
`webgym_rollout.agent` keep working.
"""

from webgym_rollout.agent.protocol import (
    VARIANTS,
    AgentSettings,
    Observation,
    ParsedResponse,
    Round,
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
    "Round",
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
