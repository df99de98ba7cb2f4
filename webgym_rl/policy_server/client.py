"""The client: `push_weights` sends a model's weights to a policy server from memory, nothing on disk.

Two forms (`webgym_rl.policy_server.weights` is the server's side): a file in shared memory
(`SHM_DIR`), written here and named to the server, which maps it and serves from it, for a server on
this machine; or the same safetensors bytes as an HTTP body, streamed from the tensors, for a
server elsewhere. The file is written by `webgym_rl.policy_server.codec` (tied tensors under each
of their names). With ``reuse_buffers`` two files per server stay between pushes and each push is
copied into the one not served from (`_KeptFiles`): a copy into pages already in memory, about half
the cost of a new file. Chat completions need no client of ours: any OpenAI client speaks to the
server.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import mmap
import os
import re
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from webgym_rl.errors import PolicyUnauthorized, SharedMemoryUnavailable, WeightsPushFailed, WeightsRejected
from webgym_rl.policy_server.codec import (
    fill_safetensors_buffer,
    safetensors_layout,
    safetensors_pieces,
    write_safetensors_file,
)
from webgym_rl.policy_server.protocol import IMAGE_PROCESSOR_METADATA, SHM_DIR, WeightsResponse
from webgym_rollout.browser.guard import is_loopback_host

__all__ = ["push_weights"]

logger = logging.getLogger(__name__)

_PUSH_CHUNK_BYTES = 4 * 2**20
"""Size of the pieces a push sends: httpcore re-slices (copies) the unsent rest of each piece after
every socket write, which is quadratic in a piece's size (one 400 MB piece took 10 s, not 0.5 s)."""


def _server_error(response: httpx.Response) -> tuple[str, str | None, str | None]:
    """(message, param, code) of an error reply: the OpenAI error shape, or the start of the raw text."""
    try:
        error = response.json()["error"]
        return str(error["message"]), error.get("param"), error.get("code")
    except (ValueError, KeyError, TypeError):
        return response.text[:500] or f"HTTP {response.status_code}", None, None


def _weights_answer(url: str, response: httpx.Response) -> WeightsResponse:
    """The server's `WeightsResponse`, or the typed error its answer stands for."""
    if response.status_code == 200:
        return WeightsResponse.model_validate(response.json())
    message, param, code = _server_error(response)
    if response.status_code == 401:
        raise PolicyUnauthorized(f"{url} refused the weights: {message}")
    if response.status_code == 400 and code == SharedMemoryUnavailable.kind:
        raise SharedMemoryUnavailable(f"{url} refused the weights: {message}", param=param)
    if response.status_code == 400:
        raise WeightsRejected(f"{url} refused the weights: {message}", param=param)
    raise WeightsPushFailed(f"{url} answered HTTP {response.status_code} to the weights: {message}")


def _post(http: httpx.Client, url: str, what: str, **kwargs: Any) -> httpx.Response:
    try:
        return http.post(url, **kwargs)
    except httpx.TransportError as exc:
        raise WeightsPushFailed(f"pushing {what} to {url} failed: {type(exc).__name__}: {exc}") from exc


def _push_shared(http: httpx.Client, url: str, state_dict: Mapping[str, Any], version: int | None,
                 headers: dict[str, str], timeout: httpx.Timeout,
                 metadata: Mapping[str, str] | None = None) -> WeightsResponse:
    """Write `state_dict` into a new file in `SHM_DIR`, name it to the server, remove the file."""
    path = f"{SHM_DIR}/webgym-weights-{uuid.uuid4().hex}.safetensors"
    try:
        started = time.perf_counter()
        try:
            size = write_safetensors_file(path, state_dict, metadata)
        except OSError as exc:
            raise SharedMemoryUnavailable(f"cannot write the weights to {path}: {exc}", param="shm") from exc
        written = time.perf_counter() - started
        response = _post(http, url, f"the weights in {path} ({size} bytes)", headers=headers, timeout=timeout,
                         json={"shm": path, "version": version})
        return _weights_answer(url, response).model_copy(update={"client_write_s": written})
    finally:
        with contextlib.suppress(FileNotFoundError):  # the server removes it once it has the weights
            os.unlink(path)


