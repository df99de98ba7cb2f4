"""webgym_rl: an Accelerate-based RL trainer for VLM web agents, and the online loop.

The core API, in the order training meets it::

    trajectories (webgym_rollout.read_episodes) -> load_trajectories -> build_samples(sets, Objective)
        -> StepSamples -> train(TrainCommandSettings) with the loss OBJECTIVES[objective]
    export_sft(ExportCommandSettings): filtered_bc's samples as TRL's conversational SFT dataset
    run_loop(LoopSettings): roll out -> train -> publish -> evaluate -> push, resumable, under the
        sync or async schedule with a resident trainer (webgym_rl.loop)

Every name below is imported on first use, so ``import webgym_rl`` does not import torch.
`webgym_rl.errors` draws the exception tree (root: `WebgymRLError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from webgym_core.lazy import lazy_exports, moved_names

__version__ = "0.2.0"

_EXPORTS = {
    "OBJECTIVES": "webgym_rl.objectives",
    "ExportCommandSettings": "webgym_rl.settings",
    "LoopSettings": "webgym_rl.loop.settings",
    "Objective": "webgym_rl.samples",
    "SampleSelection": "webgym_rl.samples",
    "StepSamples": "webgym_rl.samples",
    "OptimizationSettings": "webgym_rl.settings",
    "TrainCommandSettings": "webgym_rl.settings",
    "WebgymRLError": "webgym_rl.errors",
    "build_samples": "webgym_rl.samples",
    "export_sft": "webgym_rl.export",
    "load_trajectories": "webgym_rl.samples",
    "run_loop": "webgym_rl.loop.run",
    "train": "webgym_rl.train",
}

__all__ = [
    "OBJECTIVES",
    "ExportCommandSettings",
    "LoopSettings",
    "Objective",
    "SampleSelection",
    "StepSamples",
    "OptimizationSettings",
    "TrainCommandSettings",
    "WebgymRLError",
    "build_samples",
    "export_sft",
    "load_trajectories",
    "run_loop",
    "train",
]

if TYPE_CHECKING:
    from webgym_rl.errors import WebgymRLError
    from webgym_rl.export import export_sft
    from webgym_rl.loop.run import run_loop
    from webgym_rl.loop.settings import LoopSettings
    from webgym_rl.objectives import OBJECTIVES
    from webgym_rl.samples import Objective, SampleSelection, StepSamples, build_samples, load_trajectories
    from webgym_rl.settings import ExportCommandSettings, OptimizationSettings, TrainCommandSettings
    from webgym_rl.train import train


_lazy, __dir__ = lazy_exports(__name__, _EXPORTS)
# Renamed in 0.3.0 to say what each is; the old names go in the next release.
__getattr__ = moved_names(__name__, {"TrainSettings": "webgym_rl.settings:TrainCommandSettings",
                                     "TrainingSettings": "webgym_rl.settings:OptimizationSettings"},
                          fallback=_lazy)
