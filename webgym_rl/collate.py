"""Turn `Sample`s into model batches: prompt + response through the model's processor, labels on
the response tokens only.

Each sample is rendered with the processor's chat template (``add_generation_prompt=True``) and
the target is the raw response followed by the end-of-turn token (``<|im_end|>`` for Qwen), so
the model learns to stop. Tokenising prompt and prompt + target separately must agree on the
prompt: we check it token by token, because a BPE merge across the boundary would silently shift
the labels. Images go through the processor's image processor, which resizes each one to an area
within its ``min_pixels`` / ``max_pixels`` (set them with `webgym_rl.modeling.load_processor`).
Each sample is encoded on its own and the batch is right-padded to its longest sample.

The behaviour policy's log-probabilities (what the rollout's endpoint returned, `Sample`) are
lined up with the labels, one per response token: the endpoint's own list where it has one entry
per response token, or one per token but the end-of-turn token (a reply cut at ``max_tokens`` or at
a stop string; that token gets the mean of the others); otherwise (the trainer's tokens are not the
endpoint's) the sample's mean on every response token. NaN where nothing is known.

Exceptions (`webgym_rl.errors`)::

    CollationError (ValueError)       a sample that cannot be encoded (names episode and step)
     └── PromptPrefixError            the tokenised prompt is not a prefix of prompt + response
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from webgym_rl.errors import CollationError, PromptPrefixError
from webgym_rl.samples import Sample

__all__ = ["IGNORE_INDEX", "CollationError", "Collator", "PromptPrefixError"]

IGNORE_INDEX = -100
# Keys the processor returns per image (concatenated across the batch) rather than per token.
_PER_IMAGE_KEYS = ("pixel_values", "image_grid_thw")


def _images(messages: Sequence[dict[str, Any]]) -> list[Any]:
    found = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            found.extend(part["image"] for part in content
                         if isinstance(part, dict) and part.get("type") == "image" and "image" in part)
    return found


def _behaviour_row(sample: Sample, n_target: int) -> list[float]:
    """The behaviour log-probability of each of the `n_target` response tokens (module docstring)."""
    per_token = list(sample.behaviour_logprobs or ())
    if per_token and len(per_token) == n_target:
        return per_token
    if per_token and len(per_token) == n_target - 1:
        return [*per_token, sum(per_token) / len(per_token)]
    mean = sample.behaviour_logprob
    if mean is None and per_token:
        mean = sum(per_token) / len(per_token)
    return [float("nan") if mean is None else mean] * n_target


class Collator:
    """``collator(samples) -> batch`` with ``input_ids``, ``attention_mask``, ``labels``,
    ``advantages`` (float, one per sample), ``behaviour_logprobs`` (float, like ``labels``: NaN but
    on the response tokens whose behaviour log-probability is known) and the processor's image
    tensors."""

    def __init__(self, processor: Any):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        vocab = self.tokenizer.get_vocab()
        self.end_of_turn = "<|im_end|>" if "<|im_end|>" in vocab else (self.tokenizer.eos_token or "")
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else self.tokenizer.eos_token_id

    def prompt_text(self, sample: Sample) -> str:
        return self.processor.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)

    def encode(self, sample: Sample) -> dict[str, torch.Tensor]:
        """One sample as 1-row tensors (``input_ids`` ``(1, L)``, ``labels`` ``(1, L)``, images ...)."""
        where = f"episode {sample.episode_id} step {sample.step}"
        prompt = self.prompt_text(sample)
        full = prompt + sample.response + self.end_of_turn
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        full_ids = self.tokenizer(full, add_special_tokens=False)["input_ids"]
        for position, expected in enumerate(prompt_ids):
            got = full_ids[position] if position < len(full_ids) else None
            if got != expected:
                shown = self.tokenizer.convert_ids_to_tokens([expected] + ([got] if got is not None else []))
                raise PromptPrefixError(
                    f"{where}: the prompt tokenised alone is not a prefix of prompt + response: at token "
                    f"{position} the prompt has {shown[0]!r} but prompt + response has "
                    f"{shown[1] if len(shown) > 1 else 'nothing'!r} (the response "
                    f"{sample.response[:30]!r} merges with the end of the prompt)")
        n_target = len(full_ids) - len(prompt_ids)
        images = _images(sample.messages)
        try:
            encoded = self.processor(text=[full], images=images or None, return_tensors="pt")
        except (ValueError, IndexError, TypeError) as exc:
            raise CollationError(f"{where}: the processor rejected the sample: {exc}") from exc
        input_ids = encoded["input_ids"]
        # The processor expands each image placeholder into many <|image_pad|> tokens; all images
        # sit in the prompt, so the response is the same last `n_target` tokens either way.
        tail = input_ids[0, input_ids.shape[1] - n_target:].tolist()
        if tail != full_ids[len(prompt_ids):]:
            raise PromptPrefixError(f"{where}: the processor's tokens for the response differ from the "
                                    "tokenizer's (a placeholder in the response?)")
        labels = torch.full_like(input_ids, IGNORE_INDEX)
        labels[0, input_ids.shape[1] - n_target:] = input_ids[0, input_ids.shape[1] - n_target:]
        out = dict(encoded)
        out["labels"] = labels
        behaviour = torch.full(input_ids.shape, float("nan"))
        behaviour[0, input_ids.shape[1] - n_target:] = torch.tensor(_behaviour_row(sample, n_target))
        out["behaviour_logprobs"] = behaviour
        return out

    def __call__(self, samples: Sequence[Sample]) -> dict[str, torch.Tensor]:
        encoded = [self.encode(sample) for sample in samples]
        length = max(item["input_ids"].shape[1] for item in encoded)
        batch: dict[str, torch.Tensor] = {}
        for key in encoded[0]:
            values = [item[key] for item in encoded if key in item]
            if key in _PER_IMAGE_KEYS:
                batch[key] = torch.cat(values, dim=0)
                continue
            fill = {"input_ids": self.pad_token_id, "labels": IGNORE_INDEX,
                    "behaviour_logprobs": float("nan")}.get(key, 0)
            padded = torch.full((len(encoded), length), fill, dtype=values[0].dtype)
            for row, value in enumerate(values):
                padded[row, : value.shape[1]] = value[0]
            batch[key] = padded
        for key in _PER_IMAGE_KEYS:  # samples without images next to samples with them
            if key not in batch:
                values = [item[key] for item in encoded if key in item]
                if values:
                    batch[key] = torch.cat(values, dim=0)
        batch["advantages"] = torch.tensor([sample.advantage for sample in samples], dtype=torch.float32)
        return batch
