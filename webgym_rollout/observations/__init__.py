"""What the policy is shown beside (or instead of) the screenshot, one module per observation mode
(`webgym_rollout.settings.ObservationSettings`): `draw_marks` (``som``: the screenshot with each
interactive element's number drawn), `render_axtree` (``axtree``: the page's accessibility tree as
text, within a token budget) and `render_elements` (``elements``: the interactive elements as a
list). Elements are numbered from 1 in the order of the step's element list."""

from webgym_rollout.observations.axtree import render_axtree
from webgym_rollout.observations.elements import render_elements
from webgym_rollout.observations.marks import draw_marks

__all__ = ["draw_marks", "render_axtree", "render_elements"]
