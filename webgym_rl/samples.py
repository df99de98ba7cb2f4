"""Training samples from trajectory datasets: each objective selects steps of `Episode`s.

A sample is one kept step of a kept episode: its prompt is the exact chat the policy saw at that
step (`expand_messages` puts the screenshots back) and its target is the raw response the policy
returned. Which episodes and steps are kept, and with what weight or advantage, depends on the
`Objective`:

- ``filtered_bc``: steps of successful episodes (``reward >= success_threshold``) of the last K
  iterations, ``same_as_next`` steps dropped (nothing to imitate: `SampleSelection.drop_same_as_next`);
  sampled with recency weights ``(age + 1) ** -recency_power`` (age 0 = the newest iteration). It
  imitates any reply, the random policy's and the scripted expert's included.
- ``reinforce``: steps of every judged episode of the last K iterations; advantage = reward minus
  the mean reward of that task's attempts in the same iteration (optionally divided by the group's
  standard deviation), clipped to ``[-clip, clip]``.
- ``grpo``: the same group-relative advantages (GRPO: a group is the attempts at one task in one
  iteration), but a group whose rewards are all equal carries no signal and is dropped (DAPO's
  dynamic sampling), counted in `SampleCounts.groups_dropped`.

Every step of an episode carries the episode's advantage. `SampleCounts.group_sizes` records how
many groups of each size the reinforce and grpo selections saw. For the two policy-gradient
objectives:

- a step without behaviour log-probabilities (a reply of the random, pixel-random or scripted
  expert policy, or of an endpoint that returned none) is never trained on: the objectives weigh
  each token by how likely the rolling-out policy made it, which such a step cannot say (treating
  it as on-policy would push the model towards replies it never gave). Those steps are counted
  (`SampleCounts.steps_without_logprobs`), and a group's baseline still counts their episode's reward;
- no-op steps (``same_as_next``) follow `SampleSelection.policy_gradient_no_ops`: by default
  ``penalise`` (the published recipe's rule: a no-op of an episode with a negative advantage is
  kept, so it is pushed down; one of a positive advantage is dropped, so it is not reinforced).

Which steps carry the sampled token ids (schema 1.4, trained on exactly) and which are re-tokenised
from their text (older rows, endpoints without ``return_token_ids``) is counted too
(`SampleCounts.retokenised`, with the first few named).

Episodes are never trained on when they belong to the test split, have no reward, or ended in an
infrastructure failure (`EpisodeStatus.is_error`): those say nothing about the agent. That rule is
the trajectory contract's (`webgym_rollout.trajectory.contract.untrainable`, `Episode.trainable`),
and so is what counts as a success. Everything skipped is counted in `SampleCounts`.

Trajectories are read through `webgym_rollout.trajectory.reader.read_episodes` (a rollout folder as its
manifest lists it, or a Hub dataset; schema 1.1 to 1.3). Selection reads a few columns of the
episode rows at the Arrow level, named by the contract (`EpisodeColumn`, `StepField`), so no
screenshot is decoded until a sample is drawn; a `StepSamples` item decodes only the screenshots
its prompt shows.

Exceptions (`webgym_rl.errors`)::

    TrainingDataError (ValueError)   bad or unusable trajectory data; the message names the source
     ├── MissingColumnError          a shard lacks a column the trainer reads (names file + column)
     └── NoTrainingDataError         nothing left to train on (empty, reward-free, all filtered)
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, get_args

from webgym_rl.errors import MissingColumnError, NoTrainingDataError, TrainingDataError
from webgym_rollout.trajectory.contract import (
    EpisodeColumn,
    EpisodeStatus,
    Sampling,
    ShardSchemaError,
    StepField,
    TrajectoryError,
    expand_messages,
    policy_version_number,
    untrainable,
)
from webgym_rollout.trajectory.reader import TrajectorySet, read_episodes

__all__ = [
    "MissingColumnError",
    "NoTrainingDataError",
    "ListedEpisodes",
    "Objective",
    "Sample",
    "SampleCounts",
    "SampleSelection",
    "StepSamples",
    "TrainingDataError",
    "build_samples",
    "describe_sources",
    "load_trajectories",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListedEpisodes:
    """The episodes of a trajectory set that a batch manifest lists, each read as an episode of the
    round the manifest puts it in (the asynchronous loop's batch: episodes of several rollout
    folders, recorded as (folder, episode id) instead of copied; `webgym_rl.loop.phases.window`).
    `build_samples` takes it where it takes a `TrajectorySet`: the set's other episodes are not
    read, and a listed episode's ``iteration`` is its round (the window, recency and groups)."""

    trajectories: TrajectorySet
    rounds: Mapping[str, int]
    """Episode id -> the round whose batch holds it."""


