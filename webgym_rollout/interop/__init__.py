"""Other RL stacks' interfaces over the toolkit's environment (``pip install 'webgym[interop]'``).

`gymnasium`: `WebGymEnv`, a `WebEnv` as a ``gymnasium.Env``, and `register`, which registers the
``webgym/miniwob-<task>-v0`` and ``webgym/site-<site>-v0`` ids::

    import gymnasium
    from webgym_rollout.interop import register

    register()
    env = gymnasium.make("webgym/miniwob-click-test-v0")

The names import on first use: importing this package imports no Gymnasium; the first use of a name
without the extra raises an ImportError naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from webgym_core.lazy import lazy_exports

_EXPORTS = {
    "GymSettings": "webgym_rollout.interop.gymnasium",
    "UnicodeText": "webgym_rollout.interop.gymnasium",
    "WebGymEnv": "webgym_rollout.interop.gymnasium",
    "env_ids": "webgym_rollout.interop.gymnasium",
    "register": "webgym_rollout.interop.gymnasium",
}

__all__ = ["GymSettings", "UnicodeText", "WebGymEnv", "env_ids", "register"]

if TYPE_CHECKING:
    from webgym_rollout.interop.gymnasium import GymSettings, UnicodeText, WebGymEnv, env_ids, register

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
