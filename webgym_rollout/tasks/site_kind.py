"""The local sites as a task kind: ``environment="site:shop"``, one fresh site session per episode.

A generated site task (`webgym_sites.shop_tasks` and its siblings) names its site in its
environment. `SiteTask` opens its start URL on the site server of `EnvSettings.sites_url` (the rows
name where ``serve-sites`` listens by default; the run's URL replaces their host and port), with
``?session=<id>`` for a fresh, unguessable id drawn per episode (`SiteTask.session_id`): the site
keeps that session's cart, bookings and pages apart from every other episode, and the toolkit later
asks for its ground truth by that id (`SiteServer.facts`, `TruthClient.facts`). The pages keep no
reward of their own: the judge decides after the episode (`webgym_rollout.judge.site.SiteJudge`
against the ground truth, or a rubric judge from the screenshots).

A replay (``run --replay``) serves the pages from a recording, so the episode takes the recorded
session's id back (`SiteTask.replaying`): its requests match the recorded ones, and never reach
the site. Its truth is then the recorded session's: judge a replay by the truth only when it
repeats the recorded actions (a scripted expert, a policy at temperature 0); otherwise judge it
from its screenshots.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from webgym_rollout.browser.pages import PageHooks
from webgym_rollout.tasks.kind import TaskKind
from webgym_sites.state import new_session_id, session_in, with_session

if TYPE_CHECKING:
    from webgym_data.schema import Task
    from webgym_rollout.settings import EnvSettings

__all__ = ["SitePage", "SiteTask", "on_server"]


def on_server(url: str, sites_url: str | None) -> str:
    """`url` with its scheme, host and port replaced by those of `sites_url` (unchanged when None)."""
    if not sites_url:
        return url
    server = urlsplit(sites_url)
    return urlunsplit(urlsplit(url)._replace(scheme=server.scheme, netloc=server.netloc))


class SitePage(PageHooks):
    """Server side: a local site's page needs no preparation and keeps no state of its own."""

    name = "site"
    takes_argument = True


class SiteTask(TaskKind):
    """A task on one of the local stateful sites (``site:shop``), played on a session of its own."""

    name = "site"
    page = SitePage

    def __init__(self, task: Task, argument: str = ""):
        super().__init__(task, argument)
        self.session_id = new_session_id()  # a new kind, so a new session, per `WebEnv.reset`

    def check(self, settings: EnvSettings) -> None:
        if not settings.sites_url:
            raise ValueError(f"sites_url: task {self.task.task_id} is a local site's task "
                             f"({self.environment}); give the site server's URL (webgym-rollout "
                             "serve-sites; --sites-url)")

    def start_url(self, settings: EnvSettings) -> str:
        self.check(settings)
        return with_session(on_server(self.task.start_url, settings.sites_url), self.session_id)

    def replaying(self, recorded_urls: Sequence[str]) -> None:
        """A replay asks for the recorded session's pages: the URLs it recorded carry its id."""
        self.session_id = session_in(recorded_urls) or self.session_id

    def horizon(self, settings: EnvSettings, split: str) -> int:
        """The split's budget for the task's level; a decomposition's subtask gets the longest: its
        facts check a state (an order, a booking) that only its parent's whole work reaches."""
        if self.task.parent_task_id and self.name not in settings.horizons:
            return max(settings.test_horizons if split == "test" else settings.train_horizons)
        return super().horizon(settings, split)
