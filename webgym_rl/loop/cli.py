"""``webgym-rl loop`` and ``webgym-rl recipes``: the loop's commands."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from webgym_core.errors import SettingsError
from webgym_core.settings import SettingsCommand, load_settings, settings_options
from webgym_rl.errors import WebgymRLError
from webgym_rl.loop.settings import LoopSettings

__all__ = ["loop_command", "recipes_command"]


def _echo(event: Any) -> None:
    click.echo(f"[loop] {event.describe()}", err=True)


@click.command("loop", cls=SettingsCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config", default=None, metavar="RECIPE|FILE",
              help="A shipped recipe by name (webgym-rl recipes lists them: published, published-async, "
                   "miniwob-cpu) or a YAML file of these settings; flags override it.")
@click.option("--dry-run", is_flag=True,
              help="Check the configuration against the task set and print the plan; train nothing.")
@settings_options(LoopSettings, config=False)
def loop_command(config: str | None, dry_run: bool, **flags: Any) -> None:
    """Run the online RL loop: roll out, train, evaluate, repeat; resumable.

    Each round rolls out a task batch with the current policy version, trains the resident trainer
    on the last K rounds' episodes (filtered_bc by default) and publishes the next version to the
    policy endpoint; every --eval-every versions it evaluates. --schedule sync takes turns;
    --schedule async runs rollouts and training at once (episodes at most --max-staleness versions
    behind). Rerun the same command to resume. The loop runs the site server its tasks need, so
    --judge site reads the ground truth there (not with --sites-url). Each evaluation goes to
    OUT/evals/v-NNNN/trajectories (webgym-rollout report compares them).

    \b
    Example:
      webgym-rl recipes                                     # the shipped recipes
      webgym-rl loop --config published --tasks out/tasks --out out/paper --dry-run
      webgym-rl loop --config published --tasks out/tasks --out out/paper
      webgym-rl loop --config published-async --tasks out/tasks --out out/paper-async
      # CPU, offline: a tiny model on MiniWoB++ tasks
      webgym-rl tiny-model out/tiny-qwen3vl --family qwen3_vl
      webgym-rl loop --config miniwob-cpu --tasks out/demo/inputs/miniwob_train.jsonl \\
          --eval-tasks out/demo/inputs/miniwob_heldout.jsonl --model out/tiny-qwen3vl \\
          --out out/loop --iterations 2 --max-steps 200
    """
    from webgym_data.schema import TaskValidationError, WebgymDataError  # lazy: the command starts fast
    from webgym_rl.loop.recipes import plan, recipe_path  # lazy: the command starts fast
    from webgym_rl.loop.run import run_loop  # lazy: the command starts fast
    from webgym_rollout.errors import RolloutError  # lazy: the command starts fast

    try:
        settings = load_settings(LoopSettings, recipe_path(config) if config else None, flags)
        if dry_run:
            click.echo(plan(settings).render())
            return
        result = run_loop(settings, on_event=_echo if settings.progress else None)
    except (SettingsError, WebgymRLError, TaskValidationError, WebgymDataError, RolloutError) as exc:
        raise click.ClickException(str(exc)) from exc
    versions = len(result.state.live_versions) - 1
    click.echo(f"{versions} versions trained in {result.out}; newest checkpoint: {result.checkpoint}")


@click.command("recipes", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name", required=False)
def recipes_command(name: str | None) -> None:
    """List the shipped loop recipes, or print one (NAME) as YAML.

    \b
    Example:
      webgym-rl recipes
      webgym-rl recipes published > my-recipe.yaml     # a starting point of your own
      webgym-rl loop --config my-recipe.yaml --tasks out/tasks --out out/run --dry-run
    """
    # lazy: the command starts fast
    from webgym_rl.loop.recipes import describe_recipe, recipe_names, recipe_path

    try:
        if name:
            click.echo(recipe_path(name).read_text(encoding="utf-8"), nl=False)
            return
    except WebgymRLError as exc:
        raise click.ClickException(str(exc)) from exc
    for recipe in recipe_names():
        click.echo(textwrap.fill(describe_recipe(recipe), width=100, initial_indent=f"{recipe:<18}",
                                 subsequent_indent=" " * 18, break_on_hyphens=False))
