"""A fixture for tests that run another library's trainer (TRL's) in the test process: it resets
Accelerate's process-wide state afterwards, so the project's own trainer in later tests can set up
its Accelerator with its own settings (Accelerate refuses to change an initialised state)."""

from __future__ import annotations

import pytest


@pytest.fixture
def fresh_accelerate_state():
    """Reset Accelerate's global state after the test (also when it fails)."""
    yield
    from accelerate.state import AcceleratorState  # optional: accelerate

    AcceleratorState._reset_state(reset_partial_state=True)
