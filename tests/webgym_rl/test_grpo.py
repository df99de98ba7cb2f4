"""``--objective grpo``: group advantages, the clipped decoupled surrogate, PPO epochs, the KL term,
resuming between two passes over a batch, and the CLI end to end on a tiny Qwen2-VL."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from click.testing import CliRunner

from tests.webgym_rl.synthetic import episode, standard_iteration, tiny_checkpoint, write_shards
from webgym_core.settings import settings_from_dict
from webgym_rl.collate import NOT_MODEL_INPUTS, Collator
from webgym_rl.errors import NoTrainingDataError, ResumeError, TrainSettingsError
from webgym_rl.modeling import load_model, load_processor
from webgym_rl.objectives import OBJECTIVES, ObjectiveBatch, grpo, kl_k3, response_logprobs
from webgym_rl.samples import Objective, Sample, SampleSelection, build_samples, load_trajectories
from webgym_rl.settings import GRPOSettings, OptimizationSettings, TrainCommandSettings
from webgym_rl.train import Trainer, train, train_command

GRPO = OptimizationSettings(objective="grpo")


def _grpo(**knobs):
    """grpo's `OptimizationSettings` with some of its knobs (`GRPOSettings`) changed."""
    return OptimizationSettings(objective="grpo", grpo=GRPOSettings(**knobs))


def _logits_and_labels(seed=0, vocab=11):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 6, vocab, generator=generator)
    labels = torch.full((2, 6), -100)
    labels[0, 3:] = torch.tensor([1, 2, 3])  # 3 response tokens (positions 2..4 of the log-probs)
    labels[1, 4:] = torch.tensor([4, 5])  # 2 response tokens (positions 3..4)
    return logits, labels


def _grad(logits, labels, advantages, settings=GRPO, **batch):
    leaf = logits.clone().requires_grad_(True)
    loss, metrics = grpo(ObjectiveBatch(logits=leaf, labels=labels, advantages=advantages, **batch), settings)
    loss.backward()
    return leaf.grad, loss, metrics


# ------------------------------------------------------------------------------- group advantages

def _advantages(samples):
    return {samples[i].episode_id: samples.advantages[i] for i in range(len(samples))}


def test_group_advantages_of_a_hand_made_group_and_equal_groups_dropped_and_counted(tmp_path):
    rewards = {"a": [1.0, 0.0, 0.0, 1.0], "b": [1.0, 1.0], "c": [0.0, 0.0, 0.0]}
    episodes = [episode(task_id=t, attempt=i, reward=r, num_steps=1)
                for t, rs in rewards.items() for i, r in enumerate(rs)]
    episodes.append(episode(task_id="a", iteration=1, attempt=4, reward=0.5, num_steps=1))
    episodes.append(episode(task_id="a", iteration=1, attempt=5, reward=0.0, num_steps=1))
    sets = load_trajectories([write_shards(tmp_path / "it", episodes)], cache_dir=tmp_path / "c")

    samples = build_samples(sets, "grpo")
    # Group (0, a): mean 0.5; group (1, a): mean 0.25 (another iteration is another group).
    assert _advantages(samples) == {"a-it0-a0": 0.5, "a-it0-a1": -0.5, "a-it0-a2": -0.5, "a-it0-a3": 0.5,
                                    "a-it1-a4": 0.25, "a-it1-a5": -0.25}
    counts = samples.counts
    assert counts.groups_dropped == 2 and counts.skipped == {"episodes of groups with equal rewards": 5}
    assert counts.group_sizes == {"2": 2, "3": 1, "4": 1}
    assert "groups: 2 of 2, 1 of 3, 1 of 4, 2 dropped (equal rewards)" in counts.summary()

    normalized = _advantages(build_samples(sets, "grpo", SampleSelection(normalize_advantage=True)))
    assert normalized["a-it0-a0"] == pytest.approx(1.0, rel=1e-5)  # std of [1, 0, 0, 1] is 0.5
    assert normalized["a-it1-a5"] == pytest.approx(-1.0, rel=1e-5)  # std of [0.5, 0] is 0.25

    reinforce = build_samples(sets, "reinforce")  # keeps the equal groups, with advantage 0
    assert _advantages(reinforce)["b-it0-a0"] == 0.0 and reinforce.counts.groups_dropped == 0
    assert reinforce.counts.group_sizes == counts.group_sizes


