"""The safetensors file format, read and written here without building a tensor.

A safetensors file is an 8-byte little-endian header length, a JSON header (each tensor's dtype,
shape and byte range; an optional ``__metadata__`` of text to text), then the tensors' bytes. The
server reads only the header (`read_header`) before it knows the weights fit; the client writes
the file itself (`safetensors_layout`) rather than through ``safetensors.torch.save``, which
refuses tensors that share memory (tied weights) and builds the whole file in memory: here each
tensor's bytes are written straight from the tensor, and a tied tensor under each of its names.
Any safetensors file is read, whoever wrote it.
"""

from __future__ import annotations

import json
import mmap
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webgym_rl.errors import WeightsPushFailed, WeightsRejected

__all__ = ["TensorSlot", "fill_safetensors_buffer", "read_header", "safetensors_bytes",
           "safetensors_dtype_name", "safetensors_layout", "safetensors_pieces", "write_safetensors_file"]

# safetensors dtype names <-> torch dtype attribute names (the formats' own spellings).
_SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}


def safetensors_dtype_name(dtype: Any) -> str:
    """The safetensors name of a torch dtype (``torch.bfloat16`` -> ``BF16``)."""
    name = str(dtype).removeprefix("torch.")
    return next((key for key, value in _SAFETENSORS_DTYPES.items() if value == name), name)


@dataclass(frozen=True)
class TensorSlot:
    """Where one tensor of a safetensors file lies: dtype name, shape, absolute byte range."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


def read_header(body: bytes | bytearray | mmap.mmap,
                what: str = "the body") -> tuple[dict[str, TensorSlot], dict[str, Any]]:
    """Parse a safetensors file's header (8-byte little-endian length, then JSON) without building
    any tensor: (its tensor slots, its ``__metadata__``); raises `WeightsRejected` for anything that
    is not a well-formed safetensors file."""
    def refuse(why: str, key: str | None = None) -> WeightsRejected:
        return WeightsRejected(f"{what} is not a safetensors file ({len(body)} bytes): {why}; send a "
                               "safetensors file of the model's state_dict() (push_weights writes one)",
                               param=key)

    if len(body) < 8:
        raise refuse("shorter than the 8-byte header length")
    size = int.from_bytes(body[:8], "little")
    if size > len(body) - 8:
        raise refuse(f"its header length {size} runs past the end")
    try:
        header = json.loads(bytes(memoryview(body)[8:8 + size]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise refuse(f"its header is not JSON ({exc})") from None
    except RecursionError:  # e.g. "[[[[...": JSON nested past the parser's depth
        raise refuse("its header is JSON nested too deep to be a safetensors header") from None
    if not isinstance(header, dict):
        raise refuse("its header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if not isinstance(metadata, dict):
        metadata = {}
    base, data_size = 8 + size, len(body) - 8 - size
    slots = {}
    for key, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
            numbers = (*shape, begin, end)
            if not (isinstance(dtype, str) and all(isinstance(n, int) and n >= 0 for n in numbers)):
                raise TypeError
        except (KeyError, TypeError, ValueError):
            raise refuse(f"malformed header entry for {key!r}: {info!r}"[:300], key) from None
        if not begin <= end <= data_size:
            raise refuse(f"{key!r}: data_offsets [{begin}, {end}] outside the {data_size} data bytes", key)
        slots[key] = TensorSlot(dtype=dtype, shape=shape, start=base + begin, end=base + end)
    return slots, metadata


def safetensors_layout(state_dict: Mapping[str, Any],
                       metadata: Mapping[str, str] | None = None) -> tuple[bytes, list[Any], int]:
    """(header, tensors in file order, file size) of `state_dict` as a safetensors file. The
    tensors go by falling element size, as safetensors orders them, so each starts aligned (the
    header is padded to 8); a tied tensor is listed under each of its names. `metadata` becomes
    the header's ``__metadata__`` (text to text)."""
    if sys.byteorder != "little":
        raise WeightsPushFailed("safetensors is little-endian; this machine is not")
    tensors = sorted(((key, tensor.detach()) for key, tensor in state_dict.items()),
                     key=lambda item: -item[1].element_size())
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for key, tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        header[key] = {"dtype": safetensors_dtype_name(tensor.dtype), "shape": list(tensor.shape),
                       "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return len(text).to_bytes(8, "little") + text, [tensor for _, tensor in tensors], 8 + len(text) + offset


def _tensor_bytes(tensor: Any) -> memoryview:
    """The bytes of `tensor` (a copy only for a non-contiguous or non-CPU one)."""
    import torch  # optional: torch

    return memoryview(tensor.to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy())


def safetensors_pieces(state_dict: Mapping[str, Any], metadata: Mapping[str, str] | None = None, *,
                       piece_bytes: int) -> tuple[int, Iterator[bytes | memoryview]]:
    """(size, pieces) of `state_dict` as a safetensors file (`safetensors_layout`), in pieces of
    at most `piece_bytes` (the header is one piece), each tensor's read from the tensor as it goes."""
    header, tensors, size = safetensors_layout(state_dict, metadata)

    def pieces() -> Iterator[bytes | memoryview]:
        yield header
        for tensor in tensors:
            if tensor.numel() == 0:
                continue
            data = _tensor_bytes(tensor)
            for start in range(0, len(data), piece_bytes):
                yield data[start:start + piece_bytes]

    return size, pieces()


def safetensors_bytes(state_dict: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """`state_dict` as the bytes of a safetensors file, in one piece."""
    return b"".join(safetensors_pieces(state_dict, metadata, piece_bytes=2**30)[1])


def write_safetensors_file(path: str, state_dict: Mapping[str, Any],
                           metadata: Mapping[str, str] | None = None) -> int:
    """Write `state_dict` as a safetensors file at `path` (created here, mode 600; an existing file
    or link is refused); returns its size. Plain ``write`` calls: on tmpfs they cost half of
    filling a fresh mapping, which pays a page fault per 4 KiB page."""
    header, tensors, size = safetensors_layout(state_dict, metadata)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        for data in (memoryview(header), *(_tensor_bytes(t) for t in tensors if t.numel())):
            while data:
                data = data[os.write(fd, data):]
    finally:
        os.close(fd)
    return size


def fill_safetensors_buffer(buffer: mmap.mmap, header: bytes, tensors: list[Any]) -> None:
    """Write the safetensors file that `safetensors_layout` gave as (`header`, `tensors`) into
    `buffer` (a writable mapping of exactly its size): the header, then each tensor copied straight
    into its bytes (one copy, from any device, contiguous or not; no intermediate bytes)."""
    import torch  # optional: torch

    buffer[:len(header)] = header
    offset = len(header)
    with torch.no_grad():
        for tensor in tensors:
            if tensor.numel():
                target = torch.frombuffer(buffer, dtype=tensor.dtype, count=tensor.numel(), offset=offset)
                target.view(tensor.shape).copy_(tensor)
                del target  # an export of `buffer`: it could not be closed while one is alive
            offset += tensor.numel() * tensor.element_size()
