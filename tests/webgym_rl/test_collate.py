"""webgym_rl.collate with the real processors of tiny Qwen2-VL and Qwen3-VL checkpoints."""

from __future__ import annotations

import pytest
import torch

from tests.webgym_rl.synthetic import screenshot, tiny_checkpoint
from webgym_rl.collate import IGNORE_INDEX, Collator, PromptPrefixError
from webgym_rl.modeling import CHAT_TEMPLATE, load_model, load_processor
from webgym_rl.samples import Sample

FAMILIES = ("qwen2_vl", "qwen3_vl")


def _sample(response='{"action": "click", "x": 10}', images=1, size=(56, 56), text="Click the button."):
    content = [{"type": "text", "text": text}]
    content += [{"type": "image", "image": screenshot(i, size)} for i in range(images)]
    messages = [{"role": "system", "content": "You are a web agent."}, {"role": "user", "content": content}]
    return Sample(messages=messages, response=response, advantage=-0.5, episode_id="e1", step=3)


@pytest.fixture(params=FAMILIES)
def family_dir(request, tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory, request.param)


def test_only_the_response_tokens_carry_labels(family_dir):
    processor = load_processor(family_dir)
    sample = _sample()
    batch = Collator(processor)([sample])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    target = processor.tokenizer(sample.response + "<|im_end|>", add_special_tokens=False)["input_ids"]
    start = len(ids) - len(target)
    assert labels[:start].tolist() == [IGNORE_INDEX] * start
    assert labels[start:].tolist() == target == ids[start:].tolist()
    assert processor.tokenizer.decode(labels[start:]) == sample.response + "<|im_end|>"
    # Everything before the response is the prompt exactly as the chat template renders it.
    prompt = processor.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)
    prompt_alone = processor(text=[prompt], images=[sample.messages[1]["content"][1]["image"]],
                             return_tensors="pt")["input_ids"][0]
    assert torch.equal(prompt_alone, ids[:start])
    assert batch["advantages"].tolist() == [-0.5]


def test_padding_is_per_sample_and_each_row_matches_its_own_encoding(family_dir):
    processor = load_processor(family_dir)
    collator = Collator(processor)
    short, long = _sample(response="ok", images=1), _sample(response="a much longer answer " * 3, images=2)
    batch = collator([short, long])
    assert batch["image_grid_thw"].shape[0] == 3
    for row, sample in enumerate((short, long)):
        alone = collator.encode(sample)
        n = alone["input_ids"].shape[1]
        assert batch["attention_mask"][row].sum().item() == n
        assert torch.equal(batch["input_ids"][row, :n], alone["input_ids"][0])
        assert torch.equal(batch["labels"][row, :n], alone["labels"][0])
        assert (batch["labels"][row, n:] == IGNORE_INDEX).all()
        assert (batch["input_ids"][row, n:] == collator.pad_token_id).all()
    # The padded batch runs through the model.
    model = load_model(family_dir)
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "advantages")}
    assert model(**inputs).logits.shape[:2] == batch["input_ids"].shape


def test_images_are_resized_within_min_and_max_pixels(family_dir):
    processor = load_processor(family_dir, min_pixels=64 * 64, max_pixels=128 * 128)
    patch = processor.image_processor.patch_size
    big, small = _sample(size=(400, 300)), _sample(size=(20, 20))
    for sample in (big, small):
        grid = Collator(processor)([sample])["image_grid_thw"][0]
        area = int(grid[1] * grid[2]) * patch * patch
        assert 64 * 64 <= area <= 128 * 128


def test_a_response_that_merges_with_the_prompt_is_refused_clearly(tmp_path_factory):
    processor = load_processor(tiny_checkpoint(tmp_path_factory, "qwen2_vl"))
    # A template whose generation prompt ends in "screen": "screen" + "shot" tokenises as "ensho t".
    processor.chat_template = CHAT_TEMPLATE.replace("'<|im_start|>assistant\\n'",
                                                    "'<|im_start|>assistant\\nscreen'")
    assert processor.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                         add_generation_prompt=True).endswith("screen")
    Collator(processor)([_sample(response=" shot")])  # a space keeps the words apart: fine
    with pytest.raises(PromptPrefixError, match="episode e1 step 3: the prompt tokenised alone is not"):
        Collator(processor)([_sample(response="shot")])
