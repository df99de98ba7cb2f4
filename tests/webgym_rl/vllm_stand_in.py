"""A small FastAPI stand-in for a vLLM server on 127.0.0.1 (vLLM needs GPUs): it speaks vLLM's runtime
LoRA endpoints, its RL weight-update endpoints, ``GET /v1/models`` and OpenAI chat completions, and
records every call as ``(route, query, body)`` in the list it is given.

Like vLLM (``--enable-lora``): loading an adapter name it holds is refused (HTTP 400), unloading or
asking for a model it does not hold is HTTP 404, ``/v1/models`` lists the served base model and the
loaded adapters (``root`` = the adapter folder, ``parent`` = the base model), and a chat reply's
``model`` is the model asked for. Chat calls are recorded with the model they asked for only.

    calls = []
    with serving(vllm_stand_in(calls, reply="...")) as base_url:   # http://127.0.0.1:PORT/v1
        ...
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

__all__ = ["serving", "vllm_stand_in"]


def vllm_stand_in(calls: list[tuple[str, dict, dict]], *, served_name: str = "policy",
                  reply: str = "ok") -> FastAPI:
    """The stand-in app: serves a base model as `served_name`; every chat completion answers `reply`."""
    app = FastAPI()
    adapters: dict[str, str] = {}

    @app.get("/v1/models")
    async def models(request: Request):
        calls.append(("models", dict(request.query_params), {}))
        cards = [{"id": served_name, "object": "model", "root": "base", "parent": None}]
        cards += [{"id": name, "object": "model", "root": path, "parent": served_name}
                  for name, path in adapters.items()]
        return JSONResponse({"object": "list", "data": cards})

    @app.post("/v1/load_lora_adapter")
    async def load(request: Request):
        body = await request.json()
        calls.append(("load_lora_adapter", dict(request.query_params), body))
        if body["lora_name"] in adapters:
            return JSONResponse({"error": {"message": f"The lora adapter '{body['lora_name']}' has already "
                                                      "been loaded."}}, status_code=400)
        adapters[body["lora_name"]] = body["lora_path"]
        return JSONResponse(f"Success: LoRA adapter '{body['lora_name']}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload(request: Request):
        body = await request.json()
        calls.append(("unload_lora_adapter", dict(request.query_params), body))
        if body["lora_name"] not in adapters:
            return JSONResponse({"error": {"message": f"{body['lora_name']} not found"}}, status_code=404)
        del adapters[body["lora_name"]]
        return JSONResponse("ok")

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        model = body.get("model")
        calls.append(("chat_completions", {}, {"model": model}))
        if model != served_name and model not in adapters:
            return JSONResponse({"error": {"message": f"The model `{model}` does not exist."}},
                                status_code=404)
        choice = {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": word, "logprob": -0.5, "bytes": None,
                                               "top_logprobs": []} for word in reply.split()]}
        return JSONResponse({"id": f"chatcmpl-{len(calls)}", "object": "chat.completion",
                             "created": int(time.time()), "model": model, "choices": [choice],
                             "usage": {"prompt_tokens": 10, "completion_tokens": len(reply.split()),
                                       "total_tokens": 10 + len(reply.split())}})

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
def serving(app: FastAPI):
    """Serve `app` on a free port of 127.0.0.1 in a thread; yields its OpenAI base URL (``.../v1``)."""
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