def test_a_set_whose_groups_all_got_equal_rewards_has_nothing_for_grpo(tmp_path):
    episodes = [episode(task_id=t, attempt=i, reward=1.0, num_steps=1) for t in "ab" for i in range(2)]
    sets = load_trajectories([write_shards(tmp_path / "it", episodes)], cache_dir=tmp_path / "c")
    with pytest.raises(NoTrainingDataError, match="grpo: every advantage .* is zero"):
        build_samples(sets, "grpo")


# ------------------------------------------------------------------------------------ the surrogate

def test_first_pass_is_the_advantage_weighted_likelihood_gradient_under_either_normaliser():
    logits, labels = _logits_and_labels()
    advantages = torch.tensor([1.0, -2.0])
    logp, mask = response_logprobs(logits, labels)
    expectations = (("token-mean", -(1.0 * 3 - 2.0 * 2) / 5), ("sequence-mean", -(1.0 - 2.0) / 2))
    for aggregation, expected in expectations:
        settings = _grpo(loss_aggregation=aggregation)
        grad, loss, metrics = _grad(logits, labels, advantages, settings)
        assert loss.item() == pytest.approx(expected)  # the ratio is 1 on the first pass
        # ... and its gradient is that of the advantage-weighted log-likelihood.
        plain = logits.clone().requires_grad_(True)
        lp, _ = response_logprobs(plain, labels)
        weighted = lp * advantages[:, None]
        reference = (-weighted.sum() / 5 if aggregation == "token-mean"
                     else -(weighted.sum(1) / mask.sum(1)).mean())
        reference.backward()
        assert torch.allclose(grad, plain.grad, atol=1e-6)
        assert metrics["ratio_mean"].item() == pytest.approx(1.0) and metrics["clip_fraction"] == 0


def test_a_token_past_the_clip_in_its_advantages_direction_gets_no_gradient():
    logits, labels = _logits_and_labels()
    logp, mask = response_logprobs(logits, labels)
    for advantage, ratio, clipped in ((1.0, 1.5, True), (1.0, 1.2, False), (-1.0, 0.5, True),
                                      (-1.0, 1.5, False), (1.0, 0.5, False)):
        # Sample 0's ratio to the proximal policy is `ratio` on every token; sample 1's is 1.
        proximal = logp.detach().clone()
        proximal[0] -= math.log(ratio) * mask[0]
        grad, _, metrics = _grad(logits, labels, torch.tensor([advantage, 1.0]), proximal_logprobs=proximal)
        assert bool(grad[0].abs().sum() == 0) is clipped, (advantage, ratio)
        assert grad[1].abs().sum() > 0  # the other sample still learns
        assert metrics["clip_fraction"].item() == pytest.approx(3 / 5 if clipped else 0.0)
    # clip_high widens the upper bound only (DAPO's clip-higher): a ratio of 1.25 is inside [0.8, 1.28].
    proximal = logp.detach().clone()
    proximal[0] -= math.log(1.25) * mask[0]
    grad, _, _ = _grad(logits, labels, torch.tensor([1.0, 1.0]), proximal_logprobs=proximal)
    assert grad[0].abs().sum() > 0
    tight = _grpo(clip_high=0.2)
    grad, _, _ = _grad(logits, labels, torch.tensor([1.0, 1.0]), tight, proximal_logprobs=proximal)
    assert grad[0].abs().sum() == 0


