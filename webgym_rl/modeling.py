"""Qwen-VL models and processors for training and serving, plus tiny random ones for tests.

Public surface:

- `build_tiny_model(out_dir, family=...)` writes a randomly initialised Qwen2-VL or Qwen3-VL
  checkpoint (two layers, hidden size 64) with a byte-level BPE tokenizer trained on the spot
  and an image-only processor, in the ordinary Hugging Face layout.
- `load_processor(path_or_repo)` loads the processor of any Qwen2-VL / Qwen2.5-VL / Qwen3-VL
  checkpoint (local folder or Hub id) as an `ImageOnlyQwenVLProcessor`.
- `load_model(path_or_repo)` loads the model with `AutoModelForImageTextToText`.
- `model_family(path_or_repo)` says which family a checkpoint belongs to (from its config).
- `merge_adapter(adapter_dir, out_dir)` folds a LoRA checkpoint into its base model's weights and
  writes an ordinary checkpoint (what vLLM, the CPU policy server and the next RL iteration load).

Why an image-only processor: the stock `Qwen2VLProcessor` / `Qwen3VLProcessor` insist on a video
processor, and the video processor (and the default "fast" image processor) import torchvision,
which does not import beside the CPU torch on our machines. Web agents only see screenshots, so
`ImageOnlyQwenVLProcessor` keeps the tokenizer and the PIL image processor
(`Qwen2VLImageProcessorPil`, which also serves Qwen3-VL with patch size 16) and nothing else.
`AutoProcessor.from_pretrained` would silently hand back the bare tokenizer in that setup, so
always go through `load_processor`.

Errors::

    ModelingError (ValueError)
     +-- UnknownFamilyError       a family name or a checkpoint config we do not support
     +-- CheckpointError          a folder without the files a checkpoint needs (names the folder)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import click
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor

__all__ = [
    "FAMILIES",
    "CheckpointError",
    "ImageOnlyQwenVLProcessor",
    "ModelingError",
    "UnknownFamilyError",
    "build_tiny_model",
    "load_model",
    "load_processor",
    "merge_adapter",
    "merge_command",
    "model_family",
    "tiny_model_command",
]

logger = logging.getLogger(__name__)

Family = Literal["qwen2_vl", "qwen3_vl"]
FAMILIES: tuple[str, ...] = ("qwen2_vl", "qwen3_vl")
# config.json `model_type` -> family; Qwen2.5-VL shares Qwen2-VL's processor and chat format.
_MODEL_TYPES = {"qwen2_vl": "qwen2_vl", "qwen2_5_vl": "qwen2_vl", "qwen3_vl": "qwen3_vl"}
_STOCK_PROCESSORS = {"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor",
                     "qwen3_vl": "Qwen3VLProcessor"}

# Transformers 5 writes processor_config.json; older checkpoints (and vLLM) use preprocessor_config.json.
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")

# What a processor needs from a Hub repo: configs, tokenizer files, chat templates (no weights).
_PROCESSOR_PATTERNS = ["*.json", "*.jinja", "*.txt", "*.model", "additional_chat_templates/*"]

IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|image_pad|>", "<|video_pad|>",
)
# Ordinary (non-special) added tokens: they survive `skip_special_tokens=True` decoding, as in Qwen.
ADDED_TOKENS = ("<tool_call>", "</tool_call>", "<think>", "</think>")

# A Qwen-style chat template. Image parts (`{"type": "image"}`, `{"type": "image_url"}` or any part
# with an "image" key) become one vision placeholder that the processor expands to the right number
# of <|image_pad|> tokens. String and list contents are both accepted.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- elif part['type'] in ('image', 'image_url') or 'image' in part -%}"
    "{{ '" + IMAGE_PLACEHOLDER + "' }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

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


class ModelingError(ValueError):
    """Base class of this module's errors."""


class UnknownFamilyError(ModelingError):
    """A model family (or a checkpoint's `model_type`) that is not Qwen2-VL, Qwen2.5-VL or Qwen3-VL."""


class CheckpointError(ModelingError):
    """A checkpoint folder or Hub id that lacks the files a processor or model needs."""


