"""One prompt to a served model before a run: does the endpoint answer, and does its reply parse?

``webgym-rollout check-endpoint URL --model M`` (`check_endpoint_command`) sends the request a run
would send at the first step of an episode (`OpenAIPolicy.act`: the same prompt builder, variant,
sampling fields and inlined screenshot), on a small page drawn here (a "Submit" button on a white
page, `probe_observation`), and says

- whether the endpoint answered, and as which model, in how many seconds (an unreachable server, an
  unknown model or a bad key is named as such, with the exit status 1);
- whether the reply holds exactly one valid ``computer_use`` tool call (`parse_response`: the
  reason when it does not, exit status 1): a reply that does not parse is a no-op step in a run;
- whether the endpoint returned the reply's token ids and log-probabilities (without token ids the
  trainer re-tokenises the replies; reinforce and grpo train on no step without log-probabilities;
  vLLM 0.10.2+ and the CPU policy server return both);
- where a click lands on the page (on the button or not): a hint about the model, never a failure.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass

import click
from PIL import Image, ImageDraw, ImageFont

from webgym_core.endpoint import Endpoint
from webgym_rollout.actions import grid_to_pixels
from webgym_rollout.agent.policies import OpenAIPolicy, PolicyOutput, SamplingSettings
from webgym_rollout.agent.protocol import VARIANTS, AgentSettings, Observation
from webgym_rollout.errors import PolicyError

__all__ = ["PROBE_BUTTON", "EndpointCheck", "check_endpoint", "check_endpoint_command", "probe_observation"]

PROBE_VIEWPORT = (320, 240)
PROBE_BUTTON = (110, 100, 100, 40)
"""The probe page's button: x, y, width, height in pixels of its 320 x 240 screenshot."""


def probe_observation() -> Observation:
    """The first step of a one-button task: a 320 x 240 white page with a "Submit" button."""
    image = Image.new("RGB", PROBE_VIEWPORT, "white")
    draw = ImageDraw.Draw(image)
    x, y, width, height = PROBE_BUTTON
    draw.rectangle((x, y, x + width, y + height), fill="#e0e0e0", outline="#404040", width=2)
    font = ImageFont.load_default()
    left, top, right, bottom = draw.textbbox((0, 0), "Submit", font=font)
    draw.text((x + (width - right + left) / 2, y + (height - bottom + top) / 2 - top), "Submit",
              fill="black", font=font)
    draw.text((10, 10), "Press the button to submit the form.", fill="black", font=font)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return Observation(instruction='Click the "Submit" button.', screenshot=buffer.getvalue(),
                       viewport=PROBE_VIEWPORT, url="http://127.0.0.1/check", title="Endpoint check",
                       episode_id="check-endpoint")


@dataclass(frozen=True)
class EndpointCheck:
    """What one probe request showed (`check_endpoint`)."""

    output: PolicyOutput
    """The reply, what it parsed to, the messages as built, tokens and timing."""

    @property
    def parses(self) -> bool:
        """The reply holds exactly one valid tool call (a run would carry it out)."""
        return self.output.parsed.action is not None

    @property
    def on_target(self) -> bool | None:
        """Whether a click lands on the probe's button; None for an action that is no click."""
        action = self.output.parsed.action
        if action is None or action.coordinate is None or action.name != "left_click":
            return None
        px, py = grid_to_pixels(action.coordinate, PROBE_VIEWPORT)
        x, y, width, height = PROBE_BUTTON
        return x <= px <= x + width and y <= py <= y + height

    def lines(self) -> list[str]:
        """The report, one finding a line."""
        output = self.output
        lines = [f"endpoint: answered as {output.model!r} in {output.latency_s:.1f} s "
                 f"({output.prompt_tokens} prompt tokens, {output.completion_tokens} reply tokens, "
                 f"finish_reason {output.finish_reason or '-'})"]
        shown = output.response if len(output.response) <= 600 else output.response[:600] + " ..."
        lines.append("reply:\n  " + "\n  ".join(shown.splitlines() or ["(empty)"]))
        if self.parses:
            lines.append(f"reply parses: yes, {output.parsed.action.describe()}")
        else:
            lines.append(f"reply parses: no: {output.parsed.error}. In a run this step would be a no-op "
                         "(its action_error says why); see the reply format in docs/guides/your-model.md")
        if self.on_target is not None:
            lines.append(f"the click lands {'on' if self.on_target else 'off'} the button")
        tokens = "yes" if output.token_ids else "no (the trainer re-tokenises the replies)"
        logprobs = "yes" if output.logprobs else ("no (reinforce and grpo train on no step without them; "
                                                  "filtered_bc does not need them)")
        lines += [f"token ids returned: {tokens}", f"log-probabilities returned: {logprobs}"]
        return lines


async def check_endpoint(endpoint: Endpoint, *, agent: AgentSettings | None = None,
                         sampling: SamplingSettings | None = None) -> EndpointCheck:
    """Send the probe's prompt to `endpoint` as a run's policy would. Raises `PolicyError` (its
    subclasses name the cause) when the endpoint does not answer with a chat completion."""
    async with OpenAIPolicy(endpoint, sampling=sampling, agent=agent) as policy:
        return EndpointCheck(await policy.act(probe_observation()))


@click.command("check-endpoint")
@click.argument("url")
@click.option("--model", required=True, help="Model name the endpoint serves (as its /v1/models lists it).")
@click.option("--variant", type=click.Choice(VARIANTS), default="memory", show_default=True,
              help="Prompt variant to send (as webgym-rollout run --policy-variant).")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
              help="Environment variable holding the API key (EMPTY is sent when it is unset).")
@click.option("--temperature", type=float, default=0.0, show_default=True, help="Sampling temperature.")
@click.option("--max-tokens", type=int, default=1024, show_default=True, help="Longest reply.")
@click.option("--openai-only", is_flag=True,
              help="Send only OpenAI's own request fields (no top_k, no return_token_ids), as "
                   "webgym-rollout run --policy-openai-only does.")
@click.option("--timeout-s", type=float, default=120.0, show_default=True,
              help="Seconds the request may take.")
def check_endpoint_command(url: str, model: str, variant: str, api_key_env: str, temperature: float,
                           max_tokens: int, openai_only: bool, timeout_s: float) -> None:
    """Send one real prompt to an OpenAI-compatible endpoint and say whether the reply parses.

    The request is the one a run sends at an episode's first step (same prompt, screenshot inlined,
    sampling fields), on a small page with one button. Exit status 0 when the endpoint answered and
    its reply holds one valid computer_use tool call; 1 when it did not answer (the cause is named)
    or the reply does not parse (the parser's reason is printed).

    \b
    Example:
      webgym-rollout check-endpoint http://127.0.0.1:8000/v1 --model qwen3-vl-8b
      webgym-rollout check-endpoint http://127.0.0.1:8500/v1 --model tiny --variant compact
    """
    try:
        endpoint = Endpoint(base_url=url, model=model, api_key_env=api_key_env, timeout_s=timeout_s,
                            max_retries=0)
        sampling = SamplingSettings(temperature=temperature, max_tokens=max_tokens, openai_only=openai_only)
        agent = AgentSettings(variant=variant)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        check = asyncio.run(check_endpoint(endpoint, agent=agent, sampling=sampling))
    except PolicyError as exc:
        raise click.ClickException(f"the endpoint did not answer: {exc}") from exc
    for line in check.lines():
        click.echo(line)
    if not check.parses:
        raise click.exceptions.Exit(1)
