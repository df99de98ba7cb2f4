"""Other RL stacks' interfaces over the toolkit's environment (``pip install 'webgym[interop]'``).

`gymnasium`: `WebGymEnv`, a `WebEnv` as a ``gymnasium.Env``, and `register`, which registers the
``webgym/miniwob-<task>-v0`` and ``webgym/site-<site>-v0`` ids::

    import gymnasium
    from webgym_rollout.interop import register

    register()
    env = gymnasium.make("webgym/miniwob-click-test-v0")

`openenv`: ``webgym-rollout serve-openenv``, an OpenEnv server over `WebGymEnv` sessions
(`WebGymOpenEnv`, its models `WebGymAction`, `WebGymObservation`, `WebGymState`), and
`WebGymOpenEnvClient`, openenv's client typed for it::

    from webgym_rollout.interop import WebGymOpenEnvClient

    with WebGymOpenEnvClient(base_url="http://127.0.0.1:8600").sync() as env:
        result = env.reset(seed=0, task="miniwob:click-test")

The names import on first use: importing this package imports neither Gymnasium nor openenv-core;
the first use of a name without the extra raises an ImportError naming it.
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
    "OpenEnvSettings": "webgym_rollout.interop.openenv",
    "WebGymAction": "webgym_rollout.interop.openenv",
    "WebGymObservation": "webgym_rollout.interop.openenv",
    "WebGymOpenEnv": "webgym_rollout.interop.openenv",
    "WebGymOpenEnvClient": "webgym_rollout.interop.openenv",
    "WebGymState": "webgym_rollout.interop.openenv",
    "create_openenv_app": "webgym_rollout.interop.openenv",
}

__all__ = ["GymSettings", "OpenEnvSettings", "UnicodeText", "WebGymAction", "WebGymEnv", "WebGymObservation",
           "WebGymOpenEnv", "WebGymOpenEnvClient", "WebGymState", "create_openenv_app", "env_ids", "register"]

if TYPE_CHECKING:
    from webgym_rollout.interop.gymnasium import GymSettings, UnicodeText, WebGymEnv, env_ids, register
    from webgym_rollout.interop.openenv import (
        OpenEnvSettings,
        WebGymAction,
        WebGymObservation,
        WebGymOpenEnv,
        WebGymOpenEnvClient,
        WebGymState,
        create_openenv_app,
    )

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
