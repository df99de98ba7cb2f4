"""The examples of docs/guides/your-model.md and docs/guides/trajectories.md are what the code renders now.

``scripts/render_agent_examples.py`` renders them from the checked-in episode
(examples/trajectory-login-user/): the prompt of its first step as `build_messages` builds it for each
variant, the request body a run's client sends, one valid reply per variant and the row field by
field. A change to the prompt, the client's request, the reply format or the trajectory row fails
here until the script is run again (and a change of the trajectory schema until it re-captures).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO_ROOT
from webgym_rollout.agent.protocol import VARIANTS, parse_response
from webgym_rollout.trajectory.contract import TRAJECTORY_SCHEMA_VERSION, schema_version_of

_spec = importlib.util.spec_from_file_location("render_agent_examples",
                                               REPO_ROOT / "scripts" / "render_agent_examples.py")
render_agent_examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render_agent_examples)
RERUN = "run: .venv/bin/python scripts/render_agent_examples.py"


def test_the_checked_in_examples_are_what_the_code_renders_now():
    rendered = render_agent_examples.render()
    assert len(rendered) == 2 * len(VARIANTS) + 3  # a prompt and a reply per variant, request, row, image
    for path, content in rendered.items():
        assert path.is_file(), f"{path.relative_to(REPO_ROOT)} is missing; {RERUN}"
        stored = path.read_bytes() if isinstance(content, bytes) else path.read_text(encoding="utf-8")
        assert stored == content, f"{path.relative_to(REPO_ROOT)} is stale; {RERUN}"


def test_the_example_episode_is_of_the_current_schema_and_succeeded():
    dataset = render_agent_examples.DATASET
    manifest = json.loads((dataset / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["schema_version"] == TRAJECTORY_SCHEMA_VERSION, f"{RERUN} --capture"
    (shard,) = manifest["shards"]
    assert schema_version_of(pq.read_schema(dataset / shard["path"])) == TRAJECTORY_SCHEMA_VERSION
    episode = render_agent_examples.first_episode()
    assert episode.reward == 1.0 and episode.num_steps == 5 and not any(s.action_error for s in episode.steps)


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_example_reply_parses_to_the_episodes_first_action(variant):
    reply = (render_agent_examples.EXAMPLES / f"reply-{variant}.txt").read_text(encoding="utf-8")
    parsed = parse_response(reply, variant)
    assert parsed.error == ""
    assert parsed.action == render_agent_examples.first_episode().steps[0].parsed_action
    assert bool(parsed.memory) == (variant == "memory")
    assert bool(parsed.intention) == (variant != "compact")


def test_the_request_example_inlines_the_screenshot_as_a_run_does():
    body = json.loads((render_agent_examples.EXAMPLES / "request.json").read_text(encoding="utf-8"))
    image = body["messages"][-1]["content"][-1]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/png;base64,")
    assert {"temperature", "top_p", "max_tokens", "logprobs", "top_k", "return_token_ids"} <= set(body)


ROOT_BLOCK = re.compile(r"^<!-- runs from the repository root -->\n```python\n(.*?)```\n\n"
                        r"```text\n(.*?)```\n", re.DOTALL | re.MULTILINE)


def test_the_trajectory_guides_datasets_example_prints_what_it_shows(tmp_path):
    """Its example reads the checked-in dataset, so it runs from the repository root (the docs'
    other examples run in a fresh folder)."""
    page = REPO_ROOT / "docs" / "guides" / "trajectories.md"
    blocks = ROOT_BLOCK.findall(page.read_text(encoding="utf-8"))
    assert blocks
    for code, printed in blocks:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_DATASETS_CACHE": str(tmp_path / "cache"),
               "HF_HUB_OFFLINE": "1"}
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout == printed
