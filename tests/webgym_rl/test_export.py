"""webgym_rl.export: trajectory steps as TRL's conversational vision dataset, read back with
`datasets` and trained on with TRL's own SFTTrainer (the tiny Qwen2-VL, a few steps on the CPU)."""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

import datasets
import pytest
from click.testing import CliRunner
from PIL import Image

from tests.webgym_rl.synthetic import episode, step_image, write_shards
from webgym_core.errors import SettingsError
from webgym_core.settings import settings_from_dict
from webgym_rl.cli import main as rl_main
from webgym_rl.errors import ExportError, NoTrainingDataError, TrainSettingsError
from webgym_rl.export import check_with_trl, export_sft
from webgym_rl.samples import SampleSelection, build_samples, load_trajectories
from webgym_rl.settings import ExportCommandSettings

OBSERVATION = "Elements:\n[1] button 'Submit'\n[2] link 'Home'"


def _text_only(item):
    """`item` as a text observation mode plays it: prompts with the element list, no image part."""
    for step in item.steps:
        step.observation_text = OBSERVATION
        step.messages = json.dumps([
            {"role": "system", "content": "You are a web agent. Reply with one action."},
            {"role": "user", "content": [{"type": "text", "text": f"Step {step.index}.\n{OBSERVATION}"}]},
        ])
    return item


@pytest.fixture(scope="module")
def rollout(tmp_path_factory) -> tuple[Path, dict]:
    """A rollout folder: two successful episodes with screenshots (step 1 shows two), one failed,
    one successful episode of a text observation mode; and its episodes by id."""
    played = [
        episode(task_id="alpha", reward=1.0, num_steps=2),
        episode(task_id="beta", reward=1.0, num_steps=2),
        episode(task_id="gamma", reward=0.0, num_steps=2),
        _text_only(episode(task_id="delta", reward=1.0, num_steps=1)),
    ]
    folder = write_shards(tmp_path_factory.mktemp("export") / "rollout", played)
    return folder, {item.episode_id: item for item in played}


def _settings(data, out, **values):
    return settings_from_dict(ExportCommandSettings, {"data": [str(d) for d in data], "out": str(out),
                                                      "shard_rows": 2, **values})


def _load(out: Path, cache: Path):
    return datasets.load_dataset(str(out), split="train", cache_dir=str(cache))


def _image_parts(messages) -> int:
    return sum(part["type"] == "image" for message in messages for part in message["content"])


def test_export_writes_the_steps_filtered_bc_trains_on_as_conversations(rollout, tmp_path):
    folder, played = rollout
    result = export_sft(_settings([folder], tmp_path / "sft"))
    steps = _load(tmp_path / "sft", tmp_path / "cache")

    # The trainer's own selection: the successful episodes' steps, the failed one left out.
    expected = build_samples(load_trajectories([folder]), "filtered_bc")
    assert len(steps) == len(expected) == result.rows == 5
    assert {row["episode_id"] for row in steps} == {"alpha-it0-a0", "beta-it0-a0", "delta-it0-a0"}
    assert len(result.shards) == 3 and all(path.exists() for path in result.shards)  # 2 rows a shard
    assert result.text_only == 1 and result.episodes == 3

    for row in steps:
        step = played[row["episode_id"]].steps[row["step"]]
        messages = row["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant"]
        assert messages[-1]["content"] == [{"type": "text", "text": step.response}]
        assert len(row["images"]) == _image_parts(messages)
        assert row["task_id"] == played[row["episode_id"]].task.task_id and row["reward"] == 1.0
        if row["episode_id"] == "delta-it0-a0":
            assert row["images"] == [] and OBSERVATION in messages[1]["content"][0]["text"]
            continue
        # The screenshots the stored prompt shows, in order, pixel for pixel.
        shown = [part["step"] for m in json.loads(step.messages) if isinstance(m["content"], list)
                 for part in m["content"] if part["type"] == "image"]
        assert len(shown) == row["step"] + 1
        for image, j in zip(row["images"], shown, strict=True):
            wanted = step_image(played[row["episode_id"]].steps[j])
            assert image.convert("RGB").tobytes() == wanted.tobytes()
    assert result.images == sum(len(row["images"]) for row in steps) == 6

    card = (tmp_path / "sft" / "README.md").read_text()
    assert "data/train-00002-of-00003.parquet" in card and "| rows (steps) | 5 (1 without an image) |" in card


