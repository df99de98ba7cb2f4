"""webgym_rl.loop.phases: one recipe whichever schedule runs it, and the pieces both schedules share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.webgym_rl.loops import loop_settings
from webgym_data.sampler import SamplerSettings
from webgym_rl.errors import LoopSettingsError
from webgym_rl.loop.phases import curve_names, curve_panels, draw_tasks
from webgym_rl.loop.run import run_loop
from webgym_rollout.trajectory.reader import read_episodes


def _trainable_steps(folder: str, r: int) -> int:
    """The samples the recipe takes from a batch folder: steps of judged episodes of round `r`,
    no-op steps dropped (threshold 0: every judged episode)."""
    return sum(1 for e in read_episodes(folder) if e.iteration == r and not e.status.is_error
               for s in e.steps if not s.same_as_next)


@pytest.mark.browser
@pytest.mark.slow
def test_both_schedules_apply_the_same_window_weights_and_selection(tmp_path, tiny_qwen2_vl):
    common = dict(iterations=3, last_k_iterations=2, recency_power=1.0, success_threshold=0.0, eval_every=0,
                  bootstrap_policy="random", sampler={"kind": "epoch", "batch_size": 4})
    runs = {}
    for schedule in ("sync", "async"):
        (tmp_path / schedule).mkdir()
        settings = loop_settings(tmp_path / schedule, tiny_qwen2_vl, schedule=schedule, batch_episodes=4,
                                 max_staleness=1, **common)
        runs[schedule] = run_loop(settings).state
    for schedule, state in runs.items():
        for r in range(3):
            record = state.rounds[r]
            # The same window (the last 2 rounds) and recency weights, from the trained samples' provenance.
            assert record.train.window == list(range(max(0, r - 1), r + 1)), (schedule, r)
            assert record.train.weights == ({"0": 1.0} if r == 0 else {str(r - 1): 0.5, str(r): 1.0})
            # Every sample of each round in the window is one trainable step of that round's batch.
            expected = {str(k): _trainable_steps(state.rounds[k].batch.folder, k)
                        for k in record.train.window}
            assert record.train.samples_by_round == {k: n for k, n in expected.items() if n}, (schedule, r)
            assert record.train.counts["objective"] == "filtered_bc"
    # Both trainers ran the same settings (selection, optimizer) from the same model.
    states = {s: json.loads((Path(tmp_path / s / "loop" / "checkpoints" / "v-0003" / "trainer_state.json"))
                            .read_text()) for s in runs}
    assert states["sync"]["settings"] == states["async"]["settings"]
    assert states["sync"]["base_model"] == states["async"]["base_model"] == str(tiny_qwen2_vl)


def test_a_sampler_that_needs_a_history_is_refused_where_none_is_kept(tmp_path):
    from tests.webgym_rl.loops import tasks_file

    tasks = tasks_file(tmp_path / "tasks.jsonl")
    sampler = SamplerSettings(kind="success_aware", batch_size=2)
    with pytest.raises(LoopSettingsError, match="success_aware draws by the outcomes of earlier batches"):
        draw_tasks(source=str(tasks), split="train", sampler=sampler, index=0, target=tmp_path / "t.jsonl")
    # With the history of earlier batches it draws (a task never tried weighs 1).
    from webgym_data.sampler import TaskHistory

    drawn = draw_tasks(source=str(tasks), split="train", sampler=sampler, index=0,
                       target=tmp_path / "t.jsonl", history=TaskHistory)
    assert len(drawn.read_text().splitlines()) == 2
    # `webgym-rollout run` keeps no history: it refuses the sampler with the field named.
    from webgym_rollout.runner import RunSettings

    with pytest.raises(ValueError, match="sampler.kind: success_aware .* `webgym-rollout run` does not keep"):
        RunSettings(tasks=tasks, out=tmp_path / "o", servers=("http://127.0.0.1:1",), sampler=sampler)


def test_each_round_draws_its_own_batch_and_the_same_seed_draws_the_same(tmp_path):
    """Epoch batches without replacement across rounds, recorded before the rollout, the same on a
    rerun with the same seed."""
    from tests.webgym_rl.loops import tasks_file

    tasks = tasks_file(tmp_path / "tasks.jsonl")

    def batches(out: str, seed: int) -> list[list[str]]:
        sampler = SamplerSettings(kind="epoch", batch_size=2, seed=seed)
        drawn = [draw_tasks(source=str(tasks), split="train", sampler=sampler, index=r,
                            target=tmp_path / out / f"round-{r}-tasks.jsonl") for r in (0, 1)]
        return [[json.loads(line)["task_id"] for line in path.read_text().splitlines()] for path in drawn]

    first = batches("a", seed=5)
    assert len(first[0]) == len(first[1]) == 2 and not set(first[0]) & set(first[1])  # no task twice
    assert batches("b", seed=5) == first  # the same seed draws the same batches
    assert batches("a", seed=6) == first  # a rerun of the same folder plays the recorded batches
    others = [batches(f"c{seed}", seed=seed) for seed in (6, 7, 8)]
    assert any(other != first for other in others)
    in_file = {json.loads(line)["task_id"] for line in tasks.read_text().splitlines()}
    assert {t for b in first for t in b} <= in_file


def test_a_batch_whose_episodes_were_all_too_stale_leaves_the_window(tmp_path):
    """An async batch that lost every episode to the staleness bound is an empty folder: the rounds
    whose window holds it train on the other batches instead of stopping."""
    from types import SimpleNamespace

    from webgym_rl.loop.phases import window
    from webgym_rl.loop.state import BatchRecord, LoopState
    from webgym_rollout.trajectory.writer import TrajectoryWriter

    state = LoopState()
    for r, dropped in ((0, []), (1, ["e1", "e2"]), (2, ["e3"])):
        folder = tmp_path / f"round-{r}"
        TrajectoryWriter(folder, run_info={"batch": r}).close()
        episodes = ["e1", "e2"] if r == 1 else ["e3", "e4"]
        state.round(r).batch = BatchRecord(folder=str(folder), episodes=episodes, dropped_stale=dropped)
    loop = SimpleNamespace(state=state, settings=SimpleNamespace(
        training=SimpleNamespace(samples=SimpleNamespace(last_k_iterations=3))))
    assert [r for r, _ in window(loop, 2)] == [0, 2]


def test_an_async_batch_is_a_manifest_the_window_reads_by_folder(tmp_path):
    """An async batch lists (chunk folder, episode id) of the episodes it trains on; the window
    names each folder once per round with its listed episodes (nothing is copied)."""
    from types import SimpleNamespace

    from webgym_rl.loop.phases import window
    from webgym_rl.loop.state import BatchRecord, LoopState

    state = LoopState()
    a, b = str(tmp_path / "chunk-0000"), str(tmp_path / "chunk-0001")
    state.round(0).batch = BatchRecord(folder=str(tmp_path), episodes=["e1", "e2", "e3"],
                                       members=[[a, "e1"], [b, "e2"], [a, "e3"]])
    state.round(1).batch = BatchRecord(folder=str(tmp_path), episodes=["e4", "e5"], dropped_stale=["e4"],
                                       members=[[b, "e5"]])
    state.round(2).batch = BatchRecord(folder=str(tmp_path), episodes=["e6"], dropped_stale=["e6"])
    loop = SimpleNamespace(state=state, settings=SimpleNamespace(
        training=SimpleNamespace(samples=SimpleNamespace(last_k_iterations=3))))
    assert window(loop, 2) == [[0, a, ["e1", "e3"]], [0, b, ["e2"]], [1, b, ["e5"]]]


def test_a_round_with_nothing_to_train_on_records_its_manifest_window(tmp_path):
    # A skipped round records the folders and rounds of its window once each, whatever its shape.
    from types import SimpleNamespace

    from webgym_rl.errors import NoTrainingDataError
    from webgym_rl.loop.phases import train_round
    from webgym_rl.loop.state import BatchRecord, LoopState

    def nothing(*_, **__):
        raise NoTrainingDataError("every episode failed")

    state = LoopState()
    a, b = str(tmp_path / "chunk-0000"), str(tmp_path / "chunk-0001")
    state.round(0).batch = BatchRecord(folder=str(tmp_path), episodes=["e1", "e2", "e3"],
                                       members=[[a, "e1"], [b, "e2"], [a, "e3"]])
    state.round(1).batch = BatchRecord(folder=str(tmp_path), episodes=["e4"], members=[[b, "e4"]])
    loop = SimpleNamespace(state=state, trainer=SimpleNamespace(call=nothing), settings=SimpleNamespace(
        skip_empty_train=True, training=SimpleNamespace(samples=SimpleNamespace(last_k_iterations=2))))
    record = train_round(loop, 1)
    assert record.window == [0, 1] and record.data == [a, b]
    assert "every episode failed" in record.skipped


def test_the_curve_names_version_0_by_its_bootstrap_and_keeps_train_and_test_apart():
    assert curve_names("random", [0, 1, 2]) == {0: "v0 (bootstrap: random)", 1: "v1", 2: "v2"}
    assert curve_names("model", {0})[0] == "v0 (bootstrap: model)"
    assert curve_names("random", [3]) == {3: "v3"}  # a resumed loop's curve without version 0
    panels = curve_panels("test")
    assert set(panels) == {"train", "test"} and "test tasks" in panels["test"]
    assert panels["train"] != panels["test"]
