"""webgym_rollout: real Chromium browsers behind an HTTP server, a rollout runner and judges."""

__version__ = "0.1.0"
