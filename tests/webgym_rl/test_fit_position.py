"""FitPosition: where Trainer.fit stands in the data order (a checkpoint records it)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.webgym_rl.synthetic import standard_iteration, tiny_checkpoint
from webgym_rl.samples import build_samples, load_trajectories
from webgym_rl.settings import GRPOSettings, OptimizationSettings
from webgym_rl.train import EpochOrder, FitPosition, Trainer


def test_a_batch_is_passed_when_its_last_pass_is_done():
    position = FitPosition(epoch=1, batches_in_epoch=4)
    assert position.passed(2, passes=2) is False
    assert position == FitPosition(epoch=1, batches_in_epoch=4, ppo_epoch=1)
    assert position.passed(2, passes=2) is True  # the batch's 2 micro-batches are done
    assert position == FitPosition(epoch=1, batches_in_epoch=6, ppo_epoch=0)
    older = {"epoch": 2, "batches_in_epoch": 3}  # a checkpoint written before ppo_epoch
    assert FitPosition.from_state(older) == FitPosition(2, 3, 0)


def _trainer(model, tmp_path, name):
    training = OptimizationSettings(objective="grpo", grpo=GRPOSettings(ppo_epochs=2), learning_rate=1e-2,
                                    log_with="none", per_device_batch_size=2, max_steps=3)
    return Trainer(model=str(model), model_revision=None, training=training, out=tmp_path / name, seed=0,
                   total_steps=3)


def test_fit_moves_the_position_and_a_dict_still_works_with_a_warning(tmp_path_factory, tmp_path):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    data = standard_iteration(tmp_path / "it", tasks=2)
    samples = build_samples(load_trajectories([data], cache_dir=tmp_path / "c"), "grpo")
    typed, position = _trainer(model, tmp_path, "typed"), FitPosition()
    order = EpochOrder(samples.weights, 0)
    first = typed.fit(typed.loader(samples, order), order, until=3, position=position)
    # 3 steps of 2 passes each: one batch done (one micro-batch of 2 samples), the second passed once.
    assert position == FitPosition(epoch=0, batches_in_epoch=1, ppo_epoch=1)

    old = _trainer(model, tmp_path, "dict")
    given = {"epoch": 0, "batches_in_epoch": 0, "ppo_epoch": 0}
    order = EpochOrder(samples.weights, 0)
    with pytest.warns(DeprecationWarning, match="pass a FitPosition"):
        second = old.fit(old.loader(samples, order), order, until=3, position=given)
    assert given == dataclasses.asdict(position)  # updated in place, as before
    assert [e["loss"] for e in second.log_history] == pytest.approx([e["loss"] for e in first.log_history])
