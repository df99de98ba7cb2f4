"""Policies: ``await policy.act(observation) -> PolicyOutput``.

- `OpenAIPolicy`: any OpenAI-compatible chat-completions endpoint (vLLM in production,
  ``webgym-rl serve-policy`` on CPU, hosted APIs for baselines) through the toolkit's one retry
  client (`webgym_core.endpoint.ChatClient`: bounded concurrency, timeouts, typed retries, usage).
  Screenshots go inline as base64 ``data:`` URLs, never as file paths, so policy and browsers need
  no shared disk. Sampling lives in `SamplingSettings`: temperature, top_p and top_k are sent with
  every request (never left to the server's or the checkpoint's defaults) and recorded on the
  output (`PolicyOutput.sampling`). "Token in, token out": the request asks for the sampled token ids
  with their log-probabilities (``return_token_ids``, ``logprobs``) and the output keeps them, with a
  digest of the prompt's token ids, so the trainer trains on exactly the tokens sampled; the version
  that answered (the endpoint's ``system_fingerprint``) is kept too.
- `RandomPolicy`: clicks the centre of a random interactive element or types words from the
  instruction; seeded, needs no model. It writes its replies in the agent protocol's format, so its
  successful episodes can bootstrap training and it benchmarks the rollout machinery alone.
- `PixelRandomPolicy`: clicks a uniformly random point of the 0-1000 grid, with well-formed
  replies; it reads nothing (no elements, no pixels): the floor a policy that learned must beat.

A reply that does not parse is not an error here: `PolicyOutput.parsed` has ``action=None`` and the
reason, and the runner records it as a no-op step (so is an empty reply: ``content`` null). Failures
of the endpoint raise::

    RolloutError
     └── PolicyError                  (webgym_rollout.errors)
          ├── PolicyUnavailable       connection failed, or HTTP 5xx/429 after the retries, or a body
          │                           that is no chat completion (no choices, no message, content
          │                           that is not text); names the URL
          ├── PolicyTimeout           no answer within timeout_s, after the retries
          └── PolicyRejected          HTTP 4xx other than 429 (bad key, unknown model); not retried

Serving Qwen3-VL-8B-Instruct with vLLM (untested here: these machines have no GPU; ``pip install
'webgym[vllm]'`` on a CUDA machine; vLLM 0.10.2 or newer, the first to answer ``return_token_ids``
and to offer ``--logprobs-mode``)::

    vllm serve Qwen/Qwen3-VL-8B-Instruct --port 8000 --served-model-name qwen3-vl-8b \\
        --max-model-len 32768 --limit-mm-per-prompt '{"image": 5, "video": 0}' \\
        --mm-processor-kwargs '{"min_pixels": 3136, "max_pixels": 1003520}' \\
        --generation-config vllm --logprobs-mode processed_logprobs \\
        --gpu-memory-utilization 0.9 --max-num-seqs 128 --tensor-parallel-size 1

``--generation-config vllm`` keeps the checkpoint's generation_config.json (Qwen's sets top_k and
top_p) from filling in sampling settings a request leaves out (this client leaves none out);
``--logprobs-mode processed_logprobs`` returns the log-probabilities of the distribution each token
was sampled from (after temperature, top-k and top-p), as the CPU policy server does, instead of the
raw model's; the pixel bounds must be the trainer's (``--min-pixels`` / ``--max-pixels``). Point
the policy at it: ``OpenAIPolicy(Endpoint(base_url="http://HOST:8000/v1",
model="qwen3-vl-8b"))`` (``webgym-rollout run --policy openai --policy-base-url ... --policy-model ...``).
`PolicySettings` is what the CLI fills; `make_policy(settings)` builds the policy it describes.
``--limit-mm-per-prompt`` must allow ``AgentSettings.full_rounds + 1``
images (the last 4 rounds plus the current screenshot).
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from webgym_core.completion import ChatReply, clean_text
from webgym_core.endpoint import ChatClient, Endpoint, EndpointErrors, Usage
from webgym_core.settings import flat
from webgym_rollout.actions import GRID_SIZE, AgentAction, pixels_to_grid
from webgym_rollout.agent.protocol import (
    AgentSettings,
    Observation,
    ParsedResponse,
    build_messages,
    format_response,
    inline_images,
    observation_images,
    parse_response,
)
from webgym_rollout.errors import PolicyRejected, PolicyTimeout, PolicyUnavailable
from webgym_rollout.trajectory.contract import Sampling, prompt_token_digest, version_number

__all__ = [
    "OpenAIPolicy",
    "PixelRandomPolicy",
    "Policy",
    "PolicyOutput",
    "PolicyRejected",
    "PolicySettings",
    "PolicyTimeout",
    "PolicyUnavailable",
    "RandomPolicy",
    "RandomPolicySettings",
    "SHORTCUT_MODEL_PREFIX",
    "SamplingSettings",
    "element_field",
    "make_policy",
    "scripted_reply",
]

logger = logging.getLogger(__name__)

SHORTCUT_MODEL_PREFIX = "shortcut:"
"""The ``policy_model`` of a shortcut's episodes starts with it (``shortcut:spray_numbers``): adversarial
episodes that no judge should pass (``judge-eval`` flags a judge that passes one the truth fails)."""


@dataclass(frozen=True)
class PolicyOutput:
    """One policy step: the reply, what it parsed to, and the messages as sent (image placeholders)."""

    response: str
    parsed: ParsedResponse
    messages: list[dict[str, Any]]
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    latency_s: float = 0.0
    policy_version: int | None = None
    """The version of the weights that produced the reply (`Step.policy_version`), read from the name
    the endpoint gave them (its reply's ``system_fingerprint`` when it sets one, e.g. the CPU policy
    server's ``v3``; else the model it answered as, a vLLM adapter's ``name-v3``); None when that
    names no version, and for a policy without a model."""
    logprobs: tuple[float, ...] = ()
    """Log-probability of each reply token, when the endpoint returned them."""
    token_ids: tuple[int, ...] = ()
    """The reply's token ids as sampled, when the endpoint returned them (``return_token_ids``)."""
    prompt_token_hash: str = ""
    """`prompt_token_digest` of the prompt's token ids as the endpoint reported them ("" if it did not)."""
    sampling: Sampling | None = None
    """The sampling settings the request sent (None for a policy without a model)."""

    @property
    def action(self) -> AgentAction | None:
        return self.parsed.action

    @classmethod
    def scripted(cls, action: AgentAction, *, model: str = "scripted") -> PolicyOutput:
        """The output of a policy that chose `action` without a model (scripted play, tests)."""
        response = action.to_tool_call()
        return cls(response=response, parsed=ParsedResponse(action=action), messages=[], model=model,
                   finish_reason="stop")

    @property
    def messages_json(self) -> str:
        """The messages as a trajectory step stores them."""
        return json.dumps(self.messages, ensure_ascii=False)


