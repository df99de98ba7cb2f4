"""webgym_rl.merge: folding a LoRA adapter into its base model (``webgym-rl merge``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from tests.support.models import tiny_model_dir
from tests.webgym_rl.test_modeling import _image, _inputs
from webgym_rl.cli import main as rl_main
from webgym_rl.modeling import load_model, load_processor


def _adapter_checkpoint(base: Path, out: Path) -> Path:
    """A LoRA adapter on `base` with non-zero weights (as after training), saved like the trainer."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(load_model(base), config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:  # zero after init: the adapter would change nothing
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    model.save_pretrained(out)
    load_processor(base).save_pretrained(out)
    (out / "trainer_state.json").write_text(json.dumps({"step": 3, "base_model": str(base)}))
    (out / "training_state").mkdir()
    (out / "training_state" / "optimizer.bin").write_bytes(b"adapter optimizer state")
    return out


def test_merge_gives_the_adapted_model_as_an_ordinary_checkpoint(tmp_path):
    from peft import PeftModel

    base = tiny_model_dir("qwen2_vl")
    adapter = _adapter_checkpoint(base, tmp_path / "adapter")
    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / "stale.txt").write_text("from an earlier merge")  # the output is replaced, not mixed

    result = CliRunner().invoke(rl_main, ["merge", str(adapter), "--out", str(merged)])
    assert result.exit_code == 0, result.output
    names = {p.name for p in merged.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "trainer_state.json"} <= names
    assert not names & {"adapter_config.json", "adapter_model.safetensors", "training_state", "stale.txt"}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary folder left

    inputs = _inputs(load_processor(merged), _image((10, 120, 200)))
    with torch.no_grad():
        expected = PeftModel.from_pretrained(load_model(base), adapter)(**inputs).logits
        plain = load_model(base)(**inputs).logits
        got = load_model(merged)(**inputs).logits
    assert torch.allclose(got, expected, atol=1e-4)
    assert not torch.allclose(got, plain, atol=1e-2)


def test_merge_names_what_is_wrong(tmp_path):
    runner = CliRunner()
    not_adapter = runner.invoke(rl_main, ["merge", str(tiny_model_dir("qwen2_vl")), "--out",
                                          str(tmp_path / "o")])
    assert not_adapter.exit_code == 1 and "has no adapter_config.json" in not_adapter.output
    adapter = _adapter_checkpoint(tiny_model_dir("qwen2_vl"), tmp_path / "adapter")
    no_base = runner.invoke(rl_main, ["merge", str(adapter), "--out", str(tmp_path / "o"),
                                      "--base", str(tmp_path / "missing")])
    assert no_base.exit_code == 1 and "does not exist" in no_base.output

    # Weights for a layer the base model lacks (an adapter of a deeper model): peft would only warn.
    from safetensors.torch import load_file, save_file

    weights = load_file(adapter / "adapter_model.safetensors")
    weights = {k.replace("layers.1.", "layers.7."): v for k, v in weights.items()}
    save_file(weights, adapter / "adapter_model.safetensors")
    mismatched = runner.invoke(rl_main, ["merge", str(adapter), "--out", str(tmp_path / "o")])
    assert mismatched.exit_code == 1, mismatched.output
    assert "match no module of the base model" in mismatched.output and "layers.7." in mismatched.output
    assert "Traceback" not in mismatched.output and not (tmp_path / "o").exists()


def test_merge_adapter_raises_merge_errors(tmp_path):
    from webgym_rl.errors import MergeError, WebgymRLError
    from webgym_rl.merge import merge_adapter

    with pytest.raises(MergeError, match="has no adapter_config.json"):
        merge_adapter(tiny_model_dir("qwen2_vl"), tmp_path / "o")
    adapter = _adapter_checkpoint(tiny_model_dir("qwen2_vl"), tmp_path / "adapter")
    with pytest.raises(MergeError, match="cannot load the base model .*does not exist"):
        merge_adapter(adapter, tmp_path / "o", base=tmp_path / "missing")
    assert issubclass(MergeError, WebgymRLError) and not (tmp_path / "o").exists()