class Objective(StrEnum):
    """The training objectives: which samples `build_samples` selects, and (by the same name) which
    loss of `webgym_rl.objectives` trains on them. The one list of objective names."""

    FILTERED_BC = "filtered_bc"
    """Behaviour cloning on the steps of successful episodes, recency-weighted."""
    REINFORCE = "reinforce"
    """REINFORCE with a per-task baseline over every judged episode."""
    GRPO = "grpo"
    """Clipped-ratio policy gradient on group-relative advantages; groups without signal dropped."""


NoOpSteps = Literal["penalise", "drop", "keep"]


@dataclass(frozen=True)
class SampleSelection:
    """Which episodes and steps become samples, and how they are weighted."""

    last_k_iterations: int = 4
    """Train on the last K rollout iterations present in the data (0 = all)."""
    recency_power: float = 1.0
    """filtered_bc sampling weight of an iteration of age a (0 = newest): (a + 1) ** -power."""
    success_threshold: float = 1.0
    """filtered_bc keeps episodes whose reward is at least this."""
    normalize_advantage: bool = False
    """reinforce, grpo: divide each advantage by the std of its group's rewards (the GRPO paper's
    form; off = the mean baseline alone, as Dr. GRPO recommends)."""
    advantage_clip: float = 5.0
    """reinforce, grpo: clip advantages to [-clip, clip]."""
    drop_same_as_next: bool = True
    """filtered_bc: drop steps whose screenshot equals the next one (no-op actions: nothing to imitate)."""
    policy_gradient_no_ops: NoOpSteps = "penalise"
    """reinforce, grpo: steps whose screenshot equals the next one: penalise (kept where the episode's
    advantage is negative, dropped where it is positive: the published recipe), drop, or keep."""

    def __post_init__(self) -> None:
        if self.last_k_iterations < 0:
            raise ValueError(f"last_k_iterations: must be >= 0, got {self.last_k_iterations}")
        if not self.advantage_clip > 0:
            raise ValueError(f"advantage_clip: must be > 0, got {self.advantage_clip}")
        if self.policy_gradient_no_ops not in get_args(NoOpSteps):
            raise ValueError(f"policy_gradient_no_ops: {self.policy_gradient_no_ops!r} is unknown; choose "
                             f"{', '.join(get_args(NoOpSteps))}")

    def keeps_no_op(self, objective: Objective, advantage: float) -> bool:
        """Whether `objective` trains on a no-op step (``same_as_next``) of an episode with `advantage`."""
        if objective is Objective.FILTERED_BC:
            return not self.drop_same_as_next
        if self.policy_gradient_no_ops == "penalise":
            return advantage < 0
        return self.policy_gradient_no_ops == "keep"

    def imitates(self, reward: float) -> bool:
        """filtered_bc imitates a (trainable) episode of this reward: at least `success_threshold`."""
        return reward >= self.success_threshold


