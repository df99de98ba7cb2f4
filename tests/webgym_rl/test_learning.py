"""Learning you can see on one CPU: the tiny model's size from its settings, the shuffled-screenshot
control (a policy that learned from the screenshot falls back to pixel-random when it is shown the
screenshots of other episodes), known answers (each objective learns a visual bandit from its own
samples, through the real path, and shuffled rewards teach nothing) and a cut-down run of
``benchmarks/learning_miniwob.py``."""

from __future__ import annotations

import asyncio
import io
import json
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from tests.webgym_rl.synthetic import task, write_shards
from webgym_rl.settings import GRPOSettings, OptimizationSettings
from webgym_rl.tiny import TinyModelSettings, build_tiny_model
from webgym_rollout.actions import AgentAction
from webgym_rollout.agent.protocol import AgentSettings, Observation, build_messages, format_response

ROOT = Path(__file__).resolve().parents[2]
COMPACT = AgentSettings(variant="compact", full_rounds=0)
INSTRUCTION = "Click the left half on a red page, the right half on a blue page."
# Where the trained policy is taught to click: the centre of the half its page's colour names.
TARGET = {"red": (250, 500), "blue": (750, 500)}


def test_tiny_model_sizes_come_from_the_settings(tmp_path):
    from webgym_rl.modeling import load_model

    small = TinyModelSettings(family="qwen3_vl", hidden_size=32, num_layers=1, vision_width=16, seed=1)
    model = load_model(build_tiny_model(tmp_path / "small", settings=small))
    text = model.config.text_config
    assert (text.hidden_size, text.num_hidden_layers) == (32, 1)
    assert model.config.vision_config.hidden_size == 16
    default = load_model(build_tiny_model(tmp_path / "default", family="qwen3_vl"))
    assert sum(p.numel() for p in model.parameters()) < sum(p.numel() for p in default.parameters())
    for bad, field in ((dict(hidden_size=60), "hidden_size"), (dict(num_layers=0), "num_layers"),
                       (dict(vision_width=20), "vision_width"), (dict(max_pixels=100), "max_pixels"),
                       (dict(image_mean=1.5), "image_mean"), (dict(image_std=0.0), "image_std")):
        with pytest.raises(ValueError, match=f"^{field}: "):
            TinyModelSettings(**bad)


@pytest.mark.parametrize("overrides, white", [({}, 0.0), ({"image_mean": 0.5}, 1.0)])
def test_the_checkpoint_normalises_pixels_around_its_image_mean(tmp_path, overrides, white):
    """By default a white page (the background of most web pages) becomes zeros, so the image tokens
    carry what is drawn on the page; the setting is stored with the checkpoint's processor."""
    from webgym_rl.modeling import load_processor

    settings = TinyModelSettings(family="qwen3_vl", **overrides)
    processor = load_processor(build_tiny_model(tmp_path / "model", settings=settings))
    page = Image.new("RGB", (160, 210), (255, 255, 255))
    page.paste((0, 0, 0), (40, 40, 80, 60))  # a black button
    pixels = processor.image_processor(images=[page], return_tensors="pt")["pixel_values"]
    values = pixels.flatten().tolist()
    # Most values are white's, (1 - mean) / std; the button's are black's, (0 - mean) / std (and
    # between the two at its edges, where resizing blends them).
    black = (0.0 - settings.image_mean) / settings.image_std
    assert sum(1 for v in values if abs(v - white) < 1e-3) > 0.8 * len(values)
    assert any(abs(v - black) < 1e-3 for v in values)
    assert all(black - 1e-3 <= v <= white + 1e-3 for v in values)


def _page(colour: str, rng: random.Random) -> bytes:
    """A 160x210 page of one shade of `colour` (the shade varies, the colour decides the click)."""
    shade = rng.randrange(150, 256)
    other = rng.randrange(0, 60)
    pixel = (shade, other, other) if colour == "red" else (other, other, shade)
    buffer = io.BytesIO()
    Image.new("RGB", (160, 210), pixel).save(buffer, "PNG")
    return buffer.getvalue()


def _observation(colour: str, rng: random.Random, index: int) -> tuple[Observation, str]:
    return (Observation(instruction=INSTRUCTION, screenshot=_page(colour, rng), viewport=(160, 210),
                        episode_id=f"{colour}-{index}"), colour)


def _training_episodes(count: int):
    from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Step

    rng = random.Random(0)
    episodes = []
    for i in range(count):
        observation, colour = _observation("red" if i % 2 else "blue", rng, i)
        action = AgentAction("left_click", coordinate=TARGET[colour])
        reply = format_response(action, variant="compact")
        step = Step(index=0, screenshot=observation.screenshot, response=reply, action=reply,
                    messages=json.dumps(build_messages(observation, COMPACT)), same_as_next=False)
        episodes.append(Episode(task=task(f"page{i}"), episode_id=f"page{i}", split="train",
                                instruction=INSTRUCTION, reward=1.0, status=EpisodeStatus.OK, steps=[step]))
    return episodes


