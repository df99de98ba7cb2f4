"""webgym_rl.loop.services: the policy endpoint started once and switched to each new version (a reload
URL, a restarted command), with real policy servers on 127.0.0.1 and tiny random models."""

from __future__ import annotations

import pytest

from tests.webgym_rl.loops import loop_settings as _settings
from webgym_rl.errors import PolicyEndpointError
from webgym_rl.loop.settings import PolicyEndpointSettings


def test_the_policy_endpoint_settings_compose_the_rollouts_own():
    from webgym_core.endpoint import Endpoint
    from webgym_rollout.agent.policies import SamplingSettings
    from webgym_rollout.agent.protocol import AgentSettings

    settings = PolicyEndpointSettings()
    assert isinstance(settings.endpoint, Endpoint) and settings.endpoint.base_url == ""  # the CPU server
    assert settings.served_name == "webgym-policy"
    assert isinstance(settings.sampling, SamplingSettings) and isinstance(settings.agent, AgentSettings)
    command = PolicyEndpointSettings(command="vllm serve {checkpoint} --port {port} --x '{\"a\": 1}'")
    assert command.argv == ["vllm", "serve", "{checkpoint}", "--port", "{port}", "--x", '{"a": 1}']


def _root(base_url: str) -> str:
    import httpx

    (card,) = httpx.get(f"{base_url}/models", timeout=10).json()["data"]
    return card["root"]


def test_external_endpoint_is_switched_through_the_reload_url(tmp_path, tiny_qwen2_vl):
    from tests.support.models import tiny_model_dir
    from webgym_rl.loop.services import LoopServices
    from webgym_rl.policy_server import PolicyServerSettings, running_policy_server

    other = tiny_model_dir("qwen2_vl", seed=1)
    served = PolicyServerSettings(model=str(tiny_qwen2_vl), port=0, served_model_name="webgym-policy")
    with running_policy_server(served) as url:
        settings = _settings(tmp_path, tiny_qwen2_vl,
                             policy={"base_url": url, "reload_url": url.removesuffix("/v1") + "/reload"})
        with LoopServices(settings) as services:
            assert services.start_policy(str(tiny_qwen2_vl)) == url  # reached, and told its version 0
            updater = services.updater()
            assert updater.url == url.removesuffix("/v1") + "/reload" and updater.weights_url is None
            updater.update(str(other), 1)
            assert _root(url) == str(other)
            with pytest.raises(PolicyEndpointError, match="reload"):
                updater.update(str(tmp_path / "missing-checkpoint"), 2)
        assert _root(url) == str(other)  # a failed reload leaves the endpoint serving the last good one


@pytest.mark.slow
def test_policy_command_is_restarted_for_each_checkpoint_and_stopped(tmp_path, tiny_qwen2_vl):
    """The vLLM way, with a command that runs on CPU: the loop restarts it per checkpoint."""
    import shlex
    import sys

    import psutil

    from tests.support.models import tiny_model_dir
    from webgym_rl.loop.services import LoopServices

    other = tiny_model_dir("qwen2_vl", seed=1)
    # The braces of the dict stand for vLLM's JSON flags: only the three placeholders are replaced.
    command = (f"{shlex.quote(sys.executable)} -c 'assert {{\"image\": 5}}; "
               "from webgym_rl.cli import main; main()' serve-policy --model {checkpoint} "
               "--port {port} --served-model-name {name} --max-new-tokens 4")
    settings = _settings(tmp_path, tiny_qwen2_vl, policy={"command": command, "start_timeout_s": 300})
    pids = []
    with LoopServices(settings, on_event=lambda event: pids.append(event.pid)) as services:
        url = services.start_policy(str(tiny_qwen2_vl))
        assert _root(url) == str(tiny_qwen2_vl) and services.policy_pid == pids[-1]
        updater = services.updater()  # auto: restart the command
        updater.update(str(other), 1)
        assert _root(services.base_url) == str(other) and services.policy_pid == pids[-1]
    started = pids
    assert len(pids) == 2 and pids[0] != pids[1], pids
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in started)
    assert "serving webgym-policy" in (tmp_path / "loop" / "policy-server.log").read_text()