# The columns the selection and the samples read, at the Arrow level, named by the contract (the
# reader checked that every shard has them: they are columns of every schema version).
# Reading `steps` this way touches only the struct fields asked for, never a decoded image.
_EPISODE_COLUMNS = (EpisodeColumn.EPISODE_ID, EpisodeColumn.ITERATION, EpisodeColumn.TASK_ID,
                    EpisodeColumn.SPLIT, EpisodeColumn.REWARD, EpisodeColumn.STATUS, EpisodeColumn.STEPS)
_STEP_FIELDS = (StepField.SCREENSHOT, StepField.MESSAGES, StepField.RESPONSE, StepField.SAME_AS_NEXT)
# Read when the rows have them (schema 1.2 and 1.4 added them).
_OPTIONAL_STEP_FIELDS = (StepField.LOGPROBS, StepField.TOKEN_IDS, StepField.PROMPT_TOKEN_HASH,
                         StepField.SAMPLING, StepField.POLICY_VERSION, StepField.FINISH_REASON,
                         StepField.USAGE)
_NAMED = 5
"""How many re-tokenised samples `SampleCounts` names."""


@dataclass
class Sample:
    """One training sample: the prompt the policy saw and the reply it gave, as text and (schema 1.4)
    as the token ids it sampled."""

    messages: list[dict[str, Any]]
    """Chat messages with image parts ``{"type": "image", "image": PIL.Image}``."""
    response: str
    """The raw policy response (its text)."""
    advantage: float
    """1.0 for filtered_bc; the episode's clipped advantage for reinforce and grpo."""
    episode_id: str
    step: int
    behaviour_logprob: float | None = None
    """Mean log-probability of the response tokens under the policy that produced them, as its
    endpoint returned them (`Step.logprobs`); None when it returned none (the random policy)."""
    behaviour_logprobs: tuple[float, ...] | None = None
    """The same per reply token, as the endpoint returned them; None when it returned none."""
    token_ids: tuple[int, ...] | None = None
    """The reply's token ids as sampled (`Step.token_ids`): the training target, one per entry of
    `behaviour_logprobs`. None: unknown (the collator re-tokenises `response`)."""
    prompt_tokens: int | None = None
    """How many tokens the endpoint's prompt had (`Step.usage`), where it said."""
    prompt_token_hash: str = ""
    """`Step.prompt_token_hash` ("" unknown): the collator checks its prompt against it."""
    sampling: Sampling | None = None
    """How the reply was sampled (`Step.sampling`; None unknown)."""
    finish_reason: str = ""
    """``stop``, ``length`` (cut at max_tokens: no end-of-turn token) or "" (unknown)."""
    policy_version: int | None = None
    """The version that produced the reply (`Step.policy_version`; None unknown)."""

    @property
    def where(self) -> str:
        return f"episode {self.episode_id} step {self.step}"


