"""Qwen-VL models and processors as the policy server and the trainer load them.

Public surface:

- `load_processor(path_or_repo)` loads the processor of any Qwen2-VL / Qwen2.5-VL / Qwen3-VL
  checkpoint (local folder or Hub id) as an `ImageOnlyQwenVLProcessor`.
- `load_model(path_or_repo)` loads the model with `AutoModelForImageTextToText`.
- `model_family(path_or_repo)` says which family a checkpoint belongs to (from its config).
- `CHAT_TEMPLATE`, `SPECIAL_TOKENS`, `ADDED_TOKENS`, `STOCK_PROCESSORS`: the Qwen chat format and
  processor names, for code that builds checkpoints (the trainer's tiny random models for tests and
  the demo).

Why an image-only processor: the stock `Qwen2VLProcessor` / `Qwen3VLProcessor` insist on a video
processor, and the video processor (and the default "fast" image processor) import torchvision,
which does not import beside the CPU torch on our machines. Web agents only see screenshots, so
`ImageOnlyQwenVLProcessor` keeps the tokenizer and the PIL image processor
(`Qwen2VLImageProcessorPil`, which also serves Qwen3-VL with patch size 16) and nothing else.
`AutoProcessor.from_pretrained` would silently hand back the bare tokenizer in that setup, so
always go through `load_processor`.

Errors (defined in `webgym_rl.errors`)::

    webgym_rl.errors.WebgymRLError
     └── ModelingError (also a RolloutError and a ValueError)
          ├── UnknownFamilyError  a family name or a checkpoint config we do not support
          └── CheckpointError     a folder or Hub id without the files a checkpoint needs (names it)
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Literal

from transformers import AutoModelForImageTextToText, AutoTokenizer
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor

from webgym_core.sources import looks_like_path
from webgym_rl.errors import CheckpointError, ModelingError, UnknownFamilyError

__all__ = [
    "ADDED_TOKENS",
    "CHAT_TEMPLATE",
    "FAMILIES",
    "IMAGE_PLACEHOLDER",
    "SPECIAL_TOKENS",
    "STOCK_PROCESSORS",
    "VISION_PLACEHOLDERS",
    "CheckpointError",
    "Family",
    "ImageOnlyQwenVLProcessor",
    "ModelingError",
    "UnknownFamilyError",
    "load_model",
    "load_processor",
    "model_family",
    "placeholder_token_ids",
]

logger = logging.getLogger(__name__)

Family = Literal["qwen2_vl", "qwen3_vl"]
FAMILIES: tuple[str, ...] = ("qwen2_vl", "qwen3_vl")
# config.json `model_type` -> family; Qwen2.5-VL shares Qwen2-VL's processor and chat format.
_MODEL_TYPES = {"qwen2_vl": "qwen2_vl", "qwen2_5_vl": "qwen2_vl", "qwen3_vl": "qwen3_vl"}
STOCK_PROCESSORS = {"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor",
                    "qwen3_vl": "Qwen3VLProcessor"}
"""config.json `model_type` -> the stock processor class that saved processor files name."""

# Transformers 5 writes processor_config.json; older checkpoints (and vLLM) use preprocessor_config.json.
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")

# What a processor needs from a Hub repo: configs, tokenizer files, chat templates (no weights).
_PROCESSOR_PATTERNS = ["*.json", "*.jinja", "*.txt", "*.model", "additional_chat_templates/*"]

IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|image_pad|>", "<|video_pad|>",
)
VISION_PLACEHOLDERS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Tokens that stand for images in a prompt and never belong in a reply: a reply token
``<|image_pad|>`` would be taken for an image's place in training (where the processor fills those
places with image features), but as a plain token in generation. The policy server never samples
them and the trainer scores replies without them (`placeholder_token_ids`), so both score one
distribution."""


def placeholder_token_ids(tokenizer: Any) -> list[int]:
    """The ids of `VISION_PLACEHOLDERS` in `tokenizer` (those it has)."""
    vocab = tokenizer.get_vocab()
    return sorted(vocab[token] for token in VISION_PLACEHOLDERS if token in vocab)


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
    if looks_like_path(path_or_repo):
        raise CheckpointError(f"checkpoint folder {path_or_repo} does not exist")


def _read_config(path_or_repo: str | Path, revision: str | None) -> dict[str, Any]:
    local = Path(path_or_repo)
    if local.is_dir():
        config_file = local / "config.json"
        if not config_file.is_file():
            raise CheckpointError(f"{local} has no config.json: not a model checkpoint folder")
        return json.loads(config_file.read_text())
    _refuse_missing_folder(path_or_repo)
    from huggingface_hub import hf_hub_download  # optional: huggingface_hub

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
    from huggingface_hub import snapshot_download  # optional: huggingface_hub

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
        processor.stock_class_name = STOCK_PROCESSORS[
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
    model_family(path_or_repo, revision=revision)  # a clear error for a folder that is not a Qwen-VL model
    kwargs = _hub_kwargs(revision)
    kwargs["dtype"] = dtype if dtype is not None else "auto"
    try:
        model = AutoModelForImageTextToText.from_pretrained(str(path_or_repo), **kwargs)
    except OSError as exc:
        raise CheckpointError(f"cannot load the model weights of {path_or_repo!r}: {exc}") from exc
    return model.eval()


