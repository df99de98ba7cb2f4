"""webgym_rl.samples: which episodes and steps become samples, and what a sample holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import ImageChops

from tests.webgym_rl.synthetic import episode, response_for, shard_paths, step_image, write_shards
from webgym_rl.samples import (
    _EPISODE_COLUMNS,
    _STEP_FIELDS,
    ListedEpisodes,
    MissingColumnError,
    NoTrainingDataError,
    Objective,
    SampleSelection,
    TrainingDataError,
    build_samples,
    describe_sources,
    load_trajectories,
)
from webgym_rollout.trajectory.contract import TRAJECTORY_SCHEMA_VERSION


def _load(*folders, **kw):
    return load_trajectories([str(f) for f in folders], cache_dir=kw.pop("cache_dir", None))


@pytest.fixture
def mixed(tmp_path):
    """Iteration 0: task a succeeds once (its step 1 is a no-op) and fails once; task b fails."""
    episodes = [
        episode(task_id="a", attempt=0, reward=1.0, num_steps=3, same_as_next=[False, True, False]),
        episode(task_id="a", attempt=1, reward=0.0, num_steps=2),
        episode(task_id="b", attempt=0, reward=0.0, num_steps=2),
    ]
    return write_shards(tmp_path / "iter-0", episodes, shard_size=2)


def _kept(samples):
    return sorted((samples[i].episode_id, samples[i].step) for i in range(len(samples)))


def test_the_columns_read_are_columns_of_the_trajectory_contract():
    from webgym_rollout.trajectory.contract import trajectory_features

    features = trajectory_features()
    assert set(_EPISODE_COLUMNS) <= set(features)
    assert set(_STEP_FIELDS) <= set(features["steps"].feature)


def test_filtered_bc_keeps_only_successful_episodes_and_drops_same_as_next_steps(mixed, tmp_path):
    samples = build_samples(_load(mixed, cache_dir=tmp_path / "c"), "filtered_bc")
    assert _kept(samples) == [("a-it0-a0", 0), ("a-it0-a0", 2)]
    counts = samples.counts
    assert (counts.trajectories_read, counts.trajectories_kept) == (3, 1)
    assert (counts.steps_read, counts.steps_kept, counts.same_as_next_dropped) == (7, 2, 1)
    assert counts.skipped == {"episodes with reward < 1": 2}
    assert "3 trajectories read, 1 kept" in counts.summary()


def test_a_sample_is_the_exact_prompt_with_its_screenshots_and_the_raw_response(mixed, tmp_path):
    samples = build_samples(_load(mixed, cache_dir=tmp_path / "c"), Objective.FILTERED_BC)
    index = _kept(samples).index(("a-it0-a0", 2))
    sample = samples[index]
    original = episode(task_id="a", attempt=0, reward=1.0, num_steps=3).steps[2]
    stored = json.loads(original.messages)
    assert sample.response == response_for("a", 2)
    assert [m["role"] for m in sample.messages] == [m["role"] for m in stored]
    parts, stored_parts = sample.messages[1]["content"], stored[1]["content"]
    assert [p["type"] for p in parts] == [p["type"] for p in stored_parts]
    shown = [p for p in parts if p["type"] == "image"]
    assert [p["step"] for p in stored_parts if p["type"] == "image"] == [1, 2]
    for part, step in zip(shown, (1, 2), strict=True):
        expected = step_image(episode(task_id="a", attempt=0, num_steps=3).steps[step])
        assert ImageChops.difference(part["image"], expected).getbbox() is None
    assert [p["text"] for p in parts if p["type"] == "text"] == [p["text"] for p in stored_parts
                                                                  if p["type"] == "text"]


def test_reinforce_uses_every_judged_episode_with_a_per_task_baseline(tmp_path):
    episodes = [
        episode(task_id="a", attempt=0, reward=1.0, num_steps=1),
        episode(task_id="a", attempt=1, reward=0.0, num_steps=1),
        episode(task_id="a", attempt=2, reward=0.0, num_steps=1),
        episode(task_id="b", attempt=0, reward=1.0, num_steps=1),
        episode(task_id="b", attempt=1, reward=None, num_steps=1),
        episode(task_id="c", attempt=0, reward=0.0, num_steps=1, status="error:browser_crashed"),
        episode(task_id="d", attempt=0, reward=1.0, num_steps=1, split="test"),
    ]
    folder = write_shards(tmp_path / "it", episodes)
    samples = build_samples(_load(folder, cache_dir=tmp_path / "c"), "reinforce")
    advantage = {samples[i].episode_id: samples.advantages[i] for i in range(len(samples))}
    assert advantage == pytest.approx({"a-it0-a0": 2 / 3, "a-it0-a1": -1 / 3, "a-it0-a2": -1 / 3,
                                       "b-it0-a0": 0.0})
    assert samples.counts.skipped == {"episodes without reward": 1, "infrastructure failures": 1,
                                      "test-split episodes": 1}
    assert samples.weights == [1.0] * 4

    normalised = build_samples(_load(folder, cache_dir=tmp_path / "c"), "reinforce",
                               SampleSelection(normalize_advantage=True, advantage_clip=1.0))
    std = (2 / 9) ** 0.5
    values = {normalised[i].episode_id: normalised.advantages[i] for i in range(len(normalised))}
    assert values["a-it0-a0"] == pytest.approx(min(1.0, (2 / 3) / std), rel=1e-4)
    assert values["a-it0-a1"] == pytest.approx(-(1 / 3) / std, rel=1e-4)
    assert max(abs(v) for v in values.values()) <= 1.0


def test_last_k_iterations_and_recency_weights(tmp_path):
    folders = [write_shards(tmp_path / f"iter-{i}", [episode(task_id="a", iteration=i, num_steps=1)])
               for i in range(3)]
    samples = build_samples(_load(*folders, cache_dir=tmp_path / "c"), "filtered_bc",
                            SampleSelection(last_k_iterations=2, recency_power=2.0))
    weight = {samples[i].episode_id: samples.weights[i] for i in range(len(samples))}
    assert weight == {"a-it2-a0": 1.0, "a-it1-a0": 0.25}
    assert samples.counts.iterations_kept == [1, 2]
    assert samples.counts.skipped == {"episodes older than the last 2 iterations": 1}
    uniform = build_samples(_load(*folders, cache_dir=tmp_path / "c"), "filtered_bc",
                            SampleSelection(last_k_iterations=0, recency_power=0.0))
    assert len(uniform) == 3 and set(uniform.weights) == {1.0}


def test_sources_are_described_with_a_version_that_follows_the_content(tmp_path):
    folder = write_shards(tmp_path / "it", [episode(task_id="a", num_steps=1)])
    first = describe_sources(_load(folder, cache_dir=tmp_path / "c"))
    write_shards(folder, [episode(task_id="a", num_steps=2)])
    second = describe_sources(_load(folder, cache_dir=tmp_path / "c2"))
    assert first[0]["id"] == str(folder) and first[0]["rows"] == 1
    assert first[0]["version"] != second[0]["version"]


def test_an_empty_set_stops_with_a_clear_message(tmp_path):
    folder = write_shards(tmp_path / "empty", [])
    with pytest.raises(NoTrainingDataError, match="the trajectory set is empty"):
        _load(folder)
    (tmp_path / "nothing").mkdir()
    with pytest.raises(NoTrainingDataError, match="no parquet shards"):
        _load(tmp_path / "nothing")
    with pytest.raises(NoTrainingDataError, match="no trajectory sources"):
        load_trajectories([])


def test_a_reward_free_set_stops_with_a_clear_message(tmp_path):
    folder = write_shards(tmp_path / "it", [episode(task_id=t, reward=None) for t in "ab"])
    for objective in Objective:
        with pytest.raises(NoTrainingDataError, match="reward-free"):
            build_samples(_load(folder, cache_dir=tmp_path / "c"), objective)


def test_no_success_or_no_signal_stops_each_objective(tmp_path):
    folder = write_shards(tmp_path / "it", [episode(task_id="a", reward=0.0, attempt=a) for a in range(2)])
    with pytest.raises(NoTrainingDataError, match="nothing to imitate"):
        build_samples(_load(folder, cache_dir=tmp_path / "c"), "filtered_bc")
    with pytest.raises(NoTrainingDataError, match="no learning signal"):
        build_samples(_load(folder, cache_dir=tmp_path / "c"), "reinforce")
    with pytest.raises(TrainingDataError, match="unknown objective 'ppo'"):
        build_samples(_load(folder, cache_dir=tmp_path / "c"), "ppo")


def test_a_shard_missing_a_column_is_named(tmp_path):
    good = write_shards(tmp_path / "good", [episode(task_id="a")])
    bad = write_shards(tmp_path / "bad", [episode(task_id="b")], drop_columns=["reward"])
    with pytest.raises(MissingColumnError) as info:
        _load(good, bad)
    message = str(info.value)
    (shard,) = shard_paths(bad)
    assert shard.name in message and str(bad) in message and "'reward'" in message


def test_only_the_shards_of_the_manifest_are_read_and_hidden_temporaries_never(tmp_path):
    folder = write_shards(tmp_path / "it", [episode(task_id="a")])
    (shard,) = shard_paths(folder)
    # A crash left an unlisted copy of the shard and a half-written temporary file behind.
    (folder / "data" / "train-0badc0de-00001.parquet").write_bytes(shard.read_bytes())
    (folder / "data" / ".tmp-train-0badc0de-00002.parquet").write_bytes(shard.read_bytes()[:100])
    assert len(_load(folder, cache_dir=tmp_path / "c")[0].dataset) == 1
    (folder / "manifest.json").unlink()
    assert len(_load(folder, cache_dir=tmp_path / "c2")[0].dataset) == 2  # no manifest: every visible shard
    (folder / "manifest.json").write_text('{"shards": [{"path": "data/gone.parquet"}]}')
    with pytest.raises(TrainingDataError, match="lists data/gone.parquet, which is missing"):
        _load(folder)


def test_a_schema_1_1_folder_gives_the_same_samples_as_today(tmp_path):
    import pyarrow.parquet as pq

    from tests.support.schema_1_1 import write_1_1

    episodes = [episode(task_id="a", attempt=0, reward=1.0, num_steps=3, same_as_next=[False, True, False]),
                episode(task_id="a", attempt=1, reward=0.0, num_steps=2)]
    old = write_1_1(tmp_path / "v1.1", episodes)
    new = write_shards(tmp_path / "today", episodes)
    (shard,) = _load(old, cache_dir=tmp_path / "c")[0].files
    assert "policy_version" not in str(pq.read_schema(shard)) and "outcome" not in pq.read_schema(shard).names
    samples = {}
    everything = SampleSelection(success_threshold=0.0)
    for name, folder, version in (("1.1", old, "1.1"), ("today", new, TRAJECTORY_SCHEMA_VERSION)):
        (found,) = _load(folder, cache_dir=tmp_path / f"c{name}")
        assert found.schema_version == version
        samples[name] = build_samples([found], "filtered_bc", everything)
    assert _kept(samples["1.1"]) == _kept(samples["today"]) == [("a-it0-a0", 0), ("a-it0-a0", 2),
                                                               ("a-it0-a1", 0), ("a-it0-a1", 1)]
    # Schema 1.1 kept no log-probabilities: a policy-gradient objective cannot weigh its steps, and says so.
    with pytest.raises(NoTrainingDataError, match="4 without behaviour log-probabilities"):
        build_samples(_load(old, cache_dir=tmp_path / "c-pg"), "reinforce")
    for i in range(len(samples["1.1"])):
        old_sample, new_sample = samples["1.1"][i], samples["today"][i]
        assert old_sample.response == new_sample.response and old_sample.advantage == new_sample.advantage
        old_parts, new_parts = old_sample.messages[1]["content"], new_sample.messages[1]["content"]
        assert [p.get("text") for p in old_parts] == [p.get("text") for p in new_parts]
        for a, b in zip(old_parts, new_parts, strict=True):
            if a["type"] == "image":
                assert ImageChops.difference(a["image"], b["image"]).getbbox() is None


def test_a_schema_1_4_folder_gives_integer_policy_versions(tmp_path):
    # Schema 1.4 stored the endpoint's name for the weights; the trainer reads the number.
    from tests.support.schema_1_4 import write_1_4

    episodes = [episode(task_id="a", attempt=0, reward=1.0, num_steps=2),
                episode(task_id="b", attempt=0, reward=1.0, num_steps=1)]
    old = write_1_4(tmp_path / "v1.4", episodes, [["webgym-policy-v2", "v3"], [""]])
    (found,) = _load(old, cache_dir=tmp_path / "c")
    assert found.schema_version == "1.4"
    samples = build_samples([found], "filtered_bc", SampleSelection(success_threshold=0.0))
    assert samples.policy_versions == [2, 3, None]
    assert [samples[i].policy_version for i in range(len(samples))] == [2, 3, None]


def test_listed_episodes_are_read_where_they_are_as_episodes_of_their_round(tmp_path):
    # Two rollout folders (chunks) that drew the same task; a batch manifest lists some episodes of
    # each and puts them in rounds 3 and 4: only those are read, each as an episode of its round.
    first = write_shards(tmp_path / "chunk-0000", [episode(task_id="a", attempt=0, reward=1.0),
                                                   episode(task_id="b", attempt=0, reward=1.0)])
    second = write_shards(tmp_path / "chunk-0001", [episode(task_id="a", iteration=1, attempt=0, reward=1.0),
                                                    episode(task_id="a", iteration=1, attempt=1, reward=0.0)])
    sets = _load(first, second, cache_dir=tmp_path / "c")
    listed = [ListedEpisodes(sets[0], {"a-it0-a0": 3}),
              ListedEpisodes(sets[1], {"a-it1-a0": 3, "a-it1-a1": 4})]
    samples = build_samples(listed, "filtered_bc", SampleSelection(success_threshold=0.0), newest=4)
    assert samples.counts.trajectories_read == 3 and samples.counts.iterations_kept == [3, 4]
    assert sorted({(samples[i].episode_id, it) for i, it in enumerate(samples.iterations)}) == [
        ("a-it0-a0", 3), ("a-it1-a0", 3), ("a-it1-a1", 4)]
    # reinforce groups by (round, task): round 3's two attempts at task a are one group.
    grouped = build_samples(listed[:1] + [ListedEpisodes(sets[1], {"a-it1-a0": 3, "a-it1-a1": 3})],
                            "reinforce", SampleSelection(), newest=3)
    assert grouped.counts.group_sizes == {"3": 1}


def test_a_status_outside_the_contract_is_named(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = write_shards(tmp_path / "it", [episode(task_id="a"), episode(task_id="b")])
    (shard,) = shard_paths(folder)
    table = pq.read_table(shard)
    statuses = pa.array(["ok", "finished"], type=table.schema.field("status").type)
    pq.write_table(table.set_column(table.schema.get_field_index("status"), "status", statuses), shard)
    with pytest.raises(TrainingDataError, match="episode b-it0-a0 has status 'finished'"):
        build_samples(_load(folder, cache_dir=tmp_path / "c"), "filtered_bc")


def test_a_sample_carries_the_endpoints_logprobs_per_token_and_their_mean(tmp_path):
    import dataclasses

    played = episode(task_id="a", num_steps=2, logprobs=None)
    played.steps[0] = dataclasses.replace(played.steps[0], logprobs=(-0.5, -1.5, -1.0))
    samples = build_samples(_load(write_shards(tmp_path / "it", [played]), cache_dir=tmp_path / "c"),
                            "filtered_bc")
    by_step = {samples[i].step: samples[i] for i in range(len(samples))}
    assert by_step[0].behaviour_logprobs == (-0.5, -1.5, -1.0) and by_step[0].behaviour_logprob == -1.0
    assert by_step[1].behaviour_logprobs is None and by_step[1].behaviour_logprob is None  # none returned


# ------------------------------------------- the samples of a written dataset, against a recording

SAMPLES_GOLDEN = Path(__file__).with_name("samples_golden.json")
"""What `build_samples` made of `golden_episodes` for each objective, recorded before the trainer
read its columns through the trajectory contract's names and rules, and recorded again when the
policy-gradient objectives stopped training on steps without behaviour log-probabilities and on the
no-op steps of episodes with a positive advantage: they must not change by accident."""


def golden_episodes() -> list:
    """Two iterations, every kind of ending: successes and failures, a no-op step, a timeout, a
    blocked site, an infrastructure failure, a test-split episode, one never judged, logprobs (and an
    episode without them, as a policy without a model plays)."""
    import dataclasses

    found = []
    for it in (0, 1):  # (a writer keeps one episode per task and attempt)
        found += [
            episode(task_id="a", iteration=it, attempt=10 * it, reward=1.0, num_steps=3,
                    same_as_next=[False, True, False]),
            episode(task_id="a", iteration=it, attempt=10 * it + 1, reward=0.0, num_steps=2,
                    status="timeout"),
            episode(task_id="b", iteration=it, attempt=10 * it, reward=0.0, num_steps=2, logprobs=None),
            episode(task_id="b", iteration=it, attempt=10 * it + 1, reward=1.0, num_steps=1),
            episode(task_id="c", iteration=it, attempt=10 * it, reward=0.0, num_steps=1, status="blocked"),
            episode(task_id="c", iteration=it, attempt=10 * it + 1, reward=0.0, num_steps=2,
                    status="error:policy_timeout"),
            episode(task_id="d", iteration=it, attempt=10 * it, reward=1.0, num_steps=1, split="test"),
            episode(task_id="e", iteration=it, attempt=10 * it, reward=None, num_steps=1),
            episode(task_id="f", iteration=it, attempt=10 * it, reward=0.0, num_steps=1),
            episode(task_id="f", iteration=it, attempt=10 * it + 1, reward=0.0, num_steps=1),
        ]
    first = found[0]
    first.steps[0] = dataclasses.replace(first.steps[0], logprobs=(-0.25, -0.75))
    return found


def sample_record(samples) -> dict:
    """Everything a `StepSamples` holds, images as digests of their RGB pixels."""
    import hashlib

    items = []
    for i in range(len(samples)):
        sample = samples[i]
        messages = []
        for message in sample.messages:
            content = message["content"]
            if isinstance(content, list):
                content = [{"type": "image", "rgb": hashlib.sha256(part["image"].tobytes()).hexdigest()[:16],
                            "size": list(part["image"].size)} if part["type"] == "image" else part
                           for part in content]
            messages.append({**message, "content": content})
        items.append({"episode_id": sample.episode_id, "step": sample.step,
                      "advantage": round(sample.advantage, 6), "weight": round(samples.weights[i], 6),
                      "iteration": samples.iterations[i], "response": sample.response, "messages": messages,
                      "behaviour_logprob": sample.behaviour_logprob,
                      "behaviour_logprobs": list(sample.behaviour_logprobs or ()) or None})
    return {"samples": items, "counts": samples.counts.as_dict()}


def recorded_samples(tmp_path) -> dict:
    folder = write_shards(tmp_path / "golden", golden_episodes(), shard_size=7)
    sources = _load(folder, cache_dir=tmp_path / "golden-cache")
    runs = {"filtered_bc": ("filtered_bc", SampleSelection()),
            "filtered_bc_all": ("filtered_bc", SampleSelection(success_threshold=0.0, drop_same_as_next=False,
                                                               last_k_iterations=1)),
            "reinforce": ("reinforce", SampleSelection(normalize_advantage=True)),
            "grpo": ("grpo", SampleSelection(last_k_iterations=0))}
    return {name: sample_record(build_samples(sources, objective, selection))
            for name, (objective, selection) in runs.items()}


def test_the_samples_of_a_written_dataset_are_those_recorded(tmp_path):
    expected = json.loads(SAMPLES_GOLDEN.read_text(encoding="utf-8"))
    assert recorded_samples(tmp_path) == expected


def test_filtered_bc_imitates_rewards_from_its_threshold_up():
    assert [SampleSelection().imitates(r) for r in (1.0, 0.99, 0.0)] == [True, False, False]
    everything_judged = SampleSelection(success_threshold=0.0)
    assert [everything_judged.imitates(r) for r in (1.0, 0.0, -1.0)] == [True, True, False]


def test_policy_gradient_objectives_never_take_a_step_without_behaviour_logprobs_as_on_policy(tmp_path):
    """A reply of a policy without a model (random, scripted) has no behaviour log-probabilities:
    filtered_bc imitates it, reinforce and grpo leave it out (counted, and the message says why when
    nothing is left), while its episode's reward still counts in its group's baseline."""
    played = [episode(task_id="a", attempt=0, reward=1.0, num_steps=2),
              episode(task_id="a", attempt=1, reward=0.0, num_steps=2, logprobs=None)]
    sources = _load(write_shards(tmp_path / "it", played), cache_dir=tmp_path / "c")
    assert len(build_samples(sources, "filtered_bc", SampleSelection(success_threshold=0.0))) == 4
    for objective in ("reinforce", "grpo"):
        samples = build_samples(sources, objective)
        assert _kept(samples) == [("a-it0-a0", 0), ("a-it0-a0", 1)]
        assert samples.advantages == [0.5, 0.5]  # the baseline: the mean of both attempts' rewards
        assert samples.counts.steps_without_logprobs == 2
        assert "2 without behaviour log-probabilities dropped" in samples.counts.summary()
    random_only = _load(write_shards(tmp_path / "random", [
        episode(task_id="a", attempt=i, reward=float(i), num_steps=1, logprobs=None) for i in (0, 1)]),
        cache_dir=tmp_path / "c2")
    with pytest.raises(NoTrainingDataError, match="2 without behaviour log-probabilities .* cannot weigh"):
        build_samples(random_only, "grpo")


@pytest.mark.parametrize("rule, kept_no_ops", [("penalise", [("a-it0-a1", 0)]), ("drop", []),
                                               ("keep", [("a-it0-a0", 0), ("a-it0-a1", 0)])])
def test_no_op_steps_of_the_policy_gradient_objectives_follow_their_setting(tmp_path, rule, kept_no_ops):
    """penalise (the published recipe): a failed episode's no-op keeps its negative advantage, a
    successful one's is not reinforced; drop; keep. filtered_bc drops them by its own setting."""
    played = [episode(task_id="a", attempt=0, reward=1.0, num_steps=2, same_as_next=[True, False]),
              episode(task_id="a", attempt=1, reward=0.0, num_steps=2, same_as_next=[True, False])]
    sources = _load(write_shards(tmp_path / "it", played), cache_dir=tmp_path / "c")
    for objective in ("reinforce", "grpo"):
        samples = build_samples(sources, objective, SampleSelection(policy_gradient_no_ops=rule))
        no_ops = [(episode_id, step) for episode_id, step in _kept(samples) if step == 0]
        assert no_ops == kept_no_ops, objective
        assert samples.counts.same_as_next_dropped == 2 - len(kept_no_ops)
    for drop, steps in ((True, 1), (False, 2)):
        imitated = build_samples(sources, "filtered_bc", SampleSelection(drop_same_as_next=drop))
        assert len(imitated) == steps
    with pytest.raises(ValueError, match="policy_gradient_no_ops: 'sometimes' is unknown"):
        SampleSelection(policy_gradient_no_ops="sometimes")


def test_a_task_set_given_as_training_data_is_named_as_one(tmp_path):
    """``webgym-rl train --data TASKS`` reads its --data with `load_trajectories`."""
    from webgym_data.build import BuildSettings, build
    from webgym_data.split import SplitSettings

    seed = tmp_path / "seed.jsonl"
    seed.write_text(json.dumps({"task_name": "Report the opening hours of the museum",
                                "website": "https://www.museum.example"}) + "\n")
    build(BuildSettings(out=tmp_path / "tasks", importers=(("generic", str(seed)),),
                        split=SplitSettings(test_size=0), progress=False))
    with pytest.raises(TrainingDataError) as caught:
        load_trajectories([tmp_path / "tasks"])
    message = str(caught.value)
    assert f"{tmp_path / 'tasks'} is a task set" in message and "not a trajectory set" in message
    assert f"webgym-rollout run --tasks {tmp_path / 'tasks'}" in message