@dataclass
class SampleCounts:
    """What was read and what was kept, for the log, the metrics and the model card."""

    objective: str
    trajectories_read: int = 0
    trajectories_kept: int = 0
    steps_read: int = 0
    steps_kept: int = 0
    same_as_next_dropped: int = 0
    steps_without_logprobs: int = 0
    """reinforce, grpo: steps left out for want of behaviour log-probabilities (a policy without a
    model, or an endpoint that returned none): never treated as on-policy."""
    retokenised: int = 0
    """Kept steps without token ids (rows before schema 1.4, an endpoint without
    ``return_token_ids``): trained on their re-tokenised text."""
    retokenised_named: list[str] = field(default_factory=list)
    """The first few of them, ``episode E step S``."""
    iterations_kept: list[int] = field(default_factory=list)
    iteration_weights: dict[str, float] = field(default_factory=dict)
    """The sampling weight of each kept iteration's samples (filtered_bc: recency; else 1.0)."""
    samples_by_iteration: dict[str, int] = field(default_factory=dict)
    """Samples kept from each iteration: where the training data came from."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Episodes not used, by reason."""
    group_sizes: dict[str, int] = field(default_factory=dict)
    """reinforce, grpo: attempts per group (one task in one iteration) -> number of such groups."""
    groups_dropped: int = 0
    """grpo: groups whose attempts all got the same reward (no signal), dropped."""

    def summary(self) -> str:
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items())) or "none"
        groups = ""
        if self.group_sizes:
            sizes = ", ".join(f"{n} of {size}" for size, n in sorted(self.group_sizes.items(),
                                                                     key=lambda kv: int(kv[0])))
            groups = f"; groups: {sizes}, {self.groups_dropped} dropped (equal rewards)"
        without = (f", {self.steps_without_logprobs} without behaviour log-probabilities dropped"
                   if self.steps_without_logprobs else "")
        retokenised = ""
        if self.retokenised:
            more = ", ..." if self.retokenised > len(self.retokenised_named) else ""
            named = ", ".join(self.retokenised_named) + more
            retokenised = f"; {self.retokenised} kept steps have no token ids, re-tokenised ({named})"
        return (f"{self.objective}: {self.trajectories_read} trajectories read, "
                f"{self.trajectories_kept} kept (iterations {self.iterations_kept}); "
                f"{self.steps_read} steps read, {self.steps_kept} kept, "
                f"{self.same_as_next_dropped} same_as_next dropped{without}; skipped: {skipped}{groups}"
                f"{retokenised}")

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _StepRef:
    source: int
    row: int
    step: int


@dataclass(frozen=True)
class _StepFlags:
    """What the selection needs of one step, read from a few Arrow fields."""

    same_as_next: bool
    logprobs: int
    """How many behaviour log-probabilities it has."""
    token_ids: int
    """How many sampled token ids it has."""
    policy_version: int | None = None


@dataclass(frozen=True)
class _Candidate:
    """An episode that may be trained on, as the selection sees it (read from a few columns)."""

    source: int
    """Index of its `TrajectorySet`."""
    row: int
    """Row of the episode in that set's dataset."""
    episode_id: str
    iteration: int
    task_id: str
    reward: float
    steps: list[_StepFlags]
    """One per step."""


