"""How screenshots become image tokens: one setting for the whole path.

The policy that samples a reply and the trainer that trains on it must turn each screenshot into the
same image tokens, or the trainer scores other inputs than the ones the reply was sampled from (and
the prompt token ids no longer match, `webgym_rl.collate`). Qwen-VL processors resize every image to
an area between ``min_pixels`` and ``max_pixels``; `ImageSettings` holds that pair once:

- the trainer loads its processor with it (`webgym_rl.settings.OptimizationSettings.images`, flags
  ``--min-pixels`` / ``--max-pixels``), and so does the CPU policy server
  (`webgym_rl.policy_server.PolicyServerSettings.images`, the same flags);
- the loop passes its trainer's setting to the policy server it starts;
- vLLM takes it as processor arguments: ``vllm serve ... --mm-processor-kwargs
  '{"min_pixels": 3136, "max_pixels": 1003520}'`` (`ImageSettings.vllm_processor_kwargs`).

`image_processor_config` is what the policy server compares before it takes new weights: the
processor settings that decide image tokens (`IMAGE_PROCESSOR_FIELDS`), which a push carries in its
safetensors header and a checkpoint folder in its processor files; weights made with another
configuration are refused, naming the first field that differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["IMAGE_PROCESSOR_FIELDS", "ImageSettings", "differing_field", "image_processor_config"]

IMAGE_PROCESSOR_FIELDS = ("min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size",
                          "image_mean", "image_std", "do_resize", "do_rescale", "rescale_factor",
                          "do_normalize", "do_convert_rgb")
"""The image processor's settings that decide which image tokens a screenshot becomes."""


@dataclass(frozen=True)
class ImageSettings:
    """The pixel bounds screenshots are resized to (the same for the policy and the trainer)."""

    min_pixels: int | None = None
    """Smallest image area after resizing (default: the checkpoint's processor setting)."""
    max_pixels: int | None = None
    """Largest image area after resizing (default: the checkpoint's processor setting)."""

    def __post_init__(self) -> None:
        for name in ("min_pixels", "max_pixels"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}: must be >= 1, got {value}")
        if None not in (self.min_pixels, self.max_pixels) and self.min_pixels > self.max_pixels:  # type: ignore[operator]
            raise ValueError(f"min_pixels: {self.min_pixels} exceeds max_pixels {self.max_pixels}")

    def flags(self) -> list[str]:
        """The ``--min-pixels`` / ``--max-pixels`` flags of a command that takes them (set ones only)."""
        found = []
        for name in ("min_pixels", "max_pixels"):
            value = getattr(self, name)
            if value is not None:
                found += [f"--{name.replace('_', '-')}", str(value)]
        return found

    def vllm_processor_kwargs(self) -> str:
        """vLLM's ``--mm-processor-kwargs`` value for these bounds ('{}' when none is set)."""
        return json.dumps({name: getattr(self, name) for name in ("min_pixels", "max_pixels")
                           if getattr(self, name) is not None})


def image_processor_config(processor: Any) -> dict[str, Any]:
    """The settings of `processor`'s image processor that decide image tokens (`IMAGE_PROCESSOR_FIELDS`),
    JSON-ready: the resize bounds as ``min_pixels`` / ``max_pixels``, sequences as lists."""
    image_processor = getattr(processor, "image_processor", processor)
    size = getattr(image_processor, "size", None) or {}
    size = dict(size) if not isinstance(size, dict) else size
    found: dict[str, Any] = {
        "min_pixels": size.get("shortest_edge", getattr(image_processor, "min_pixels", None)),
        "max_pixels": size.get("longest_edge", getattr(image_processor, "max_pixels", None))}
    for name in IMAGE_PROCESSOR_FIELDS[2:]:
        value = getattr(image_processor, name, None)
        found[name] = [float(v) for v in value] if isinstance(value, list | tuple) else value
    return found


def differing_field(mine: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """The first of `IMAGE_PROCESSOR_FIELDS` whose values differ, as ``"name: mine vs theirs"``; None
    when they agree. Numbers compare with a tolerance of 1e-6 (a JSON round trip of a float)."""
    for name in IMAGE_PROCESSOR_FIELDS:
        a, b = mine.get(name), theirs.get(name)
        if _same(a, b):
            continue
        return f"{name}: {a!r} vs {b!r}"
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(a)))
    return a == b
