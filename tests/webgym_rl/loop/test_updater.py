"""webgym_rl.loop.updater at the HTTP boundary: a small FastAPI stand-in on 127.0.0.1 speaks vLLM's runtime
LoRA endpoints and its RL weight-update endpoints and records every call (vLLM needs GPUs;
`tests.webgym_rl.vllm_stand_in`)."""

from __future__ import annotations

import socket

import pytest

from tests.webgym_rl.vllm_stand_in import serving as _serving
from tests.webgym_rl.vllm_stand_in import vllm_stand_in as _stand_in
from webgym_rl.errors import PolicyEndpointError
from webgym_rl.loop.updater import CpuPolicyUpdater, VllmLoraUpdater, VllmWeightUpdater, version_of


def test_lora_updater_loads_one_adapter_per_version_and_unloads_old_ones():
    calls: list = []
    with _serving(_stand_in(calls)) as base_url:
        updater = VllmLoraUpdater(base_url, "policy", keep=2)
        assert updater.loads_adapters and updater.model_name(0) == "policy"  # v0: the served base model
        for version in (1, 2, 3):
            updater.update(f"/ckpt/v-{version}", version)
        assert updater.model_name(3) == "policy-v3" and version_of(updater.model_name(3)) == 3
    assert [(name, body) for name, _, body in calls] == [
        ("models", {}),  # the first update looks for adapters an earlier run left: none here
        ("load_lora_adapter", {"lora_name": "policy-v1", "lora_path": "/ckpt/v-1"}),
        ("load_lora_adapter", {"lora_name": "policy-v2", "lora_path": "/ckpt/v-2"}),
        ("load_lora_adapter", {"lora_name": "policy-v3", "lora_path": "/ckpt/v-3"}),
        ("unload_lora_adapter", {"lora_name": "policy-v1"}),
    ]
    assert not updater.stamps_versions  # the reply's model (the adapter) names the version


def test_a_rerun_replaces_the_adapters_a_crashed_run_left_loaded():
    calls: list = []
    with _serving(_stand_in(calls)) as base_url:
        crashed = VllmLoraUpdater(base_url, "policy")
        for version in (1, 2):
            crashed.update(f"/ckpt/v-{version}", version)
        calls.clear()
        # vLLM outlived the loop and holds policy-v1 and policy-v2; it refuses to load a name twice.
        resumed = VllmLoraUpdater(base_url, "policy")
        resumed.update("/ckpt/v-2", 2)
        resumed.update("/ckpt/v-3", 3)
    assert [(name, body) for name, _, body in calls] == [
        ("models", {}),
        ("unload_lora_adapter", {"lora_name": "policy-v1"}),
        ("unload_lora_adapter", {"lora_name": "policy-v2"}),
        ("load_lora_adapter", {"lora_name": "policy-v2", "lora_path": "/ckpt/v-2"}),
        ("load_lora_adapter", {"lora_name": "policy-v3", "lora_path": "/ckpt/v-3"}),
    ]


def test_a_version_without_an_adapter_is_the_served_base_model():
    calls: list = []
    with _serving(_stand_in(calls)) as base_url:
        updater = VllmLoraUpdater(base_url, "policy")
        updater.update(None, 1)  # the first training round had nothing to train on
        assert updater.model_name(1) == "policy"
        updater.update("/ckpt/v-2", 2)
        assert updater.model_name(2) == "policy-v2"
    assert [name for name, _, _ in calls] == ["models", "load_lora_adapter"]


def test_weight_updater_pauses_updates_and_resumes_even_when_the_update_fails():
    calls: list = []
    with _serving(_stand_in(calls)) as base_url:
        updater = VllmWeightUpdater(base_url, "policy")
        updater.update("/ckpt/v-1", 1)
        assert [c[0] for c in calls] == ["pause", "collective_rpc", "resume"]
        assert calls[0][1]["mode"] == "wait"
        assert calls[1][2] == {"method": "reload_weights", "kwargs": {"weights_path": "/ckpt/v-1"}}
        calls.clear()
        with pytest.raises(PolicyEndpointError, match="collective_rpc failed: HTTP 500"):
            updater.update("/ckpt/broken", 2)
        assert [c[0] for c in calls] == ["pause", "collective_rpc", "resume"]  # never left paused
    assert updater.stamps_versions and updater.model_name(2) == "policy"


