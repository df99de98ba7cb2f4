"""``webgym-rl``: train VLM web agents on trajectory datasets and run the online loop."""

from __future__ import annotations

import click

from webgym_core.cli import LazyGroup, setup_logging
from webgym_rl.samples import Objective

# The objectives named from their one list, so that the help cannot leave one out.
_OBJECTIVES = ", ".join(o.value for o in list(Objective)[:-1]) + f" or {list(Objective)[-1].value}"

COMMANDS = {
    "train": ("webgym_rl.train:train_command",
              f"Fine-tune a Qwen-VL policy on trajectory datasets ({_OBJECTIVES})."),
    "export": ("webgym_rl.export:export_command",
               "Write trajectory steps as a conversational dataset for TRL's SFTTrainer."),
    "push": ("webgym_rl.hub:push_command", "Upload a checkpoint and its model card to the Hub."),
    "loop": ("webgym_rl.loop.cli:loop_command",
             "Run the online loop (sync or async): roll out, train, publish, evaluate, repeat."),
    "recipes": ("webgym_rl.loop.cli:recipes_command", "List the shipped loop recipes, or print one."),
    "merge": ("webgym_rl.merge:merge_command", "Merge a LoRA adapter checkpoint into its base model."),
    "serve-policy": ("webgym_rl.policy_server.cli:serve_policy_command",
                     "Serve a transformers VLM as an OpenAI-compatible endpoint on CPU."),
    "tiny-model": ("webgym_rl.tiny:tiny_model_command",
                   "Write a tiny random Qwen-VL checkpoint (tests, demo, CPU runs)."),
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Train visual web agents with RL on WebGym trajectory datasets.

    \b
    Example:
      webgym-rl tiny-model out/tiny-qwen2vl
      webgym-rl train --model out/tiny-qwen2vl --data out/trajectories/iter-0000 \\
          --objective filtered_bc --out out/checkpoints/iter-0000
    """
    setup_logging(verbose)
