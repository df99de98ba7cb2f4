"""webgym_rl.train: real training runs of tiny Qwen-VL models on synthetic trajectory datasets."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from click.testing import CliRunner

from tests.webgym_rl.synthetic import episode, standard_iteration, tiny_checkpoint, write_shards
from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings, settings_from_dict
from webgym_rl.collate import NOT_MODEL_INPUTS, Collator
from webgym_rl.errors import TrainSettingsError
from webgym_rl.modeling import load_model, load_processor
from webgym_rl.objectives import ObjectiveBatch, filtered_bc, response_logprobs
from webgym_rl.samples import build_samples, load_trajectories
from webgym_rl.settings import OptimizationSettings, TrainCommandSettings
from webgym_rl.train import EpochOrder, ResumeError, Trainer, train, train_command


def _settings(model, data, out, **kw):
    """`TrainCommandSettings` from YAML-style keys (the training keys sit beside the inputs)."""
    values = dict(model=str(model), data=[str(d) for d in data], out=str(out), objective="filtered_bc",
                  learning_rate=2e-3, per_device_batch_size=2, gradient_accumulation_steps=2, max_steps=8,
                  lr_scheduler="linear", warmup_steps=2, save_every=3, seed=3, cache_dir=str(out) + "-cache")
    values.update(kw)
    return settings_from_dict(TrainCommandSettings, values)


def _batch(model_dir, data):
    samples = build_samples(load_trajectories([data]), "filtered_bc")
    batch = Collator(load_processor(model_dir))([samples[i] for i in range(len(samples))])
    labels, advantages = batch["labels"], batch["advantages"]
    return labels, advantages, {k: v for k, v in batch.items() if k not in NOT_MODEL_INPUTS}


def _kept_loss(model_dir, data, model=None):
    labels, _, inputs = _batch(model_dir, data)
    model = model if model is not None else load_model(model_dir)
    with torch.no_grad():
        batch = ObjectiveBatch(model(**inputs).logits, labels, torch.ones(len(labels)))
        return filtered_bc(batch, OptimizationSettings())[0].item()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One filtered_bc run of a tiny Qwen2-VL: 8 steps, batch 2, accumulation 2, checkpoints every 3."""
    root = tmp_path_factory.mktemp("train")
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    data = standard_iteration(root / "iter-0")
    settings = _settings(model, [data], root / "out")
    return settings, train(settings), data, model


def test_training_lowers_the_loss_on_the_kept_samples(run):
    settings, result, data, base = run
    assert result.steps == 8 and [e["step"] for e in result.log_history] == list(range(1, 9))
    assert result.counts["trajectories_kept"] == 3 and result.counts["steps_kept"] == 6
    before, after = _kept_loss(base, data), _kept_loss(result.checkpoint, data)
    assert after < 0.8 * before
    assert result.log_history[-1]["loss"] < result.log_history[0]["loss"]
    assert sorted(p.name for p in settings.out_dir.glob("checkpoint-*")) == [
        "checkpoint-000003", "checkpoint-000006", "checkpoint-000008"]
    assert list((settings.out_dir / "logs").rglob("events.out.tfevents.*"))  # TensorBoard, offline


def test_a_saved_checkpoint_reloads_to_identical_logits(run):
    _, result, data, _ = run
    for name in ("config.json", "model.safetensors", "processor_config.json", "tokenizer.json",
                 "trainer_state.json", "training_state/optimizer.bin"):
        assert (result.checkpoint / name).is_file(), name
    _, _, inputs = _batch(result.checkpoint, data)
    result.model.eval()
    with torch.no_grad():
        assert torch.equal(result.model(**inputs).logits, load_model(result.checkpoint)(**inputs).logits)