def test_an_unreachable_endpoint_names_the_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PolicyEndpointError, match=f"127.0.0.1:{port}/pause"):
        VllmWeightUpdater(f"http://127.0.0.1:{port}/v1", "policy", timeout_s=2).update("/c", 1)


def test_version_of_reads_the_fingerprint_and_adapter_names():
    names = ("v0", "v12", "policy-v3", "random", "webgym-policy", "", "fp_44709d6fcb")
    assert [version_of(v) for v in names] == [0, 12, 3, None, None, None, None]


def test_the_loop_drives_a_vllm_endpoint_under_either_schedule(tmp_path):
    import dataclasses

    from webgym_core.endpoint import Endpoint
    from webgym_rl.errors import LoopSettingsError
    from webgym_rl.loop.services import LoopServices
    from webgym_rl.loop.settings import LoopSettings, PolicyEndpointSettings, ResidentTrainerSettings
    from webgym_rl.settings import OptimizationSettings

    calls: list[tuple[str, dict, dict]] = []
    with _serving(_stand_in(calls)) as base_url:
        policy = PolicyEndpointSettings(endpoint=Endpoint(base_url=base_url, model="policy"),
                                        updater="vllm_weights")
        for schedule in ("sync", "async"):
            settings = LoopSettings(tasks="tasks.jsonl", model="base", out=str(tmp_path / schedule),
                                    policy=policy, schedule=schedule)
            with LoopServices(settings) as services:
                assert services.start_policy("base") == base_url  # reached, not started
                updater = services.updater()
                assert isinstance(updater, VllmWeightUpdater) and updater.weights_url is None  # folders
                updater.update("/ckpt/v-1", 1)
    # Nothing was posted when the loop reached the endpoint; each update reloaded v1's weights.
    assert [c[0] for c in calls] == ["pause", "collective_rpc", "resume"] * 2
    assert calls[1][2] == {"method": "reload_weights", "kwargs": {"weights_path": "/ckpt/v-1"}}
    # Runtime LoRA adapters are adapters of the served model: a full fine-tune has none to load.
    lora_policy = dataclasses.replace(policy, updater="vllm_lora")
    with pytest.raises(LoopSettingsError, match=r"policy.updater: vllm_lora .* needs training.lora"):
        LoopSettings(tasks="tasks.jsonl", model="base", out=str(tmp_path / "loop"), policy=lora_policy)
    LoopSettings(tasks="tasks.jsonl", model="base", out=str(tmp_path / "loop"), policy=lora_policy,
                 training=OptimizationSettings(lora=True))
    # Weights in memory go to the CPU policy server only: a vLLM endpoint loads folders.
    with pytest.raises(LoopSettingsError, match="trainer.publish: memory sends the weights to the CPU"):
        LoopSettings(tasks="tasks.jsonl", model="base", out=str(tmp_path / "loop"), policy=policy,
                     trainer=ResidentTrainerSettings(publish="memory"))


def test_the_cpu_policy_server_takes_weights_in_memory_unless_behind_a_hook_of_its_own():
    updater = CpuPolicyUpdater("http://127.0.0.1:8500/v1", "policy")
    assert (updater.url, updater.weights_url) == ("http://127.0.0.1:8500/reload", "http://127.0.0.1:8500/weights")
    hooked = CpuPolicyUpdater("http://127.0.0.1:8500/v1", "policy", reload_url="http://127.0.0.1:9/hook")
    assert (hooked.url, hooked.weights_url) == ("http://127.0.0.1:9/hook", None)
