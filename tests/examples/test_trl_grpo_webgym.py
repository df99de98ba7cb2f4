"""examples/trl_grpo_webgym.py: TRL's GRPOTrainer trains the tiny model on MiniWoB++ pages through
``environment_factory``, on real Chromium behind the real browser server and the real site server.
The environment's rewards reach the trainer as they are, and a rollout whose browser session is
lost (the infrastructure's failure) reaches it as None: out of its group's baseline, advantage 0."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shlex
import subprocess
import sys

import httpx
import pytest

from tests.conftest import REPO_ROOT

pytest.importorskip("trl")  # the interop extra (scripts/setup.sh installs every extra)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EXAMPLE = REPO_ROOT / "examples" / "trl_grpo_webgym.py"


def _example():
    spec = importlib.util.spec_from_file_location("trl_grpo_webgym", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def test_help_shows_an_example():
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    assert "example:" in done.stdout and "--num-generations" in done.stdout and "--max-steps" in done.stdout


def test_the_other_stacks_guides_command_parses():
    text = (REPO_ROOT / "docs" / "guides" / "other-stacks.md").read_text(encoding="utf-8")
    line = next(block for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
                if "examples/trl_grpo_webgym.py" in block)
    tokens = shlex.split(line.replace("\\\n", " "))
    args = _example().parse_args(tokens[tokens.index("examples/trl_grpo_webgym.py") + 1:])
    assert args.tasks == ["click-test", "click-button"] and args.max_steps == 3


def test_without_trl_the_error_names_the_extra():
    code = ("import runpy, sys; sys.modules['trl'] = None; sys.argv = ['trl_grpo_webgym.py']\n"
            f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 2 and "trl is not installed: pip install 'webgym[interop]'" in done.stderr


def test_a_bad_group_size_is_refused_naming_the_flag():
    done = _run("--num-generations", "1")
    assert done.returncode == 2 and "--num-generations" in done.stderr and "got 1" in done.stderr
    done = _run("--num-generations", "2", "--per-device-train-batch-size", "3")
    assert done.returncode == 2 and "multiple of --num-generations" in done.stderr
    done = _run("--tasks", "click-test", "click-nothing-here")
    assert done.returncode == 2 and "--tasks: no MiniWoB++ page 'click-nothing-here'" in done.stderr


# TRL says environment_factory is experimental; its GRPOConfig and generation call transformers'
# renamed gradient_checkpointing API.
@pytest.mark.filterwarnings("ignore:You are using 'environment_factory':UserWarning")
@pytest.mark.filterwarnings("ignore:.*is deprecated and will be removed in v6:FutureWarning")
@pytest.mark.usefixtures("fresh_accelerate_state")
def test_grpo_trains_on_the_env_rewards_and_drops_an_infrastructure_failure(tmp_path, chromium_path):
    example = _example()
    played: list[float | None] = []

    class ScriptedEnv(example.WebGymToolEnv):
        """The example's environment, with the page solved before the model starts in the first
        rollout of each group (reward 1) and the browser session deleted on the server in the second
        rollout of the second group (the next step finds it gone: the infrastructure's failure)."""

        resets = 0

        def reset(self, **row):
            text = super().reset(**row)
            index = ScriptedEnv.resets
            ScriptedEnv.resets += 1
            if index % 3 == 0:
                number = int(re.search(r"\[(\d+)\] button", text).group(1))
                self.computer_use("click_element", element=number)
            if index == 4:
                session = self.env._env.session.session_id
                httpx.delete(f"{self.services.browser_url}/sessions/{session}", timeout=30).raise_for_status()
            return text

        def get_reward(self):
            reward = super().get_reward()
            played.append(reward)
            return reward

    args = example.parse_args([
        "--out", str(tmp_path), "--tasks", "click-test", "--rows", "2", "--max-steps", "2",
        "--num-generations", "3", "--per-device-train-batch-size", "3", "--max-completion-length", "8",
        "--chromium", chromium_path])
    services = example.Services(contexts=4, chromium=chromium_path)
    try:
        trainer = example.build_trainer(args, services, ScriptedEnv)
        trainer.train()
    finally:
        services.close()

    # What the environments gave, in the trainer's order: group 1, then group 2 with the lost session.
    assert played == [1.0, 0.0, 0.0, 1.0, None, 0.0]
    assert trainer.state.global_step == 2
    logged = [entry for entry in trainer.state.log_history if "rewards/ScriptedEnv/mean" in entry]
    # The trainer's per-step mean reward is the mean of what the environments gave, None left out
    # (scored 0 it would be 1/3 in the second step too).
    assert [entry["rewards/ScriptedEnv/mean"] for entry in logged] == pytest.approx([1 / 3, 1 / 2])
    assert [entry["reward"] for entry in logged] == pytest.approx([1 / 3, 1 / 2])
    assert all(entry["grad_norm"] > 0 for entry in logged)  # the rewards moved the policy
    # The last group as TRL received it: NaN for the failure, which gets advantage 0; the baseline is
    # the mean of the two others, so they get advantages of opposite signs and equal size.
    received = list(trainer._logs["rewards"]["ScriptedEnv"])
    assert received[0] == 1.0 and math.isnan(received[1]) and received[2] == 0.0
    advantages = list(trainer._logs["advantages"])
    assert advantages[1] == 0.0
    assert advantages[0] > 0 > advantages[2] and advantages[0] == pytest.approx(-advantages[2])