def test_tokens_whose_behaviour_weight_exceeds_the_cap_are_masked_and_the_others_weighted():
    logits, labels = _logits_and_labels()
    logp, mask = response_logprobs(logits, labels)
    advantages = torch.tensor([1.0, 1.0])
    behaviour = torch.full_like(logp, float("nan"))
    # Sample 0's three tokens: behaviour weights pi_prox / mu of 2, 8 (past the cap of 5) and unknown.
    behaviour[0, 2] = logp[0, 2] - math.log(2.0)
    behaviour[0, 3] = logp[0, 3] - math.log(8.0)
    plain, _, _ = _grad(logits, labels, advantages)
    grad, _, metrics = _grad(logits, labels, advantages, behaviour_logprobs=behaviour)
    assert torch.allclose(grad[0, 2], 2.0 * plain[0, 2], atol=1e-7)  # weighted by pi_prox / mu
    assert grad[0, 3].abs().sum() == 0 and plain[0, 3].abs().sum() > 0  # masked out
    assert torch.allclose(grad[0, 4], plain[0, 4]) and torch.allclose(grad[1], plain[1])  # unknown: 1
    assert metrics["behaviour_masked_fraction"].item() == pytest.approx(1 / 5)
    uncapped = _grpo(behaviour_cap=0)
    grad, _, _ = _grad(logits, labels, advantages, uncapped, behaviour_logprobs=behaviour)
    assert torch.allclose(grad[0, 3], 8.0 * plain[0, 3], atol=1e-6)


def test_the_kl_term_is_zero_at_the_reference_and_pulls_back_towards_it():
    logits, labels = _logits_and_labels()
    logp, mask = response_logprobs(logits, labels)
    zero = torch.zeros(2)  # no advantage: the KL term alone
    settings = _grpo(kl_coef=0.5)
    grad, loss, metrics = _grad(logits, labels, zero, settings, reference_logprobs=logp.detach())
    assert loss.item() == 0 and metrics["kl"].item() == 0 and grad.abs().sum() == 0
    reference = logp.detach() - 1.0 * mask  # the reference liked every response token less
    grad, loss, metrics = _grad(logits, labels, zero, settings, reference_logprobs=reference)
    assert loss.item() > 0 and metrics["kl"].item() == pytest.approx(math.exp(-1) + 1 - 1)
    stepped = logits - 0.5 * grad
    after = response_logprobs(stepped, labels)[0]
    assert torch.all((after < logp)[mask])  # each token moved back towards the reference
    assert kl_k3(after, reference)[mask].sum() < kl_k3(logp, reference)[mask].sum()
    with pytest.raises(ValueError, match="needs the reference model"):
        _grad(logits, labels, zero, settings)


# ------------------------------------------------------------------------- settings and the batch

def test_grpo_settings_are_checked_naming_the_field():
    for values, message in (({"clip_low": 1.0}, "clip_low: must be in"), ({"clip_high": 0}, "clip_high"),
                            ({"behaviour_cap": 0.5}, "behaviour_cap: must be 0"),
                            ({"ppo_epochs": 0}, "ppo_epochs: must be >= 1"), ({"kl_coef": -1}, "kl_coef"),
                            ({"loss_aggregation": "sum"}, "loss_aggregation: 'sum' is unknown")):
        with pytest.raises(TrainSettingsError, match=message):
            _grpo(**values)
    with pytest.raises(TrainSettingsError, match="ppo_epochs: applies to --objective grpo only"):
        OptimizationSettings(objective="reinforce", grpo=GRPOSettings(ppo_epochs=2))
    with pytest.raises(TrainSettingsError, match="kl_coef: applies to --objective grpo only"):
        OptimizationSettings(grpo=GRPOSettings(kl_coef=0.1))
    settings = settings_from_dict(TrainCommandSettings, {"model": "m", "data": ["d"], "out": "o",
                                                  "objective": "grpo", "clip_high": 0.3, "ppo_epochs": 3})
    assert settings.training.grpo.clip_high == 0.3 and settings.training.grpo.ppo_epochs == 3
    help_text = CliRunner().invoke(train_command, ["--help"]).output
    for flag in ("--clip-low", "--clip-high", "--behaviour-cap", "--ppo-epochs", "--kl-coef",
                 "--loss-aggregation", "grpo"):
        assert flag in help_text, flag