class StepSamples:
    """A map-style dataset of `Sample` (usable by a torch ``DataLoader``); images decode lazily."""

    def __init__(self, sources: Sequence[TrajectorySet], refs: Sequence[_StepRef],
                 advantages: Sequence[float], weights: Sequence[float], counts: SampleCounts,
                 iterations: Sequence[int] | None = None, steps: Sequence[_StepFlags] | None = None):
        self.sources = list(sources)
        self._refs = list(refs)
        self.advantages = list(advantages)
        self.weights = list(weights)
        """Relative sampling weight of each sample (recency); all 1.0 when uniform."""
        self.iterations = list(iterations) if iterations is not None else [0] * len(self._refs)
        """The iteration (loop round) each sample's episode belongs to: its provenance."""
        steps = list(steps) if steps is not None else [_StepFlags(False, 0, 0)] * len(self._refs)
        self.policy_versions = [step.policy_version for step in steps]
        """The policy version that sampled each sample's reply (None: unknown; read without decoding
        anything)."""
        self.exact = [bool(step.token_ids and step.logprobs) for step in steps]
        """Whether each sample carries its sampled token ids and their log-probabilities (trained on
        exactly; what the on-policy check compares)."""
        self.counts = counts
        # Arrow rows: reading one step's bytes decodes nothing else of the episode.
        self._tables = [source.dataset.with_format("arrow") for source in self.sources]

    def __len__(self) -> int:
        return len(self._refs)

    def source_of(self, index: int) -> int:
        """The index in `sources` of the trajectory set sample `index` comes from."""
        return self._refs[index].source

    def origin(self, index: int) -> str:
        """Where sample `index` is stored: ``SOURCE row R step S`` (for messages about bad data)."""
        ref = self._refs[index]
        return f"{self.sources[ref.source].id} row {ref.row} step {ref.step}"

    def __getitem__(self, index: int) -> Sample:
        from datasets import Image  # optional: datasets

        ref = self._refs[index]
        table = self._tables[ref.source][ref.row]
        episode_id = table.column(EpisodeColumn.EPISODE_ID)[0].as_py()
        steps = table.column(EpisodeColumn.STEPS)[0].values
        step = {name: steps.field(name) for name in (StepField.SCREENSHOT, StepField.MESSAGES,
                                                     StepField.RESPONSE)}
        decoder = Image()

        def image_for_step(j: int):
            if not 0 <= j < len(steps):
                raise TrainingDataError(f"episode {episode_id} step {ref.step}: its messages show the "
                                        f"screenshot of step {j}, but the episode has {len(steps)} steps")
            stored = step[StepField.SCREENSHOT][j].as_py()
            if not stored or (stored.get("bytes") is None and not stored.get("path")):
                raise TrainingDataError(f"episode {episode_id} step {ref.step}: its messages show the "
                                        f"screenshot of step {j}, which has no image")
            image = decoder.decode_example(stored)
            return image.convert("RGB") if image.mode != "RGB" else image

        messages = expand_messages(step[StepField.MESSAGES][ref.step].as_py(), image_for_step)
        # Fields older rows lack (schema 1.1: log-probabilities; before 1.4: token ids, sampling).
        extra = {name: steps.field(name)[ref.step].as_py() for name in _OPTIONAL_STEP_FIELDS
                 if steps.type.get_field_index(name) >= 0}
        logprobs = extra.get(StepField.LOGPROBS) or []
        token_ids = extra.get(StepField.TOKEN_IDS) or []
        sampling = extra.get(StepField.SAMPLING)
        usage = extra.get(StepField.USAGE) or {}
        return Sample(messages=messages, response=step[StepField.RESPONSE][ref.step].as_py() or "",
                      advantage=self.advantages[index], episode_id=episode_id, step=ref.step,
                      behaviour_logprob=sum(logprobs) / len(logprobs) if logprobs else None,
                      behaviour_logprobs=tuple(logprobs) if logprobs else None,
                      token_ids=tuple(token_ids) if token_ids else None,
                      prompt_tokens=usage.get("prompt_tokens") or None,
                      prompt_token_hash=extra.get(StepField.PROMPT_TOKEN_HASH) or "",
                      sampling=Sampling(**sampling) if sampling else None,
                      finish_reason=extra.get(StepField.FINISH_REASON) or "",
                      policy_version=policy_version_number(extra.get(StepField.POLICY_VERSION)))


# ------------------------------------------------------------------------------------------ reading

def _load(source: str | Path, cache_dir: str | None) -> TrajectorySet:
    import pyarrow.parquet as pq  # optional: pyarrow

    # The columns are checked once, by the reader: every shard (a Hub dataset: its features) against
    # its schema version's, which hold every column and step field the trainer reads.
    try:
        found = read_episodes(source, cache_dir=cache_dir)
    except ShardSchemaError as exc:
        raise MissingColumnError(str(exc)) from exc
    except TrajectoryError as exc:
        raise TrainingDataError(str(exc)) from exc
    if found.files:
        # A shard with no rows says nothing (and may not even carry the schema): leave it out.
        shards = [path for path in found.files if pq.read_metadata(path).num_rows > 0]
        if shards and len(shards) < len(found.files):
            found = TrajectorySet(found.id, found.version, found.schema_version, files=shards,
                                  cache_dir=cache_dir)
        elif not shards:
            found = TrajectorySet(found.id, found.version, found.schema_version, cache_dir=cache_dir)
    if len(found) == 0:
        raise NoTrainingDataError(f"no trajectories in {source}: the trajectory set is empty (no parquet "
                                  "shards found, or only empty ones; expected <folder>/data/*.parquet)")
    return found


