"""Fixtures of the webgym_rl tests: the known-answer bandit's starting point (`tests.support.bandit`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.bandit import Arena, Bandit, SeededPolicy, arena, demonstrations, success, tasks_file


@dataclass(frozen=True)
class BanditStart:
    """A bandit page and the tiny checkpoint that clicks on it at random, measured."""

    bandit: Bandit
    site: Path
    """The folder `arena` serves."""
    checkpoint: Path
    """A tiny Qwen2-VL that imitated a random clicker (valid replies, x at random)."""
    evaluation: Path
    """The fixed evaluation set: its task file (each episode sampled with a seed of its own)."""
    before: float
    """The checkpoint's hit rate on the evaluation set: chance, the box's share of the page."""


IMITATION_STEPS = 250


SERVED = "bandit"
"""The name the CPU policy server serves a bandit policy under."""


def policy_server(checkpoint: Path):
    """The CPU policy server of `checkpoint` (a context manager yielding its base URL)."""
    from webgym_rl.policy_server import PolicyServerSettings, running_policy_server

    return running_policy_server(PolicyServerSettings(model=str(checkpoint), port=0, max_new_tokens=48,
                                                      served_model_name=SERVED))


async def evaluate(where: Arena, base_url: str, evaluation: Path, out: Path) -> float:
    """The hit rate of the policy at `base_url` on the fixed evaluation set (test-split episodes)."""
    from webgym_rollout.runner import run

    await run(where.run_settings(evaluation, out, split="test"), policy=SeededPolicy(base_url, SERVED))
    return success(out)


@pytest.fixture(scope="session")
def bandit_start(tmp_path_factory, chromium_path) -> BanditStart:
    """The bandit (its box at a place drawn with seed 0) and the policy every learning test starts
    from: a tiny Qwen2-VL (small images: the page never changes) trained with filtered_bc to imitate
    a random clicker's replies on a screenshot of the page taken by a real episode."""
    from webgym_rl.samples import SampleSelection, build_samples, load_trajectories
    from webgym_rl.settings import OptimizationSettings
    from webgym_rl.tiny import TinyModelSettings, build_tiny_model
    from webgym_rl.train import EpochOrder, Trainer
    from webgym_rollout.agent.policies import PixelRandomPolicy
    from webgym_rollout.runner import run
    from webgym_rollout.trajectory.reader import read_episodes

    root = tmp_path_factory.mktemp("bandit")
    bandit = Bandit.drawn(seed=0)
    site = bandit.write(root / "site")
    evaluation = tasks_file(root / "evaluation.jsonl", 48, first_seed=100_000)

    async def start() -> BanditStart:
        async with arena(chromium_path, site) as where:
            probe = root / "probe"
            probe_tasks = tasks_file(root / "probe.jsonl", 1)
            await run(where.run_settings(probe_tasks, probe), policy=PixelRandomPolicy())
            screenshot = next(iter(read_episodes(probe))).steps[0].screenshot
            model = build_tiny_model(root / "tiny", settings=TinyModelSettings(
                family="qwen2_vl", seed=0, min_pixels=56 * 56, max_pixels=56 * 56))
            everything = SampleSelection(success_threshold=0.0)
            training = OptimizationSettings(learning_rate=3e-3, per_device_batch_size=8, log_with="none",
                                            samples=everything)
            trainer = Trainer(model=str(model), model_revision=None, out=root / "imitation", seed=0,
                              total_steps=None, training=training)
            samples = build_samples(load_trajectories([demonstrations(screenshot, root / "demos")]),
                                    "filtered_bc", everything)
            order = EpochOrder(samples.weights, seed=0)
            trainer.fit(trainer.loader(samples, order), order, until=IMITATION_STEPS)
            checkpoint = trainer.save_servable(root / "start", {})
            with policy_server(checkpoint) as base_url:
                before = await evaluate(where, base_url, evaluation, root / "evaluation-start")
        return BanditStart(bandit, site, checkpoint, evaluation, before)

    return asyncio.run(start())
