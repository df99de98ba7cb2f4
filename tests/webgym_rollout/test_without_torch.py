"""The rollout package runs without the ML stack: ``pip install webgym[rollout]`` installs neither
torch nor transformers, so ``webgym-rollout run`` against an OpenAI-protocol endpoint must work in a
process where they cannot be imported (the CPU policy server and model loading are `webgym_rl`'s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from webgym_rollout.actions import AgentAction
from webgym_rollout.agent.protocol import format_response
from webgym_rollout.trajectory.reader import read_episodes

HIDDEN = ("torch", "transformers", "accelerate", "peft", "vllm")

# A child process in which the ML stack cannot be imported: an import fails, and is recorded.
CHILD = f"""
import importlib.abc, importlib.machinery, sys

HIDDEN = {HIDDEN!r}
attempts = []

class _Refuse(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        attempts.append(module.__name__)
        raise ModuleNotFoundError(f"{{module.__name__}} is not installed (hidden by the test)")

class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:  # found (availability probes see it), but cannot be imported
            return importlib.machinery.ModuleSpec(name, _Refuse())
        return None

sys.meta_path.insert(0, _Hide())
from webgym_rollout.cli import main
try:
    main()
finally:
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in HIDDEN and sys.modules[m] is not None)
    print("ML-STACK", {{"attempts": attempts, "loaded": loaded}}, file=sys.stderr)
"""


@pytest.fixture
async def browser_url(chromium_path, sites):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    pool = PoolSettings(executable_path=chromium_path, browsers=1, contexts_per_browser=2,
                        allow_hosts=(f"{sites.host}:{sites.port}",))
    async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (url, _):
        yield url


@pytest.mark.browser
async def test_a_rollout_against_an_openai_endpoint_runs_with_torch_and_transformers_hidden(
        tmp_path, sites_url, browser_url, scripted_openai):
    import asyncio

    llm = scripted_openai([format_response(AgentAction(name="left_click", coordinate=(500, 500)))],
                          model="served-policy")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({
        "task_id": f"click-{seed}", "task_name": "MiniWoB click-test", "website": "miniwob:click-test",
        "benchmark_name": "miniwob", "environment": "miniwob:click-test", "env_seed": seed}) + "\n"
        for seed in (0, 1)))
    out = tmp_path / "out"
    command = [sys.executable, "-c", CHILD, "run", "--tasks", str(tasks), "--servers", browser_url,
               "--sites-url", sites_url, "--policy", "openai", "--policy-base-url", llm.base_url,
               "--policy-model", "served-policy", "--judge", "programmatic", "--horizons", "miniwob=2",
               "--viewport", "320x240", "--out", str(out), "--no-progress"]
    # The browser server runs on this test's event loop: wait for the child without blocking it.
    child = await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                 cwd=Path(__file__).resolve().parents[2])
    stdout, stderr = await asyncio.wait_for(child.communicate(), timeout=300)
    report = stderr.decode()
    assert child.returncode == 0, report[-3000:]
    line = next(line for line in report.splitlines() if line.startswith("ML-STACK"))
    assert line == "ML-STACK {'attempts': [], 'loaded': []}", line  # nothing even tried to import them
    episodes = list(read_episodes(out))
    assert len(episodes) == 2 and all(e.num_steps >= 1 and not e.status.is_error for e in episodes)
    assert len(llm.requests) == sum(e.num_steps for e in episodes)  # every step asked the endpoint
    assert {e.policy_model for e in episodes} == {"served-policy"}