def load_trajectories(sources: Sequence[str | Path], *,
                      cache_dir: str | Path | None = None) -> list[TrajectorySet]:
    """Read each source with `read_episodes`: a rollout folder (the shards its manifest lists) or a
    Hub dataset id, optionally ``id@revision``. Raises `MissingColumnError` naming the shard and
    `NoTrainingDataError` for a source without episodes."""
    if not sources:
        raise NoTrainingDataError("no trajectory sources given (pass one or more --data folders or Hub ids)")
    cache = str(cache_dir) if cache_dir else None
    return [_load(source, cache) for source in sources]


def describe_sources(sources: Sequence[TrajectorySet]) -> list[dict[str, Any]]:
    """``[{"id", "version", "rows"}]`` for the trainer state and the model card."""
    return [{"id": s.id, "version": s.version, "rows": len(s)} for s in sources]


# ---------------------------------------------------------------------------------------- selection

def _episode_status(value: str | None, source: TrajectorySet, episode_id: str) -> str | None:
    """`value` if it is an `EpisodeStatus` (or empty); else a `TrainingDataError` naming the episode."""
    try:
        return EpisodeStatus(value).value if value else value
    except ValueError:
        choices = ", ".join(s.value for s in EpisodeStatus if not s.is_error)
        raise TrainingDataError(f"{source.id}: episode {episode_id} has status {value!r}, which is not an "
                                f"episode status ({choices} or error:<kind>)") from None


def _step_flags(steps_column) -> list[list[_StepFlags]]:
    """Each row's `_StepFlags`, read from the Arrow list column without its other fields (no
    screenshot is touched)."""
    import pyarrow.compute as pc  # optional: pyarrow

    flags: list[list[_StepFlags]] = []
    for chunk in steps_column.chunks:
        lengths = chunk.value_lengths().fill_null(0).to_pylist()
        inner = chunk.flatten()
        same = inner.field(StepField.SAME_AS_NEXT).fill_null(False).to_pylist()
        # An integer since schema 1.5, the endpoint's name for it before: read as the integer.
        versions = ([policy_version_number(v) for v in inner.field(StepField.POLICY_VERSION).to_pylist()]
                    if inner.type.get_field_index(StepField.POLICY_VERSION) >= 0 else [None] * len(same))
        counts = {}
        for name in (StepField.LOGPROBS, StepField.TOKEN_IDS):
            present = inner.type.get_field_index(name) >= 0
            counts[name] = (pc.list_value_length(inner.field(name)).fill_null(0).to_pylist() if present
                            else [0] * len(same))
        offset = 0
        for n in lengths:
            flags.append([_StepFlags(same[i], counts[StepField.LOGPROBS][i], counts[StepField.TOKEN_IDS][i],
                                     versions[i]) for i in range(offset, offset + n)])
            offset += n
    return flags


def _candidates(sources: Sequence[TrajectorySet | ListedEpisodes], counts: SampleCounts,
                skipped: Counter[str]) -> list[_Candidate]:
    found = []
    for s, listed in enumerate(sources):
        rounds = listed.rounds if isinstance(listed, ListedEpisodes) else None
        source = listed.trajectories if isinstance(listed, ListedEpisodes) else listed
        table = source.dataset.with_format("arrow")[:]
        flags = _step_flags(table.column(EpisodeColumn.STEPS))
        names = [name for name in _EPISODE_COLUMNS if name != EpisodeColumn.STEPS]
        rows = zip(*(table.column(name).to_pylist() for name in names), strict=True)
        for row, (episode_id, iteration, task_id, split, reward, status) in enumerate(rows):
            if rounds is not None:
                if episode_id not in rounds:
                    continue  # not in the batch
                iteration = rounds[episode_id]
            counts.trajectories_read += 1
            counts.steps_read += len(flags[row])
            reason = untrainable(split, _episode_status(status, source, episode_id), reward)
            if reason:
                skipped[reason.value] += 1
                continue
            found.append(_Candidate(source=s, row=row, episode_id=episode_id, iteration=int(iteration or 0),
                                    task_id=task_id, reward=float(reward), steps=flags[row]))
    return found