def test_the_prompt_renders_as_the_trainer_renders_it(rollout, tmp_path, tiny_qwen2_vl):
    """Through the processor's chat template, the exported prompt (TRL's preparation, the reply left
    off) is the very text the trainer builds from the stored step."""
    from trl.data_utils import prepare_multimodal_messages

    from webgym_rl.collate import Collator
    from webgym_rl.modeling import load_processor

    folder, _ = rollout
    export_sft(_settings([folder], tmp_path / "sft"))
    steps = _load(tmp_path / "sft", tmp_path / "cache")
    samples = build_samples(load_trajectories([folder]), "filtered_bc")
    by_step = {(samples[i].episode_id, samples[i].step): samples[i] for i in range(len(samples))}
    collator = Collator(load_processor(tiny_qwen2_vl))
    processor = collator.processor
    for row in steps:
        prompt = prepare_multimodal_messages(row["messages"][:-1], images=row["images"])
        ours = processor.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        assert ours == collator.prompt_text(by_step[(row["episode_id"], row["step"])])


def test_the_success_threshold_and_the_window_select_as_the_trainer_does(rollout, tmp_path):
    folder, _ = rollout
    everything = export_sft(_settings([folder], tmp_path / "all", success_threshold=0.0))
    assert everything.rows == 7  # the failed episode's two steps too
    assert everything.counts["trajectories_kept"] == 4
    with pytest.raises(NoTrainingDataError, match="reward >= 2"):
        export_sft(_settings([folder], tmp_path / "none", success_threshold=2.0))


def test_an_earlier_export_is_replaced_only_when_asked(rollout, tmp_path):
    folder, _ = rollout
    export_sft(_settings([folder], tmp_path / "sft", shard_rows=1))  # five shards
    with pytest.raises(ExportError, match=r"already holds an export \(5 shards, README.md\).*--overwrite"):
        export_sft(_settings([folder], tmp_path / "sft"))
    again = export_sft(_settings([folder], tmp_path / "sft", overwrite=True))
    assert sorted((tmp_path / "sft" / "data").glob("*.parquet")) == again.shards and len(again.shards) == 3


def test_a_prompt_part_it_cannot_write_is_named_with_its_folder_row_and_step(tmp_path):
    item = episode(task_id="alpha", reward=1.0, num_steps=2)
    messages = json.loads(item.steps[1].messages)
    messages[1]["content"].append({"type": "input_audio", "input_audio": {"data": ""}})
    item.steps[1].messages = json.dumps(messages)
    folder = write_shards(tmp_path / "rollout", [item])
    with pytest.raises(ExportError, match=rf"{folder} row 0 step 1 \(episode alpha-it0-a0\).*'input_audio'"):
        export_sft(_settings([folder], tmp_path / "sft"))

    item.steps[0].messages = "{not json"
    folder = write_shards(tmp_path / "rollout", [item])
    with pytest.raises(ExportError, match=rf"{folder} row 0 step 0: "):
        export_sft(_settings([folder], tmp_path / "sft2"))


def test_settings_refuse_what_the_export_does_not_read(rollout, tmp_path):
    folder, _ = rollout
    with pytest.raises(SettingsError, match="advantage_clip.*applies to the policy-gradient objectives only"):
        _settings([folder], tmp_path, advantage_clip=1.0)
    with pytest.raises(TrainSettingsError, match="out: is required"):
        ExportCommandSettings(data=[str(folder)])
    with pytest.raises(TrainSettingsError, match="shard_rows"):
        ExportCommandSettings(data=[str(folder)], out=str(tmp_path), shard_rows=0)
    assert ExportCommandSettings(data=["x"], out="y").samples == SampleSelection()


