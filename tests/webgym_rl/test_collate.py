"""webgym_rl.collate with the real processors of tiny Qwen2-VL and Qwen3-VL checkpoints."""

from __future__ import annotations

import pytest
import torch

from tests.webgym_rl.synthetic import screenshot, tiny_checkpoint
from webgym_rl.collate import IGNORE_INDEX, NOT_MODEL_INPUTS, Collator, PromptPrefixError, TokenMismatchError
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
    inputs = {k: v for k, v in batch.items() if k not in NOT_MODEL_INPUTS}
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


# --------------------------------------------------------------------- token in, token out


def _byte_ids(processor, text: str) -> list[int]:
    """`text` as one token per character: ids a model may sample, which the tokenizer's own merges
    would never give back (it re-tokenises "click" as one or two pieces, not five)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    pieces = bytes_to_unicode()  # byte-level BPE: each byte is a piece of its own
    ids = [processor.tokenizer.convert_tokens_to_ids(pieces[byte]) for byte in text.encode()]
    assert None not in ids
    return ids


def _sampled(processor, text='{"action": "click"}', **changes) -> Sample:
    from webgym_rollout.trajectory.contract import Sampling, prompt_token_digest

    sample = _sample(response=text)
    ids = _byte_ids(processor, text) + [processor.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    prompt = processor.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = processor(text=[prompt], images=[sample.messages[1]["content"][1]["image"]],
                           return_tensors="pt")["input_ids"][0].tolist()
    values = dict(token_ids=tuple(ids), behaviour_logprobs=tuple(-0.01 * (i + 1) for i in range(len(ids))),
                  prompt_tokens=len(prompt_ids), prompt_token_hash=prompt_token_digest(prompt_ids),
                  sampling=Sampling(temperature=0.7), finish_reason="stop", policy_version=4)
    values["behaviour_logprob"] = sum(values["behaviour_logprobs"]) / len(values["behaviour_logprobs"])
    import dataclasses

    return dataclasses.replace(sample, **{**values, **changes})


def test_the_sampled_ids_are_trained_on_as_they_are_never_re_tokenised(family_dir):
    """Each behaviour log-probability sits on the token it was computed for: the reply's labels are
    the sampled ids (which re-tokenising the text would not give), its behaviour log-probabilities
    are the endpoint's in order, and the batch says it is exact, at which temperature and version."""
    processor = load_processor(family_dir)
    collator = Collator(processor)
    sample = _sampled(processor)
    retokenised = processor.tokenizer(sample.response + "<|im_end|>", add_special_tokens=False)["input_ids"]
    assert retokenised != list(sample.token_ids)  # the case that re-tokenisation gets wrong
    batch = collator([sample, _sample(response="ok")])
    labels, behaviour = batch["labels"][0], batch["behaviour_logprobs"][0]
    reply = labels != IGNORE_INDEX
    assert labels[reply].tolist() == list(sample.token_ids)
    assert behaviour[reply].tolist() == pytest.approx(list(sample.behaviour_logprobs))
    assert torch.isnan(behaviour[~reply]).all()
    assert batch["exact"].tolist() == [True, False] and batch["versions"].tolist() == [4, -1]
    assert batch["temperatures"].tolist() == pytest.approx([0.7, 1.0])
    model = load_model(family_dir)
    inputs = {k: v for k, v in batch.items() if k not in NOT_MODEL_INPUTS}
    assert model(**inputs).logits.shape[:2] == batch["input_ids"].shape


def test_tokens_that_are_not_the_sampled_ones_are_refused_naming_the_step(family_dir):
    processor = load_processor(family_dir)
    sample = _sampled(processor)
    with pytest.raises(TokenMismatchError, match=r"e1 step 3: the step has \d+ sampled token ids but 3 log"):
        Collator(processor)([_sampled(processor, behaviour_logprobs=(-1.0, -1.0, -1.0))])
    # The endpoint's prompt was other tokens: another chat template, or other image tokens.
    with pytest.raises(TokenMismatchError, match="episode e1 step 3: the trainer's prompt .* --min-pixels"):
        Collator(processor)([_sampled(processor, prompt_token_hash="0" * 64)])
    smaller = load_processor(family_dir, min_pixels=28 * 28, max_pixels=28 * 28 * 2)  # fewer image tokens
    with pytest.raises(TokenMismatchError, match=f"{sample.prompt_tokens} tokens"):
        Collator(smaller)([sample])
    Collator(processor)([sample])  # the same processor as the rollout's: fine


def test_a_re_tokenised_reply_cut_at_max_tokens_gets_no_end_of_turn_token(family_dir):
    processor = load_processor(family_dir)
    end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for reason, ends in (("stop", True), ("", True), ("length", False)):
        sample = _sample(response='{"action": "cli')
        sample.finish_reason = reason
        labels = Collator(processor)([sample])["labels"][0]
        assert (labels[labels != IGNORE_INDEX][-1].item() == end) is ends, reason