@runtime_checkable
class Policy(Protocol):
    """Anything that maps an observation to a reply. A policy that reads the page's interactive
    elements (``Observation.elements``) says so with ``observes_elements = True``."""

    model_id: str

    async def act(self, observation: Observation) -> PolicyOutput: ...


@dataclass(frozen=True)
class SamplingSettings:
    """Sampling parameters sent with every policy request (each step records temperature, top_p and
    top_k: `webgym_rollout.trajectory.contract.Sampling`)."""

    temperature: float = 1.0
    """Sampling temperature (RL rollouts sample; use 0 for evaluation)."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 = no cut)."""
    top_k: int = 0
    """Sample among the k most likely tokens only (0 = no limit; sent as -1, vLLM's 'off'). RL
    objectives assume the whole distribution: a cut makes the trainer's log-probabilities differ
    from the rollout's (the on-policy check shows by how much)."""
    max_tokens: int = 1024
    """Longest reply; a reply cut here usually fails to parse and becomes a no-op step."""
    sampling_seed: int | None = None
    """Per-request seed where the server supports it (vLLM does). Unset in RL: attempts of one task
    must be able to differ."""
    logprobs: bool = True
    """Ask for the reply tokens' log-probabilities (stored on each step; vLLM and the CPU policy
    server return them)."""
    openai_only: bool = False
    """Send only OpenAI's own request fields, for APIs that refuse others (OpenAI's): then no
    ``top_k`` (it must be 0) and no ``return_token_ids``, so no token ids are recorded and the
    trainer re-tokenises the replies. Off (default): both are sent, as vLLM 0.10.2+ and the CPU
    policy server take them."""
    extra_body: dict[str, Any] = field(default_factory=dict, metadata={"cli": False})
    """Server-specific fields passed through, e.g. ``{"repetition_penalty": 1.0}`` for vLLM."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature: must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k: must be >= 0 (0 = no limit), got {self.top_k}")
        if self.openai_only and self.top_k:
            raise ValueError(f"top_k: {self.top_k} cannot be sent with openai_only (OpenAI's API has no "
                             "top_k); use 0")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens: must be >= 1, got {self.max_tokens}")


@dataclass(frozen=True)
class RandomPolicySettings:
    """The random baseline policy (no model)."""

    seed: int = 0
    """Base seed; each step's choice depends only on (seed, episode id, step), not on timing."""
    type_probability: float = 0.2
    """Chance of typing words from the instruction instead of clicking."""
    scroll_probability: float = 0.05
    """Chance of scrolling down instead of clicking."""
    max_words: int = 3
    """Most words typed at once."""


