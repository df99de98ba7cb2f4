"""The online RL loop: one recipe, two schedules, a resident trainer.

::

    run_loop(LoopSettings) -> LoopResult          (webgym_rl.loop.run)
      sync   rollout -> train -> publish -> eval -> push, round after round   (.sync)
      async  rollouts beside training, bounded by staleness                   (.asynchronous)
             the bound: StalenessManager (capacity for a version, counts)      (.staleness)
      both   the same phases (.phases), the same resident trainer (.resident), typed state (.state),
             services (.services), updaters (.updater), events (.events), recipes (.recipes)

Every name below is imported on first use, so ``import webgym_rl.loop`` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from webgym_core.lazy import lazy_exports, moved_names

_EXPORTS = {
    "AsyncSettings": "webgym_rl.loop.settings",
    "LoopResult": "webgym_rl.loop.run",
    "LoopServices": "webgym_rl.loop.services",
    "LoopSettings": "webgym_rl.loop.settings",
    "LoopState": "webgym_rl.loop.state",
    "PolicyEndpointSettings": "webgym_rl.loop.settings",
    "ResidentTrainerSettings": "webgym_rl.loop.settings",
    "StalenessManager": "webgym_rl.loop.staleness",
    "load_state": "webgym_rl.loop.state",
    "load_recipe": "webgym_rl.loop.recipes",
    "plan": "webgym_rl.loop.recipes",
    "recipe_path": "webgym_rl.loop.recipes",
    "run_loop": "webgym_rl.loop.run",
}

__all__ = ["AsyncSettings", "LoopResult", "LoopServices", "LoopSettings", "LoopState",
           "PolicyEndpointSettings", "ResidentTrainerSettings", "StalenessManager", "load_recipe",
           "load_state", "plan", "recipe_path", "run_loop"]

if TYPE_CHECKING:
    from webgym_rl.loop.recipes import load_recipe, plan, recipe_path
    from webgym_rl.loop.run import LoopResult, run_loop
    from webgym_rl.loop.services import LoopServices
    from webgym_rl.loop.settings import (
        AsyncSettings,
        LoopSettings,
        PolicyEndpointSettings,
        ResidentTrainerSettings,
    )
    from webgym_rl.loop.staleness import StalenessManager
    from webgym_rl.loop.state import LoopState, load_state


_lazy, __dir__ = lazy_exports(__name__, _EXPORTS)
# Renamed in 0.3.0; the old name goes in the next release.
__getattr__ = moved_names(__name__, {"TrainerSettings": "webgym_rl.loop.settings:ResidentTrainerSettings"},
                          fallback=_lazy)
