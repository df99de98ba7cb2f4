"""``webgym-rollout run``: `run` from the command line."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from webgym_core.errors import SettingsError
from webgym_core.settings import SettingsCommand, load_settings, settings_options
from webgym_data.schema import TaskValidationError
from webgym_rollout.errors import Unauthorized
from webgym_rollout.runner.report import RunReport
from webgym_rollout.runner.rollout import run
from webgym_rollout.runner.settings import RunSettings
from webgym_rollout.trajectory.contract import TrajectoryError

__all__ = ["run_command"]


@click.command("run", cls=SettingsCommand)
@settings_options(RunSettings)
def run_command(config: str | None, **flags: Any) -> None:
    """Roll out tasks with a policy against browser servers; judge them; write trajectories.

    Episodes run fully asynchronously (--concurrency at once, no barrier between steps or
    episodes); --lockstep is the baseline that steps a batch of them together. Episodes go to OUT
    as parquet shards with a manifest, so an interrupted run continues with --resume and nothing is
    lost or repeated.

    \b
    Example:
      webgym-rollout serve-sites --port 8400 &
      webgym-rollout serve --port 8300 --allow-hosts 127.0.0.1:8400 &
      webgym-rollout run --tasks tasks.jsonl --servers http://127.0.0.1:8300 \\
          --sites-url http://127.0.0.1:8400 --policy random --judge programmatic \\
          --concurrency 8 --out out/trajectories/iter-0000
      # a VLM behind vLLM or `webgym-rl serve-policy`, resumed after an interruption:
      webgym-rollout run --tasks out/tasks --split test --servers http://127.0.0.1:8300 \\
          --policy openai --policy-base-url http://127.0.0.1:8500/v1 --policy-model qwen \\
          --policy-temperature 0 --judge rubric --judge-base-url http://127.0.0.1:8001/v1 \\
          --judge-model judge --out out/eval --resume
      # 64 tasks of one benchmark, a new random batch per --iteration (without replacement):
      webgym-rollout run --tasks out/tasks --servers http://127.0.0.1:8300 --sampler epoch \\
          --sampler-batch-size 64 --sampler-benchmarks deepshop --iteration 3 --out out/iter-3
      # record every episode's traffic once; later checkpoints replay the same web offline:
      webgym-rollout run --tasks out/tasks --split test --servers http://127.0.0.1:8300 \\
          --policy random --record --out out/eval-recorded
      webgym-rollout run --tasks out/tasks --split test --servers http://127.0.0.1:8300 \\
          --policy openai --policy-base-url http://127.0.0.1:8500/v1 --policy-model qwen \\
          --replay out/eval-recorded --out out/eval-replayed
    """
    try:
        settings = load_settings(RunSettings, config, flags)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        report = asyncio.run(run(settings))
    except (TaskValidationError, TrajectoryError, Unauthorized, SettingsError) as exc:
        raise click.ClickException(str(exc)) from exc
    errors = ", ".join(f"{k} {n}" for k, n in sorted(report.errors.items())) or "none"
    invalid = f"; {report.invalid_rows} invalid task rows skipped" if report.invalid_rows else ""
    click.echo(f"{report.episodes} episodes ({report.skipped} already done{invalid}), {report.steps} steps "
               f"in {report.elapsed_s:.1f} s ({report.steps_per_s:.2f} steps/s); {report.success_line()}; "
               f"errors: {errors} -> {report.out}")
    if report.episodes and not report.evaluated:
        raise click.ClickException(_nothing_evaluated(report, settings))
    if report.internal_errors:
        click.secho(f"WARNING: {report.internal_errors} episodes ended with error:internal: this is a bug, "
                    f"please report it (first: {report.first_internal_error})", err=True, fg="red", bold=True)


_CAUSES = {
    "server_unavailable": "no browser server answered at --servers {servers} (start one with "
                          "`webgym-rollout serve`, or check the URL)",
    "invalid_request": "the browser servers refused the sessions (the log names the reason: a task's "
                       "environment, or a start page the site server does not have)",
    "unauthorized": "the browser servers refused the token (--browser-token / WEBGYM_BROWSER_TOKEN)",
    "policy_unavailable": "the policy endpoint did not answer (--policy-base-url)",
    "judge_unavailable": "the judge endpoint did not answer (--judge-base-url)",
}


def _nothing_evaluated(report: RunReport, settings: RunSettings) -> str:
    """The message of a run whose every episode failed on infrastructure: the failures, and the
    likely cause of the most common one."""
    kinds = sorted(report.errors.items(), key=lambda item: -item[1])
    listed = ", ".join(f"error:{kind} {n}" for kind, n in kinds)
    cause = _CAUSES.get(kinds[0][0], "see the log for the first failure").format(
        servers=" ".join(settings.servers) or "(none)")
    return (f"all {report.episodes} episodes failed on infrastructure ({listed}); nothing was evaluated: "
            f"{cause}. The failed episodes are recorded in {report.out}; once the cause is fixed, run again "
            "into a new --out")
