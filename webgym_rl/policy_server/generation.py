"""Generation: one chat request in, one sampled reply out, with its token ids and log-probabilities.

Sampling is exactly what the request says and nothing else (`webgym_rl.policy_server.protocol`):
``temperature`` (below 1e-5 = greedy), ``top_p``, ``top_k`` (as vLLM takes it: 0, -1 or absent =
no limit), ``max_tokens``, ``seed``, ``stop``. The checkpoint's generation config is never applied
(`webgym_rl.policy_server.model`). The vision placeholder tokens (``<|image_pad|>`` ...:
`webgym_rl.modeling.VISION_PLACEHOLDERS`) are never sampled: in a reply the trainer would take one
for an image's place. The images of a request (inline base64 data URLs only; the server fetches no
URL) are decoded and really fed to the model through its processor.

``logprobs`` / ``top_logprobs`` are the log-probabilities of the distribution each token was
sampled from: ``softmax(logits / temperature)`` without the placeholders, cut to ``top_k`` and
``top_p`` and renormalised (vLLM's ``--logprobs-mode processed_logprobs``); with temperature 1 and
no cut, the model's own less the placeholders, what the trainer scores. Greedy replies get those of
temperature 1. The token ids returned are the ids sampled (the end-of-turn token included when the
reply stopped on it) and the prompt's (image tokens included): a trainer trains on exactly them.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
from dataclasses import dataclass
from typing import Any, Literal

from webgym_rl.errors import BadChatRequest
from webgym_rl.policy_server.model import SPECIAL_TOKEN_FIELDS, ServedPolicy
from webgym_rl.policy_server.protocol import ChatCompletionRequest, TextPart, TokenLogprob, TopLogprob

__all__ = ["Generation", "TokenText", "generate", "prepare_messages"]


@dataclass
class Generation:
    """A reply: its text, why it ended, the prompt's and the reply's token ids, the log-probabilities."""

    text: str
    finish_reason: Literal["stop", "length"]
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None


def _decode_image_url(url: str, where: str) -> Any:
    """The RGB image of an inline base64 data URL; `BadChatRequest` naming `where` for anything else."""
    from PIL import Image, UnidentifiedImageError  # optional: PIL

    if not url.startswith("data:"):
        scheme = url.split(":", 1)[0] if ":" in url else "a bare path"
        raise BadChatRequest(f"{where}: only inline base64 data URLs (data:image/png;base64,...) are "
                             f"accepted, not {scheme} URLs: {url[:60]!r}", param=where)
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64") or not header[5:].startswith("image/"):
        raise BadChatRequest(f"{where}: malformed image data URL; expected data:image/<type>;base64,<data>, "
                             f"got {url[:40]!r}...", param=where)
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadChatRequest(f"{where}: the image data URL is not valid base64 ({exc})",
                             param=where) from None
    try:
        image = Image.open(io.BytesIO(raw))
        image.load()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise BadChatRequest(f"{where}: the image data URL does not hold a readable image ({exc})",
                             param=where) from None
    return image.convert("RGB")


def prepare_messages(request: ChatCompletionRequest) -> tuple[list[dict], list]:
    """OpenAI messages -> processor chat messages (image parts as {"type": "image"}) + PIL images."""
    if not request.messages:
        raise BadChatRequest("messages must not be empty", param="messages")
    messages, images = [], []
    for i, message in enumerate(request.messages):
        if message.content is None or isinstance(message.content, str):
            messages.append({"role": message.role, "content": message.content or ""})
            continue
        parts = []
        for j, part in enumerate(message.content):
            if isinstance(part, TextPart):
                parts.append({"type": "text", "text": part.text})
            else:
                images.append(_decode_image_url(part.image_url.url, f"messages[{i}].content[{j}].image_url"))
                parts.append({"type": "image"})
        messages.append({"role": message.role, "content": parts})
    return messages, images


@functools.cache
def _byte_decoder() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # optional: transformers

    return {char: byte for byte, char in bytes_to_unicode().items()}


class TokenText:
    """Token id -> (text, exact bytes). Byte-level BPE pieces can hold half a UTF-8 character, so the
    bytes come from the piece itself, not from its (lossy) decoded text."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._added = set(tokenizer.get_added_vocab())

    def entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self._tokenizer.decode([token_id])
        piece = self._tokenizer.convert_ids_to_tokens(token_id)
        if piece is None:  # an id past the tokenizer's vocabulary (the model's rows are padded)
            return {"token": "", "logprob": logprob, "bytes": []}
        decoder = _byte_decoder()
        if piece not in self._added and all(char in decoder for char in piece):
            raw = bytes(decoder[char] for char in piece)
        else:
            raw = text.encode("utf-8")
        return {"token": text, "logprob": logprob, "bytes": list(raw)}


