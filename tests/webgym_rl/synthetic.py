"""Synthetic trajectory datasets, written the way a rollout writes them.

`episode(...)` builds one `Episode` (with its `Task` and `Step`s): every step has a real PNG
screenshot, the messages as sent (image parts stored as ``{"type": "image", "step": j}``) and a
raw response. `write_shards(out, episodes)` writes them with the rollout's own `TrajectoryWriter`
(parquet shards + ``manifest.json``), so no column is spelled out here.

The responses are a deterministic function of the task, so a model trained on them can learn them
(a falling loss is a meaningful check).
"""

from __future__ import annotations

import io
import json
import random
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

from PIL import Image

from webgym_data.schema import FactGroup, Task
from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Latency, Step, TokenUsage, Verdict
from webgym_rollout.trajectory.reader import read_manifest
from webgym_rollout.trajectory.writer import TrajectoryWriter

SYSTEM_PROMPT = "You are a web agent. Reply with one action."


def screenshot(seed: int, size: tuple[int, int] = (56, 56)) -> Image.Image:
    """A small RGB image whose pixels depend on `seed` (blocks of colour, PNG-friendly)."""
    rng = random.Random(seed)
    image = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    for _ in range(4):
        x, y = rng.randrange(size[0]), rng.randrange(size[1])
        box = (x, y, min(size[0], x + 12), min(size[1], y + 12))
        image.paste(tuple(rng.randrange(256) for _ in range(3)), box)
    return image


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def step_image(step: Step) -> Image.Image:
    """The screenshot of a `Step`, decoded."""
    return Image.open(io.BytesIO(step.screenshot)).convert("RGB")


def response_for(task_id: str, step: int) -> str:
    return f'{{"action": "click", "x": {10 * (step + 1)}, "y": {len(task_id) * 7}}}'


def task(task_id: str) -> Task:
    return Task(task_id=task_id, task_name=f"do {task_id}", website="127.0.0.1",
                start_url=f"http://127.0.0.1/{task_id}", benchmark_name="synthetic", domain="test",
                subdomain="test", evaluator_reference=(FactGroup(id="g0", description="done",
                                                                 facts=("it is done",)),))


def episode(
    *,
    task_id: str,
    iteration: int = 0,
    attempt: int = 0,
    reward: float | None = 1.0,
    num_steps: int = 2,
    same_as_next: Sequence[bool] | None = None,
    status: str = "ok",
    split: str = "train",
    image_size: tuple[int, int] = (56, 56),
    window: int = 2,
    responses: Sequence[str] | None = None,
    logprobs: Sequence[float] | None = (-1.0,) * 8,
) -> Episode:
    """One episode; step ``i``'s prompt shows the screenshots of the last `window` steps. Each step
    carries `logprobs` as its behaviour log-probabilities (as a model's endpoint returns them; None:
    none, as a policy without a model) but no token ids (its text is re-tokenised)."""
    same_as_next = list(same_as_next) if same_as_next is not None else [False] * num_steps
    steps = []
    for i in range(num_steps):
        shown = list(range(max(0, i - window + 1), i + 1))
        user_content: list[dict] = [{"type": "text", "text": f"Task: do {task_id}. Step {i}."}]
        for j in shown:
            user_content.append({"type": "text", "text": f"Screenshot {j}:"})
            user_content.append({"type": "image", "step": j})
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_content},
        ]
        image = screenshot(zlib.crc32(f"{task_id}/{iteration}/{attempt}/{i}".encode()), image_size)
        response = responses[i] if responses is not None else response_for(task_id, i)
        steps.append(Step(
            index=i, screenshot=png(image), messages=json.dumps(messages), response=response, action=response,
            url=f"http://127.0.0.1/{task_id}/{i}", title=task_id, same_as_next=bool(same_as_next[i]),
            finish_reason="stop", usage=TokenUsage(prompt_tokens=100, completion_tokens=10),
            latency=Latency(policy_s=0.1, execute_s=0.05, screenshot_s=0.02),
            logprobs=tuple(logprobs or ())))
    return Episode(
        task=task(task_id), episode_id=f"{task_id}-it{iteration}-a{attempt}", iteration=iteration,
        attempt=attempt, split=split, instruction=f"do {task_id}", policy_model="tiny", judge_model="rule",
        reward=reward,  # type: ignore[arg-type]  # None: an episode nobody judged
        status=EpisodeStatus(status), verdicts=[Verdict("g0", bool(reward), "synthetic")],
        duration_s=1.0, judge_s=0.1, steps=steps)


def write_shards(out: Path, episodes: Sequence[Episode], *, shard_size: int = 64,
                 drop_columns: Sequence[str] = ()) -> Path:
    """Write `episodes` to the rollout folder `out` (replaced if it exists) with `TrajectoryWriter`;
    returns `out`. `shard_size` episodes go to each shard; `drop_columns` rewrites every shard
    without those top-level columns (to test a broken shard)."""
    import pyarrow.parquet as pq

    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    with TrajectoryWriter(out, max_shard_episodes=shard_size) as writer:
        for item in episodes:
            writer.add(item)
    if drop_columns:
        for shard in read_manifest(out)["shards"]:
            path = out / shard["path"]
            table = pq.read_table(path)
            pq.write_table(table.drop_columns(list(drop_columns)), path)
    return out


def shard_paths(out: Path) -> list[Path]:
    """The shards of a folder `write_shards` wrote, in manifest order."""
    return [Path(out) / shard["path"] for shard in read_manifest(out)["shards"]]


def standard_iteration(out: Path, *, iteration: int = 0, tasks: int = 3, attempts: int = 2,
                       num_steps: int = 2, image_size: tuple[int, int] = (56, 56)) -> Path:
    """A rollout folder where, per task, attempt 0 succeeds (reward 1) and the others fail."""
    episodes = [
        episode(task_id=f"task{t}", iteration=iteration, attempt=a, reward=1.0 if a == 0 else 0.0,
                num_steps=num_steps, image_size=image_size)
        for t in range(tasks) for a in range(attempts)
    ]
    return write_shards(out, episodes)


_TINY: dict[str, Path] = {}


def tiny_checkpoint(root_factory, family: str = "qwen2_vl") -> Path:
    """A tiny random checkpoint of `family`, built once per test session (``tmp_path_factory``)."""
    from webgym_rl.tiny import build_tiny_model

    if family not in _TINY:
        _TINY[family] = build_tiny_model(root_factory.mktemp(f"tiny-{family}"), family=family, seed=0)
    return _TINY[family]