def test_without_trl_the_check_names_the_extra(rollout, tmp_path, monkeypatch):
    folder, _ = rollout
    result = export_sft(_settings([folder], tmp_path / "sft", check_with_trl=False))
    monkeypatch.setitem(sys.modules, "trl.data_utils", None)
    with pytest.raises(ImportError, match=r"webgym\[interop\].*--no-check-with-trl"):
        check_with_trl(result.shards[0])
    with pytest.raises(ImportError, match=r"webgym\[interop\]"):  # before anything is written
        export_sft(_settings([folder], tmp_path / "checked"))
    assert not (tmp_path / "checked").exists()


def test_the_command_exports_and_its_help_has_an_example(rollout, tmp_path):
    folder, _ = rollout
    runner = CliRunner()
    shown = runner.invoke(rl_main, ["export", "--help"])
    assert shown.exit_code == 0 and "webgym-rl export --data" in shown.output
    assert "--success-threshold" in shown.output and "--no-check-with-trl" in shown.output
    done = runner.invoke(rl_main, ["export", "--data", str(folder), "--out", str(tmp_path / "sft")])
    assert done.exit_code == 0, done.output
    assert "5 steps of 3 episodes (6 images, 1 steps without one) in 1 shards" in done.output
    refused = runner.invoke(rl_main, ["export", "--data", str(folder), "--out", str(tmp_path / "sft")])
    assert refused.exit_code == 1 and "--overwrite" in refused.output


# TRL 1.16's SFTConfig sets transformers' renamed gradient_checkpointing itself.
@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.usefixtures("fresh_accelerate_state")
def test_trl_sft_trainer_trains_the_tiny_model_on_the_export(rollout, tmp_path, tiny_qwen2_vl):
    import torch
    from trl import SFTConfig, SFTTrainer

    from webgym_rl.modeling import load_model, load_processor

    folder, _ = rollout
    export_sft(_settings([folder], tmp_path / "sft"))
    steps = _load(tmp_path / "sft", tmp_path / "cache")
    model, processor = load_model(tiny_qwen2_vl), load_processor(tiny_qwen2_vl)
    before = {name: value.detach().clone() for name, value in model.named_parameters()}
    args = SFTConfig(output_dir=str(tmp_path / "trl"), max_steps=3, per_device_train_batch_size=2,
                     learning_rate=1e-3, use_cpu=True, report_to="none", save_strategy="no", logging_steps=1,
                     max_length=None, dataloader_num_workers=0, seed=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=steps, processing_class=processor)
    # A batch may hold a text-only step beside steps with screenshots: TRL's collator takes it.
    mixed = [row for row in steps if row["images"]][:1] + [row for row in steps if not row["images"]]
    batch = trainer.data_collator(mixed)
    assert batch["input_ids"].shape[0] == 2 and batch["image_grid_thw"].shape[0] == len(mixed[0]["images"])
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    changed = [name for name, value in model.named_parameters() if not torch.equal(value, before[name])]
    assert any("visual" in name for name in changed) and any("visual" not in name for name in changed)


def test_images_are_png_of_the_decoded_pixels():
    from webgym_rl.export import sft_row
    from webgym_rl.samples import Sample

    image = Image.new("RGB", (8, 4), (1, 2, 3))
    row = sft_row(Sample(messages=[{"role": "user", "content": [{"type": "image", "image": image}]}],
                         response="done", advantage=1.0, episode_id="e", step=0))
    assert row["messages"][0]["content"] == [{"type": "image", "text": None}]
    stored = Image.open(io.BytesIO(row["images"][0]["bytes"]))
    assert stored.format == "PNG" and stored.tobytes() == image.tobytes()
