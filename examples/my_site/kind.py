"""The Larkspur Library as a task kind: ``environment="library"``, one fresh site session per episode.

A task kind is a class: subclass `TaskKind`, name it, and override the hooks your site needs; defining
the class registers it (the env and the runner find it from a task row's ``environment``) and its page
hooks (the browser server serves sessions of that environment). Import this module in the process
that plays episodes, and have a separate browser server import it too
(``webgym-rollout serve --page-modules webgym_rollout.tasks examples.my_site.kind``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from webgym_rollout.browser.pages import PageHooks
from webgym_rollout.tasks import TaskKind
from webgym_sites import new_session_id, with_session

if TYPE_CHECKING:
    from webgym_data import Task
    from webgym_rollout.settings import EnvSettings


# --8<-- [start:kind]
class LibraryPage(PageHooks):
    """Server side: the library's pages need no preparation and keep no state a script reads."""

    name = "library"


class LibraryTask(TaskKind):
    """A Larkspur Library task, played on a session of its own: the truth is read by its id."""

    name = "library"
    page = LibraryPage

    def __init__(self, task: Task, argument: str = ""):
        super().__init__(task, argument)
        self.session_id = new_session_id()  # a new kind object, so a new session, per episode

    def start_url(self, settings: EnvSettings) -> str:
        return with_session(self.task.start_url, self.session_id)
# --8<-- [end:kind]
