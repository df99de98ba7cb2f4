"""The served checkpoint: a `transformers` Qwen-VL model and its processor, loaded as one unit.

/reload builds a second `ServedPolicy` beside the first and swaps one reference
(`webgym_rl.policy_server.service`); /weights changes the tensors of the one serving in place
(`webgym_rl.policy_server.weights`). The checkpoint is loaded with `webgym_rl.modeling`
(image-only Qwen-VL processor, no torchvision); its generation config keeps only its special token
ids, so nothing but the request shapes the distribution sampled from (vLLM's
``--generation-config vllm``).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from webgym_rl.policy_server.codec import safetensors_dtype_name
from webgym_rl.policy_server.settings import PolicyServerSettings

__all__ = ["SPECIAL_TOKEN_FIELDS", "ServedPolicy", "load_policy"]

logger = logging.getLogger(__name__)

SPECIAL_TOKEN_FIELDS = ("eos_token_id", "pad_token_id", "bos_token_id")
"""The only fields of a checkpoint's generation config the server reads."""


@dataclass
class ServedPolicy:
    """One loaded checkpoint: model + processor, swapped as a unit by /reload. /weights changes the
    model's tensors in place (shapes and dtypes stay) and `version`, on the generation worker."""

    checkpoint: str
    model: Any
    processor: Any
    version: int = 0
    loaded_at: int = field(default_factory=lambda: int(time.time()))

    @functools.cached_property
    def placeholders(self) -> list[int]:
        """The vision placeholder ids replies never get (`webgym_rl.modeling.placeholder_token_ids`)."""
        from webgym_rl.modeling import placeholder_token_ids  # lazy: imports transformers

        return placeholder_token_ids(self.processor.tokenizer)

    @functools.cached_property
    def weights_spec(self) -> dict[str, tuple[str, tuple[int, ...], int]]:
        """``state_dict()`` key -> (safetensors dtype name, shape, bytes), in the model's order."""
        return {key: (safetensors_dtype_name(tensor.dtype), tuple(tensor.shape),
                      tensor.numel() * tensor.element_size())
                for key, tensor in self.model.state_dict().items()}

    @functools.cached_property
    def weights_bytes(self) -> int:
        """Bytes of the weights in a safetensors body (header excluded)."""
        return sum(size for _, _, size in self.weights_spec.values())


def load_policy(settings: PolicyServerSettings, checkpoint: str, revision: str | None,
                version: int) -> ServedPolicy:
    """Load `checkpoint` (at `revision`) as `version`, on the settings' device and dtype, with the
    settings' image processor bounds."""
    import torch  # optional: torch

    from webgym_rl.modeling import load_model, load_processor  # lazy: imports transformers

    dtype = None if settings.dtype == "auto" else getattr(torch, settings.dtype)
    processor = load_processor(checkpoint, revision=revision, min_pixels=settings.images.min_pixels,
                               max_pixels=settings.images.max_pixels)
    model = load_model(checkpoint, revision=revision, dtype=dtype).to(settings.device)
    model.generation_config = _plain_generation_config(model.generation_config)
    logger.info("loaded %s on %s", checkpoint, settings.device)
    return ServedPolicy(checkpoint=checkpoint, model=model, processor=processor, version=version)


def _plain_generation_config(found: Any) -> Any:
    """A generation config holding only the checkpoint's special token ids: transformers fills what a
    request's config leaves unset from the model's generation config (a checkpoint's top_k, top_p,
    repetition penalty or suppressed tokens would change the distribution sampled from)."""
    from transformers import GenerationConfig  # optional: transformers

    return GenerationConfig(**{name: getattr(found, name, None) for name in SPECIAL_TOKEN_FIELDS})
