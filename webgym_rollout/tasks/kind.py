"""Task kinds: how a task opens in a browser session and how its outcome is read.

A task row's ``environment`` names its kind: ``web`` (any website: open the start URL; the judge
decides the reward later) or ``<kind>:<argument>``, e.g. ``miniwob:click-button`` (a MiniWoB++ page,
seeded; the page reports its own reward). Each kind is a small `TaskKind` subclass, registered
under its `name`; `task_kind(task)` picks the class. `WebEnv` (client side) and the browser pool
(server side) only call the kind's hooks, so neither branches on the kind, and
`webgym_rollout.tasks.miniwob` holds every MiniWoB-specific line.

Client side, per task (`WebEnv`)::

    kind.session_request(settings, seed) -> what the browser server opens (URL, environment, seed)
    await kind.setup(session)            -> the instruction the agent is given
    await kind.validate(session)         -> TaskOutcome, or None when the kind has no verdict
    kind.outcome(env_state)              -> the same verdict from the state a step's `act` read
    kind.replaying(recorded_urls)        -> the episode replays a recording made with these URLs
    kind.horizon(settings, split)        -> the step budget
    kind.check(settings)                 -> raise ValueError if the settings cannot run this kind

Server side, per page: ``Kind.page``, the kind's `webgym_rollout.browser.pages.PageHooks` (the
screenshot region, what to do once the start URL has loaded, the page's own state), registered
with the browser server when the kind is defined; the browser never imports this package.

Errors: `InvalidRequest` (a `BrowserError`) names an environment string no kind reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from webgym_data.schema import DIFFICULTY_LEVELS, Task
from webgym_rollout.browser.pages import PageHooks, page_hooks, register_page_hooks
from webgym_rollout.browser.protocol import CreateSessionRequest, EnvState
from webgym_rollout.errors import InvalidRequest
from webgym_rollout.trajectory.contract import TaskOutcome

if TYPE_CHECKING:
    from webgym_rollout.browser.client import BrowserSession
    from webgym_rollout.settings import EnvSettings

__all__ = ["TaskKind", "WebTask", "kind_class", "kind_names", "task_kind"]

_KINDS: dict[str, type[TaskKind]] = {}


class TaskKind:
    """One kind of task. Subclasses set `name` (the ``environment`` prefix) and override hooks."""

    name: ClassVar[str]
    page: ClassVar[type[PageHooks]] = PageHooks
    """What the browser server does to this kind's pages (`webgym_rollout.browser.pages`),
    registered with the browser under `name` when the kind is defined."""
    default_horizon: ClassVar[int | None] = None
    """This kind's step budget, whatever the task's difficulty (MiniWoB: 6); None: by the task's
    difficulty, from the split's table (`EnvSettings.train_horizons` / ``test_horizons``).
    `EnvSettings.horizons` overrides either, per kind."""
    keeps_reward: ClassVar[bool] = False
    """The environment reports its own reward (`validate`), which the programmatic judge reads; a
    website keeps none, so its episodes need a rubric judge."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _KINDS[cls.name] = cls
        if cls.page.name != cls.name:
            raise TypeError(f"{cls.__name__}.page.name is {cls.page.name!r}; it must be the kind's name "
                            f"{cls.name!r}")
        register_page_hooks(cls.page)

    def __init__(self, task: Task, argument: str = ""):
        self.task = task
        self.argument = argument
        """What follows ``<kind>:`` in the task's ``environment`` (``click-button``)."""
        self.session_id = ""
        """The local site session this episode plays, whose ground truth the toolkit can read
        (`webgym_rollout.tasks.site_kind`); "" for kinds without one."""

    # ---------------------------------------------------------------- client side (WebEnv)

    @property
    def environment(self) -> str:
        """The environment string the browser server is asked for."""
        return f"{self.name}:{self.argument}" if self.argument else self.name

    def check(self, settings: EnvSettings) -> None:
        """Raise ValueError (naming the setting) when `settings` cannot run this kind of task."""

    def start_url(self, settings: EnvSettings) -> str:
        return self.task.start_url

    def session_request(self, settings: EnvSettings, seed: int | None) -> CreateSessionRequest:
        """The session the browser server opens for this task (one call: page loaded, ready)."""
        return CreateSessionRequest(start_url=self.start_url(settings), viewport=settings.viewport_size,
                                    environment=self.environment, seed=seed)

    async def setup(self, session: BrowserSession) -> str:
        """Anything to do once the session is open; returns the instruction for the agent."""
        return self.task.task_name

    async def validate(self, session: BrowserSession) -> TaskOutcome | None:
        """The environment's own verdict after a step, or None when it has none (the judge decides)."""
        return None

    def outcome(self, state: EnvState | None) -> TaskOutcome | None:
        """The verdict `validate` gives, from the page's state that a step's ``act`` read already
        (None: the page keeps none); saves the round trip of `validate`."""
        return None

    def replaying(self, recorded_urls: Sequence[str]) -> None:
        """The episode is served from a recording whose requests were made to `recorded_urls`
        (a kind whose start URL is drawn per episode takes the recorded one back)."""

    def horizon(self, settings: EnvSettings, split: str) -> int:
        """The step budget (the environment truncates the episode after that many steps): the
        kind's budget in `EnvSettings.horizons`, else its `default_horizon`, else the horizon table
        of `split` indexed by the task's difficulty level. A task of unknown difficulty (no rubric,
        no seed label) gets the table's longest budget: too short a budget would fail a hard task
        for want of steps."""
        if self.name in settings.horizons:
            return settings.horizons[self.name]
        if self.default_horizon is not None:
            return self.default_horizon
        table = settings.test_horizons if split == "test" else settings.train_horizons
        level = self.task.difficulty_level
        if level not in DIFFICULTY_LEVELS:  # "unknown"
            return max(table)
        return table[DIFFICULTY_LEVELS.index(level)]


class WebTask(TaskKind):
    """Any website: open the start URL; the reward comes from the judge after the episode."""

    name = "web"


def kind_names() -> list[str]:
    """The environment strings the registered kinds read, e.g. ``['miniwob:<task>', 'web']``."""
    return sorted(f"{name}:<task>" if cls.page.takes_argument else name for name, cls in _KINDS.items())


def kind_class(environment: str) -> tuple[type[TaskKind], str]:
    """The kind class and its argument for an ``environment`` string (``"web"``,
    ``"miniwob:click-button"``); raises `InvalidRequest` naming the string when no kind reads it."""
    hooks, argument = page_hooks(environment)  # the same rules as the browser server's
    cls = _KINDS.get(hooks.name)
    if cls is None:
        known = ", ".join(f"'{name}'" for name in kind_names())
        raise InvalidRequest(f"unknown environment {environment!r}: expected one of {known}")
    return cls, argument


def task_kind(task: Task) -> TaskKind:
    """The kind of `task`, read from its ``environment``."""
    cls, argument = kind_class(task.environment)
    return cls(task, argument)