_GREEDY_BELOW = 1e-5
"""A temperature below this samples greedily (as vLLM does): dividing the logits by 1e-167 makes
them infinite, and sampling from that fails."""


def _sampling_config(request: ChatCompletionRequest, max_new_tokens: int, model_config: Any,
                     placeholders: list[int], *, scores: bool) -> Any:
    """The generation config of `request`: every setting that shapes the distribution set here,
    explicitly (transformers would fill the unset ones from its defaults: top_k 50). The vision
    placeholder tokens are never sampled (`webgym_rl.modeling.VISION_PLACEHOLDERS`)."""
    from transformers import GenerationConfig  # optional: transformers

    greedy = request.temperature < _GREEDY_BELOW
    top_k = request.top_k if request.top_k is not None and request.top_k > 0 else 0
    return GenerationConfig(
        **{name: getattr(model_config, name, None) for name in SPECIAL_TOKEN_FIELDS},
        max_new_tokens=max_new_tokens, do_sample=not greedy,
        temperature=1.0 if greedy else request.temperature, top_p=1.0 if greedy else request.top_p,
        top_k=0 if greedy else top_k, min_p=None, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0,
        repetition_penalty=1.0, no_repeat_ngram_size=0, min_length=0, suppress_tokens=placeholders or None,
        return_dict_in_generate=True, output_scores=scores)


def generate(policy: ServedPolicy, request: ChatCompletionRequest, messages: list[dict], images: list,
             max_new_tokens: int, device: str) -> Generation:
    """Run `request` (its `prepare_messages` output) through `policy` on `device`: on the generation
    worker only (``seed`` seeds torch's global generator)."""
    import torch  # optional: torch
    from jinja2 import TemplateError  # optional: jinja2

    processor, model = policy.processor, policy.model
    tokenizer = processor.tokenizer
    try:
        prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs = processor(text=[prompt], images=images or None, return_tensors="pt").to(device)
    except (ValueError, TemplateError) as exc:  # e.g. an image 3000 x 1: aspect ratio over 200
        raise BadChatRequest(f"messages: the model's processor cannot take them: {exc}",
                             param="messages") from None
    prompt_ids = inputs["input_ids"][0].tolist()
    want_logprobs = bool(request.logprobs or request.top_logprobs)
    config = _sampling_config(request, max_new_tokens, model.generation_config, policy.placeholders,
                              scores=want_logprobs)
    stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    if stops:
        config.stop_strings = stops
    if request.seed is not None:
        torch.manual_seed(request.seed)  # safe: generation is serialised on one worker thread
    with torch.inference_mode():
        out = model.generate(**inputs, generation_config=config, tokenizer=tokenizer if stops else None)
    new_ids = out.sequences[0, len(prompt_ids):].tolist()
    eos = config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    pad = config.pad_token_id
    # Batch of one: nothing is padded unless generation ended early; drop any trailing pad anyway.
    while new_ids and pad is not None and new_ids[-1] == pad and pad not in eos_ids:
        new_ids.pop()
    text = tokenizer.decode(new_ids, skip_special_tokens=True)
    finish: Literal["stop", "length"] = "length"
    if new_ids and new_ids[-1] in eos_ids:
        finish = "stop"
    for stop in stops:
        cut = text.find(stop)
        if cut >= 0:
            text, finish = text[:cut], "stop"
    logprobs = _token_logprobs(out.scores, new_ids, tokenizer, request.top_logprobs or 0) \
        if want_logprobs else None
    return Generation(text=text, finish_reason=finish, prompt_ids=prompt_ids, token_ids=new_ids,
                      logprobs=logprobs)


def _token_logprobs(scores: Any, token_ids: list[int], tokenizer: Any, k: int) -> list[TokenLogprob]:
    """Each sampled token's log-probability in the distribution it was drawn from (the processed
    `scores`: placeholders suppressed, temperature, top-k, top-p applied; -inf outside the cut;
    greedy: the model's at temperature 1), with the `k` most likely alternatives."""
    import torch  # optional: torch

    logprobs = []
    token_text = TokenText(tokenizer)
    for step, token_id in enumerate(token_ids):
        row = torch.log_softmax(scores[step][0].float(), dim=-1)
        top = torch.topk(row, k) if k else None
        alternatives = [] if top is None else [
            TopLogprob(**token_text.entry(int(i), float(v)))
            for v, i in zip(top.values, top.indices, strict=True)]
        logprobs.append(TokenLogprob(**token_text.entry(token_id, float(row[token_id])),
                                     top_logprobs=alternatives))
    return logprobs
