"""``webgym-data``: build, extend, inspect and publish the task set."""

from __future__ import annotations

import click

from webgym_core.cli import LazyGroup, setup_logging

COMMANDS = {
    "build": ("webgym_data.build:build_command",
              "Import seeds, rubric, decompose, split; write a Hub-ready folder."),
    "import": ("webgym_data.importers:import_command",
               "Import one seed set to task rows (JSONL) with validation."),
    "rubrics": ("webgym_data.rubrics:rubrics_command",
                "Generate fact-group rubrics with an OpenAI-compatible LLM (cached)."),
    "stats": ("webgym_data.stats:stats_command", "Print the statistics tables of a built task set."),
    "diff": ("webgym_data.versions:diff_command", "Report tasks added, removed or changed between builds."),
    "push": ("webgym_data.versions:push_command", "Publish a built folder to the Hugging Face Hub."),
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Build, extend and version the WebGym task set as Hugging Face datasets.

    seeds/ holds the seed task sets you fetched (where each lives, its licence and the folder it
    goes in: docs/guides/data.md, "Getting the data").

    \b
    Example:
      webgym-data build --seeds seeds/ --out out/tasks
      webgym-data stats out/tasks
      python -c "import datasets; print(datasets.load_dataset('out/tasks'))"
    """
    setup_logging(verbose)