def test_resume_gives_the_same_loss_curve_as_an_uninterrupted_run(run, tmp_path):
    settings, result, data, model = run
    # An interrupted run: only the step-3 checkpoint (mid-epoch, mid-warm-up) survived.
    out = tmp_path / "out"
    shutil.copytree(settings.out_dir / "checkpoint-000003", out / "checkpoint-000003")
    resumed = train(_settings(model, [data], out, resume=True))
    assert resumed.steps == 8
    assert [e["step"] for e in resumed.log_history] == list(range(1, 9))
    assert [e["loss"] for e in resumed.log_history] == pytest.approx(
        [e["loss"] for e in result.log_history], rel=1e-6, abs=1e-7)
    assert [e["lr"] for e in resumed.log_history] == pytest.approx([e["lr"] for e in result.log_history])
    with pytest.raises(ResumeError, match="an exact resume needs the same objective"):
        train(_settings(model, [data], out, resume=True, objective="reinforce"))
    pairs = zip(result.model.named_parameters(), resumed.model.named_parameters(), strict=True)
    for (name, a), (_, b) in pairs:
        assert torch.allclose(a, b, atol=1e-6), name


def test_qwen3_vl_reinforce_with_lora_through_the_cli(tmp_path_factory, tmp_path):
    model = tiny_checkpoint(tmp_path_factory, "qwen3_vl")
    data = standard_iteration(tmp_path / "iter-0", tasks=2)
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({"model": str(model), "objective": "reinforce", "max_steps": 5,
                                      "learning_rate": 0.5, "lora_rank": 4, "log_with": "none"}))
    out = tmp_path / "out"
    result = CliRunner().invoke(train_command, [
        "--config", str(config), "--data", str(data), "--out", str(out), "--lora", "--max-steps", "2",
        "--gradient-checkpointing", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert "reinforce: 4 trajectories read, 4 kept, 8 steps; trained 2 steps" in result.output
    ckpt = out / "checkpoint-000002"
    assert (ckpt / "adapter_config.json").is_file() and (ckpt / "processor_config.json").is_file()
    from peft import PeftModel

    base = load_model(model)
    tuned = PeftModel.from_pretrained(load_model(model), ckpt)
    labels, advantages, inputs = _batch(model, data)
    with torch.no_grad():
        assert not torch.allclose(base(**inputs).logits, tuned(**inputs).logits)


def test_lora_from_an_adapter_folder_trains_that_adapter_on_relative_to_its_base(tmp_path_factory, tmp_path):
    from safetensors.torch import load_file

    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    data = standard_iteration(tmp_path / "iter-0", tasks=2)
    lora = dict(lora=True, lora_rank=4, lora_alpha=8, max_steps=2, save_every=0, warmup_steps=0,
                log_with="none")
    first = train(_settings(model, [data], tmp_path / "first", learning_rate=0.05, **lora))
    # A learning rate too small to move anything: what comes out is what went in.
    second = train(_settings(first.checkpoint, [data], tmp_path / "second", learning_rate=1e-12, **lora))
    config = json.loads((second.checkpoint / "adapter_config.json").read_text())
    state = json.loads((second.checkpoint / "trainer_state.json").read_text())
    assert config["base_model_name_or_path"] == str(model)  # still an adapter of the base model
    assert state["base_model"] == str(model) and state["start_adapter"] == str(first.checkpoint)
    before = load_file(first.checkpoint / "adapter_model.safetensors")
    after = load_file(second.checkpoint / "adapter_model.safetensors")
    assert before.keys() == after.keys()
    assert all(torch.allclose(before[k], after[k], atol=1e-6) for k in before)
    assert any("lora_B" in k and before[k].abs().max() > 0 for k in before)  # trained: not a fresh one
    trainable = {n for n, p in second.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)

    # The adapter keeps its shape and needs --lora: other settings are refused, naming the field.
    with pytest.raises(TrainSettingsError, match="lora_rank: 8, but the adapter .* has 4"):
        train(_settings(first.checkpoint, [data], tmp_path / "third", **{**lora, "lora_rank": 8}))
    with pytest.raises(TrainSettingsError, match="model: .* is a LoRA adapter; train it on with --lora"):
        train(_settings(first.checkpoint, [data], tmp_path / "third", max_steps=1))
    assert not (tmp_path / "third").exists()


def test_settings_come_from_yaml_then_flags(tmp_path, monkeypatch):
    config = tmp_path / "c.yaml"
    config.write_text("model: m\ndata: [a, b]\nout: o\nlearning-rate: 0.25\nmax_steps: 7\n")
    settings = load_settings(TrainCommandSettings, config, {"training__max_steps": 3, "training__lora": None,
                                                     "data": ()})
    assert (settings.model, settings.data, settings.training.learning_rate) == ("m", ["a", "b"], 0.25)
    assert settings.training.max_steps == 3
    config.write_text("modle: m\n")
    with pytest.raises(SettingsError, match="modle: unknown setting"):
        load_settings(TrainCommandSettings, config)
    # Out-of-range values are refused naming the field (and, from the CLI, the flag).
    with pytest.raises(TrainSettingsError, match="learning_rate: must be > 0"):
        OptimizationSettings(learning_rate=0)
    with pytest.raises(SettingsError, match="learning_rate: must be > 0"):
        settings_from_dict(TrainCommandSettings,
                           {"model": "m", "data": ["a"], "out": "o", "learning_rate": 0})
    with pytest.raises(SettingsError, match=r"lr_scheduler \(--lr-scheduler\): 'cosine2' is not one of"):
        load_settings(TrainCommandSettings, None, {"model": "m", "data": ("a",), "out": "o",
                                            "training__lr_scheduler": "cosine2"})
    # --data takes several values after one flag, and the flag can repeat.
    seen = {}

    def fake_train(settings):
        seen["s"] = settings
        raise TrainSettingsError("parsed only")

    monkeypatch.setattr("webgym_rl.train.train", fake_train)
    CliRunner().invoke(train_command, ["--data", "d1", "d2", "--model", "m", "--data", "d3", "--out", "o",
                                       "--lora-target-modules", "q_proj", "v_proj"])
    assert seen["s"].data == ["d1", "d2", "d3"]
    assert seen["s"].training.lora_target_modules == ["q_proj", "v_proj"]
    help_text = CliRunner().invoke(train_command, ["--help"]).output
    assert "Example:" in help_text and "--recency-power" in help_text and "(a + 1) ** -power" in help_text


@pytest.mark.parametrize("case", ["empty", "reward_free", "missing_column", "no_processor", "no_checkpoint"])
def test_bad_input_stops_with_one_clear_message_before_training(case, tmp_path_factory, tmp_path):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    data = tmp_path / "data"
    args = []
    if case == "empty":
        write_shards(data, [])
        expected = "the trajectory set is empty"
    elif case == "reward_free":
        write_shards(data, [episode(task_id="a", reward=None)])
        expected = "reward-free"
    elif case == "missing_column":
        write_shards(data, [episode(task_id="a")], drop_columns=["steps"])
        expected = "missing column 'steps'"
    elif case == "no_processor":
        write_shards(data, [episode(task_id="a")])
        broken = tmp_path / "ckpt"
        shutil.copytree(model, broken)
        for name in ("processor_config.json", "preprocessor_config.json"):
            (broken / name).unlink(missing_ok=True)
        model = broken
        expected = "has no preprocessor_config.json or processor_config.json"
    else:
        write_shards(data, [episode(task_id="a")])
        args = ["--resume"]
        expected = "no complete checkpoint"
    out = tmp_path / "out"
    result = CliRunner().invoke(train_command, ["--model", str(model), "--data", str(data), "--out", str(out),
                                                "--cache-dir", str(tmp_path / "cache"), *args])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and expected in errors[0], result.output
    assert "Traceback" not in result.output
    assert not list(out.glob("checkpoint-*"))


def test_a_schema_1_1_dataset_still_trains(tmp_path_factory, tmp_path):
    """Trajectories written before schema 1.2 (no policy versions, log-probs or outcomes) train."""
    from tests.support.schema_1_1 import write_1_1

    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    episodes = [episode(task_id=f"task{t}", attempt=a, reward=float(a == 0))
                for t in range(2) for a in range(2)]
    data = write_1_1(tmp_path / "iter-0", episodes)
    result = train(_settings(model, [data], tmp_path / "out", max_steps=2, save_every=0, log_with="none"))
    assert result.steps == 2 and result.counts["trajectories_kept"] == 2 and result.counts["steps_kept"] == 4
    state = json.loads((result.checkpoint / "trainer_state.json").read_text())
    assert state["data"][0]["id"] == str(data) and state["data"][0]["rows"] == 4
    load_model(result.checkpoint)


def test_a_schema_1_3_dataset_still_trains_and_says_its_steps_were_re_tokenised(tmp_path_factory, tmp_path):
    """Trajectories written before schema 1.4 (no token ids, no sampling settings) train with every
    objective, their replies re-tokenised; the run counts and names those steps."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    episodes = [episode(task_id=f"task{t}", attempt=a, reward=float(a == 0))
                for t in range(2) for a in range(2)]
    data = write_shards(tmp_path / "iter-0", episodes)
    manifest = json.loads((data / "manifest.json").read_text())
    added = ("token_ids", "prompt_token_hash", "sampling", "observation_text")  # 1.4, 1.6
    for shard in manifest["shards"]:  # as the 1.3 writer wrote it: steps without the 1.4 fields
        rows = pq.read_table(data / shard["path"]).to_pylist()
        for row in rows:
            row["steps"] = [{k: v for k, v in step.items() if k not in added} for step in row["steps"]]
        pq.write_table(pa.Table.from_pylist(rows), data / shard["path"])
    (data / "manifest.json").write_text(json.dumps({**manifest, "schema_version": "1.3"}))
    for objective in ("filtered_bc", "reinforce"):
        result = train(_settings(model, [data], tmp_path / objective, objective=objective, max_steps=2,
                                 save_every=0, log_with="none"))
        assert result.steps == 2 and result.counts["retokenised"] == result.counts["steps_kept"] > 0
        assert result.counts["retokenised_named"][0].startswith("episode task")
        assert result.on_policy == {}  # nothing to compare: no step carries its sampled ids


# ----------------------------------------------------------------------------- the on-policy check


def _fresh_episode(checkpoint, tmp_path, *, episode_id: str, steps: int = 3, text: str = "",
                   image: bool = True):
    """An episode of `steps` steps whose replies a real policy server sampled from `checkpoint` at
    temperature 1 (prompts with the screenshots of up to two earlier rounds and their replies);
    `text`: each step's text observation (step i's ends in its number), as the env records it;
    `image`: whether the prompts show the screenshots (False: a text-only observation mode)."""
    import asyncio

    from tests.webgym_rl.synthetic import png, screenshot, task
    from webgym_core.endpoint import Endpoint
    from webgym_rl.policy_server import PolicyServerSettings, running_policy_server
    from webgym_rollout.agent.policies import OpenAIPolicy, SamplingSettings
    from webgym_rollout.agent.protocol import AgentSettings, Observation
    from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Step, TokenUsage

    server = PolicyServerSettings(model=str(checkpoint), port=0, max_new_tokens=32, served_model_name="tiny")

    async def play(base_url: str) -> list:
        sampling = SamplingSettings(temperature=1.0, max_tokens=32, sampling_seed=None)
        agent = AgentSettings(variant="memory", full_rounds=2)
        recorded: list[Step] = []  # the episode's steps: also the policy's history
        endpoint = Endpoint(base_url=base_url, model="tiny")
        async with OpenAIPolicy(endpoint, sampling=sampling, agent=agent) as p:
            for i in range(steps):
                shot = png(screenshot(100 + i, (112, 84)))
                shown = f"{text}{i + 1}" if text else ""
                output = await p.act(Observation(instruction="Open the second tab.", screenshot=shot,
                                                 viewport=(112, 84), step=i, history=tuple(recorded),
                                                 text=shown, image=image))
                recorded.append(Step(index=i, screenshot=shot, observation_text=shown,
                                     messages=output.messages_json,
                                     response=output.response, finish_reason=output.finish_reason,
                                     action=output.action.to_json() if output.action is not None else "",
                                     usage=TokenUsage(output.prompt_tokens, output.completion_tokens),
                                     policy_version=output.policy_version, logprobs=output.logprobs,
                                     token_ids=output.token_ids, prompt_token_hash=output.prompt_token_hash,
                                     sampling=output.sampling))
        return recorded

    with running_policy_server(server) as base_url:
        recorded = asyncio.run(play(base_url))
    return Episode(task=task(episode_id), episode_id=episode_id, reward=1.0, status=EpisodeStatus.OK,
                   instruction="Open the second tab.", steps=recorded)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_the_trainer_scores_fresh_samples_as_the_policy_that_sampled_them(family, tmp_path_factory, tmp_path):
    """The on-policy check: on replies the policy server has just sampled (screenshots, a history of
    earlier rounds), the trainer's log-probability of every sampled token is the rollout's to within
    1e-3 (float32). A step that misstates its sampling temperature is caught by the same check."""
    import dataclasses

    from webgym_rl.train import Trainer
    from webgym_rollout.trajectory.contract import Sampling

    checkpoint = tiny_checkpoint(tmp_path_factory, family)
    fresh = _fresh_episode(checkpoint, tmp_path, episode_id="fresh")
    assert all(step.token_ids and len(step.token_ids) == len(step.logprobs) for step in fresh.steps)
    assert fresh.steps[-1].messages.count('"type": "image"') == 3  # two earlier rounds and the current one
    misstated = dataclasses.replace(fresh, episode_id="misstated", attempt=1, steps=[
        dataclasses.replace(step, policy_version=9, sampling=Sampling(temperature=0.5))
        for step in fresh.steps])
    data = write_shards(tmp_path / "fresh", [fresh, misstated])
    samples = build_samples(load_trajectories([data], cache_dir=tmp_path / "cache"), "filtered_bc")
    assert samples.counts.retokenised == 0 and all(samples.exact)
    trainer = Trainer(model=str(checkpoint), model_revision=None,
                      training=OptimizationSettings(log_with="none"),
                      out=tmp_path / "out", seed=0, total_steps=None)
    check = trainer.on_policy_check(samples)
    tokens = sum(len(step.token_ids) for step in fresh.steps)
    assert check["v0"]["samples"] == 3 and check["v0"]["tokens"] == tokens
    assert check["v0"]["max_abs"] < 1e-3 and check["v0"]["mean_abs"] < 1e-4, check
    assert check["v9"]["max_abs"] > 0.05, check  # scored at temperature 0.5, sampled at 1


@pytest.mark.parametrize("image", [True, False], ids=["with-screenshot", "text-only"])
def test_a_trajectory_with_a_text_observation_trains_on_the_prompt_the_policy_saw(tmp_path_factory, tmp_path,
                                                                                   image):
    """Steps whose policy was shown a text observation (the element list): the stored messages carry
    it, the collator's prompt tokens are the policy server's token for token (its digest checks
    every step, and a step whose text is left out of the prompt is refused), and the run trains."""
    import dataclasses

    from webgym_rl.collate import TokenMismatchError
    checkpoint = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    text = 'Interactive elements:\n[1] tab "Tab #1" (id=tab1)\n[2] tab "Tab #2" (id=tab2)\n[3] link "Go" '
    fresh = _fresh_episode(checkpoint, tmp_path, episode_id="text", text=text, image=image)
    assert all(('"type": "image"' in step.messages) == image for step in fresh.steps)
    assert [step.observation_text for step in fresh.steps] == [f"{text}{i}" for i in (1, 2, 3)]
    assert all(json.loads(step.messages)[-1]["content"][0]["text"].endswith("\n\n" + step.observation_text)
               for step in fresh.steps)
    data = write_shards(tmp_path / "fresh", [fresh])
    samples = build_samples(load_trajectories([data], cache_dir=tmp_path / "cache"), "filtered_bc")
    assert samples.counts.retokenised == 0 and all(samples.exact) and len(samples) == 3
    processor = load_processor(checkpoint)
    collator = Collator(processor)
    batch = collator([samples[i] for i in range(len(samples))])  # checks each prompt's digest
    assert batch["exact"].all()
    # The same step with the text left out of its prompt is not the prompt the server tokenised.
    first = samples[0]
    without = [dict(m) for m in first.messages]
    without[-1]["content"] = [({**part, "text": part["text"].replace(fresh.steps[0].observation_text, "")}
                               if part.get("type") == "text" else part) for part in without[-1]["content"]]
    with pytest.raises(TokenMismatchError, match="the trainer's prompt"):
        collator([dataclasses.replace(first, messages=without)])
    result = train(_settings(checkpoint, [data], tmp_path / "out", max_steps=1, save_every=0,
                             log_with="none"))
    assert result.steps == 1 and result.counts["steps_kept"] == 3


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_the_trainer_computes_logits_at_the_labelled_positions_alone_with_the_full_results(
        tmp_path_factory, tmp_path, family):
    model = tiny_checkpoint(tmp_path_factory, family)
    samples = build_samples(load_trajectories([standard_iteration(tmp_path / "it", tasks=1)],
                                              cache_dir=tmp_path / "c"), "filtered_bc")
    training = OptimizationSettings(log_with="none", per_device_batch_size=2, max_steps=1, learning_rate=1e-3)
    trainer = Trainer(model=str(model), model_revision=None, training=training, out=tmp_path / "out", seed=0,
                      total_steps=None)
    batch = trainer.collator([samples[i] for i in range(len(samples))])
    labels, temperatures = batch["labels"], batch["temperatures"]
    inputs = {k: v for k, v in batch.items() if k not in NOT_MODEL_INPUTS}
    positions = trainer.logit_positions(labels)
    assert positions is not None and 0 < len(positions) < labels.shape[1] / 2
    rows = []  # the rows the output projection is applied to, call by call
    head = trainer.accelerator.unwrap_model(trainer.model).get_output_embeddings()
    hook = head.register_forward_hook(lambda module, args, output: rows.append(args[0].shape[1]))
    results = []
    for kept in (None, positions):
        trainer.model.zero_grad()
        logits = trainer.policy_logits(trainer.model, inputs, kept)
        loss, _ = filtered_bc(ObjectiveBatch(logits, labels, torch.ones(len(labels)), positions=kept),
                              training)
        loss.backward()
        logp = response_logprobs(logits.detach(), labels, temperatures, kept)[0]
        results.append((loss.detach(), logp, [p.grad.clone() for p in trainer.model.parameters()
                                              if p.grad is not None]))
    (full_loss, full_logp, full_grads), (loss, logp, grads) = results
    assert rows == [labels.shape[1], len(positions)]
    assert torch.allclose(loss, full_loss, atol=1e-6, rtol=0)
    assert torch.allclose(logp, full_logp, atol=1e-6, rtol=0)
    assert len(grads) == len(full_grads) > 0
    assert all(torch.allclose(g, f, atol=1e-6, rtol=1e-5) for g, f in zip(grads, full_grads, strict=True))
    # The trainer's own step takes the same path.
    rows.clear()
    order = EpochOrder(samples.weights, 0)
    trainer.fit(trainer.loader(samples, order), order, until=1)
    hook.remove()
    assert rows and max(rows) < labels.shape[1] / 2