def _advantages(objective: Objective, episodes: list[_Candidate], selection: SampleSelection,
                counts: SampleCounts, skipped: Counter[str], names: str) -> list[tuple[_Candidate, float]]:
    """The episodes trained on, each with its advantage (see the module docstring); records the
    group sizes (and grpo's dropped groups) in `counts`. Raises `NoTrainingDataError` when there is
    no learning signal."""
    if objective is Objective.FILTERED_BC:
        return [(episode, 1.0) for episode in episodes]
    groups: dict[tuple[int, str], list[_Candidate]] = defaultdict(list)
    for episode in episodes:
        groups[(episode.iteration, episode.task_id)].append(episode)
    sizes = Counter(len(members) for members in groups.values())
    counts.group_sizes = {str(size): n for size, n in sorted(sizes.items())}
    kept: list[tuple[_Candidate, float]] = []
    for members in groups.values():
        rewards = [episode.reward for episode in members]
        mean = sum(rewards) / len(rewards)
        if objective is Objective.GRPO and all(r == rewards[0] for r in rewards):
            counts.groups_dropped += 1  # DAPO's dynamic sampling: every advantage would be 0
            skipped["episodes of groups with equal rewards"] += len(members)
            continue
        std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
        for episode in members:
            value = episode.reward - mean
            if selection.normalize_advantage:
                value /= std + 1e-6
            kept.append((episode, max(-selection.advantage_clip, min(selection.advantage_clip, value))))
    if all(abs(a) < 1e-12 for _, a in kept):
        raise NoTrainingDataError(f"{objective.value}: every advantage in {names} is zero (each task got the "
                                  "same reward on all its attempts): no learning signal")
    return kept


def build_samples(sources: Sequence[TrajectorySet | ListedEpisodes], objective: Objective | str,
                  selection: SampleSelection | None = None, *, newest: int | None = None) -> StepSamples:
    """Select the training samples of `objective` from `sources` (see the module docstring).

    The last-K window and the recency ages count back from iteration `newest` (the loop's current
    round: an iteration without trainable episodes still takes its place in the window); by default
    from the newest iteration present in the data.

    Raises `NoTrainingDataError` when the set is empty, has no rewards, or nothing survives."""
    try:
        objective = Objective(objective)
    except ValueError:
        raise TrainingDataError(f"unknown objective '{objective}'; "
                                f"choose one of {', '.join(o.value for o in Objective)}") from None
    selection = selection or SampleSelection()
    sets = [s.trajectories if isinstance(s, ListedEpisodes) else s for s in sources]
    names = ", ".join(dict.fromkeys(source.id for source in sets))
    counts = SampleCounts(objective=objective.value)
    skipped: Counter[str] = Counter()
    episodes = _candidates(sources, counts, skipped)
    if counts.trajectories_read == 0:
        raise NoTrainingDataError(f"no trajectories in {names}: the trajectory set is empty")
    if not episodes:
        raise NoTrainingDataError(f"none of the {counts.trajectories_read} trajectories in {names} can be "
                                  f"trained on ({dict(skipped)}): the set is reward-free")

    episodes = _last_iterations(episodes, objective, selection, newest, counts, skipped)
    if objective is Objective.FILTERED_BC:
        episodes = _imitated(episodes, selection, counts, skipped, names)
    samples = _Samples()
    for episode, advantage in _advantages(objective, episodes, selection, counts, skipped, names):
        samples.add(episode, advantage, objective, selection, counts)
    counts.steps_kept = len(samples.refs)
    counts.samples_by_iteration = {str(it): n for it, n in sorted(Counter(samples.provenance).items())}
    counts.skipped = dict(skipped)
    if not samples.refs:
        without = (f", {counts.steps_without_logprobs} without behaviour log-probabilities (a policy without "
                   "a model played them: the policy-gradient objectives cannot weigh them)"
                   if counts.steps_without_logprobs else "")
        raise NoTrainingDataError(f"{objective.value}: the kept trajectories in {names} have no trainable "
                                  f"steps ({counts.same_as_next_dropped} same_as_next steps dropped"
                                  f"{without})")
    log.info("%s", counts.summary())
    return StepSamples(sets, samples.refs, samples.advantages, samples.weights, counts, samples.provenance,
                       samples.flags)


