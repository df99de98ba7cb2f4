"""Deprecated: moved to `webgym_sites.serving` (issue 38); this path goes in 0.4.0."""

from webgym_rollout.tasks._moved import forward

forward(__name__, "webgym_sites.serving")
