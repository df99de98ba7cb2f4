"""Turn `Sample`s into model batches: the prompt through the model's processor, then the reply's
tokens, with labels on the reply tokens only.

**Token in, token out.** A sample whose step recorded the token ids the policy sampled (schema 1.4:
the CPU policy server, vLLM with ``return_token_ids``) is trained on exactly those ids: the prompt is
rendered with the processor's chat template (``add_generation_prompt=True``) and tokenised with its
images, and the sampled ids follow it as they are. Nothing is re-tokenised, so each behaviour
log-probability sits on the token it was computed for. Where the step also recorded a digest of the
endpoint's prompt ids (`Step.prompt_token_hash`), the collator checks that its own prompt tokenises
to the same ids (same chat template, same image tokens: the pixel bounds must be the rollout's,
`webgym_rl.pixels`); a mismatch, or token ids and log-probabilities of different lengths, is a
`TokenMismatchError` naming the episode and step, never a silent fallback. A reply cut at
``max_tokens`` ends where it was cut: no end-of-turn token is added that was never sampled.

**Steps without token ids** (rows before schema 1.4, endpoints that do not return ids, the random
and scripted policies) are trained as before: the reply text is re-tokenised after the prompt,
followed by the end-of-turn token (``<|im_end|>`` for Qwen) when the reply stopped (not when it was
cut at ``max_tokens``), with the prompt's tokens checked to be a prefix of prompt + reply (a BPE
merge across the boundary would shift the labels: `PromptPrefixError`). Their behaviour
log-probabilities are lined up by count only: the endpoint's list where it has one entry per
re-tokenised token (or one per token but the added end-of-turn token, which gets the mean of the
others), else the sample's mean on every reply token; NaN where nothing is known. That alignment is
a guess (re-tokenisation can split the text otherwise), which is why `webgym_rl.samples` counts and
names these steps, and why the on-policy check leaves them out.

Each sample is encoded on its own and the batch is right-padded to its longest sample. Besides the
model inputs and ``labels``, a batch carries per sample ``advantages``, ``temperatures`` (the
rollout's sampling temperature, 1.0 where unknown or greedy), ``exact`` (trained on the sampled ids
with their log-probabilities: the samples the on-policy check compares) and ``versions`` (the
policy version that sampled it, -1 unknown), and per token ``behaviour_logprobs``.

Exceptions (`webgym_rl.errors`)::

    CollationError (ValueError)       a sample that cannot be encoded (names episode and step)
     ├── PromptPrefixError            the tokenised prompt is not a prefix of prompt + response
     └── TokenMismatchError           the trainer's tokens are not those the policy sampled from
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from webgym_rl.errors import CollationError, PromptPrefixError, TokenMismatchError
from webgym_rl.modeling import placeholder_token_ids
from webgym_rl.samples import Sample
from webgym_rollout.trajectory.contract import prompt_token_digest

__all__ = ["IGNORE_INDEX", "NOT_MODEL_INPUTS", "CollationError", "Collator", "PromptPrefixError",
           "TokenMismatchError"]

IGNORE_INDEX = -100
# Keys the processor returns per image (concatenated across the batch) rather than per token.
_PER_IMAGE_KEYS = ("pixel_values", "image_grid_thw")
_PER_SAMPLE_KEYS = ("advantages", "temperatures", "exact", "versions")
NOT_MODEL_INPUTS = ("labels", "behaviour_logprobs", *_PER_SAMPLE_KEYS)
"""Keys of a collated batch that are not model inputs."""
# Per-token processor outputs and the value of a reply token in each (the reply is text).
_REPLY_FILL = {"attention_mask": 1, "mm_token_type_ids": 0, "token_type_ids": 0}


def _images(messages: Sequence[dict[str, Any]]) -> list[Any]:
    found = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            found.extend(part["image"] for part in content
                         if isinstance(part, dict) and part.get("type") == "image" and "image" in part)
    return found


def _behaviour_row(sample: Sample, n_target: int) -> list[float]:
    """The behaviour log-probability of each of the `n_target` re-tokenised reply tokens (module
    docstring: lined up by count, a guess)."""
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
    """``collator(samples) -> batch`` (see the module docstring for what a batch holds)."""

    def __init__(self, processor: Any):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        vocab = self.tokenizer.get_vocab()
        self.end_of_turn = "<|im_end|>" if "<|im_end|>" in vocab else (self.tokenizer.eos_token or "")
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else self.tokenizer.eos_token_id
        self.placeholders = set(placeholder_token_ids(self.tokenizer))

    def prompt_text(self, sample: Sample) -> str:
        return self.processor.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)

    def _process(self, sample: Sample, text: str) -> dict[str, torch.Tensor]:
        images = _images(sample.messages)
        try:
            return dict(self.processor(text=[text], images=images or None, return_tensors="pt"))
        except (ValueError, IndexError, TypeError) as exc:
            raise CollationError(f"{sample.where}: the processor rejected the sample: {exc}") from exc

    def encode(self, sample: Sample) -> dict[str, torch.Tensor]:
        """One sample as 1-row tensors (``input_ids`` ``(1, L)``, ``labels`` ``(1, L)``, images ...)."""
        if sample.token_ids:
            out, exact = self._encode_sampled(sample), sample.behaviour_logprobs is not None
        else:
            out, exact = self._encode_text(sample), False
        sampling = sample.sampling
        temperature = 1.0 if sampling is None or sampling.greedy else sampling.temperature
        out["temperatures"] = torch.tensor([temperature], dtype=torch.float32)
        out["exact"] = torch.tensor([exact])
        version = sample.policy_version
        out["versions"] = torch.tensor([-1 if version is None else version])
        return out

    def _encode_sampled(self, sample: Sample) -> dict[str, torch.Tensor]:
        """The prompt as the processor tokenises it, then the sampled ids as they are."""
        token_ids = list(sample.token_ids or ())
        logprobs = sample.behaviour_logprobs
        if logprobs is not None and len(logprobs) != len(token_ids):
            raise TokenMismatchError(f"{sample.where}: the step has {len(token_ids)} sampled token ids but "
                                     f"{len(logprobs)} log-probabilities; they must pair up one to one")
        placeholders = set(token_ids) & self.placeholders
        if placeholders:
            raise TokenMismatchError(
                f"{sample.where}: the reply holds vision placeholder token(s) {sorted(placeholders)}, which "
                "stand for an image's place in training: the endpoint should never sample them (the CPU "
                "policy server does not; give vLLM logit_bias -100 for them)")
        out = self._process(sample, self.prompt_text(sample))
        prompt_ids = out["input_ids"][0].tolist()
        self._check_prompt(sample, prompt_ids)
        reply = torch.tensor([token_ids], dtype=out["input_ids"].dtype)
        for key, fill in _REPLY_FILL.items():
            if key in out:
                out[key] = torch.cat([out[key], torch.full_like(reply, fill)], dim=1)
        out["input_ids"] = torch.cat([out["input_ids"], reply], dim=1)
        labels = torch.full_like(out["input_ids"], IGNORE_INDEX)
        labels[0, len(prompt_ids):] = reply[0]
        out["labels"] = labels
        behaviour = torch.full(labels.shape, float("nan"))
        if logprobs is not None:
            behaviour[0, len(prompt_ids):] = torch.tensor(logprobs, dtype=torch.float32)
        out["behaviour_logprobs"] = behaviour
        return out

    def _check_prompt(self, sample: Sample, prompt_ids: list[int]) -> None:
        """Refuse a prompt that does not tokenise to the ids the endpoint sampled from."""
        known = sample.prompt_token_hash or sample.prompt_tokens
        if not known:
            return
        if sample.prompt_token_hash:
            same = prompt_token_digest(prompt_ids) == sample.prompt_token_hash
        else:
            same = len(prompt_ids) == sample.prompt_tokens
        if same:
            return
        theirs = f"{sample.prompt_tokens} tokens" if sample.prompt_tokens else "other ids"
        raise TokenMismatchError(
            f"{sample.where}: the trainer's prompt is {len(prompt_ids)} tokens that differ from the ones the "
            f"policy endpoint sampled the reply from ({theirs}): the chat template or the image processor "
            "differs between the rollout and the trainer (give the policy server and the trainer the same "
            "--min-pixels / --max-pixels, and the same checkpoint's processor)")

    def _encode_text(self, sample: Sample) -> dict[str, torch.Tensor]:
        """A step without token ids: the reply text re-tokenised after the prompt (module docstring)."""
        where = sample.where
        prompt = self.prompt_text(sample)
        ending = "" if sample.finish_reason == "length" else self.end_of_turn
        full = prompt + sample.response + ending
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
        out = self._process(sample, full)
        input_ids = out["input_ids"]
        # The processor expands each image placeholder into many <|image_pad|> tokens; all images
        # sit in the prompt, so the response is the same last `n_target` tokens either way.
        start = input_ids.shape[1] - n_target
        if input_ids[0, start:].tolist() != full_ids[len(prompt_ids):]:
            raise PromptPrefixError(f"{where}: the processor's tokens for the response differ from the "
                                    "tokenizer's (a placeholder in the response?)")
        labels = torch.full_like(input_ids, IGNORE_INDEX)
        labels[0, start:] = input_ids[0, start:]
        out["labels"] = labels
        behaviour = torch.full(input_ids.shape, float("nan"))
        behaviour[0, start:] = torch.tensor(_behaviour_row(sample, n_target))
        out["behaviour_logprobs"] = behaviour
        return out

    def __call__(self, samples: Sequence[Sample]) -> dict[str, torch.Tensor]:
        encoded = [self.encode(sample) for sample in samples]
        length = max(item["input_ids"].shape[1] for item in encoded)
        batch: dict[str, torch.Tensor] = {}
        for key in encoded[0]:
            values = [item[key] for item in encoded if key in item]
            if key in _PER_IMAGE_KEYS or key in _PER_SAMPLE_KEYS:
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
