"""TRL's GRPOTrainer on WebGym MiniWoB++ tasks, through TRL's ``environment_factory`` (CPU, tiny model).

::

    pip install 'webgym[interop]'        # trl, gymnasium
    OMP_NUM_THREADS=1 python examples/trl_grpo_webgym.py --out out/trl-grpo --tasks click-test click-button \\
        --max-steps 3 --num-generations 2

What runs. One browser server (one Chromium) and one site server on 127.0.0.1, started here; a tiny
random Qwen2-VL checkpoint (`webgym_rl.tiny.build_tiny_model`) written to ``OUT/model``; TRL's
`GRPOTrainer` with ``environment_factory=WebGymToolEnv``: TRL makes one environment per rollout
(pooled, reset between batches), shows the model the environment's tool (``computer_use``, the
element actions of WebGym's action space) and plays every tool call the model writes on the page.

Prompts are text: the observation mode is ``elements`` (the page's interactive elements as a
numbered list), not the screenshot. TRL's GRPO path also takes images (a VLM processor, tool results
with image parts), but then the processor's chat template must be one TRL parses tool calls from, and
a text prompt keeps the CPU run to seconds. The model is the tiny Qwen2-VL used as a language model
(its vision tower idle), with its tokenizer's chat template replaced by TRL's Qwen2.5 template, one of
those TRL parses tool calls from (`trl.chat_template_utils.add_response_schema`).

Rewards. The task's reward at the end of the episode (`WebGymEnv`'s judge: 1 when the MiniWoB page
reports success, else 0), through the environment's ``get_reward``. An episode the model left
unfinished (it stopped calling the tool) ends there, as if it had answered. An infrastructure failure
(a crashed browser, a lost session: ``info["infrastructure_failure"]``) gives reward None: TRL leaves
that rollout out of its group's baseline and gives it advantage 0, rather than scoring the agent 0 for
the browser's fault.

The rows of the training set are (task, seed) pairs: the ``num_generations`` rollouts of one row play
the same MiniWoB page with the same seed, the group GRPO compares.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import inspect
import json
import logging
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EPILOG = """\
example:
  OMP_NUM_THREADS=1 python examples/trl_grpo_webgym.py --out out/trl-grpo \\
      --tasks click-test click-button --max-steps 3 --num-generations 2