def test_behaviour_logprobs_reach_the_batch_one_per_response_token(tmp_path_factory, tmp_path):
    collator = Collator(load_processor(tiny_checkpoint(tmp_path_factory, "qwen2_vl")))
    messages = [{"role": "user", "content": [{"type": "text", "text": "Click it."}]}]

    def row(**behaviour):
        batch = collator([Sample(messages=messages, response='{"action": "click"}', advantage=1.0,
                                 episode_id="e", step=0, **behaviour)])
        mask = batch["labels"][0] != -100
        assert torch.isnan(batch["behaviour_logprobs"][0][~mask]).all()
        return batch["behaviour_logprobs"][0][mask].tolist(), int(mask.sum())

    _, n = row()
    assert all(math.isnan(v) for v in row()[0])  # the random policy: nothing known
    exact = tuple(-0.1 * (i + 1) for i in range(n))
    assert row(behaviour_logprob=sum(exact) / n, behaviour_logprobs=exact)[0] == pytest.approx(exact)
    cut = exact[:-1]  # no end-of-turn token from the endpoint: it gets the mean of the others
    assert row(behaviour_logprobs=cut)[0] == pytest.approx([*cut, sum(cut) / len(cut)])
    other = (-1.0, -3.0)  # another tokenisation: the mean on every token
    assert row(behaviour_logprob=-2.0, behaviour_logprobs=other)[0] == pytest.approx([-2.0] * n)


# --------------------------------------------------------------------------- the trainer's side

def _settings(model, data, out, **kw):
    values = dict(model=str(model), data=[str(d) for d in data], out=str(out), objective="grpo",
                  learning_rate=1e-3, per_device_batch_size=2, log_with="none", seed=1,
                  cache_dir=str(out) + "-cache")
    values.update(kw)
    return settings_from_dict(TrainCommandSettings, values)


def _sample_logprobs(model, processor, samples):
    """Each sample's summed response-token log-probability under `model`."""
    batch = Collator(processor)([samples[i] for i in range(len(samples))])
    labels = batch.pop("labels")
    batch.pop("advantages"), batch.pop("behaviour_logprobs")
    with torch.no_grad():
        return response_logprobs(model(**batch).logits, labels)[0].sum(1)


def test_one_step_raises_the_successful_attempt_and_lowers_the_failed_one(tmp_path_factory, tmp_path):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    replies = ['{"action": "click", "x": 10}', '{"action": "type", "text": "q"}']
    data = write_shards(tmp_path / "it", [episode(task_id="a", attempt=a, reward=float(a == 0), num_steps=1,
                                                  responses=[replies[a]]) for a in (0, 1)])
    samples = build_samples(load_trajectories([data], cache_dir=tmp_path / "c"), "grpo")
    processor = load_processor(model)
    before = _sample_logprobs(load_model(model), processor, samples)
    result = train(_settings(model, [data], tmp_path / "out", max_steps=1))
    result.model.eval()
    after = _sample_logprobs(result.model, processor, samples)
    success = [i for i in range(len(samples)) if samples.advantages[i] > 0]
    assert len(success) == 1
    s, f = success[0], 1 - success[0]
    assert after[s] > before[s] and after[f] < before[f]


def test_ppo_epochs_pass_over_each_batch_with_proximal_logprobs_computed_once(tmp_path_factory, tmp_path,
                                                                               monkeypatch):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    data = standard_iteration(tmp_path / "it", tasks=2)  # 4 episodes x 2 steps = 8 samples
    calls, proximal_made = [], []
    loss = OBJECTIVES[Objective.GRPO]

    def spy(batch, settings):
        calls.append(batch.proximal_logprobs)
        return loss(batch, settings)

    logprobs = Trainer._logprobs

    def count(logits, labels, temperatures=None, positions=None):
        proximal_made.append(1)
        return logprobs(logits, labels, temperatures, positions)

    monkeypatch.setitem(OBJECTIVES, Objective.GRPO, spy)
    monkeypatch.setattr(Trainer, "_logprobs", staticmethod(count))
    once = train(_settings(model, [data], tmp_path / "one", gradient_accumulation_steps=2))
    assert once.steps == 2 and len(calls) == 4 and len(proximal_made) == 4
    calls.clear(), proximal_made.clear()
    twice = train(_settings(model, [data], tmp_path / "two", gradient_accumulation_steps=2, ppo_epochs=2))
    # 2 batches of 2 micro-batches, 2 passes each: twice the optimizer steps, the proximal
    # log-probabilities computed in the first pass only and handed to the second.
    assert twice.steps == 4 and [e["step"] for e in twice.log_history] == [1, 2, 3, 4]
    assert len(calls) == 8 and len(proximal_made) == 4
    for first, second in ((0, 2), (1, 3), (4, 6), (5, 7)):
        assert calls[first] is calls[second] and calls[first] is not None
    assert twice.samples_seen == 2 * once.samples_seen