def _last_iterations(episodes: list[_Candidate], objective: Objective, selection: SampleSelection,
                     newest: int | None, counts: SampleCounts, skipped: Counter[str]) -> list[_Candidate]:
    """The episodes of the last-K window, counted back from `newest` (or the newest present); sets
    each kept iteration's recency weight in `counts`."""
    last_k = selection.last_k_iterations
    iterations = sorted({episode.iteration for episode in episodes})
    if newest is None:
        kept_iterations = iterations[-last_k:] if last_k > 0 else iterations
        age = {it: len(kept_iterations) - 1 - i for i, it in enumerate(kept_iterations)}
    else:
        kept_iterations = [it for it in iterations if it <= newest and (last_k == 0 or it > newest - last_k)]
        age = {it: newest - it for it in kept_iterations}
    counts.iterations_kept = kept_iterations
    counts.iteration_weights = {
        str(it): (age[it] + 1) ** -selection.recency_power if objective is Objective.FILTERED_BC else 1.0
        for it in kept_iterations}
    older = [e for e in episodes if e.iteration not in age]
    if older:
        skipped[f"episodes older than the last {last_k} iterations"] += len(older)
    return [e for e in episodes if e.iteration in age]


def _imitated(episodes: list[_Candidate], selection: SampleSelection, counts: SampleCounts,
              skipped: Counter[str], names: str) -> list[_Candidate]:
    """filtered_bc's episodes: those whose reward reaches the success threshold."""
    threshold = selection.success_threshold
    failed = [e for e in episodes if not selection.imitates(e.reward)]
    if failed:
        skipped[f"episodes with reward < {threshold:g}"] += len(failed)
    episodes = [e for e in episodes if selection.imitates(e.reward)]
    if not episodes:
        raise NoTrainingDataError(f"filtered_bc: no trajectory in {names} has reward >= "
                                  f"{threshold:g} (of {counts.trajectories_read} read): "
                                  "nothing to imitate")
    return episodes


@dataclass
class _Samples:
    """The kept steps as `StepSamples` holds them: parallel lists, one entry per step."""

    refs: list[_StepRef] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    provenance: list[int] = field(default_factory=list)
    flags: list[Any] = field(default_factory=list)

    def add(self, episode: _Candidate, advantage: float, objective: Objective, selection: SampleSelection,
            counts: SampleCounts) -> None:
        """Keep the trainable steps of `episode`, counting those dropped and those to retokenise."""
        counts.trajectories_kept += 1
        weight = counts.iteration_weights[str(episode.iteration)]
        policy_gradient = objective is not Objective.FILTERED_BC
        for j, step in enumerate(episode.steps):
            if step.same_as_next and not selection.keeps_no_op(objective, advantage):
                counts.same_as_next_dropped += 1
                continue
            if policy_gradient and not step.logprobs:
                counts.steps_without_logprobs += 1
                continue
            if not step.token_ids:
                counts.retokenised += 1
                if len(counts.retokenised_named) < _NAMED:
                    counts.retokenised_named.append(f"episode {episode.episode_id} step {j}")
            self.refs.append(_StepRef(episode.source, episode.row, j))
            self.advantages.append(advantage)
            self.weights.append(weight)
            self.provenance.append(episode.iteration)
            self.flags.append(step)