@dataclass(frozen=True)
class PolicySettings:
    """Which policy plays, and how it is called (the ``--policy-*`` flags)."""

    kind: Literal["random", "pixel_random", "openai", "expert"] = "random"
    """random (clicks element centres, types words of the instruction; no model), pixel_random
    (clicks uniformly random points of the 0-1000 grid; the floor of learning), openai (any
    OpenAI-compatible chat endpoint: vLLM, the CPU policy server, an API) or expert (the scripted
    expert of the local sites' generated tasks: a demonstration source that reads their truth)."""
    shortcut: str = ""
    """With --policy expert: play this shortcut of the local sites' tasks instead of the task's plan
    (list_everything, spray_numbers, do_everything: webgym_sites.shortcuts); its
    episodes' policy is shortcut:NAME, adversarial episodes for testing judges, never demonstrations."""
    endpoint: Endpoint = flat(Endpoint)
    sampling: SamplingSettings = flat(SamplingSettings)
    agent: AgentSettings = flat(AgentSettings)
    random: RandomPolicySettings = flat(RandomPolicySettings)

    def __post_init__(self) -> None:
        if self.shortcut:
            from webgym_sites.shortcuts import SHORTCUTS  # lazy: only a shortcut run loads the sites

            if self.kind != "expert":
                raise ValueError(f"shortcut: a shortcut is played by the scripted expert (--policy expert "
                                 f"--policy-shortcut {self.shortcut}), not by the {self.kind} policy")
            if self.shortcut not in SHORTCUTS:
                raise ValueError(f"shortcut: unknown shortcut {self.shortcut!r}; expected one of "
                                 f"{', '.join(SHORTCUTS)}")
        if self.kind == "openai" and not self.endpoint.configured:
            raise ValueError("base_url: the openai policy needs the endpoint's base_url and model "
                             "(--policy-base-url, --policy-model)")


def make_policy(settings: PolicySettings) -> Policy:
    """The policy `settings` describe (all but the expert, which needs the run's tasks)."""
    if settings.kind == "expert":
        raise ValueError("kind: the expert plays the run's generated site tasks; the runner builds it "
                         "(webgym_rollout.agent.expert.ExpertPolicy)")
    if settings.kind == "random":
        return RandomPolicy(settings.random, agent=settings.agent)
    if settings.kind == "pixel_random":
        return PixelRandomPolicy(settings.random, agent=settings.agent)
    return OpenAIPolicy(settings.endpoint, sampling=settings.sampling, agent=settings.agent)