def test_a_resume_between_two_passes_over_a_batch_ends_with_the_same_weights(tmp_path_factory, tmp_path):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    data = standard_iteration(tmp_path / "it", tasks=2)  # 4 batches of 2 per epoch
    kw = dict(ppo_epochs=2, max_steps=6, save_every=3, lr_scheduler="linear", warmup_steps=1,
              learning_rate=5e-3)
    whole = train(_settings(model, [data], tmp_path / "whole", **kw))
    checkpoint = tmp_path / "whole" / "checkpoint-000003"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert (state["batches_in_epoch"], state["ppo_epoch"]) == (1, 1)  # batch 2 passed over once
    assert (checkpoint / "proximal-0.safetensors").is_file()

    out = tmp_path / "resumed"
    shutil.copytree(checkpoint, out / checkpoint.name)
    resumed = train(_settings(model, [data], out, resume=True, **kw))
    assert [e["loss"] for e in resumed.log_history] == pytest.approx(
        [e["loss"] for e in whole.log_history], rel=1e-6, abs=1e-7)
    pairs = zip(whole.model.named_parameters(), resumed.model.named_parameters(), strict=True)
    for (name, a), (_, b) in pairs:
        assert torch.allclose(a, b, atol=1e-6), name

    broken = tmp_path / "broken"  # the proximal log-probabilities lost: no silent inexact resume
    shutil.copytree(checkpoint, broken / checkpoint.name)
    (broken / checkpoint.name / "proximal-0.safetensors").unlink()
    with pytest.raises(ResumeError, match="no proximal log-probabilities"):
        train(_settings(model, [data], broken, resume=True, **kw))


def test_the_reference_model_stays_the_starting_model(tmp_path_factory, tmp_path):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    data = standard_iteration(tmp_path / "it", tasks=1)
    samples = build_samples(load_trajectories([data], cache_dir=tmp_path / "c"), "grpo")
    training = OptimizationSettings(objective="grpo", grpo=GRPOSettings(kl_coef=0.1), learning_rate=1e-2,
                                    log_with="none", per_device_batch_size=2, max_steps=2)
    trainer = Trainer(model=str(model), model_revision=None, training=training, out=tmp_path / "out", seed=0,
                      total_steps=None)
    batch = trainer.collator([samples[i] for i in range(len(samples))])
    inputs = {k: v for k, v in batch.items() if k not in NOT_MODEL_INPUTS}

    def own():
        with torch.no_grad():
            return Trainer._logprobs(trainer.policy_logits(trainer.model, inputs), batch["labels"],
                                     batch["temperatures"])

    start = trainer._reference_logprobs(batch)
    assert torch.allclose(start, own(), atol=1e-6)  # KL 0 at the start
    from webgym_rl.train import EpochOrder

    order = EpochOrder(samples.weights, 0)
    trainer.fit(trainer.loader(samples, order), order, until=2)
    assert torch.equal(trainer._reference_logprobs(batch), start)
    assert not torch.allclose(own(), start, atol=1e-4)  # the model moved; its reference did not


