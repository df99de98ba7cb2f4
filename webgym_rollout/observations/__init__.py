"""What the policy is shown beside (or instead of) the screenshot, one module per observation mode
(`webgym_rollout.settings.ObservationSettings`): `render_elements` (``elements``: the interactive
elements as a list). Elements are numbered from 1 in the order of the step's element list."""

from webgym_rollout.observations.elements import render_elements

__all__ = ["render_elements"]
