"""`EnvSettings`: how an episode is played in the browser (the viewport, the local sites, the step
budgets), read by the environment (`webgym_rollout.env`) and by the task kinds it plays
(`webgym_rollout.tasks`). This module imports nothing of webgym_rollout: both import it, and the
kinds need not import the environment for its settings.

Step budgets: each task kind declares its own (`TaskKind.default_horizon`; MiniWoB: 6), or takes
one by the task's difficulty from the split's table (``train_horizons`` / ``test_horizons``: web
and local-site tasks); ``horizons`` overrides a kind's budget (``--horizons miniwob=2``). The
environment truncates the episode once it has taken that many steps (Gymnasium's time limit).

Observation modes (`ObservationSettings`, ``EnvSettings.observation``; ``--observation-modes``,
YAML ``observation: {modes: [som, elements]}``): what the policy is shown at each step, any
combination of ``screenshot`` (the viewport's screenshot: the default, and the published recipe's),
``som`` (the screenshot with each interactive element's box and number drawn on it, set-of-marks),
``axtree`` (the page's accessibility tree as text, interactive elements first, cut to
``axtree_tokens``) and ``elements`` (the interactive elements as a compact list, one line each).
Elements are numbered from 1 in the order the page lists them at that step; the numbers of the
marks, the lists and the element actions are the same.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from webgym_core.sources import url_problem

__all__ = ["OBSERVATION_MODES", "EnvSettings", "ObservationSettings"]

OBSERVATION_MODES = ("screenshot", "som", "axtree", "elements")
"""The observation modes, in the order their parts are shown: the image (``screenshot`` or its
set-of-marks version ``som``), then the texts (``axtree``, ``elements``; see `webgym_rollout.env`)."""


# The observation modes that show element ids to the policy: with any of them, element actions are offered.
ELEMENT_MODES = frozenset({"som", "axtree", "elements"})


@dataclass(frozen=True)
class ObservationSettings:
    """What the policy is shown at each step (see the module docstring)."""

    modes: tuple[str, ...] = ("screenshot",)
    """Observation modes, any combination of screenshot, som (set-of-marks screenshot), axtree
    (accessibility tree text) and elements (interactive elements list); comma- or space-separated,
    e.g. som,elements."""
    axtree_tokens: int = 2000
    """Longest accessibility tree text shown, in tokens of 4 characters (axtree mode)."""

    def __post_init__(self) -> None:
        modes = (self.modes,) if isinstance(self.modes, str) else tuple(self.modes)
        split = tuple(part.strip().lower() for mode in modes for part in str(mode).split(",") if part.strip())
        unknown = [mode for mode in split if mode not in OBSERVATION_MODES]
        if unknown:
            raise ValueError(f"modes: unknown observation mode{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(map(repr, unknown))}; the modes are {', '.join(OBSERVATION_MODES)}")
        if not split:
            raise ValueError(f"modes: give at least one observation mode ({', '.join(OBSERVATION_MODES)})")
        if "screenshot" in split and "som" in split:
            raise ValueError("modes: screenshot and som both show the screenshot (som with the element "
                             "numbers drawn on it): give one of them")
        object.__setattr__(self, "modes", tuple(dict.fromkeys(split)))
        if self.axtree_tokens < 1:
            raise ValueError(f"axtree_tokens: must be >= 1, got {self.axtree_tokens}")

    @property
    def image(self) -> bool:
        """Whether the policy is shown an image (screenshot or som)."""
        return "screenshot" in self.modes or "som" in self.modes

    @property
    def needs_elements(self) -> bool:
        """Whether the modes read the page's interactive elements at every step (som, axtree, elements)."""
        return any(mode in ELEMENT_MODES for mode in self.modes)


@dataclass(frozen=True)
class EnvSettings:
    """How an episode is played in the browser: the viewport, the local sites, the step budgets."""

    viewport: str = "1280x720"
    """Browser viewport WIDTHxHEIGHT in pixels."""
    sites_url: str | None = None
    """Base URL of the local site server (webgym-rollout serve-sites); MiniWoB tasks need it."""
    train_horizons: tuple[int, int, int] = (10, 20, 30)
    """Step budget of easy / medium / hard tasks in the train split (kinds whose budget goes by
    difficulty: web, site)."""
    test_horizons: tuple[int, int, int] = (30, 50, 70)
    """Step budget of easy / medium / hard tasks in the test split (kinds whose budget goes by
    difficulty: web, site)."""
    horizons: dict[str, int] = field(default_factory=dict)
    """Step budget per task kind, over the kind's own and the difficulty tables (KIND=STEPS, e.g.
    miniwob=2; MiniWoB's own is 6)."""
    miniwob_horizon: int | None = None
    """Deprecated: use --horizons miniwob=N (YAML: horizons: {miniwob: N})."""
    busy_wait_s: float = 120.0
    """How long reset waits for a free session slot while every server answers 'busy'."""
    elements: bool = field(default=False, metadata={"cli": False})
    """Read the page's interactive elements into each observation (one more call per step; the
    random policy needs them). Set by the runner from the policy; the observation modes som, axtree
    and elements read them whatever this says."""
    observation: ObservationSettings = field(default_factory=ObservationSettings)
    """What the policy is shown at each step: the observation modes."""

    def __post_init__(self) -> None:
        if self.sites_url and url_problem(self.sites_url):
            raise ValueError(url_problem(self.sites_url, what="sites_url: site server URL"))
        try:
            width, height = self.viewport_size
        except ValueError:
            raise ValueError(f"viewport: expected WIDTHxHEIGHT, e.g. 1280x720, got {self.viewport!r}"
                             ) from None
        if width < 1 or height < 1:
            raise ValueError(f"viewport: both sides must be >= 1, got {self.viewport!r}")
        for name in ("train_horizons", "test_horizons"):
            if any(h < 1 for h in getattr(self, name)):
                raise ValueError(f"{name}: every horizon must be >= 1, got {list(getattr(self, name))}")
        if self.miniwob_horizon is not None:
            warnings.warn("miniwob_horizon (--miniwob-horizon) is deprecated: use horizons "
                          "(--horizons miniwob=N); it goes in the next release", DeprecationWarning,
                          stacklevel=3)
            object.__setattr__(self, "horizons", {"miniwob": self.miniwob_horizon, **self.horizons})
            object.__setattr__(self, "miniwob_horizon", None)
        for kind, steps in self.horizons.items():
            if steps < 1:
                raise ValueError(f"horizons: the budget of {kind!r} must be >= 1, got {steps}")

    @property
    def viewport_size(self) -> tuple[int, int]:
        width, _, height = self.viewport.lower().partition("x")
        return int(width), int(height)