def test_grpo_through_the_cli_with_lora_kl_and_two_passes(tmp_path_factory, tmp_path):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    episodes = [episode(task_id=t, attempt=a, reward=float(a == 0)) for t in ("a", "b") for a in range(2)]
    episodes += [episode(task_id="c", attempt=a, reward=0.0) for a in range(2)]  # no signal: dropped
    data = write_shards(tmp_path / "it", episodes)
    out = tmp_path / "out"
    result = CliRunner().invoke(train_command, [
        "--model", str(model), "--data", str(data), "--out", str(out), "--objective", "grpo", "--lora",
        "--lora-rank", "4", "--kl-coef", "0.05", "--ppo-epochs", "2", "--clip-high", "0.3",
        "--loss-aggregation", "sequence-mean", "--per-device-batch-size", "4", "--learning-rate", "0.01",
        "--log-with", "none", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    # 8 samples, batch 4: 2 batches x 2 passes.
    assert "grpo: 6 trajectories read, 4 kept, 8 steps; trained 4 steps" in result.output
    state = json.loads((out / "checkpoint-000004" / "trainer_state.json").read_text())
    assert state["counts"]["group_sizes"] == {"2": 3} and state["counts"]["groups_dropped"] == 1
    assert state["settings"]["ppo_epochs"] == 2 and state["settings"]["loss_aggregation"] == "sequence-mean"
    assert all(math.isfinite(e["loss"]) for e in state["log_history"])
    assert (out / "checkpoint-000004" / "adapter_config.json").is_file()


# ------------------------------------------------------------ normalisers of the optimizer step


def _first_step_gradient(checkpoint, data, training: OptimizationSettings, out) -> list[torch.Tensor]:
    """The gradient of the first optimizer step of `training` on `data` (recorded when it steps)."""
    from webgym_rl.train import EpochOrder

    samples = build_samples(load_trajectories([data]), training.objective, training.samples)
    trainer = Trainer(model=str(checkpoint), model_revision=None, training=training, out=out, seed=0,
                      total_steps=None)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    recorded: list[list[torch.Tensor]] = []
    step = trainer.optimizer.step

    def record(*args, **kwargs):  # called after every micro-batch; it steps after the last
        if trainer.accelerator.sync_gradients:
            recorded.append([p.grad.detach().clone() for p in params])
        return step(*args, **kwargs)

    trainer.optimizer.step = record
    order = EpochOrder([1.0] * len(samples), seed=0)
    trainer.fit(trainer.loader(samples, order), order, until=1)
    return recorded[0]


@pytest.mark.parametrize("objective, aggregation", [
    ("grpo", "token-mean"), ("grpo", "sequence-mean"), ("filtered_bc", "token-mean"),
    ("reinforce", "token-mean")])
def test_a_steps_gradient_does_not_depend_on_how_its_samples_are_split_into_micro_batches(
        tmp_path_factory, tmp_path, objective, aggregation):
    """One batch of 4 samples or four micro-batches of 1: the same step, the same gradient, for every
    objective and normaliser (token-mean divides by the step's tokens, not each micro-batch's, so at
    batch size 1 it is still DAPO's token-level loss, not the sequence mean)."""
    checkpoint = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    replies = ["ok", '{"action": "click", "x": 120, "y": 5, "why": "a much longer reply"}', "go", "x" * 30]
    episodes = [episode(task_id="t", attempt=i, reward=float(i % 2), num_steps=1, responses=[reply])
                for i, reply in enumerate(replies)]
    data = write_shards(tmp_path / "data", episodes)
    grads = {}
    for layout, (batch, accumulation) in {"one batch": (4, 1), "micro-batches": (1, 4)}.items():
        training = OptimizationSettings(objective=objective, per_device_batch_size=batch, max_steps=1,
                                        gradient_accumulation_steps=accumulation, log_with="none",
                                        samples=SampleSelection(success_threshold=0.0),
                                        **({"grpo": GRPOSettings(loss_aggregation=aggregation)}
                                       if objective == "grpo" else {}))
        grads[layout] = _first_step_gradient(checkpoint, data, training, tmp_path / layout)
    for a, b in zip(grads["one batch"], grads["micro-batches"], strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7), (a - b).abs().max()
    if aggregation == "token-mean" and objective == "grpo":  # and the two normalisers do differ here
        sequence = OptimizationSettings(objective="grpo", per_device_batch_size=4, max_steps=1,
                                        log_with="none", grpo=GRPOSettings(loss_aggregation="sequence-mean"))
        other = _first_step_gradient(checkpoint, data, sequence, tmp_path / "sequence")
        pairs = zip(grads["one batch"], other, strict=True)
        assert not all(torch.allclose(a, b, rtol=1e-3) for a, b in pairs)
