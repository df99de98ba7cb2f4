"""Tiny random Qwen-VL checkpoints for tests, the demo and CPU runs (``webgym-rl tiny-model``).

`build_tiny_model(out_dir, family=...)` writes a randomly initialised Qwen2-VL or Qwen3-VL
checkpoint (by default two layers, hidden size 64; sizes from `TinyModelSettings`, the command's
flags) with a byte-level BPE tokenizer trained on the spot and an image-only processor, in the
ordinary Hugging Face layout: it loads with `webgym_rl.modeling.load_model` /
`load_processor` like any Hub checkpoint. Untrained it produces gibberish, but every code path
(processor, training, serving) is real, and a few minutes of filtered-BC training on MiniWoB++
teach it the reply format and where the target is on the screenshot
(``benchmarks/learning_miniwob.py``). That needs its processor to map white, the background of
web pages, to zero (`TinyModelSettings.image_mean`, the default): with Qwen's usual 0.5 every
image token of a random vision tower is one large constant plus a small trace of the page, and
the model learns one typical click per task instead (benchmarks/RESULTS.md, 2026-12-04).

Errors: `webgym_rl.modeling.UnknownFamilyError` for a family that is not Qwen2-VL or Qwen3-VL.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from transformers import (
    AutoModelForImageTextToText,
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen2VLConfig,
    Qwen3VLConfig,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings, settings_options
from webgym_rl.modeling import (
    ADDED_TOKENS,
    CHAT_TEMPLATE,
    FAMILIES,
    SPECIAL_TOKENS,
    STOCK_PROCESSORS,
    Family,
    ImageOnlyQwenVLProcessor,
    UnknownFamilyError,
)

__all__ = ["TinyModelSettings", "build_tiny_model", "tiny_model_command"]

logger = logging.getLogger(__name__)

# Text the tiny tokenizer is trained on: the words the agent protocol and the tests use, so that
# prompts tokenise into a sensible number of tokens. Any byte still encodes (byte-level alphabet).
_TOKENIZER_CORPUS = (
    "You are a web agent. Look at the screenshot and complete the task step by step.",
    "Memory: nothing found yet. Progress: opened the page. Intention: click the button.",
    'Action: left_click <tool_call>{"name": "computer_use", "arguments": {"action": "left_click", '
    '"coordinate": [500, 500]}}</tool_call>',
    '<tool_call>{"name": "computer_use", "arguments": {"action": "type", "text": "hello world"}}</tool_call>',
    '{"action": "scroll", "direction": "down"} {"action": "wait"} {"action": "go_back"} '
    '{"action": "navigate", "url": "http://127.0.0.1:8400/index.html"} {"action": "answer", "text": "done"}',
    "<think>The page shows a search box; I should type the query and press enter.</think>",
    "Click the button labelled ONE. Select the second item. Enter the date and submit the form.",
    "the quick brown fox jumps over the lazy dog 0123456789 ,.;:!?()[]{}<>'\"/-_=+*&%$#@",
    "Task: find the price of the cheapest flight from Paris to Berlin on Monday.",
    "user assistant system tool image text screenshot page title url website answer",
)


@dataclass(frozen=True)
class TinyModelSettings:
    """Sizes of a tiny random Qwen-VL checkpoint (for tests, the demo and CPU runs)."""

    family: Family = "qwen2_vl"
    """Model family: "qwen2_vl" (patch 14) or "qwen3_vl" (patch 16, deepstack)."""
    seed: int = 0
    """Seed for the random weights; the tokenizer is the same for every seed."""
    vocab_size: int = 400
    """Target vocabulary size of the byte-level BPE tokenizer, special tokens included."""
    hidden_size: int = 64
    """Width of the language model."""
    num_layers: int = 2
    """Transformer layers in the language model and in the vision tower."""
    vision_width: int = 32
    """Width of the vision tower."""
    min_pixels: int = 56 * 56
    """Smallest image area after resizing (pixels)."""
    max_pixels: int = 256 * 256
    """Largest image area after resizing (pixels); small keeps CPU steps fast."""
    heads: int = 4
    """Attention heads of the language model (half as many key/value heads)."""
    image_mean: float = 1.0
    """The pixel value (0-1, every channel) the processor's normalisation maps to zero. 1.0, white,
    the background of most web pages, makes a random vision tower's image tokens differ by what
    is drawn on the page rather than carry one large constant: with Qwen's usual 0.5 a tiny model
    cannot learn where a MiniWoB button is (benchmarks/RESULTS.md, 2026-12-04). Screens mostly of
    another colour (dark themes) want that colour's value instead."""
    image_std: float = 0.5
    """The pixel spread (every channel) that normalises to one."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise UnknownFamilyError(f"family: unknown {self.family!r}; expected one of {list(FAMILIES)}")
        for name in ("num_layers", "vision_width", "heads", "min_pixels", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.heads % 2 or self.hidden_size % self.heads or (self.hidden_size // self.heads) % 8:
            raise ValueError(f"hidden_size: must split into {self.heads} heads (an even number) of a "
                             f"multiple of 8 dimensions each, got {self.hidden_size}")
        if self.vision_width % 16:
            raise ValueError(f"vision_width: must be a multiple of 16 (2 heads, rotary halves), "
                             f"got {self.vision_width}")
        if self.max_pixels < self.min_pixels:
            raise ValueError(f"max_pixels: must be >= min_pixels ({self.min_pixels}), got {self.max_pixels}")
        if not 0.0 <= self.image_mean <= 1.0:
            raise ValueError(f"image_mean: must be a pixel value in [0, 1], got {self.image_mean}")
        if not self.image_std > 0:
            raise ValueError(f"image_std: must be > 0, got {self.image_std}")


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # optional: tokenizers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(list(_TOKENIZER_CORPUS) * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
        padding_side="right",
    )
    fast.add_tokens(list(ADDED_TOKENS))
    return fast


def _tiny_config(settings: TinyModelSettings, tokenizer):
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    heads, kv_heads = settings.heads, settings.heads // 2
    head_dim = settings.hidden_size // heads
    # M-RoPE splits each head's rotary half into (temporal, height, width) sections.
    half = head_dim // 2
    mrope_section = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
    text = dict(
        vocab_size=len(tokenizer), hidden_size=settings.hidden_size,
        intermediate_size=2 * settings.hidden_size,
        num_hidden_layers=settings.num_layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=4096, eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None,
        tie_word_embeddings=False,
    )
    if settings.family == "qwen2_vl":
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                                   "mrope_section": mrope_section}
        vision = dict(depth=settings.num_layers, embed_dim=settings.vision_width,
                      hidden_size=settings.hidden_size, num_heads=2, mlp_ratio=2, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2)
        return Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    if settings.family == "qwen3_vl":
        text.update(head_dim=head_dim, rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope_section,
            "mrope_interleaved": True})
        vision = dict(depth=settings.num_layers, hidden_size=settings.vision_width,
                      intermediate_size=2 * settings.vision_width, num_heads=2, patch_size=16,
                      spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=settings.hidden_size,
                      num_position_embeddings=256, deepstack_visual_indexes=[0])
        return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    raise UnknownFamilyError(f"unknown family {settings.family!r}; expected one of {list(FAMILIES)}")


def build_tiny_model(out_dir: Path | str, *, family: Family = "qwen2_vl", seed: int = 0,
                     settings: TinyModelSettings | None = None) -> Path:
    """Write a tiny randomly initialised Qwen-VL checkpoint (model, tokenizer, processor) to `out_dir`.

    `settings` gives every size (its family and seed then win over `family` and `seed`). The result
    loads with `load_model` / `load_processor` like any Hub checkpoint. Returns `out_dir`.
    """
    import torch  # optional: torch

    if settings is None:
        if family not in FAMILIES:
            raise UnknownFamilyError(f"unknown family {family!r}; expected one of {list(FAMILIES)}")
        settings = TinyModelSettings(family=family, seed=seed)
    family, seed = settings.family, settings.seed
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = _train_tokenizer(settings.vocab_size)
    patch = 14 if family == "qwen2_vl" else 16
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=patch, merge_size=2, temporal_patch_size=2,
        min_pixels=settings.min_pixels, max_pixels=settings.max_pixels,
        # Stored with the checkpoint: training, serving and vLLM normalise alike.
        image_mean=[settings.image_mean] * 3, image_std=[settings.image_std] * 3,
    )
    processor = ImageOnlyQwenVLProcessor(image_processor, tokenizer, chat_template=CHAT_TEMPLATE)
    processor.stock_class_name = STOCK_PROCESSORS[family]

    config = _tiny_config(settings, tokenizer)
    # Seeded init without disturbing the caller's global RNG state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=config.text_config.eos_token_id, pad_token_id=config.text_config.pad_token_id,
        do_sample=False, max_new_tokens=64)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    logger.info("wrote tiny %s checkpoint (%d parameters) to %s", family,
                sum(p.numel() for p in model.parameters()), out)
    return out


@click.command("tiny-model", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@settings_options(TinyModelSettings)
def tiny_model_command(out: Path, config: str | None, **flags: Any) -> None:
    """Write a tiny random Qwen-VL checkpoint to OUT (tests, demo, CPU runs).

    By default two layers, hidden size 64, a byte-level BPE tokenizer trained on the spot and an
    image-only processor: untrained it produces gibberish, but every code path (processor,
    training, serving) is real. The flags set its sizes.

    \b
    Example:
      webgym-rl tiny-model out/tiny-qwen2vl
      webgym-rl tiny-model out/tiny-qwen3vl --family qwen3_vl --seed 1
      webgym-rl tiny-model out/tiny-qwen3vl-128 --family qwen3_vl --hidden-size 128 --num-layers 4
      webgym-rl serve-policy --model out/tiny-qwen3vl
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        settings = load_settings(TinyModelSettings, config, flags)
    except (SettingsError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    path = build_tiny_model(out, settings=settings)
    click.echo(f"wrote tiny {settings.family} checkpoint to {path}")
