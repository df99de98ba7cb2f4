"""End to end with real parts only: MiniWoB site server, browser server (real Chromium), the runner,
a policy (random, or a tiny random Qwen2-VL behind the CPU policy server) and the programmatic judge
produce a trajectory dataset that `datasets.load_dataset` reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_asyncio

from webgym_core.endpoint import Endpoint
from webgym_rollout.agent.policies import PolicySettings, RandomPolicySettings
from webgym_rollout.judge.judges import JudgeSettings
from webgym_rollout.runner import RolloutSettings, RunSettings, run
from webgym_rollout.settings import EnvSettings
from webgym_rollout.trajectory.contract import expand_messages

pytestmark = [pytest.mark.browser]


def write_miniwob_tasks(path: Path, seeds, task: str = "click-button") -> Path:
    """A JSONL task file with one MiniWoB task row per seed."""
    with path.open("w", encoding="utf-8") as handle:
        for seed in seeds:
            handle.write(json.dumps({
                "task_id": f"{task}-{seed}", "task_name": f"MiniWoB {task}", "website": f"miniwob:{task}",
                "benchmark_name": "miniwob", "environment": f"miniwob:{task}", "env_seed": seed,
            }) + "\n")
    return path



@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def browser_url(chromium_path, sites):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=6,
                        allow_hosts=(f"{sites.host}:{sites.port}",))
    async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (url, _):
        yield url


def _load(out: Path):
    import datasets

    # A cache of the test's own, so that the suite leaves the user's ~/.cache alone.
    return datasets.load_dataset(str(out), split="train", cache_dir=str(out.parent / "hf-cache"))


def _check_steps(row) -> None:
    """Invariants every recorded episode must satisfy."""
    from PIL import Image

    steps = row["steps"]
    assert row["num_steps"] == len(steps)
    assert [s["index"] for s in steps] == list(range(len(steps)))
    for i, step in enumerate(steps):
        image = step["screenshot"]
        assert isinstance(image, Image.Image)
        image.load()  # decodes
        assert image.size == (160, 210)  # MiniWoB shots are cropped to the task area
        assert step["response"], "the policy's raw reply is recorded"
        # messages are stored with image placeholders that refer to this or earlier steps
        messages = expand_messages(step["messages"], lambda j: j)
        assert messages[0]["role"] == "system"
        referenced = [part["image"] for m in messages if isinstance(m["content"], list)
                      for part in m["content"] if part.get("type") == "image"]
        assert referenced and max(referenced) == i and all(0 <= j <= i for j in referenced)
        if i + 1 < len(steps):  # same_as_next is exactly "the next screenshot is pixel-identical"
            assert step["same_as_next"] == (step["screenshot_sha256"] == steps[i + 1]["screenshot_sha256"])
        if not step["action"]:
            assert step["action_error"], "an unparsed reply carries its parse error"


async def test_random_policy_on_click_button(tmp_path, sites_url, browser_url):
    tasks = write_miniwob_tasks(tmp_path / "tasks.jsonl", range(8))
    out = tmp_path / "out"
    report = await run(RunSettings(
        tasks=tasks, servers=(browser_url,), out=out, progress=False, rollout=RolloutSettings(concurrency=4),
        env=EnvSettings(sites_url=sites_url, viewport="320x240", horizons={"miniwob": 5}),
        policy=PolicySettings(kind="random", random=RandomPolicySettings(seed=3)),
        judge=JudgeSettings(kind="programmatic")))
    assert report.episodes == 8 and not report.errors
    ds = _load(out)
    assert sorted(ds["task_id"]) == sorted(f"click-button-{s}" for s in range(8))
    assert report.steps == sum(ds["num_steps"])
    for row in ds:
        _check_steps(row)
        assert row["policy_model"] == "random" and row["judge_model"] == "programmatic"
        # the agent was given the page's own sentence, not the row's name
        assert row["instruction"].startswith("Click on the") and row["instruction"] != row["task_name"]
        assert row["status"] in ("ok", "timeout")
        assert 1 <= row["num_steps"] <= 5
        (verdict,) = row["verdicts"]
        assert verdict["passed"] == (row["reward"] == 1.0)
        if row["status"] == "timeout":
            assert row["num_steps"] == 5 and row["reward"] == 0.0
    rewards = ds["reward"]
    assert any(r == 1.0 for r in rewards), rewards
    assert report.successes == sum(r == 1.0 for r in rewards)


@pytest.fixture(scope="module")
def tiny_policy_url(tiny_qwen2_vl):
    from webgym_rl.policy_server import PolicyServerSettings, running_policy_server

    model = tiny_qwen2_vl
    # A cap on new tokens keeps CPU generation short; the random model's text rarely parses anyway.
    settings = PolicyServerSettings(model=str(model), port=0, served_model_name="tiny-qwen2vl",
                                    max_new_tokens=24)
    with running_policy_server(settings) as url:
        yield url


async def test_openai_policy_with_tiny_model(tmp_path, sites_url, browser_url, tiny_policy_url):
    tasks = write_miniwob_tasks(tmp_path / "tasks.jsonl", range(3))
    out = tmp_path / "out"
    settings = RunSettings(
        tasks=tasks, servers=(browser_url,), out=out, progress=False, rollout=RolloutSettings(concurrency=3),
        env=EnvSettings(sites_url=sites_url, viewport="320x240", horizons={"miniwob": 3}),
        policy=PolicySettings(kind="openai",
                              endpoint=Endpoint(base_url=tiny_policy_url, model="tiny-qwen2vl")))
    report = await run(settings)
    assert report.episodes == 3 and not report.errors
    ds = _load(out)
    assert sorted(ds["task_id"]) == [f"click-button-{s}" for s in range(3)]
    assert report.steps == sum(ds["num_steps"])
    for row in ds:
        _check_steps(row)
        assert row["policy_model"] == "tiny-qwen2vl"
        assert row["status"] in ("ok", "timeout")
        if row["status"] == "timeout":
            assert row["num_steps"] == 3
        # the random model's replies are mostly unparseable: each is a no-op step, never a crash
        for step in row["steps"]:
            sent = json.loads(step["messages"])
            assert sent[-1]["content"][-1] == {"type": "image", "step": step["index"]}
            # token usage as the policy server reported it (the screenshot alone is many tokens)
            assert step["usage"]["prompt_tokens"] > 50 and step["usage"]["completion_tokens"] > 0
            assert step["finish_reason"] in ("stop", "length")
            # the behaviour policy's version and its token log-probabilities, as the endpoint returned them
            assert step["policy_version"] == 0  # the server names the weights' version: v0
            assert len(step["logprobs"]) == step["usage"]["completion_tokens"]
            assert all(lp <= 0 for lp in step["logprobs"])
    parse_errors = sum(1 for row in ds for s in row["steps"] if not s["action"])
    assert parse_errors == report.parse_errors
