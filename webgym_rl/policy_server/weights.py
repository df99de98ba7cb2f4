"""New weights from memory (``POST /weights``): checked against the served model, then copied in
or pointed at, never half taken.

The weights are checked against the served model from the safetensors header alone
(`check_weights`: every key of its ``state_dict()``, no other, same dtypes and shapes, and the same
image processor; no tensor is built before everything matches). An HTTP body (one buffer,
preallocated from Content-Length) is then copied into the served model's own tensors, read straight
out of the buffer (views: `copy_weights`). A shared-memory file is mapped (`map_shared_weights`,
``MAP_SHARED``; its pages are faulted in while the header is checked, before the worker is
involved) and each tensor's ``.data`` is set to a view of its bytes: no copy (`point_weights`); the
old tensors are freed on another thread, beside the next generation. A tied tensor's names all get
the view of its first name, so they stay one tensor. The views keep the mapping alive: it goes, and
its memory with it, when the next shared-memory push points the tensors elsewhere or a /reload drops
the model. Once the weights are in, the server removes the file's name (`unlink_if_same`), and the
client removes it in any case, so /dev/shm keeps nothing; unless the request says ``keep``
(``push_weights(reuse_buffers=True)``): the client keeps two files and writes each push into the
one not served from, the server leaves the name and keeps its mapping for the next time the file
is named (`KeptMappings`). Where views cannot stand in (a model not
on the CPU, unaligned offsets, tensors that overlap partially: `view_groups`) the file is copied
from like a body.

Shared (tied) tensors: ``state_dict()`` lists a tied tensor under each of its names, and the
server expects every name; the client writes each under each name
(`webgym_rl.policy_server.codec`); the server copies both into the one shared tensor (a body) or
points the shared tensor at the first copy (a shared-memory file; the second stays mapped, unused,
until the next push).

The only files mapped are `SHM_DIR` + ``/webgym-weights-<letters, digits, - or _>.safetensors``,
compared as written (no other directory, no ``..``, no relative path), opened without following a
symbolic link, and only a regular file of the server's own user with one link, no write permission
for group or others, and no larger than the weights allow; anything else is refused naming ``shm``,
and the file is neither read nor removed.

Weights whose header says they were made with another image processor (its ``__metadata__`` key
`IMAGE_PROCESSOR_METADATA`, which `webgym_rl.policy_server.push_weights` writes from the
trainer's processor) are refused: the pixel bounds (`webgym_rl.pixels.ImageSettings`) must be the
trainer's, or screenshots become other image tokens in training than in the rollout.
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import re
import stat
import time
from collections.abc import Mapping
from typing import Any

from webgym_rl.errors import SharedMemoryUnavailable, WeightsRejected
from webgym_rl.pixels import differing_field, image_processor_config
from webgym_rl.policy_server.codec import TensorSlot, read_header
from webgym_rl.policy_server.model import ServedPolicy
from webgym_rl.policy_server.protocol import IMAGE_PROCESSOR_METADATA, SHM_DIR

__all__ = ["WEIGHTS_HEADER_ALLOWANCE", "KeptMappings", "check_weights", "copy_weights", "map_shared_weights",
           "point_weights", "unlink_if_same", "view_groups"]

WEIGHTS_HEADER_ALLOWANCE = 16 * 2**20
"""Bytes a /weights body may hold beyond the served weights: the safetensors header."""
_SHM_NAME = re.compile(r"webgym-weights-[A-Za-z0-9_-]{1,128}\.safetensors")
"""The only file names the server maps (`SHM_DIR` + ``/`` + this, nothing else)."""


def _describe(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype} {list(shape)}"


def _image_processor_problem(processor: Any, metadata: Mapping[str, Any]) -> str | None:
    """Why weights whose header carries `metadata` do not fit the served `processor`: its image
    processor settings differ (named); None when they agree or the push did not say."""
    sent = metadata.get(IMAGE_PROCESSOR_METADATA)
    if sent is None:
        return None
    try:
        theirs = json.loads(sent)
        if not isinstance(theirs, dict):
            raise ValueError("not an object")
    except (TypeError, ValueError, RecursionError) as exc:
        return f"its {IMAGE_PROCESSOR_METADATA} metadata is not a JSON object ({exc})"
    differs = differing_field(image_processor_config(processor), theirs)
    if differs is None:
        return None
    return (f"they were made with another image processor ({differs}, served vs pushed): screenshots would "
            "become other image tokens than the trainer's; give the trainer and the server the same "
            "--min-pixels / --max-pixels")


def check_weights(body: bytes | bytearray | mmap.mmap, policy: ServedPolicy,
                  what: str = "the body") -> dict[str, TensorSlot]:
    """The body's tensor slots, checked against `policy`'s ``state_dict()``: every key present, no
    other key, same dtype and shape, the right number of bytes. Raises `WeightsRejected` naming the
    first bad key (in the model's order; unexpected keys after) and how many are bad in all."""
    refused = f"weights refused, still serving v{policy.version}"
    try:
        slots, metadata = read_header(body, what)
    except WeightsRejected as exc:
        raise WeightsRejected(f"{refused}: {exc}", param=exc.param) from None
    problem = _image_processor_problem(policy.processor, metadata)
    if problem:
        raise WeightsRejected(f"{refused}: {problem}", param=IMAGE_PROCESSOR_METADATA)
    spec = policy.weights_spec
    problems: list[tuple[str, str]] = []
    for key, (dtype, shape, size) in spec.items():
        slot = slots.get(key)
        if slot is None:
            problems.append((key, f"missing key {key!r} (expected {_describe(dtype, shape)})"))
        elif (slot.dtype, slot.shape) != (dtype, shape):
            problems.append((key, f"{key!r}: expected {_describe(dtype, shape)}, received "
                                  f"{_describe(slot.dtype, slot.shape)}"))
        elif slot.end - slot.start != size:
            problems.append((key, f"{key!r}: its data_offsets hold {slot.end - slot.start} bytes, "
                                  f"{_describe(dtype, shape)} needs {size}"))
    problems += [(key, f"unexpected key {key!r} ({_describe(slot.dtype, slot.shape)}): the served model has "
                       "no such tensor") for key, slot in slots.items() if key not in spec]
    if problems:
        key, first = problems[0]
        more = f" ({len(problems)} bad keys in all)" if len(problems) > 1 else ""
        raise WeightsRejected(f"{refused}: {first}{more}; {what} must hold exactly the served model's "
                              f"state_dict() ({len(spec)} tensors)", param=key)
    return slots


def copy_weights(policy: ServedPolicy, body: bytearray | mmap.mmap, slots: dict[str, TensorSlot],
                 version: int) -> tuple[float, float]:
    """Copy checked weights into `policy`'s tensors in place and set its version. Runs on the
    generation worker, so no generation sees half of it. Returns (start, end) perf_counter times."""
    import torch  # optional: torch

    started = time.perf_counter()
    with torch.no_grad():
        for key, target in policy.model.state_dict().items():
            if target.numel() == 0:
                continue
            slot = slots[key]  # views into the request buffer: no second copy of the weights
            source = torch.frombuffer(body, dtype=target.dtype, count=target.numel(), offset=slot.start)
            target.copy_(source.view(target.shape))
    policy.version = version
    policy.loaded_at = int(time.time())
    return started, time.perf_counter()


def view_groups(targets: Mapping[str, Any], slots: dict[str, TensorSlot]) -> list[list[str]] | None:
    """The served ``state_dict()`` keys grouped by the tensor they name (a tied tensor is one group
    of several keys), in the model's order; None where views of the file cannot stand in for the
    tensors: one not on the CPU, a slot not aligned to its element size, or tensors that overlap
    without being the same tensor (a view could not keep that aliasing)."""
    groups: dict[int, list[str]] = {}
    layouts: dict[int, tuple] = {}
    for key, tensor in targets.items():
        if tensor.device.type != "cpu" or slots[key].start % tensor.element_size():
            return None
        if tensor.numel() == 0:
            continue
        storage = tensor.untyped_storage().data_ptr()
        layout = (tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if layouts.setdefault(storage, layout) != layout:
            return None
        groups.setdefault(storage, []).append(key)
    return list(groups.values())


def point_weights(policy: ServedPolicy, mapping: mmap.mmap, slots: dict[str, TensorSlot], version: int,
                  *, retired: list) -> tuple[float, float]:
    """Point `policy`'s tensors at views of `mapping` (a checked shared-memory file: no copy) and set
    its version; on the generation worker, like `copy_weights`, which it falls back to where views
    cannot stand in (`view_groups`). A tied tensor's names all get the view of its first name, so
    they stay one tensor. The views keep the mapping alive; it is unmapped (and the file's memory
    freed) when the last of them goes: when the next shared-memory push points the tensors elsewhere
    or a /reload drops this model (an HTTP push copies into them, in the mapping). The tensors the
    model held before go to `retired`, for the caller to free off the worker (unmapping and freeing
    a previous push's file takes ~20 ms for 400 MB)."""
    import torch  # optional: torch

    targets = policy.model.state_dict(keep_vars=True)  # the Parameters themselves, not detached copies
    groups = view_groups(targets, slots)
    if groups is None:
        return copy_weights(policy, mapping, slots, version)
    started = time.perf_counter()
    with torch.no_grad():
        for keys in groups:
            first = targets[keys[0]]
            view = torch.frombuffer(mapping, dtype=first.dtype, count=first.numel(),
                                    offset=slots[keys[0]].start).view(first.shape)
            for tensor in {id(targets[key]): targets[key] for key in keys}.values():
                retired.append(tensor.data)
                tensor.data = view
    policy.version = version
    policy.loaded_at = int(time.time())
    return started, time.perf_counter()


class KeptMappings:
    """The server's mappings of the files a client keeps between pushes (``keep``), by (device,
    inode): a push naming one again finds it mapped (no new mapping whose page tables are filled
    again, ~15 ms for 400 MB). A mapping holds its file alive, so no other file can have its
    (device, inode) meanwhile: a match is the same file, with the bytes the client wrote since. At
    most `limit` are kept; one whose name is gone (the client dropped it) is let go at the next
    kept push, and all of them by a push that is not kept or a /reload."""

    def __init__(self, limit: int = 2):
        self.limit = limit
        self._mappings: dict[tuple[int, int], tuple[str, int, mmap.mmap]] = {}

    def get(self, path: str, identity: tuple[int, int], size: int) -> mmap.mmap | None:
        """The mapping of the file `path` names (`identity`, `size` bytes) if kept; prunes the rest."""
        for known, (name, _, _) in list(self._mappings.items()):
            with contextlib.suppress(OSError):
                info = os.stat(name, follow_symlinks=False)
                if (info.st_dev, info.st_ino) == known:
                    continue
            self.drop(known)
        entry = self._mappings.get(identity)
        if entry is None or (entry[0], entry[1]) != (path, size) or entry[2].closed:
            return None
        return entry[2]

    def add(self, path: str, identity: tuple[int, int], mapping: mmap.mmap) -> None:
        self._mappings[identity] = (path, len(mapping), mapping)
        while len(self._mappings) > self.limit:
            self.drop(next(iter(self._mappings)))

    def drop(self, identity: tuple[int, int]) -> None:
        """Let the mapping of `identity` go (unmapped now, or when the last tensor viewing it goes)."""
        entry = self._mappings.pop(identity, None)
        if entry is not None:
            with contextlib.suppress(BufferError):
                entry[2].close()

    def clear(self) -> None:
        for identity in list(self._mappings):
            self.drop(identity)


def map_shared_weights(path: str, limit: int,
                       kept: KeptMappings | None = None) -> tuple[mmap.mmap, tuple[int, int]]:
    """Open and map the shared-memory weights file `path` (pages faulted in now, not during the
    next generation), or with `kept` find it mapped already (and keep a new mapping there);
    returns the mapping and the file's (device, inode). Refuses with
    `WeightsRejected` (param ``shm``) a path other than `SHM_DIR`/webgym-weights-<name>.safetensors,
    a symbolic link, anything but a regular file of the server's user with one link and no write
    permission for others, and a file larger than `limit`; a missing file is
    `SharedMemoryUnavailable`. The file descriptor is closed before returning."""
    def refuse(why: str) -> WeightsRejected:
        return WeightsRejected(f"weights refused: shm {path!r} {why}", param="shm")

    directory, name = os.path.split(path)
    if directory != SHM_DIR or not _SHM_NAME.fullmatch(name):
        raise refuse(f"is not a file this server reads: it must be {SHM_DIR}/webgym-weights-<letters, "
                     "digits, - or _>.safetensors (push_weights writes one)")
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise SharedMemoryUnavailable(
            f"weights refused: shm {path!r} does not exist for the server; a server that does not share "
            f"the client's {SHM_DIR} (another machine or container) takes the weights as an HTTP body",
            param="shm") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse("is a symbolic link; write the weights into the file itself") from None
        raise refuse(f"cannot be opened: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refuse("is not a regular file")
        if info.st_uid != os.geteuid():
            raise refuse(f"belongs to uid {info.st_uid}, not to the server's user ({os.geteuid()})")
        if info.st_nlink != 1:
            raise refuse(f"has {info.st_nlink} hard links; it must have one")
        if info.st_mode & 0o022:
            raise refuse(f"is writable by others (mode {stat.S_IMODE(info.st_mode):o}); create it with "
                         "mode 600")
        if not 8 <= info.st_size <= limit:
            raise refuse(f"holds {info.st_size} bytes; a safetensors file of the served model's weights "
                         f"holds 8 to {limit}")
        identity = (info.st_dev, info.st_ino)
        if kept is not None and (known := kept.get(path, identity, info.st_size)) is not None:
            return known, identity
        mapping = mmap.mmap(fd, info.st_size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        if kept is not None:
            kept.add(path, identity, mapping)
        return mapping, identity
    finally:
        os.close(fd)


def unlink_if_same(path: str, identity: tuple[int, int]) -> None:
    """Remove `path` if it still names the file (device, inode) `identity`: the server has taken
    the weights (its mapping keeps the bytes), so the name is no longer needed."""
    with contextlib.suppress(FileNotFoundError):
        info = os.stat(path, follow_symlinks=False)
        if (info.st_dev, info.st_ino) == identity:
            os.unlink(path)