@dataclass
class _KeptFile:
    """A shared-memory weights file kept between pushes, mapped here for writing."""

    path: str
    mapping: mmap.mmap
    header: bytes

    def close(self) -> None:
        with contextlib.suppress(BufferError):
            self.mapping.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


@dataclass
class _KeptFiles:
    """The two files kept for one server (``reuse_buffers=True``): each push writes into the one
    the server is not serving from (its pages are already in memory: no page is allocated and
    zeroed, about half the cost of a fresh file), and the server points its tensors at it. After
    anything but a clean answer (a refusal, a timeout, an interrupted write) both are dropped, so
    no file the server may be serving from is ever written again."""

    files: list[_KeptFile | None] = field(default_factory=lambda: [None, None])
    serving: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def discard(self) -> None:
        for kept in self.files:
            if kept is not None:
                kept.close()
        self.files, self.serving = [None, None], None


_KEPT: dict[str, _KeptFiles] = {}
"""Kept files by /weights URL, for this process's life (removed at exit)."""


@atexit.register
def _discard_kept_files() -> None:
    for kept in list(_KEPT.values()):
        kept.discard()


_KEPT_NAME = re.compile(r"webgym-weights-keep-(\d+)-[0-9a-f]+\.safetensors")
"""A kept file's name: it carries the pid of the process that keeps it."""


def _remove_stale_kept_files() -> None:
    """Remove the kept files of processes of this user that are gone (killed before their exit
    could remove them)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(SHM_DIR):
            found = _KEPT_NAME.fullmatch(entry.name)
            if found is None or entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue
            try:
                os.kill(int(found[1]), 0)
            except ProcessLookupError:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
            except OSError:  # alive, another user's
                continue


def _new_kept_file(state_dict: Mapping[str, Any], metadata: Mapping[str, str] | None,
                   header: bytes) -> _KeptFile:
    """A new file in `SHM_DIR` holding `state_dict`, written and mapped for the pushes after."""
    _remove_stale_kept_files()
    path = f"{SHM_DIR}/webgym-weights-keep-{os.getpid()}-{uuid.uuid4().hex}.safetensors"
    try:
        size = write_safetensors_file(path, state_dict, metadata)
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        finally:
            os.close(fd)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise SharedMemoryUnavailable(f"cannot write the weights to {path}: {exc}", param="shm") from exc
    return _KeptFile(path, mapping, header)


def _fill_kept(kept: _KeptFiles, state_dict: Mapping[str, Any], metadata: Mapping[str, str] | None) -> int:
    """Write `state_dict` into the kept file the server is not serving from (a new one when there
    is none of its layout); returns that file's index."""
    header, tensors, _ = safetensors_layout(state_dict, metadata)
    index = 1 if kept.serving == 0 else 0
    file = kept.files[index]
    if file is not None and file.header == header:
        fill_safetensors_buffer(file.mapping, header, tensors)
        return index
    if file is not None:
        file.close()
        kept.files[index] = None
    kept.files[index] = _new_kept_file(state_dict, metadata, header)
    return index


def _push_kept(http: httpx.Client, url: str, state_dict: Mapping[str, Any], version: int | None,
               headers: dict[str, str], timeout: httpx.Timeout,
               metadata: Mapping[str, str] | None = None) -> WeightsResponse:
    """`_push_shared` into a kept file (`_KeptFiles`) that stays for the next pushes but one."""
    kept = _KEPT.setdefault(url, _KeptFiles())
    with kept.lock:
        try:
            started = time.perf_counter()
            index = _fill_kept(kept, state_dict, metadata)
            written = time.perf_counter() - started
            path = kept.files[index].path
            response = _post(http, url, f"the weights in {path}", headers=headers, timeout=timeout,
                             json={"shm": path, "version": version, "keep": True})
            answer = _weights_answer(url, response)
        except BaseException:
            kept.discard()  # the server may serve from either file now, or from neither: write neither
            raise
        kept.serving = index
        return answer.model_copy(update={"client_write_s": written})


def _drop_kept(url: str) -> None:
    """Remove the files kept for `url` (a push without ``reuse_buffers``)."""
    kept = _KEPT.pop(url, None)
    if kept is not None:
        with kept.lock:
            kept.discard()


