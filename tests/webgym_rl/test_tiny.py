"""webgym_rl.tiny: tiny random Qwen-VL checkpoints (``webgym-rl tiny-model``)."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from webgym_rl.cli import main as rl_main
from webgym_rl.modeling import UnknownFamilyError, load_model, load_processor, model_family
from webgym_rl.tiny import build_tiny_model


def test_seed_decides_weights_not_tokenizer(tmp_path):
    a = build_tiny_model(tmp_path / "a", family="qwen2_vl", seed=3)
    b = build_tiny_model(tmp_path / "b", family="qwen2_vl", seed=3)
    c = build_tiny_model(tmp_path / "c", family="qwen2_vl", seed=4)
    wa, wb, wc = (load_model(p).state_dict() for p in (a, b, c))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    assert (a / "tokenizer.json").read_text() == (c / "tokenizer.json").read_text()


def test_an_unknown_family_is_refused(tmp_path):
    with pytest.raises(UnknownFamilyError, match="qwen9"):
        build_tiny_model(tmp_path / "x", family="qwen9")  # type: ignore[arg-type]
    assert not (tmp_path / "x").exists()


def test_tiny_model_cli(tmp_path):
    runner = CliRunner()
    help_result = runner.invoke(rl_main, ["tiny-model", "--help"])
    assert help_result.exit_code == 0, help_result.output
    assert "Example:" in help_result.output and "--family" in help_result.output

    result = runner.invoke(rl_main, ["tiny-model", str(tmp_path / "out"), "--family", "qwen3_vl",
                                     "--seed", "2"])
    assert result.exit_code == 0, result.output
    assert model_family(tmp_path / "out") == "qwen3_vl"
    assert load_processor(tmp_path / "out").image_processor.patch_size == 16

    bad = runner.invoke(rl_main, ["tiny-model", str(tmp_path / "bad"), "--family", "llama"])
    assert bad.exit_code != 0 and "llama" in bad.output
