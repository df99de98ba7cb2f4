"""webgym_rl.modeling: the image-only Qwen-VL processor and model loading, on tiny checkpoints."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from tests.support.models import tiny_model_dir
from webgym_rl.modeling import (
    CHAT_TEMPLATE,
    CheckpointError,
    ImageOnlyQwenVLProcessor,
    ModelingError,
    UnknownFamilyError,
    load_model,
    load_processor,
    model_family,
)
from webgym_rollout.errors import RolloutError

FAMILIES = ["qwen2_vl", "qwen3_vl"]
PATCH = {"qwen2_vl": 14, "qwen3_vl": 16}


def _image(color: tuple[int, int, int], size: tuple[int, int] = (224, 224)) -> Image.Image:
    image = Image.new("RGB", size, color)
    # A little structure so the patches differ from each other.
    for x in range(0, size[0], 7):
        image.putpixel((x, x % size[1]), (255 - color[0], 0, 255))
    return image


def _inputs(processor, image: Image.Image, text: str = "Click the button"):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return processor(text=[prompt], images=[image], return_tensors="pt")


@pytest.fixture(params=FAMILIES)
def tiny(request) -> tuple[str, Path]:
    return request.param, tiny_model_dir(request.param)


def test_tiny_model_family_and_processor_layout(tiny):
    family, path = tiny
    assert model_family(path) == family
    processor = load_processor(path)
    assert isinstance(processor, ImageOnlyQwenVLProcessor)
    assert not hasattr(processor, "video_processor")
    assert processor.image_processor.patch_size == PATCH[family]
    # Saved files name the stock class, so other tools (vLLM, AutoProcessor with torchvision) load them.
    stock = {"qwen2_vl": "Qwen2VLProcessor", "qwen3_vl": "Qwen3VLProcessor"}[family]
    assert json.loads((path / "processor_config.json").read_text())["processor_class"] == stock
    assert json.loads((path / "tokenizer_config.json").read_text())["processor_class"] == stock
    preprocessor = json.loads((path / "preprocessor_config.json").read_text())
    assert preprocessor["patch_size"] == PATCH[family]
    tokenizer = processor.tokenizer
    for token in ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                  "<|video_pad|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<think>", "</think>"):
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1, f"{token} is not one token: {ids}"
    # Byte-level: arbitrary text round-trips exactly.
    text = 'Tapez «héllo» → {"x": 500}\n\t✓'
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_processor_expands_image_placeholder_to_grid(tiny):
    family, path = tiny
    processor = load_processor(path)
    model = load_model(path)
    enc = _inputs(processor, _image((200, 30, 30)))
    assert {"input_ids", "attention_mask", "pixel_values", "image_grid_thw"} <= set(enc)
    (t, h, w), = enc["image_grid_thw"].tolist()
    assert (t, h, w) == (1, 224 // PATCH[family], 224 // PATCH[family])
    merge = processor.image_processor.merge_size
    n_pad = int((enc["input_ids"] == model.config.image_token_id).sum())
    assert n_pad == t * h * w // merge**2
    assert enc["pixel_values"].shape[0] == t * h * w
    text = processor.tokenizer.decode(enc["input_ids"][0])
    assert text.startswith("<|im_start|>user\n<|vision_start|><|image_pad|>")
    assert text.endswith("Click the button<|im_end|>\n<|im_start|>assistant\n")


def test_image_reaches_the_model_and_gets_gradients(tiny):
    _, path = tiny
    processor = load_processor(path)
    model = load_model(path)
    red, blue = _inputs(processor, _image((200, 30, 30))), _inputs(processor, _image((20, 30, 220)))
    with torch.no_grad():
        logits_red = model(**red).logits
        logits_blue = model(**blue).logits
    assert logits_red.shape == logits_blue.shape
    assert not torch.allclose(logits_red[0, -1], logits_blue[0, -1])

    model.train()
    out = model(**red, labels=red["input_ids"])
    out.loss.backward()
    vision_grads = [p.grad for name, p in model.named_parameters() if "visual" in name and p.grad is not None]
    assert vision_grads and any(g.abs().sum() > 0 for g in vision_grads)


def test_save_reload_gives_identical_logits(tiny, tmp_path):
    _, path = tiny
    processor = load_processor(path)
    model = load_model(path)
    enc = _inputs(processor, _image((10, 120, 60)))
    with torch.no_grad():
        before = model(**enc).logits
    model.save_pretrained(tmp_path / "ckpt")
    processor.save_pretrained(tmp_path / "ckpt")
    reloaded_processor = load_processor(tmp_path / "ckpt")
    enc2 = _inputs(reloaded_processor, _image((10, 120, 60)))
    assert torch.equal(enc["input_ids"], enc2["input_ids"])
    assert torch.equal(enc["pixel_values"], enc2["pixel_values"])
    with torch.no_grad():
        after = load_model(tmp_path / "ckpt")(**enc2).logits
    assert torch.equal(before, after)


def _hub_style_copy(src: Path, dst: Path, preprocessor: dict) -> Path:
    """A folder laid out like a real Qwen-VL Hub checkpoint's processor files."""
    dst.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors", "generation_config.json"):
        shutil.copy(src / name, dst / name)
    tokenizer_config = json.loads((src / "tokenizer_config.json").read_text())
    tokenizer_config.update(tokenizer_class="Qwen2Tokenizer", processor_class="Qwen2VLProcessor")
    (dst / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (dst / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    # Real checkpoints also ship a video processor config; it must be ignored, not needed.
    (dst / "video_preprocessor_config.json").write_text(json.dumps(
        {**preprocessor, "video_processor_type": "Qwen2VLVideoProcessor"}))
    (dst / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    return dst


@pytest.mark.parametrize("family, preprocessor", [
    ("qwen2_vl", {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                  "merge_size": 2, "image_mean": [0.48, 0.46, 0.41], "image_std": [0.27, 0.26, 0.28],
                  "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor"}),
    ("qwen3_vl", {"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
                  "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
                  "image_std": [0.5, 0.5, 0.5], "image_processor_type": "Qwen2VLImageProcessorFast",
                  "processor_class": "Qwen3VLProcessor"}),
])
def test_load_processor_on_hub_layout_with_pixel_bounds(family, preprocessor, tmp_path):
    folder = _hub_style_copy(tiny_model_dir(family), tmp_path / "hub", preprocessor)
    image = _image((90, 90, 90), size=(640, 480))
    unit = preprocessor["patch_size"] * 2

    default = load_processor(folder)
    assert default.chat_template == CHAT_TEMPLATE
    (_, h, w), = _inputs(default, image)["image_grid_thw"].tolist()
    # Within the checkpoint's own bounds a 640x480 image keeps (about) its size; Qwen3-VL's minimum
    # of 65536 pixels is below 640*480 too.
    patch = preprocessor["patch_size"]
    assert abs(h * patch - 480) <= unit and abs(w * patch - 640) <= unit

    small = load_processor(folder, min_pixels=unit * unit, max_pixels=unit * unit * 12)
    enc = _inputs(small, image)
    (_, h, w), = enc["image_grid_thw"].tolist()
    assert h * w * preprocessor["patch_size"] ** 2 <= unit * unit * 12
    assert int((enc["input_ids"] == small.image_token_id).sum()) == h * w // 4
    with torch.no_grad():
        load_model(folder)(**enc)

    with pytest.raises(ModelingError, match="min_pixels"):
        load_processor(folder, min_pixels=unit * unit * 100, max_pixels=unit * unit)


def test_clear_errors_for_bad_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        model_family(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_processor(str(tmp_path / "missing"))
    for typo in ("out/checkpoints/nope", ".cache/nope", "~/nope"):  # paths, never asked of the Hub
        with pytest.raises(CheckpointError, match=f"checkpoint folder {re.escape(typo)} does not exist"):
            model_family(typo)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(UnknownFamilyError, match="llama"):
        load_model(tmp_path)
    with pytest.raises(CheckpointError, match=str(tmp_path)):
        load_processor(tmp_path)
    assert issubclass(CheckpointError, RolloutError) and issubclass(CheckpointError, ValueError)


def test_load_from_a_hub_id_through_a_local_hub_server(tmp_path, local_hub):
    local_hub.publish("model", "webgym/tiny-qwen3vl", tiny_model_dir("qwen3_vl"))
    # huggingface_hub reads HF_ENDPOINT at import, so the loading runs in a fresh interpreter.
    code = """
import sys
from webgym_rl.modeling import CheckpointError, load_model, load_processor, model_family
assert model_family("webgym/tiny-qwen3vl", revision="main") == "qwen3_vl"
processor = load_processor("webgym/tiny-qwen3vl", revision="main", max_pixels=128 * 128)
assert processor.image_processor.patch_size == 16 and processor.image_processor.size.longest_edge == 128 * 128
assert processor.chat_template is not None
model = load_model("webgym/tiny-qwen3vl", revision="main")
assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
try:
    load_processor("webgym/not-there", revision="main")
except CheckpointError as exc:
    assert "webgym/not-there" in str(exc)
else:
    sys.exit("no error for a missing repo")
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], env=local_hub.env(tmp_path / "hf"),
                            capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
