"""``webgym-rollout``: browser server, site server, rollout runner, judges, reports, viewer."""

from __future__ import annotations

import click

from webgym_core.cli import LazyGroup, setup_logging

COMMANDS = {
    "serve": ("webgym_rollout.browser.server:serve_command",
              "Run the browser environment server (Chromium pool over HTTP)."),
    "serve-sites": ("webgym_rollout.tasks.sites:serve_sites_command",
                    "Serve the MiniWoB++, sandbox, shop, reference and travel sites on 127.0.0.1 (truth on "
                    "its own port)."),
    "serve-openenv": ("webgym_rollout.interop.openenv:serve_openenv_command",
                      "Serve the web tasks as an OpenEnv environment (/reset, /step, /ws sessions); needs "
                      "webgym[interop]."),
    "site-tasks": ("webgym_sites.generate:site_tasks_command",
                   "Write generated tasks of the local sites as task rows (for webgym-data build)."),
    "run": ("webgym_rollout.runner:run_command",
            "Roll out tasks with a policy against browser servers; write trajectories."),
    "view": ("webgym_rollout.report.viewer:view_command",
             "Write a static HTML report of a trajectory dataset."),
    "report": ("webgym_rollout.report.html:report_command",
               "Success rates with confidence intervals and run-to-run comparisons, as HTML."),
    "rejudge": ("webgym_rollout.judge.rejudge:rejudge_command",
                "Score stored episodes again with another judge, without browsers; write a new dataset."),
    "judge-eval": ("webgym_rollout.judge.calibration:judge_eval_command",
                   "Measure judges against human labels or the sites' ground truth (agreement, kappa, F1)."),
    "fleet": ("webgym_rollout.fleet:fleet_group",
              "Browser fleets on a Ray cluster: fleet up | status | down (needs webgym[ray])."),
    "push": ("webgym_rollout.trajectory.hub:push_command",
             "Publish a trajectory dataset to the Hugging Face Hub."),
    "check-endpoint": ("webgym_rollout.agent.check:check_endpoint_command",
                       "Send one real prompt to an OpenAI-compatible endpoint; say if the reply parses."),
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Run visual web agents in real Chromium browsers and write trajectory datasets.

    \b
    Example:
      webgym-rollout serve-sites --port 8400 &
      webgym-rollout serve --port 8300 --allow-hosts 127.0.0.1:8400 &
      webgym-rollout run --tasks out/tasks --servers http://127.0.0.1:8300 \\
          --sites-url http://127.0.0.1:8400 --policy random --out out/trajectories/iter-0000
      webgym-rollout view out/trajectories/iter-0000
    """
    setup_logging(verbose)


if __name__ == "__main__":  # python -m webgym_rollout.cli
    main()
