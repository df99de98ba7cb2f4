"""webgym_rl.loop.resident: the trainer that stays up across rounds, with tiny real models on CPU.

The weights after K rounds equal one continuous run over the same batches in the same order (the
optimizer's moments and the schedule carry over), where a fresh trainer per round (what the loop
did before) ends elsewhere; a full checkpoint resumes exactly; the trainer runs as a child process
and as two gloo ranks under ``accelerate launch`` that stay up between rounds."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT, free_port
from tests.webgym_rl.synthetic import standard_iteration, tiny_checkpoint
from webgym_rl.errors import NoTrainingDataError
from webgym_rl.loop.resident import ResidentTrainer, TrainerProcess, TrainerSetup
from webgym_rl.samples import SampleSelection, build_samples, load_trajectories
from webgym_rl.settings import OptimizationSettings
from webgym_rl.train import EpochOrder, Trainer

ROUNDS, STEPS, SEED = 3, 2, 3
# Each round trains only its own batch (last K = 1): the rounds' batches are b0, b1, b2 in order.
# A linear schedule with warm-up: a run that restarted it each round would show.
TRAINING = OptimizationSettings(max_steps=STEPS, per_device_batch_size=2, learning_rate=5e-3,
                                lr_scheduler="linear", warmup_steps=1, log_with="none",
                                samples=SampleSelection(last_k_iterations=1))


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    root = tmp_path_factory.mktemp("batches")
    # Per round: 2 successful episodes x 2 steps = 4 samples, one epoch of 2 steps of batch 2.
    return [standard_iteration(root / f"round-{r}", iteration=r, tasks=2, attempts=2) for r in range(ROUNDS)]


def _setup(model: Path, out: Path, **changes) -> TrainerSetup:
    values = dict(model=str(model), out=str(out), seed=SEED, total_steps=ROUNDS * STEPS, training=TRAINING)
    return TrainerSetup(**{**values, **changes})


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    model = trainer.accelerator.unwrap_model(trainer.model)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6, rtol=1e-5) for k in a)


class _FixedOrder:
    """A sampler that yields a fixed list of indices (one "epoch")."""

    def __init__(self, indices: list[int]):
        self.indices, self.epoch = indices, 0

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self):
        return iter(self.indices)


def test_k_rounds_of_the_resident_trainer_equal_one_run_over_the_same_batches(tmp_path_factory, tmp_path,
                                                                              batches):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    resident = ResidentTrainer(_setup(model, tmp_path / "resident"))
    records = [resident.train_round(r, [[r, str(batches[r])]]) for r in range(ROUNDS)]
    assert [r["steps"] for r in records] == [STEPS] * ROUNDS
    assert [r["trainer_step"] for r in records] == [STEPS * (r + 1) for r in range(ROUNDS)]
    assert [r["window"] for r in records] == [[r] for r in range(ROUNDS)]
    after_rounds = _weights(resident.trainer)

    # One continuous run: the same samples in the same order (each round's epoch order), one optimizer
    # and one schedule over all the steps.
    samples, indices, offset = [], [], 0
    for r in range(ROUNDS):
        found = build_samples(load_trajectories([batches[r]]), "filtered_bc", TRAINING.samples, newest=r)
        order = list(EpochOrder(found.weights, SEED * 1000 + r))
        assert len(order) == STEPS * TRAINING.per_device_batch_size  # one epoch per round: no partial batch
        indices += [offset + i for i in order]
        samples.append(found)
        offset += len(found)
    whole = Trainer(model=str(model), model_revision=None, training=TRAINING, out=tmp_path / "one-run",
                    seed=SEED, total_steps=ROUNDS * STEPS)
    order = _FixedOrder(indices)
    whole.fit(whole.loader(torch.utils.data.ConcatDataset(samples), order), order, until=ROUNDS * STEPS)
    assert _close(after_rounds, _weights(whole))

    # What the loop used to do, a fresh trainer (optimizer, schedule) per round from the previous
    # round's weights, ends elsewhere: the test can tell the two apart.
    weights_dir = model
    for r in range(ROUNDS):
        fresh = ResidentTrainer(_setup(weights_dir, tmp_path / f"fresh-{r}", total_steps=STEPS))
        fresh.train_round(r, [[r, str(batches[r])]])
        weights_dir = tmp_path / f"fresh-{r}" / "weights"
        fresh.save_version(r + 1, str(weights_dir))
    restarted = _weights(fresh.trainer)
    assert not _close(after_rounds, restarted)


def test_a_full_checkpoint_resumes_the_run_exactly(tmp_path_factory, tmp_path, batches):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    going = ResidentTrainer(_setup(model, tmp_path / "a"))
    for r in range(2):
        going.train_round(r, [[r, str(batches[r])]])
    going.checkpoint(1, str(tmp_path / "checkpoint"))
    assert (tmp_path / "checkpoint" / "training_state" / "optimizer.bin").is_file()
    going.train_round(2, [[2, str(batches[2])]])

    resumed = ResidentTrainer(_setup(model, tmp_path / "b", resume_from=str(tmp_path / "checkpoint")))
    assert (resumed.round, resumed.trainer.step) == (1, 2 * STEPS)
    record = resumed.train_round(2, [[2, str(batches[2])]])
    assert record["trainer_step"] == ROUNDS * STEPS
    assert _close(_weights(going.trainer), _weights(resumed.trainer))


def test_the_trainer_in_a_child_process_reports_no_data_and_failures_by_kind(tmp_path_factory, tmp_path,
                                                                             batches):
    from tests.webgym_rl.synthetic import episode, write_shards
    from webgym_rl.errors import LoopError

    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    failed = write_shards(tmp_path / "failed", [episode(task_id="t", iteration=0, reward=0.0)])
    child = TrainerProcess(_setup(model, tmp_path / "trainer"), tmp_path / "trainer" / "control")
    try:
        info = child.call("info")
        assert info["pid"] != os.getpid() and info["round"] == -1
        with pytest.raises(NoTrainingDataError, match="filtered_bc: no trajectory .* has reward >= 1"):
            child.call("train_round", r=0, sources=[[0, str(failed)]])
        with pytest.raises(LoopError, match=r"the resident trainer failed in train_round: .*no-such-folder"):
            child.call("train_round", r=0, sources=[[0, str(tmp_path / "no-such-folder")]])
        record = child.call("train_round", r=0, sources=[[0, str(batches[0])]])  # still up, nothing lost
        assert record["steps"] == STEPS and child.call("info")["pid"] == info["pid"]
    finally:
        child.close()
    assert not list((tmp_path / "trainer" / "control").glob("request-*"))


@pytest.mark.slow
def test_two_gloo_ranks_stay_up_across_rounds_under_accelerate_launch(tmp_path_factory, tmp_path, batches,
                                                                     monkeypatch):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    accelerate = Path(sys.executable).with_name("accelerate")
    launcher = (f"{accelerate} launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no "
                f"--dynamo_backend no --main_process_port {free_port()}")
    # The launched ranks inherit these: gloo on CPU (as the DDP test of webgym_rl.train runs).
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    child = TrainerProcess(_setup(model, tmp_path / "trainer"), tmp_path / "trainer" / "control",
                           launcher=launcher)
    try:
        first = child.call("info")
        assert first["num_processes"] == 2
        for r in range(2):
            record = child.call("train_round", r=r, sources=[[r, str(batches[r])]])
            assert record["trainer_step"] == STEPS * (r + 1)
            child.call("save_version", version=r + 1, checkpoint=str(tmp_path / f"v{r + 1}"))
        child.call("checkpoint", r=1, folder=str(tmp_path / "checkpoint"))
        assert child.call("info")["pid"] == first["pid"]  # the same rank 0 from the first round to the last
    finally:
        child.close()
    states = [json.loads((tmp_path / f"v{v}" / "trainer_state.json").read_text()) for v in (1, 2)]
    assert [s["round"] for s in states] == [0, 1] and {s["pid"] for s in states} == {first["pid"]}
    assert all(s["num_processes"] == 2 and s["launched"] for s in states)
    # Both ranks saved their state into the full checkpoint.
    assert (tmp_path / "checkpoint" / "training_state" / "random_states_1.pkl").is_file()