"""


@dataclass
class Args:
    """The run's settings (each one a flag: ``--max-steps``, ...)."""

    out: Path = Path("out/trl-grpo")
    """Folder for the tiny checkpoint (``OUT/model``) and the trainer's output (``OUT/trainer``)."""
    tasks: list[str] = field(default_factory=lambda: ["click-test", "click-button"])
    """MiniWoB++ tasks (page names of the ``miniwob`` package) the rows are drawn from."""
    rows: int = 8
    """Rows of the training set: (task, seed) pairs, tasks in turn, seeds 0, 1, ..."""
    max_steps: int = 3
    """Optimizer steps."""
    num_generations: int = 2
    """Rollouts per row (GRPO's group); at least 2."""
    per_device_train_batch_size: int = 2
    """Rollouts per optimizer step on this process (a multiple of ``num_generations``)."""
    max_completion_length: int = 48
    """Tokens the model may write in one episode, tool results included."""
    max_tool_calls: int = 3
    """Tool calls (page actions) per episode before TRL stops the episode."""
    learning_rate: float = 1e-4
    """AdamW's learning rate."""
    seed: int = 0
    """Seed of the tiny model's weights and of the trainer."""
    chromium: str | None = None
    """Chromium executable (default: ``WEBGYM_CHROMIUM`` or Debian's chromium-headless-shell)."""


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for item in dataclasses.fields(Args):
        flag = "--" + item.name.replace("_", "-")
        help_text = _field_doc(item.name)
        if item.name == "tasks":
            parser.add_argument(flag, nargs="+", default=item.default_factory(), help=help_text)
        elif item.name == "chromium":
            parser.add_argument(flag, default=None, help=help_text)
        else:
            default = item.default
            parser.add_argument(flag, type=type(default), default=default, help=help_text)
    args = Args(**vars(parser.parse_args(argv)))
    if args.num_generations < 2:
        parser.error(f"--num-generations: GRPO compares at least 2 rollouts, got {args.num_generations}")
    if args.per_device_train_batch_size % args.num_generations:
        parser.error(f"--per-device-train-batch-size ({args.per_device_train_batch_size}) must be a multiple "
                     f"of --num-generations ({args.num_generations})")
    from webgym_rollout.tasks.miniwob import html_dir  # lazy: --help starts fast

    pages = {path.stem for path in (html_dir() / "miniwob").glob("*.html")}
    unknown = [task for task in args.tasks if task not in pages]
    if unknown:
        parser.error(f"--tasks: no MiniWoB++ page {', '.join(map(repr, unknown))} (the miniwob package ships "
                     f"{len(pages)}, e.g. click-test, click-button, enter-text)")
    for name in ("rows", "max_steps", "max_completion_length", "max_tool_calls"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    return args


def _field_doc(name: str) -> str:
    """The docstring under field `name` of `Args` (the line after its definition)."""
    lines = inspect.getsource(Args).splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(f"{name}:") and i + 1 < len(lines):
            return lines[i + 1].strip().strip('"')
    return ""


# ----------------------------------------------------------------------------------- services


class Services:
    """A browser server and a site server on 127.0.0.1, for every environment of the run to share.
    The browser server runs on an event loop in a thread of its own; `close` closes the environments
    made on them (`environments`), then stops both servers."""

    def __init__(self, contexts: int, chromium: str | None = None):
        # lazy: --help starts fast
        from webgym_rollout.browser.pool import PoolSettings
        from webgym_rollout.browser.server import ServerSettings, running_server
        from webgym_rollout.tasks.sites import SiteServer

        self.environments: list[WebGymToolEnv] = []
        self.sites = SiteServer("127.0.0.1", 0).start()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="browser-server", daemon=True)
        self._thread.start()
        self._stack = contextlib.AsyncExitStack()
        pool = PoolSettings(browsers=1, contexts_per_browser=contexts,
                            allow_hosts=(f"127.0.0.1:{self.sites.port}",),
                            **({"executable_path": chromium} if chromium else {}))
        server = running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool))
        try:
            self.browser_url, _pool = self._run(self._stack.enter_async_context(server))
        except BaseException:
            self.close()
            raise

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(300)

    def close(self) -> None:
        for environment in self.environments:
            environment._close()
        with contextlib.suppress(Exception):
            self._run(self._stack.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self.sites.stop()


# -------------------------------------------------------------------------------- environment


class WebGymToolEnv:
    """One rollout's environment for TRL's ``environment_factory``: a `WebGymEnv` (MiniWoB++, the
    ``elements`` observation) on the browser and site servers of `services`, whose tool is
    ``computer_use``. TRL calls the factory without arguments: pass
    ``functools.partial(WebGymToolEnv, services)``. Every public method but `reset` and `get_reward`
    is a tool TRL shows the model, its docstring the tool's description."""

    def __init__(self, services: Services) -> None:
        from webgym_rollout.interop.gymnasium import WebGymEnv  # optional: interop (gymnasium)

        self.services = services
        self.env = WebGymEnv("miniwob:click-test", browser_url=services.browser_url,
                             sites_url=services.sites.base_url, observation_modes=("elements",))
        services.environments.append(self)
        self.reward: float | None = 0.0
        self.done = True
        self.failed = False

    def reset(self, task: str = "click-test", seed: int = 0, **_: Any) -> str:
        """Start the episode of row (`task`, `seed`): MiniWoB++ page `task` with seed `seed`. Returns
        the page as text, which TRL appends to the row's prompt."""
        from webgym_data.importers.miniwob import miniwob_task  # lazy: --help starts fast

        observation, _info = self.env.reset(options={"task": miniwob_task(task, int(seed))})
        self.reward, self.done, self.failed = 0.0, False, False
        return _page_text(observation)

    def computer_use(self, action: str, element: int = 0, text: str = "", option: str = "",
                     keys: str = "") -> str:
        """Act on the web page; returns the page after the action, as text.

        Args:
            action: click_element, type_element, select_element, hover_element, key or answer (the end).
            element: the element's number in the page's element list (element actions).
            text: the text to type (type_element) or the answer (answer).
            option: the visible text of the option to choose (select_element).
            keys: the key to press, or keys joined by '+' (key).
        """
        if self.done:
            return "The episode is over."
        arguments: dict[str, Any] = {"action": action}
        for name, value in (("element", element), ("text", text), ("option", option), ("keys", keys)):
            if value:
                arguments[name] = value
        if action == "answer":
            arguments.setdefault("text", "")
        return self._step(arguments)

    def get_reward(self) -> float | None:
        """The episode's reward; None when the infrastructure failed (TRL drops the rollout)."""
        if not self.done:  # the model stopped calling the tool: the episode ends as if it had answered
            self._step({"action": "answer", "text": ""})
        return None if self.failed else self.reward

    def _step(self, arguments: dict[str, Any]) -> str:
        """Play `arguments` as the reply WebGym's parser reads (the same tool call, in its own format)."""
        reply = "<tool_call>" + json.dumps({"name": "computer_use", "arguments": arguments}) + "</tool_call>"
        observation, reward, terminated, truncated, info = self.env.step(reply)
        self.done = terminated or truncated
        self.failed = self.failed or info["infrastructure_failure"]
        self.reward = reward
        if info["infrastructure_failure"]:
            return f"The browser failed ({info['error']}); the episode is over."
        step = info.get("step")
        error = step.action_error if step is not None else ""
        return (f"Error: {error}\n" if error else "") + _page_text(observation)

    def _close(self) -> None:
        """Close the environment (private: a public method would be a tool)."""
        self.env.close()


def _page_text(observation: dict[str, Any]) -> str:
    return f"Task: {observation['instruction']}\n{observation['text']}"


# ------------------------------------------------------------------------------------ training


def tiny_model(out: Path, seed: int) -> tuple[Any, Any]:
    """The tiny Qwen2-VL (written to `out` once) and its tokenizer with TRL's Qwen2.5 chat template."""
    # optional: interop (trl)
    from transformers import AutoModelForImageTextToText, AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from webgym_rl.tiny import build_tiny_model

    if not (out / "config.json").exists():
        build_tiny_model(out, family="qwen2_vl", seed=seed)
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.padding_side = "left"
    model = AutoModelForImageTextToText.from_pretrained(out)
    return model, tokenizer


def train_rows(args: Args) -> Any:
    """The training set: (task, seed) rows, each with a prompt that the environment's reset completes."""
    from datasets import Dataset  # lazy: --help starts fast

    prompt = [{"role": "system", "content": "You are a web agent. Complete the task on the page with the "
                                            "computer_use tool."},
              {"role": "user", "content": ""}]
    tasks = [args.tasks[i % len(args.tasks)] for i in range(args.rows)]
    return Dataset.from_dict({"prompt": [prompt] * args.rows, "task": tasks, "seed": list(range(args.rows))})


def build_trainer(args: Args, services: Services, environment: type[WebGymToolEnv] = WebGymToolEnv) -> Any:
    """TRL's GRPOTrainer for `args`, with `environment` on `services` as its environment factory."""
    from trl import GRPOConfig, GRPOTrainer  # optional: interop (trl)

    model, tokenizer = tiny_model(args.out / "model", args.seed)
    config = GRPOConfig(
        output_dir=str(args.out / "trainer"), max_steps=args.max_steps, learning_rate=args.learning_rate,
        per_device_train_batch_size=args.per_device_train_batch_size, num_generations=args.num_generations,
        max_completion_length=args.max_completion_length, max_tool_calling_iterations=args.max_tool_calls,
        use_cpu=True, bf16=False, fp16=False, report_to="none", logging_steps=1, save_strategy="no",
        seed=args.seed, temperature=1.0, dataloader_num_workers=0, log_completions=False)
    return GRPOTrainer(model=model, args=config, train_dataset=train_rows(args), processing_class=tokenizer,
                       environment_factory=functools.partial(environment, services))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16
    try:
        # optional: interop
        import gymnasium  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        print(f"error: {exc.name or exc} is not installed: pip install 'webgym[interop]'", file=sys.stderr)
        return 2
    services = Services(contexts=args.per_device_train_batch_size + 1, chromium=args.chromium)
    try:
        trainer = build_trainer(args, services)
        trainer.train()
        rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
        print(f"trained {trainer.state.global_step} steps; mean reward per step: {rewards}")
    finally:
        services.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
