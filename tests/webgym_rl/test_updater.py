"""webgym_rl.updater at the HTTP boundary: a small FastAPI stand-in on 127.0.0.1 speaks vLLM's runtime
LoRA endpoints and its RL weight-update endpoints and records every call (vLLM needs GPUs)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from webgym_rl.errors import PolicyEndpointError
from webgym_rl.updater import VllmLoraUpdater, VllmWeightUpdater, version_of


def _stand_in(calls: list[tuple[str, dict, dict]]) -> FastAPI:
    app = FastAPI()
    adapters: set[str] = set()

    @app.post("/v1/load_lora_adapter")
    async def load(request: Request):
        body = await request.json()
        calls.append(("load_lora_adapter", dict(request.query_params), body))
        adapters.add(body["lora_name"])
        return JSONResponse(f"Success: LoRA adapter '{body['lora_name']}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload(request: Request):
        body = await request.json()
        calls.append(("unload_lora_adapter", dict(request.query_params), body))
        if body["lora_name"] not in adapters:
            return JSONResponse({"error": {"message": f"{body['lora_name']} not found"}}, status_code=404)
        adapters.discard(body["lora_name"])
        return JSONResponse("ok")

    for route in ("/pause", "/resume", "/collective_rpc"):
        @app.post(route)
        async def record(request: Request, route=route):
            body = await request.json() if await request.body() else {}
            calls.append((route.strip("/"), dict(request.query_params), body))
            if route == "/collective_rpc" and body["kwargs"]["weights_path"].endswith("broken"):
                return JSONResponse({"error": "no such checkpoint"}, status_code=500)
            return JSONResponse({"results": []} if route == "/collective_rpc" else {"status": "ok"})
    return app


@contextlib.contextmanager
def _serving(app: FastAPI):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_lora_updater_loads_one_adapter_per_version_and_unloads_old_ones():
    calls: list = []
    with _serving(_stand_in(calls)) as base_url:
        updater = VllmLoraUpdater(base_url, "policy", keep=2)
        for version in (1, 2, 3):
            updater.update(f"/ckpt/v-{version}", version)
        assert updater.model_name(3) == "policy-v3" and version_of(updater.model_name(3)) == 3
    assert [(name, body) for name, _, body in calls] == [
        ("load_lora_adapter", {"lora_name": "policy-v1", "lora_path": "/ckpt/v-1"}),
        ("load_lora_adapter", {"lora_name": "policy-v2", "lora_path": "/ckpt/v-2"}),
        ("load_lora_adapter", {"lora_name": "policy-v3", "lora_path": "/ckpt/v-3"}),
        ("unload_lora_adapter", {"lora_name": "policy-v1"}),
    ]
    assert not updater.stamps_versions  # the reply's model (the adapter) names the version


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


def test_the_loop_drives_a_vllm_endpoint_without_a_reload_hook_in_async_mode_only(tmp_path):
    import dataclasses

    from webgym_core.endpoint import Endpoint
    from webgym_rl.errors import LoopSettingsError
    from webgym_rl.loop import LoopSettings
    from webgym_rl.services import LoopServices, PolicyEndpointSettings
    from webgym_rollout.runner import RolloutSettings

    calls: list[tuple[str, dict, dict]] = []
    with _serving(_stand_in(calls)) as base_url:
        policy = PolicyEndpointSettings(endpoint=Endpoint(base_url=base_url, model="policy"),
                                        updater="vllm_weights")
        settings = LoopSettings(tasks="tasks.jsonl", model="base", out=str(tmp_path / "loop"), policy=policy,
                                rollout=RolloutSettings(mode="async"))
        with LoopServices(settings) as services:
            assert services.start_policy("base") == (base_url, "policy")  # reached, not started
            updater = services.updater()
            assert isinstance(updater, VllmWeightUpdater)
            updater.update("/ckpt/v-1", 1)
    # Nothing was posted when the loop reached the endpoint; the update reloaded v1's weights.
    assert [c[0] for c in calls] == ["pause", "collective_rpc", "resume"]
    assert calls[1][2] == {"method": "reload_weights", "kwargs": {"weights_path": "/ckpt/v-1"}}
    # The sync loop switches checkpoints by restart or reload hook only: refused with the field named.
    with pytest.raises(LoopSettingsError, match="policy.updater: vllm_weights switches versions in --mode"):
        LoopSettings(tasks="tasks.jsonl", model="base", out=str(tmp_path / "loop"), policy=policy,
                     rollout=RolloutSettings(mode="sync"))
    # Runtime LoRA adapters would be loaded from merged checkpoints: refused until the loop keeps them.
    with pytest.raises(LoopSettingsError, match="policy.updater: vllm_lora is not usable by the loop yet"):
        LoopSettings(tasks="tasks.jsonl", model="base", out=str(tmp_path / "loop"),
                     policy=dataclasses.replace(policy, updater="vllm_lora"),
                     rollout=RolloutSettings(mode="async"))