def _shares_memory_with(url: str) -> bool:
    """Whether the server at `url` can read this process's `SHM_DIR` files: it is on a loopback
    address and the directory is there (a loopback server in another container may still not see
    them; it answers `SharedMemoryUnavailable`)."""
    return is_loopback_host(httpx.URL(url).host) and os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def push_weights(base_url: str, state_dict: Mapping[str, Any], *, version: int | None = None,
                 token: str | None = None, timeout_s: float = 300.0, client: httpx.Client | None = None,
                 transport: Literal["auto", "shm", "http"] = "auto",
                 image_processor: Mapping[str, Any] | None = None,
                 reuse_buffers: bool = False) -> WeightsResponse:
    """Send `state_dict` (a torch model's ``state_dict()``) to the policy server at `base_url`
    (``http://HOST:PORT``, with or without ``/v1``) as new weights of `version` (default: the
    serving version + 1), from memory, nothing on disk. Returns the server's `WeightsResponse` once
    every later generation runs on them. `client`: an ``httpx.Client`` to reuse across pushes (a
    new one costs ~20 ms); by default one for this call.

    `transport`: ``shm`` writes the weights into a new file ``SHM_DIR/webgym-weights-<uuid>.safetensors``
    (mode 600) and sends only its name; the server maps the file and serves from it (no copy on
    its side) and removes the name; this function removes the file in any case (refused, failed or
    interrupted), so nothing is left in /dev/shm. ``http`` streams the same safetensors bytes as the
    request body (for a server on another machine). ``auto`` (default): ``shm`` when the server is on
    a loopback address and `SHM_DIR` is writable, falling back to ``http`` when the shared-memory
    handover turns out not to work (`SharedMemoryUnavailable`: the server sees no such file, or
    /dev/shm is full); ``http`` otherwise. ``response.client_write_s`` is the time spent writing
    the file.

    `reuse_buffers` (shared memory only): keep two files in `SHM_DIR` for this server between
    pushes, mapped in this process, and write each push into the one the server is not serving
    from, copying the tensors straight into pages already in memory (about half the cost of a new
    file, whose pages the kernel allocates and zeroes first); the server leaves the name in place.
    Costs a second copy of the weights in shared memory while the process lives (the files are
    removed at exit, after a failed push, and by a push to the same server without it; those of a
    killed process by the next process of the user that creates one). A push that
    fails or is interrupted leaves the server on the weights it had: it never serves from the file
    being written.

    The dtypes must be the served ones (cast first, e.g. to bfloat16, if the server runs
    ``--dtype bfloat16``). Tied tensors go out under each of their names, as ``state_dict()``
    lists them (``safetensors.torch.save`` would refuse them; this writer does not use it).
    `image_processor` (`webgym_rl.pixels.image_processor_config` of the trainer's processor) travels
    in the file's ``__metadata__``: a server whose image processor differs refuses the weights.
    Raises `WeightsRejected` (HTTP 400: the weights do not match; the old weights keep serving),
    `SharedMemoryUnavailable` (``transport="shm"`` only), `PolicyUnauthorized` (HTTP 401: pass the
    server's `token`) or `WeightsPushFailed` (no connection, timeout, HTTP 5xx; retry), each naming
    the URL and the server's message.
    """
    url = base_url.rstrip("/").removesuffix("/v1") + "/weights"
    headers = {"authorization": f"Bearer {token}"} if token else {}
    metadata = {IMAGE_PROCESSOR_METADATA: json.dumps(dict(image_processor))} if image_processor else None
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
    if not reuse_buffers:
        _drop_kept(url)
    with contextlib.ExitStack() as stack:
        http = client or stack.enter_context(httpx.Client(trust_env=False))
        if transport == "shm" or (transport == "auto" and _shares_memory_with(url)):
            push = _push_kept if reuse_buffers else _push_shared
            try:
                return push(http, url, state_dict, version, headers, timeout, metadata)
            except SharedMemoryUnavailable as exc:
                if transport == "shm":
                    raise
                logger.warning("shared-memory push to %s not possible, sending an HTTP body: %s", url, exc)
        size, pieces = safetensors_pieces(state_dict, metadata, piece_bytes=_PUSH_CHUNK_BYTES)
        response = _post(http, url, f"{size} bytes of weights", content=pieces,
                         params={} if version is None else {"version": version}, timeout=timeout,
                         headers={**headers, "content-type": "application/octet-stream",
                                  "content-length": str(size)})
        return _weights_answer(url, response)