def _hit(action: AgentAction | None, colour: str) -> bool:
    """The click landed on the half the page's colour names (what pixel-random hits half the time)."""
    if action is None or action.name != "left_click" or action.coordinate is None:
        return False
    return (action.coordinate[0] < 500) == (colour == "red")


async def _success(policy, cases) -> float:
    hits = [_hit((await policy.act(observation)).action, colour) for observation, colour in cases]
    return sum(hits) / len(hits)


def test_shuffled_screenshots_fall_back_to_pixel_random(tmp_path):
    """A checkpoint trained here reads the page colour from the screenshot; shown the screenshots of
    other episodes it scores what blind clicking scores."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from learning_miniwob import ShuffledScreenshots

    from webgym_core.endpoint import Endpoint
    from webgym_rl.policy_server import PolicyServerSettings, running_policy_server
    from webgym_rl.settings import OptimizationSettings, TrainCommandSettings
    from webgym_rl.train import train
    from webgym_rollout.agent.policies import (
        OpenAIPolicy,
        PixelRandomPolicy,
        RandomPolicySettings,
        SamplingSettings,
    )

    # Pages of one saturated colour, no white: normalised around mid-grey, so that neither colour is
    # a large constant in every patch (the default, white, suits web pages).
    tiny = TinyModelSettings(family="qwen3_vl", hidden_size=128, vision_width=64, image_mean=0.5)
    model = build_tiny_model(tmp_path / "model", settings=tiny)
    data = write_shards(tmp_path / "pages", _training_episodes(32))
    training = OptimizationSettings(learning_rate=1e-3, max_steps=80, per_device_batch_size=4,
                                    log_with="none")
    result = train(TrainCommandSettings(model=str(model), data=[str(data)], out=str(tmp_path / "train"),
                                        seed=0, training=training))
    rng = random.Random(1)  # shades never seen in training
    cases = [_observation(colour, rng, 100 + i) for i, colour in enumerate(["red", "blue"] * 12)]
    pool = [observation.screenshot for observation, _ in cases]
    server = PolicyServerSettings(model=str(result.checkpoint), port=0, served_model_name="tiny",
                                  max_new_tokens=40)
    greedy = SamplingSettings(temperature=0.0, max_tokens=40)

    async def measure(base_url: str) -> dict[str, float]:
        endpoint = Endpoint(base_url=base_url, model="tiny")
        async with OpenAIPolicy(endpoint, sampling=greedy, agent=COMPACT) as p:
            return {"screenshots": await _success(p, cases),
                    "shuffled": await _success(ShuffledScreenshots(p, pool, seed=0), cases),
                    "pixel_random": await _success(PixelRandomPolicy(RandomPolicySettings(seed=0),
                                                                     agent=COMPACT), cases)}

    with running_policy_server(server) as base_url:
        rates = asyncio.run(measure(base_url))
    assert rates["screenshots"] >= 0.9, rates
    # Blind clicking hits the named half about half the time; so does the policy shown other pages.
    assert 0.25 <= rates["pixel_random"] <= 0.75, rates
    assert abs(rates["shuffled"] - rates["pixel_random"]) <= 0.25, rates
    assert rates["screenshots"] - rates["shuffled"] >= 0.25, rates


@pytest.mark.slow
@pytest.mark.browser
def test_a_cut_down_benchmark_run_learns(tmp_path):
    """One loop iteration on MiniWoB++ (the benchmark runs two, on more data): the trained policy
    writes valid actions where the untrained one does not, and solves more held-out episodes than
    pixel-random on the same seeds."""
    out = tmp_path / "learning"
    finished = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "learning_miniwob.py"), "--out", str(out),
         "--iterations", "1", "--train-seeds", "200", "--heldout-seeds", "15", "--max-steps", "800"],
        capture_output=True, text=True, timeout=3600, cwd=ROOT)
    assert finished.returncode == 0, finished.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    final, untrained, pixel = results["iterations"][-1]["eval"], results["untrained"], results["pixel_random"]
    assert final["episodes"] == untrained["episodes"] == pixel["episodes"] == 30
    assert final["valid_action_rate"] > untrained["valid_action_rate"]
    assert (out / "learning_miniwob.png").read_bytes()[:4] == b"\x89PNG"
    assert "pixel-random" in (out / "report" / "report.html").read_text()
    assert final["success_rate"] > pixel["success_rate"], (final, pixel)


# ------------------------------------------------------------ known answers: a one-step visual bandit


@dataclass(frozen=True)
class Plan:
    """How an objective trains on its own samples, round after round."""

    training: OptimizationSettings
    rounds: int
    steps: int
    """Optimizer steps per round (grpo: passes over the round's one batch)."""


ATTEMPTS = 32
"""Episodes per round: 32 attempts at one task (one group for grpo's and reinforce's baselines)."""
PLANS = {
    # Imitation tolerates a large step. The policy-gradient objectives push replies down as well as up,
    # and under large unclipped steps a tiny model's format breaks (a reply of the wrong first digit
    # loses its well-formed rest too): reinforce takes smaller steps, over more rounds (at 8e-4 it
    # collapsed in one run of two), and grpo clips them (PPO: eight clipped passes over each round's batch).
    "filtered_bc": Plan(OptimizationSettings(objective="filtered_bc", learning_rate=1e-3,
                                             per_device_batch_size=8, log_with="none"), rounds=3, steps=8),
    "reinforce": Plan(OptimizationSettings(objective="reinforce", learning_rate=6e-4,
                                           per_device_batch_size=16, log_with="none"), rounds=14, steps=2),
    "grpo": Plan(OptimizationSettings(objective="grpo", learning_rate=1e-3, per_device_batch_size=ATTEMPTS,
                                      grpo=GRPOSettings(ppo_epochs=8), log_with="none"), rounds=5, steps=8),
}


async def _learn(start, chromium_path: str, plan: Plan, out: Path, *, shuffle: bool = False
                 ) -> tuple[list[float], float]:
    """Train `start.checkpoint` with `plan` on its own samples through the real path (the CPU policy
    server samples at temperature 1, Chromium plays the page, the programmatic judge scores, the
    trainer trains on the trajectories and pushes its weights to the server), each round's rewards
    shuffled among its episodes when `shuffle`; returns the hit rate of each round and the final
    one on the fixed evaluation set."""
    from tests.support.bandit import COMPACT, arena, shuffled_rewards, success, tasks_file
    from tests.webgym_rl.conftest import SERVED, evaluate, policy_server
    from webgym_core.endpoint import Endpoint
    from webgym_rl.errors import NoTrainingDataError
    from webgym_rl.pixels import image_processor_config
    from webgym_rl.policy_server import push_weights
    from webgym_rl.samples import build_samples, load_trajectories
    from webgym_rl.train import EpochOrder, Trainer
    from webgym_rollout.agent.policies import OpenAIPolicy, SamplingSettings
    from webgym_rollout.runner import run

    t = plan.training
    trainer = Trainer(model=str(start.checkpoint), model_revision=None, training=t, out=out / "trainer",
                      seed=0, total_steps=None)
    task = tasks_file(out / "task.jsonl", 1)
    rng, played = random.Random(0), []
    async with arena(chromium_path, start.site, contexts=8) as where:
        with policy_server(start.checkpoint) as base_url:
            for r in range(plan.rounds):
                policy = OpenAIPolicy(Endpoint(base_url=base_url, model=SERVED), agent=COMPACT,
                                      sampling=SamplingSettings(temperature=1.0, max_tokens=48))
                rollout = out / f"round-{r}"
                await run(where.run_settings(task, rollout, attempts=ATTEMPTS, iteration=r, concurrency=8),
                          policy=policy)
                played.append(success(rollout))
                data = shuffled_rewards(rollout, out / f"shuffled-{r}", rng) if shuffle else rollout
                try:
                    samples = build_samples(load_trajectories([data]), t.objective, t.samples)
                except NoTrainingDataError:  # no hit (filtered_bc), or all hits (grpo): nothing to learn
                    continue
                order = EpochOrder(samples.weights, seed=r)
                trainer.fit(trainer.loader(samples, order), order, until=trainer.step + plan.steps)
                push_weights(base_url, trainer.servable_state_dict(),
                             image_processor=image_processor_config(trainer.processor))
            after = await evaluate(where, base_url, start.evaluation, out / "evaluation")
    return played, after


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("objective", list(PLANS))
def test_each_objective_learns_a_visual_bandit_from_its_own_samples(objective, bandit_start, chromium_path,
                                                                     tmp_path):
    """Known answer: from a policy that clicks at random (hit rate on the fixed evaluation set about
    the box's share of the page: chance), training on its own samples raises the hit rate to at least
    twice chance within a fixed number of updates."""
    chance = bandit_start.bandit.chance
    assert bandit_start.before <= 1.5 * chance, bandit_start.before  # it starts at chance
    played, after = asyncio.run(_learn(bandit_start, chromium_path, PLANS[objective], tmp_path))
    assert after >= 2 * chance, (objective, chance, bandit_start.before, played, after)


@pytest.mark.slow
@pytest.mark.browser
def test_shuffled_rewards_teach_nothing(bandit_start, chromium_path, tmp_path):
    """The control: grpo's plan on the same replies with their rewards shuffled among them (the same
    number of successes, no link between a reply and its reward) does not reach twice chance."""
    chance = bandit_start.bandit.chance
    played, after = asyncio.run(_learn(bandit_start, chromium_path, PLANS["grpo"], tmp_path, shuffle=True))
    assert after < 2 * chance, (chance, bandit_start.before, played, after)