class OpenAIPolicy:
    """A VLM behind an OpenAI-compatible endpoint. Use as ``async with OpenAIPolicy(endpoint) as p``."""

    def __init__(self, endpoint: Endpoint, *, sampling: SamplingSettings | None = None,
                 agent: AgentSettings | None = None) -> None:
        self.endpoint = endpoint
        self.sampling = sampling or SamplingSettings()
        self.agent = agent or AgentSettings()
        self.model_id = endpoint.model
        self._client = ChatClient(endpoint, errors=EndpointErrors(
            unavailable=PolicyUnavailable, timeout=PolicyTimeout, rejected=PolicyRejected,
            invalid=PolicyUnavailable))

    @property
    def usage(self) -> Usage:
        """Requests, retries, failures and tokens over the life of this policy."""
        return self._client.usage

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    async def act(self, observation: Observation) -> PolicyOutput:
        messages = build_messages(observation, self.agent)
        sampling = self.sampling
        request: dict[str, Any] = {
            "messages": inline_images(messages, observation_images(observation)),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.sampling_seed is not None:
            request["seed"] = sampling.sampling_seed
        if sampling.logprobs:
            request["logprobs"] = True
        # Not OpenAI fields: they go in the body beside them (top_k -1: vLLM's "no limit").
        extra = {} if sampling.openai_only else {"top_k": sampling.top_k or -1, "return_token_ids": True}
        if extra or sampling.extra_body:
            request["extra_body"] = {**extra, **sampling.extra_body}
        started = time.perf_counter()
        reply = await self._client.complete(**request)
        latency = time.perf_counter() - started
        text = _reply_text(reply)
        return PolicyOutput(
            response=text,
            parsed=parse_response(text, self.agent.variant),
            messages=messages,
            model=self.model_id,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            finish_reason=reply.finish_reason,
            latency_s=latency,
            # The weights' version as the server names it (the CPU policy server: ``v<N>``), else as
            # the model it answered as (a vLLM LoRA adapter per version: ``name-v<N>``): read once, here.
            policy_version=version_number(reply.system_fingerprint or reply.served_model or self.model_id),
            logprobs=reply.logprobs,
            token_ids=reply.token_ids,
            prompt_token_hash=prompt_token_digest(reply.prompt_token_ids) if reply.prompt_token_ids else "",
            sampling=Sampling(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k),
        )


def _reply_text(reply: ChatReply) -> str:
    """The reply as text. A server running a tool-call parser (vLLM ``--enable-auto-tool-choice``)
    moves the call out of the text into ``tool_calls``; it is put back as a ``<tool_call>`` block so
    that the stored response is the full training target and parses the same way. Whatever the
    server put there (arguments that are not JSON, a name that is not a string) is kept as it came:
    the parser reports it as the agent's mistake."""
    text = reply.text or ""
    for call in reply.tool_calls:
        arguments = call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except (ValueError, RecursionError):
                pass  # kept verbatim: the parser reports it as invalid
        try:
            call_json = json.dumps({"name": call.name, "arguments": arguments}, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            call_json = "(a tool call that is not JSON)"  # the parser reports it as invalid
        text += f"\n<tool_call>\n{call_json}\n</tool_call>"
    return clean_text(text)


# Elements worth clicking; others (plain text, layout boxes) are skipped when any of these exist.
def scripted_reply(action: AgentAction, observation: Observation, agent: AgentSettings, model_id: str,
                   started: float, *, memory: str, intention: str) -> PolicyOutput:
    """The reply of a policy without a model that chose `action` (at ``time.perf_counter()`` `started`),
    written in the agent's reply format as a model would write it (so the step can be trained on)."""
    response = format_response(action, variant=agent.variant, memory=memory,
                               progress=f"Step {observation.step}.", intention=intention)
    return PolicyOutput(response=response, parsed=parse_response(response, agent.variant),
                        messages=build_messages(observation, agent), model=model_id, finish_reason="stop",
                        latency_s=time.perf_counter() - started)


_INTERACTIVE_TAGS = {"a", "button", "input", "select", "textarea", "option", "label", "summary"}
_INTERACTIVE_ROLES = {"button", "link", "checkbox", "radio", "tab", "menuitem", "option", "textbox",
                      "combobox", "searchbox", "switch", "slider"}
_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")
_TEXT_ROLES = {"textbox", "searchbox"}


def element_field(element: Any, name: str, default: Any = None) -> Any:
    """Field `name` of an observation's element, a typed `Element` or its dict form."""
    if isinstance(element, dict):
        return element.get(name, default)
    return getattr(element, name, default)


class RandomPolicy:
    """Clicks the centre of a random interactive element, sometimes types instruction words.

    Where element actions are offered (an observation that numbers the elements, or
    ``AgentSettings.element_actions``) it makes the same choices by element number: click_element,
    type_element into a random text field, select_element of a word of a drop-down's text."""

    model_id = "random"
    observes_elements = True

    def __init__(self, settings: RandomPolicySettings | None = None, *,
                 agent: AgentSettings | None = None) -> None:
        self.settings = settings or RandomPolicySettings()
        self.agent = agent or AgentSettings()

    async def act(self, observation: Observation) -> PolicyOutput:
        started = time.perf_counter()
        settings = self.settings
        # A string seed hashes with SHA-512: the same on every run and process.
        rng = random.Random(
            f"{settings.seed}|{observation.episode_id}|{observation.instruction}|{observation.step}")
        words = _WORD.findall(observation.instruction)
        if observation.numbered or self.agent.element_actions:
            # Offered element actions (a numbered observation, --policy-element-actions): the same
            # random choices, by element number.
            action, intention = self._element_action(observation, rng, words)
            return scripted_reply(action, observation, self.agent, self.model_id, started,
                                  memory="Nothing recorded (random policy).", intention=intention)
        targets = self._targets(observation)
        roll = rng.random()
        if words and roll < settings.type_probability:
            count = rng.randint(1, max(1, min(settings.max_words, len(words))))
            start = rng.randrange(0, len(words) - count + 1)
            text = " ".join(words[start:start + count])
            action = AgentAction(name="type", text=text)
            intention = f"Type {text!r} into the focused field."
        elif targets and roll >= settings.type_probability + settings.scroll_probability:
            x, y, label = rng.choice(targets)
            action = AgentAction(name="left_click", coordinate=pixels_to_grid(x, y, observation.viewport))
            intention = f"Click {label}."
        else:
            action = AgentAction(name="scroll", direction="down")
            intention = "Scroll down to see more of the page."
        return scripted_reply(action, observation, self.agent, self.model_id, started,
                              memory="Nothing recorded (random policy).", intention=intention)

    def _element_action(self, observation: Observation, rng: random.Random,
                        words: list[str]) -> tuple[AgentAction, str]:
        """The same choices as the coordinate form, by element number: type a span of the
        instruction into a random text field, choose a word of a drop-down's text, click an element."""
        settings = self.settings
        numbered = list(enumerate(observation.elements, start=1))
        fields = [i for i, e in numbered if str(element_field(e, "role", "")).lower() in _TEXT_ROLES]
        roll = rng.random()
        if words and fields and roll < settings.type_probability:
            count = rng.randint(1, max(1, min(settings.max_words, len(words))))
            start = rng.randrange(0, len(words) - count + 1)
            text = " ".join(words[start:start + count])
            number = rng.choice(fields)
            return (AgentAction(name="type_element", element=number, text=text),
                    f"Type {text!r} into element [{number}].")
        if not numbered or roll < settings.type_probability + settings.scroll_probability:
            return AgentAction(name="scroll", direction="down"), "Scroll down to see more of the page."
        number, element = rng.choice(numbered)
        options = _WORD.findall(str(element_field(element, "text", "") or ""))
        if str(element_field(element, "tag", "")).lower() == "select" and options:
            option = rng.choice(options)
            return (AgentAction(name="select_element", element=number, option=option),
                    f"Choose {option!r} in element [{number}].")
        return AgentAction(name="click_element", element=number), f"Click element [{number}]."

    @staticmethod
    def _targets(observation: Observation) -> list[tuple[float, float, str]]:
        """(centre x, centre y, label) of visible elements, interactive ones only if there are any."""
        width, height = observation.viewport
        visible, interactive = [], []
        for element in observation.elements:
            x, y, w, h = (float(element_field(element, key, 0) or 0) for key in ("x", "y", "width", "height"))
            cx, cy = x + w / 2, y + h / 2
            if w <= 0 or h <= 0 or not (0 <= cx < width and 0 <= cy < height):
                continue
            tag = str(element_field(element, "tag", "") or "").lower()
            role = str(element_field(element, "role", "") or "").lower()
            text = " ".join(str(element_field(element, "text", "") or "").split())[:40]
            label = f"the {tag or role or 'element'}" + (f" {text!r}" if text else "")
            visible.append((cx, cy, label))
            if tag in _INTERACTIVE_TAGS or role in _INTERACTIVE_ROLES:
                interactive.append((cx, cy, label))
        return interactive or visible


class PixelRandomPolicy:
    """Clicks a uniformly random point of the 0-1000 grid: the baseline of a policy that reads nothing.

    Seeded like `RandomPolicy` (``RandomPolicySettings.seed``; the other fields do not apply): the
    same (seed, episode, step) gives the same click. Replies are well formed, so its valid-action
    rate is 100 % and its success rate is what blind clicking achieves on the page."""

    model_id = "pixel_random"
    observes_elements = False

    def __init__(self, settings: RandomPolicySettings | None = None, *,
                 agent: AgentSettings | None = None) -> None:
        self.settings = settings or RandomPolicySettings()
        self.agent = agent or AgentSettings()

    async def act(self, observation: Observation) -> PolicyOutput:
        started = time.perf_counter()
        rng = random.Random(f"pixel|{self.settings.seed}|{observation.episode_id}|{observation.instruction}|"
                            f"{observation.step}")
        point = (rng.randint(0, GRID_SIZE), rng.randint(0, GRID_SIZE))
        action = AgentAction(name="left_click", coordinate=point)
        return scripted_reply(action, observation, self.agent, self.model_id, started,
                              memory="Nothing recorded (random clicks).", intention="Click a random point.")
