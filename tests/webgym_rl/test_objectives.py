"""webgym_rl.objectives: the losses, checked against plain cross-entropy and by gradient sign."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from webgym_rl.objectives import (
    OBJECTIVES,
    ObjectiveBatch,
    filtered_bc,
    grpo,
    logit_positions,
    reinforce,
    response_logprobs,
)
from webgym_rl.samples import Objective
from webgym_rl.settings import OptimizationSettings

SETTINGS = OptimizationSettings()


def _call(fn, logits, labels, advantages=None, behaviour=None, **settings):
    """`fn` on one `ObjectiveBatch`; `behaviour` per sample (broadcast over its response tokens)."""
    per_token = None
    if behaviour is not None:
        mask = labels[:, 1:] != -100
        per_token = torch.where(mask, behaviour[:, None].expand(mask.shape), torch.tensor(float("nan")))
    advantages = advantages if advantages is not None else torch.ones(labels.shape[0])
    batch = ObjectiveBatch(logits=logits, labels=labels, advantages=advantages, behaviour_logprobs=per_token)
    return fn(batch, OptimizationSettings(**settings) if settings else SETTINGS)


def _batch(seed=0, vocab=11):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 6, vocab, generator=generator)
    labels = torch.full((2, 6), -100)
    labels[0, 3:] = torch.tensor([1, 2, 3])
    labels[1, 4:] = torch.tensor([4, 5])
    return logits, labels


def test_every_objective_has_its_loss_and_nothing_else_does():
    assert set(OBJECTIVES) == set(Objective)
    assert OBJECTIVES[Objective.FILTERED_BC] is filtered_bc and OBJECTIVES[Objective.REINFORCE] is reinforce
    assert OBJECTIVES[Objective("reinforce")] is reinforce  # the settings' string names the same loss
    assert OBJECTIVES[Objective("grpo")] is grpo


def test_filtered_bc_is_the_cross_entropy_of_the_labelled_tokens():
    logits, labels = _batch()
    loss, metrics = _call(filtered_bc, logits, labels)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=-100)
    assert torch.allclose(loss, expected)
    assert metrics["tokens"] == 5


def test_unlabelled_positions_do_not_matter():
    logits, labels = _batch()
    changed = logits.clone()
    changed[0, :2] += 5.0  # predicts labels[0, 1:3], all -100
    changed[:, -1] += 3.0  # the last position predicts nothing
    for fn in OBJECTIVES.values():
        assert torch.equal(_call(fn, logits, labels, torch.tensor([1.0, -1.0]))[0],
                           _call(fn, changed, labels, torch.tensor([1.0, -1.0]))[0]), fn.__name__


def test_reinforce_weights_each_sample_by_its_advantage():
    logits, labels = _batch()
    logp, mask = response_logprobs(logits, labels)
    per_sample = logp.sum(1) / mask.sum(1)
    loss, _ = _call(reinforce, logits, labels, torch.tensor([2.0, -0.5]))
    assert torch.allclose(loss, -(2.0 * per_sample[0] - 0.5 * per_sample[1]) / 2)


def test_a_negative_advantage_gives_the_opposite_gradient():
    logits, labels = _batch()
    grads = []
    for advantage in (1.0, -1.0):
        leaf = logits[:1].clone().requires_grad_(True)
        _call(reinforce, leaf, labels[:1], torch.tensor([advantage]))[0].backward()
        grads.append(leaf.grad)
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], -grads[1])
    # With advantage +1 a gradient step raises the response's likelihood; with -1 it lowers it.
    for advantage, sign in ((1.0, 1), (-1.0, -1)):
        leaf = logits[:1].clone().requires_grad_(True)
        _call(reinforce, leaf, labels[:1], torch.tensor([advantage]))[0].backward()
        before = response_logprobs(logits[:1], labels[:1])[0].sum()
        after = response_logprobs(logits[:1] - 0.1 * leaf.grad, labels[:1])[0].sum()
        assert sign * (after - before) > 0


def test_a_negative_advantage_sample_pushes_a_real_model_the_other_way(tmp_path_factory, tmp_path):
    from tests.webgym_rl.synthetic import episode, tiny_checkpoint, write_shards
    from webgym_rl.collate import Collator
    from webgym_rl.modeling import load_model, load_processor
    from webgym_rl.samples import build_samples, load_trajectories

    model_dir = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    folder = write_shards(tmp_path / "it", [episode(task_id="a", attempt=a, reward=float(a == 0), num_steps=1)
                                            for a in range(2)])
    samples = build_samples(load_trajectories([folder], cache_dir=tmp_path / "c"), "reinforce")
    batch = Collator(load_processor(model_dir))([samples[1]])  # the failed attempt
    labels, advantages = batch.pop("labels"), batch.pop("advantages")
    batch.pop("behaviour_logprobs")
    assert advantages.tolist() == [-0.5]
    model = load_model(model_dir)
    grads = []
    for advantage in (advantages, -advantages):
        model.zero_grad()
        _call(reinforce, model(**batch).logits, labels, advantage)[0].backward()
        grads.append(model.lm_head.weight.grad.clone())
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], -grads[1], atol=1e-7)


def test_importance_weights_are_truncated_ratios_and_one_without_behaviour():
    from webgym_rl.objectives import importance_weights

    per_sample = torch.tensor([-1.0, -1.0, -1.0, -1.0])
    behaviour = torch.tensor([-1.0, -1.5, -4.0, float("nan")])
    weights = importance_weights(per_sample, behaviour, clip=2.0)
    assert torch.allclose(weights, torch.tensor([1.0, float(torch.exp(torch.tensor(0.5))), 2.0, 1.0]))
    assert torch.equal(importance_weights(per_sample, behaviour, clip=0.0), torch.ones(4))
    assert torch.equal(importance_weights(per_sample, None, clip=2.0), torch.ones(4))


def test_reinforce_scales_each_sample_by_its_importance_weight_without_differentiating_it():
    logits, labels = _batch()
    logp, mask = response_logprobs(logits, labels)
    per_sample = logp.sum(1) / mask.sum(1)
    advantages = torch.tensor([1.0, 1.0])
    # Sample 0 was rolled out by a policy that liked its reply much less (weight truncated at 2),
    # sample 1 by the same policy (weight 1).
    behaviour = torch.stack([per_sample[0] - 3.0, per_sample[1]])
    loss, metrics = _call(reinforce, logits, labels, advantages, behaviour, importance_clip=2.0)
    assert torch.allclose(loss, -(2.0 * per_sample[0] + per_sample[1]) / 2)
    assert torch.allclose(metrics["importance_weight_mean"], torch.tensor(1.5))
    leaf = logits.clone().requires_grad_(True)
    _call(reinforce, leaf, labels, advantages, behaviour, importance_clip=2.0)[0].backward()
    plain = logits.clone().requires_grad_(True)
    (-(2.0 * (response_logprobs(plain, labels)[0].sum(1) / mask.sum(1))[0]) / 2).backward()
    assert torch.allclose(leaf.grad[0], plain.grad[0])  # the weight is a constant factor


def test_logits_at_the_labelled_positions_alone_give_the_same_log_probabilities_losses_and_gradients():
    logits, labels = _batch()
    positions = logit_positions(labels)
    # Sample 0's labels at 3-5 are predicted from 2-4, sample 1's at 4-5 from 3-4: the union.
    assert positions.tolist() == [2, 3, 4]
    temperatures = torch.tensor([0.7, 1.3])
    behaviour = torch.full((2, 5), float("nan"))
    behaviour[0, 2:] = -1.0
    for fn in OBJECTIVES.values():
        results = []
        for kept in (None, positions):
            leaf = logits.clone().requires_grad_(True)
            given = leaf if kept is None else leaf[:, kept]  # what a model with logits_to_keep returns
            batch = ObjectiveBatch(logits=given, labels=labels, advantages=torch.tensor([1.0, -0.5]),
                                   behaviour_logprobs=behaviour, temperatures=temperatures, positions=kept)
            loss, _ = fn(batch, SETTINGS)
            loss.backward()
            logp, mask = response_logprobs(given.detach(), labels, temperatures, kept)
            results.append((loss.detach(), logp, mask, leaf.grad))
        (full_loss, full_logp, full_mask, full_grad), (loss, logp, mask, grad) = results
        assert logp.shape == full_logp.shape == (2, 5) and torch.equal(mask, full_mask)
        assert torch.allclose(logp, full_logp, atol=1e-6, rtol=0), fn.__name__
        assert torch.allclose(loss, full_loss, atol=1e-6, rtol=0), fn.__name__
        assert torch.allclose(grad, full_grad, atol=1e-6, rtol=0), fn.__name__
        assert full_grad[:, [0, 1, 5]].abs().sum() == 0  # the positions left out carry no gradient anyway


def test_logit_positions_of_a_batch_without_labels_is_position_zero():
    labels = torch.full((2, 6), -100)
    positions = logit_positions(labels)
    assert positions.tolist() == [0]
    logp, mask = response_logprobs(torch.randn(2, 1, 11), labels, positions=positions)
    assert not mask.any() and torch.equal(logp, torch.zeros(2, 5))