class ImageOnlyQwenVLProcessor(Qwen2VLProcessor):
    """`Qwen2VLProcessor` without the video processor: tokenizer + PIL image processor only.

    The image path (placeholder expansion to ``grid_t * grid_h * grid_w / merge_size**2``
    `<|image_pad|>` tokens, ``pixel_values`` and ``image_grid_thw``) is the same for Qwen2-VL,
    Qwen2.5-VL and Qwen3-VL, so one class serves all three.
    """

    # ProcessorMixin reads the sub-processors from the `__init__` signature: no `video_processor`.
    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        # Skip Qwen2VLProcessor.__init__ (it requires a video processor) and go to ProcessorMixin.
        super(Qwen2VLProcessor, self).__init__(image_processor, tokenizer, chat_template=chat_template)
        self.stock_class_name = "Qwen2VLProcessor"

    # Saved files name the stock processor class (set from the checkpoint's family), so a saved
    # checkpoint loads with AutoProcessor / vLLM wherever torchvision is available.
    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        output.pop("stock_class_name", None)
        output["processor_class"] = self.stock_class_name
        return output

    def save_pretrained(self, save_directory, push_to_hub: bool = False, **kwargs):
        tokenizer = self.tokenizer
        set_class = tokenizer._set_processor_class
        tokenizer._set_processor_class = lambda _name: set_class(self.stock_class_name)
        try:
            files = super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)
        finally:
            del tokenizer._set_processor_class
        # Also the standalone preprocessor_config.json that tools older than transformers 5 read.
        self.image_processor.save_pretrained(save_directory)
        return files

    @classmethod
    def _get_arguments_from_pretrained(cls, pretrained_model_name_or_path, processor_dict=None, **kwargs):
        # The stock loader asks AutoImageProcessor, which picks the torchvision class; load the PIL one.
        from transformers import AutoTokenizer
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        kwargs.pop("subfolder", None)
        image_processor = Qwen2VLImageProcessorPil.from_pretrained(pretrained_model_name_or_path, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(pretrained_model_name_or_path, **kwargs)
        return [image_processor, tokenizer]


def _hub_kwargs(revision: str | None) -> dict[str, Any]:
    return {"revision": revision} if revision is not None else {}


def _refuse_missing_folder(path_or_repo: str | Path) -> None:
    """A path-like name that is not a folder is a typo, not a Hub id: say so instead of asking the Hub."""
    if Path(path_or_repo).is_dir():
        return
    if isinstance(path_or_repo, Path) or str(path_or_repo).startswith(("/", "./", "../", "~")):
        raise CheckpointError(f"checkpoint folder {path_or_repo} does not exist")


def _read_config(path_or_repo: str | Path, revision: str | None) -> dict[str, Any]:
    local = Path(path_or_repo)
    if local.is_dir():
        config_file = local / "config.json"
        if not config_file.is_file():
            raise CheckpointError(f"{local} has no config.json: not a model checkpoint folder")
        return json.loads(config_file.read_text())
    _refuse_missing_folder(path_or_repo)
    from huggingface_hub import hf_hub_download

    try:
        config_file = hf_hub_download(str(path_or_repo), "config.json", revision=revision)
        return json.loads(Path(config_file).read_text())
    except Exception as exc:  # the Hub client raises many kinds; one clear message for all
        raise CheckpointError(f"cannot read config.json of {path_or_repo!r} "
                              f"(revision {revision or 'default'}): {exc}") from exc


def model_family(path_or_repo: str | Path, *, revision: str | None = None) -> Family:
    """``"qwen2_vl"`` (Qwen2-VL, Qwen2.5-VL) or ``"qwen3_vl"``, from the checkpoint's `model_type`."""
    model_type = _read_config(path_or_repo, revision).get("model_type", "")
    try:
        return _MODEL_TYPES[model_type]  # type: ignore[return-value]
    except KeyError:
        raise UnknownFamilyError(
            f"{path_or_repo}: model_type {model_type!r} is not supported; "
            f"expected one of {sorted(_MODEL_TYPES)}") from None


def _download_processor_files(repo_id: str, revision: str | None) -> str:
    """Fetch only the small processor/tokenizer files of a Hub repo; returns the local snapshot folder.

    Loading from the snapshot (instead of handing the repo id to transformers) skips the weights and
    the optional-file probes (repo tree listings) that some Hub-protocol mirrors refuse."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=_PROCESSOR_PATTERNS)
    except Exception as exc:  # the Hub client raises many kinds; one clear message for all
        raise CheckpointError(f"cannot download the processor files of {repo_id!r} "
                              f"(revision {revision or 'default'}): {exc}") from exc
    if not any((Path(folder) / name).is_file() for name in _PROCESSOR_FILES):
        raise CheckpointError(f"Hub repo {repo_id!r} has no {' or '.join(_PROCESSOR_FILES)}: "
                              "the checkpoint has no processor")
    return folder


def load_processor(path_or_repo: str | Path, *, revision: str | None = None,
                   min_pixels: int | None = None, max_pixels: int | None = None) -> ImageOnlyQwenVLProcessor:
    """The image-only processor of a Qwen-VL checkpoint (local folder or Hub id); no torchvision.

    `min_pixels` / `max_pixels` bound the resized image area (each image is resized to a multiple
    of ``patch_size * merge_size`` with its area in that range), overriding the checkpoint's values.
    """
    _refuse_missing_folder(path_or_repo)
    local = Path(path_or_repo)
    if local.is_dir() and not any((local / name).is_file() for name in _PROCESSOR_FILES):
        raise CheckpointError(f"{local} has no {' or '.join(_PROCESSOR_FILES)}: the checkpoint has no "
                              "processor (save one with processor.save_pretrained, or copy it from "
                              "the base model)")
    source = str(path_or_repo) if local.is_dir() else _download_processor_files(str(path_or_repo), revision)
    try:
        processor = ImageOnlyQwenVLProcessor.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot load the processor of {path_or_repo!r}: {exc}") from exc
    with contextlib.suppress(ModelingError):
        processor.stock_class_name = _STOCK_PROCESSORS[
            _read_config(path_or_repo, revision).get("model_type", "")]
    image_processor = processor.image_processor
    if min_pixels is not None or max_pixels is not None:
        size = dict(image_processor.size)
        if min_pixels is not None:
            size["shortest_edge"] = int(min_pixels)
        if max_pixels is not None:
            size["longest_edge"] = int(max_pixels)
        if size["shortest_edge"] > size["longest_edge"]:
            raise ModelingError(f"min_pixels ({size['shortest_edge']}) must not exceed "
                                f"max_pixels ({size['longest_edge']})")
        image_processor.size = type(image_processor.size)(**size) if not isinstance(
            image_processor.size, dict) else size
    if processor.chat_template is None:
        processor.chat_template = getattr(processor.tokenizer, "chat_template", None)
    return processor


def load_model(path_or_repo: str | Path, *, revision: str | None = None, dtype=None):
    """`AutoModelForImageTextToText.from_pretrained` in eval mode; `dtype` defaults to the saved one."""
    from transformers import AutoModelForImageTextToText

    model_family(path_or_repo, revision=revision)  # a clear error for a folder that is not a Qwen-VL model
    kwargs = _hub_kwargs(revision)
    kwargs["dtype"] = dtype if dtype is not None else "auto"
    try:
        model = AutoModelForImageTextToText.from_pretrained(str(path_or_repo), **kwargs)
    except OSError as exc:
        raise CheckpointError(f"cannot load the model weights of {path_or_repo!r}: {exc}") from exc
    return model.eval()


# ---------------------------------------------------------------------------------------------
# LoRA adapters

ADAPTER_CONFIG = "adapter_config.json"
# Files a merged checkpoint does not carry over from the adapter folder: the adapter itself and
# peft's own README. Folders (the optimizer state of the adapter's parameters) are left out too.
_ADAPTER_ONLY = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", "README.md")


def merge_adapter(adapter_dir: str | Path, out_dir: str | Path, *, base: str | Path | None = None,
                  revision: str | None = None) -> Path:
    """Fold the LoRA adapter in `adapter_dir` into its base model and write the result to `out_dir`.

    `base` defaults to the base model the adapter names (``base_model_name_or_path``); give it when
    that path has moved. The other files of `adapter_dir` (processor, ``trainer_state.json``) are
    copied along, so the result is a complete checkpoint. `out_dir` is replaced by renames, so it
    never holds a partly written checkpoint. Returns `out_dir`.
    """
    from peft import PeftModel
    from peft.utils import get_peft_model_state_dict, load_peft_weights

    adapter_dir, out_dir = Path(adapter_dir), Path(out_dir)
    config_file = adapter_dir / ADAPTER_CONFIG
    if not config_file.is_file():
        raise CheckpointError(f"{adapter_dir} has no {ADAPTER_CONFIG}: not a LoRA adapter checkpoint")
    if base is None:
        base = json.loads(config_file.read_text()).get("base_model_name_or_path") or ""
        if not base:
            raise CheckpointError(f"{config_file} does not name its base model; give it with --base")
        trainer_state = adapter_dir / "trainer_state.json"
        if revision is None and trainer_state.is_file():  # the revision training started from
            revision = json.loads(trainer_state.read_text()).get("base_model_revision")
    model = load_model(base, revision=revision)
    try:
        saved = load_peft_weights(str(adapter_dir), device="cpu")
        adapted = PeftModel.from_pretrained(model, str(adapter_dir))
    except (OSError, ValueError, RuntimeError) as exc:  # missing weights, shapes of another model
        raise CheckpointError(f"cannot apply the adapter {adapter_dir} to {base}: {exc}") from exc
    # peft only warns about adapter weights it found no module for; a merge without them would be a
    # silently different model.
    loaded = get_peft_model_state_dict(adapted)
    unused = sorted(k for k, v in saved.items() if k not in loaded or loaded[k].shape != v.shape)
    if unused:
        raise CheckpointError(f"cannot apply the adapter {adapter_dir} to {base}: {len(unused)} of its "
                              f"{len(saved)} weights match no module of the base model (first: {unused[0]})")
    merged = adapted.merge_and_unload()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.merging-", dir=out_dir.parent))
    try:
        merged.save_pretrained(tmp)
        for path in adapter_dir.iterdir():
            if path.name in _ADAPTER_ONLY or path.is_dir():
                continue
            shutil.copy2(path, tmp / path.name)
        previous = tmp.with_name(tmp.name + "-previous")
        if out_dir.exists():
            os.replace(out_dir, previous)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(previous, ignore_errors=True)
    logger.info("merged adapter %s into %s -> %s", adapter_dir, base, out_dir)
    return out_dir


@click.command("merge", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("adapter", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the merged checkpoint (replaced if it exists).")
@click.option("--base", default=None,
              help="Base model (folder or Hub id); default: the one named in adapter_config.json.")
@click.option("--revision", default=None, help="Revision of a Hub base model.")
def merge_command(adapter: Path, out: Path, base: str | None, revision: str | None) -> None:
    """Merge the LoRA adapter checkpoint ADAPTER into its base model's weights.

    ``webgym-rl train --lora`` saves adapters only; serving them (vLLM, ``webgym-rollout
    serve-policy``) or training on from them needs an ordinary checkpoint. ``webgym-rl loop`` merges
    by itself after each LoRA training phase.

    \b
    Example:
      webgym-rl merge out/ckpt/checkpoint-000200 --out out/merged
      webgym-rl merge out/ckpt/checkpoint-000200 --out out/merged --base Qwen/Qwen3-VL-8B-Instruct
      webgym-rollout serve-policy --model out/merged
    """
    try:
        path = merge_adapter(adapter, out, base=base, revision=revision)
    except ModelingError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"merged {adapter} into {base or 'its base model'}: {path}")


# ---------------------------------------------------------------------------------------------
# Tiny random checkpoints


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


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

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
    heads, kv_heads = 4, 2
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
        from transformers import Qwen2VLConfig

        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                                   "mrope_section": mrope_section}
        vision = dict(depth=settings.num_layers, embed_dim=settings.vision_width,
                      hidden_size=settings.hidden_size, num_heads=2, mlp_ratio=2, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2)
        return Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    if settings.family == "qwen3_vl":
        from transformers import Qwen3VLConfig

        text.update(head_dim=head_dim, rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope_section,
            "mrope_interleaved": True})
        vision = dict(depth=settings.num_layers, hidden_size=settings.vision_width,
                      intermediate_size=2 * settings.vision_width, num_heads=2, patch_size=16,
                      spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=settings.hidden_size,
                      num_position_embeddings=256, deepstack_visual_indexes=[0])
        return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    raise UnknownFamilyError(f"unknown family {settings.family!r}; expected one of {list(FAMILIES)}")


def build_tiny_model(out_dir: Path | str, *, family: Family = "qwen2_vl", seed: int = 0) -> Path:
    """Write a tiny randomly initialised Qwen-VL checkpoint (model, tokenizer, processor) to `out_dir`.

    The result loads with `load_model` / `load_processor` like any Hub checkpoint. Returns `out_dir`.
    """
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if family not in FAMILIES:
        raise UnknownFamilyError(f"unknown family {family!r}; expected one of {list(FAMILIES)}")
    settings = TinyModelSettings(family=family, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = _train_tokenizer(settings.vocab_size)
    patch = 14 if family == "qwen2_vl" else 16
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=patch, merge_size=2, temporal_patch_size=2,
        min_pixels=settings.min_pixels, max_pixels=settings.max_pixels,
        # Qwen's own normalisation constants differ by family; the values only need to be consistent.
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )
    processor = ImageOnlyQwenVLProcessor(image_processor, tokenizer, chat_template=CHAT_TEMPLATE)
    processor.stock_class_name = _STOCK_PROCESSORS[family]

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
@click.option("--family", type=click.Choice(FAMILIES), default="qwen2_vl", show_default=True,
              help="Model family to build.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the random weights.")
def tiny_model_command(out: Path, family: str, seed: int) -> None:
    """Write a tiny random Qwen-VL checkpoint to OUT (tests, demo, CPU runs).

    Two layers, hidden size 64, a byte-level BPE tokenizer trained on the spot and an image-only
    processor: it produces gibberish, but every code path (processor, training, serving) is real.

    \b
    Example:
      webgym-rl tiny-model out/tiny-qwen2vl
      webgym-rl tiny-model out/tiny-qwen3vl --family qwen3_vl --seed 1
      webgym-rollout serve-policy --model out/tiny-qwen3vl
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    path = build_tiny_model(out, family=family, seed=seed)  # type: ignore[arg-type]
    click.echo(f"wrote tiny {family} checkpoint to {path}")
