"""Episode lengths of the batches the loop trains on: does over-provisioning favour short episodes?

The asynchronous schedule (`webgym_rl.loop.asynchronous`) takes each round's batch from the
committed episodes (`webgym_rl.loop.stream.TrajectoryStream`, folder order, then commit order), and
with ``--overprovision N`` it keeps N episodes more in flight than the batches need; what is still
running when the last batch has been taken is cancelled. A long episode commits late, so a batch
may take a shorter one that started after it ("overtaking"); the long one goes to a later batch
(one version staler: filtered_bc drops episodes past ``--max-staleness``) or, at the end, to none.
This script measures whether the episodes trained on are shorter than the episodes started, on the
same task batches, for:

- ``sync``: the synchronous schedule (trains on every episode of each round's rollout);
- ``async-0``: the asynchronous schedule with ``--overprovision 0``;
- ``async-N``: the asynchronous schedule with ``--overprovision N`` (default: one batch).

Set-up, all on 127.0.0.1 with the shipped ``miniwob-cpu`` recipe (`webgym_rl.loop.recipes`):
MiniWoB++ kinds of different natural lengths (click-test ends at its one click; click-checkboxes,
enter-text and login-user take several steps, and a policy that fails runs to ``--horizon``). A
shared bootstrap first (one sync round: the DOM-aware random policy plays other seeds of the same
kinds, filtered_bc trains ``--bootstrap-steps`` steps on its successes), so that every round of
every configuration is played by a model whose episodes end after one step where it clicks and
run to the horizon where it fails (the untrained tiny model fails everywhere, and the random
policy would play only the async chunks begun before version 1: lengths would vary only there).
Each configuration and seed then runs its own loop (OUT/<config>-s<seed>, its own services) from
that checkpoint: the epoch sampler with the same seed gives round (chunk) r the same tasks in
every configuration; the tiny Qwen-VL the loop trains plays at temperature 1 on the CPU policy
server; few optimizer steps per round, so the trainer waits for the rollout (the case
over-provisioning is for; the trainer's idle time is printed).

Measured per configuration, seeds pooled, from the loop folders (``loop_state.json``:
``rounds[r].batch.episodes`` lists what each async batch took, ``dropped_stale`` what filtered_bc
left out, ``cancelled`` the episodes begun but unfinished; OUT/<config>-s<seed>/rollouts holds
every committed episode, read with `webgym_rollout.trajectory.reader.read_episodes`): steps per
episode (mean, median, share of 1-step episodes, share at the horizon) of (a) the episodes in
batches, (a') those trained on (the stale ones left out), (b) all committed episodes, (b-a)
committed but in no batch, (c) the episodes started (committed + never committed). An episode
never committed has no row: this script counts the steps each started episode completed (it wraps
`WebEnv.reset` / `step` in this process, where the loop's rollouts run) and reads the runner's
"started" / "cancelled" log lines, so a cancelled episode gets the bound [completed steps + 1,
horizon] and (c) has a lower and an upper bound. Then: the batches' mean length per round; the
overtaking itself (batch episodes that started after an episode still out of every batch, against
those episodes, in admission order); for (a) against (b), (b-a) and (c), and within one rollout
folder, a two-sided Mann-Whitney U (normal approximation with tie correction) and a permutation
test of the difference of means (stdlib: scipy is not in the environment). (a) is a subset of
(b), so the test against (b) understates a difference; the one against (b-a) is two-sample.

Prints a table and writes OUT/results.json; about 11 minutes on 2 cores with the defaults. No
target: the figures answer a question (benchmarks/RESULTS.md says what they showed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import random
import shutil
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RECIPE = "miniwob-cpu"
"""The shipped loop recipe every configuration runs (`webgym_rl.loop.recipes`), with this run's sizes."""
EASY = ("click-test",)
HARD = ("click-checkboxes", "enter-text", "login-user")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/batch_lengths.py "
               "--out out/batch-lengths\n  (--repeats 1 --rounds 3 --bootstrap-steps 200: a quick check)")
    parser.add_argument("--out", type=Path, default=Path("out/batch-lengths"))
    parser.add_argument("--kinds", default=",".join(EASY + HARD),
                        help="MiniWoB++ kinds, comma separated (default: click-test, 3 multi-step kinds)")
    parser.add_argument("--seeds", type=int, default=40, help="training seeds per kind (default 40)")
    parser.add_argument("--bootstrap-tasks", type=int, default=10,
                        help="bootstrap: seeds per kind the random policy plays (others than the runs')")
    parser.add_argument("--bootstrap-steps", type=int, default=500,
                        help="bootstrap: filtered_bc optimizer steps on the random policy's successes")
    parser.add_argument("--configs", default="sync,async-0,async-N",
                        help="which to run: sync, async-0, async-N (N = --overprovision)")
    parser.add_argument("--rounds", type=int, default=6, help="loop rounds (versions) per configuration")
    parser.add_argument("--tasks-per-round", type=int, default=16,
                        help="tasks per round = episodes per batch (one attempt each)")
    parser.add_argument("--overprovision", type=int, default=0,
                        help="async-N's over-provision (default 0 = one batch: --tasks-per-round)")
    parser.add_argument("--max-staleness", type=int, default=1, help="async staleness bound (default 1)")
    parser.add_argument("--horizon", type=int, default=6, help="steps per MiniWoB episode at most")
    parser.add_argument("--concurrency", type=int, default=4, help="episodes in flight, every schedule")
    parser.add_argument("--max-steps", type=int, default=10,
                        help="optimizer steps per round (few: the trainer waits for the rollout, the case "
                             "over-provisioning is for)")
    parser.add_argument("--batch-size", type=int, default=8, help="training batch")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--permutations", type=int, default=5000, help="of each permutation test")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--repeats", type=int, default=3,
                        help="seeds per configuration (seed, seed + 1, ...); the figures pool them")
    parser.add_argument("--progress", action="store_true", help="live progress bars")
    args = parser.parse_args(argv)
    args.overprovision = args.overprovision or args.tasks_per_round
    return args


# ----------------------------------------------------------------------- what each episode did


class EpisodeWatch:
    """Steps completed per started episode, and the runner's started / cancelled lines, for the
    episodes that are never committed (and so have no row). Wraps `WebEnv.reset` and `WebEnv.step`
    of this process (the loop's rollouts run in it) and listens to ``webgym_rollout.runner``."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}
        self.started: dict[str, float] = {}
        self.cancelled: dict[str, float] = {}
        self.tasks: dict[str, str] = {}
        """episode id -> task id (from the runner's started line)."""
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self.steps.clear()
            self.started.clear()
            self.cancelled.clear()
            self.tasks.clear()

    def install(self) -> None:
        from webgym_rollout.env import WebEnv

        watch, reset, step = self, WebEnv.reset, WebEnv.step

        async def counted_reset(env: Any, task: Any, **kwargs: Any) -> Any:
            env.watched_episode = kwargs.get("episode_id", "")
            return await reset(env, task, **kwargs)

        async def counted_step(env: Any, action: Any) -> Any:
            result = await step(env, action)
            with watch._lock:
                watch.steps[getattr(env, "watched_episode", "")] = len(env.steps)
            return result

        WebEnv.reset, WebEnv.step = counted_reset, counted_step  # type: ignore[method-assign]

        class Lines(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if not isinstance(record.msg, str) or not record.args:
                    return
                target = (watch.started if record.msg.startswith("episode %s started") else
                          watch.cancelled if record.msg.startswith("episode %s cancelled") else None)
                if target is not None:
                    with watch._lock:
                        target[str(record.args[0])] = record.created  # type: ignore[index]
                        if target is watch.started:
                            watch.tasks[str(record.args[0])] = str(record.args[1])  # type: ignore[index]

        runner = logging.getLogger("webgym_rollout.runner")
        runner.setLevel(logging.INFO)
        runner.addHandler(Lines(logging.INFO))


# ------------------------------------------------------------------------------------ the runs


def write_tasks(path: Path, kinds: list[str], seeds: range) -> Path:
    from webgym_data.importers.miniwob import miniwob_task
    from webgym_data.loading import write_tasks as write

    return write([miniwob_task(k, s) for s in seeds for k in kinds], path)


def recipe(args: argparse.Namespace, **changes: Any) -> Any:
    """The shipped CPU recipe with this run's sizes and `changes` (YAML keys) on top."""
    from webgym_rl.loop import load_recipe

    values = dict(
        eval_every=0, progress=args.progress, concurrency=args.concurrency,
        pool={"contexts_per_browser": args.concurrency}, horizons={"miniwob": args.horizon},
        learning_rate=args.learning_rate, per_device_batch_size=args.batch_size,
        policy={"model": "tiny-policy", "max_new_tokens": args.max_new_tokens,
                "max_tokens": args.max_new_tokens, "temperature": 1.0, "variant": "compact"})
    return load_recipe(RECIPE, **{**values, **changes})


def bootstrap(args: argparse.Namespace, tasks: Path, model: Path) -> str:
    """One sync round: the DOM-aware random policy plays the bootstrap tasks, filtered_bc trains
    on its successes. The checkpoint every configuration starts from: its rollouts (temperature 1)
    end after one step where it clicks right or wrong and run to the horizon where it fails to act,
    so their lengths vary in every round, not only in the random policy's."""
    from webgym_rl.loop import run_loop

    settings = recipe(args, tasks=str(tasks), model=str(model), out=str(args.out / "bootstrap"),
                      iterations=1, bootstrap_policy="random", seed=args.seed, sampler={"kind": "all"},
                      max_steps=args.bootstrap_steps)
    return run_loop(settings).checkpoint


def settings_for(args: argparse.Namespace, config: str, seed: int, tasks: Path, model: str) -> Any:
    """One configuration and seed (the sampler's draws and the training order): every round is
    played by the model being trained, from the bootstrap checkpoint."""
    return recipe(
        args, tasks=str(tasks), model=model, out=str(args.out / f"{config}-s{seed}"), iterations=args.rounds,
        schedule="sync" if config == "sync" else "async", bootstrap_policy="model", seed=seed,
        max_steps=args.max_steps, checkpoint_every=args.rounds, max_staleness=args.max_staleness,
        overprovision=args.overprovision if config == "async-N" else 0,
        sampler={"kind": "epoch", "batch_size": args.tasks_per_round})


def run_config(args: argparse.Namespace, config: str, seed: int, tasks: Path, model: str,
               watch: EpisodeWatch) -> dict[str, Any]:
    from webgym_rl.loop import run_loop

    settings = settings_for(args, config, seed, tasks, model)
    shutil.rmtree(settings.out, ignore_errors=True)  # a fresh loop each time, never a resumed one
    watch.clear()
    began = time.perf_counter()
    result = run_loop(settings)
    seconds = time.perf_counter() - began
    return analyse(args, config, result.state, Path(settings.out), watch, seconds)


# ------------------------------------------------------------------------------------ analysis


@dataclasses.dataclass
class Row:
    """One committed episode."""

    id: str
    folder: str
    steps: int
    kind: str
    policy: str
    reward: float
    status: str


def committed(out: Path) -> list[Row]:
    """Every committed episode of a loop folder's rollouts (sync: round-XXXX; async: chunk-XXXX)."""
    from webgym_rollout.trajectory.reader import read_episodes

    rows = []
    for folder in sorted(p for p in (out / "rollouts").iterdir() if p.is_dir()):
        if not (folder / "manifest.json").is_file():
            continue
        for episode in read_episodes(folder):
            rows.append(Row(episode.episode_id, folder.name, len(episode.steps),
                            episode.task.environment.partition(":")[2],
                            "random" if episode.policy_model == "random" else "model",
                            episode.reward, episode.status.value))
    return rows


def describe(lengths: list[int], horizon: int) -> dict[str, Any]:
    if not lengths:
        return {"n": 0}
    n = len(lengths)
    return {"n": n, "mean": statistics.fmean(lengths), "median": statistics.median(lengths),
            "one_step": sum(1 for x in lengths if x == 1) / n,
            "at_horizon": sum(1 for x in lengths if x >= horizon) / n,
            "histogram": {str(k): v for k, v in sorted(Counter(lengths).items())}}


def mann_whitney(x: list[int], y: list[int]) -> dict[str, float]:
    """Two-sided Mann-Whitney U of x against y: U of x, the normal approximation's z (tie-corrected,
    continuity-corrected) and p, and the common-language effect P(X < Y) + P(X = Y) / 2."""
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        return {}
    pooled = sorted((v, i) for i, v in enumerate(x + y))
    ranks = [0.0] * (n1 + n2)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[pooled[k][1]] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    u = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    n = n1 + n2
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))) if n > 1 else 0.0
    mean = n1 * n2 / 2
    z = 0.0 if sigma == 0 else (abs(u - mean) - 0.5) / sigma * (1 if u >= mean else -1)
    p = 1.0 if sigma == 0 else min(1.0, math.erfc(abs(z) / math.sqrt(2)))
    return {"u": u, "z": z, "p": p, "p_x_shorter": 1 - u / (n1 * n2)}


def permutation(x: list[int], y: list[int], rounds: int, seed: int) -> float:
    """Two-sided permutation p of the difference of means of x and y (x, y exchangeable)."""
    if not x or not y:
        return 1.0
    rng = random.Random(seed)
    pooled, n1 = x + y, len(x)
    observed = abs(statistics.fmean(x) - statistics.fmean(y))
    hits = 0
    for _ in range(rounds):
        rng.shuffle(pooled)
        if abs(statistics.fmean(pooled[:n1]) - statistics.fmean(pooled[n1:])) >= observed - 1e-12:
            hits += 1
    return (hits + 1) / (rounds + 1)


def chunk_of_tasks(out: Path) -> dict[str, str]:
    """task_id -> the rollout folder (round-XXXX / chunk-XXXX) whose task batch drew it."""
    found = {}
    for tasks in sorted((out / "rollouts").glob("*-tasks.jsonl")):
        for line in tasks.read_text(encoding="utf-8").splitlines():
            if line.strip():
                found[json.loads(line)["task_id"]] = tasks.name.removesuffix("-tasks.jsonl")
    return found


def analyse(args: argparse.Namespace, config: str, state: Any, out: Path, watch: EpisodeWatch,
            seconds: float) -> dict[str, Any]:
    """The raw lengths of one run: per set, per round, per rollout folder (trained or not)."""
    horizon = args.horizon
    rows = committed(out)
    by_id = {row.id: row for row in rows}
    rounds = [state.rounds[r] for r in sorted(state.rounds)]
    if config == "sync":  # every episode of each round's rollout is trained on
        per_round = [[row.id for row in rows if row.folder == f"round-{r:04d}"] for r in range(len(rounds))]
        dropped: set[str] = set()
    else:
        per_round = [list(record.batch.episodes) for record in rounds]
        dropped = {e for record in rounds for e in record.batch.dropped_stale}
    in_batches = [e for batch in per_round for e in batch]
    if len(set(in_batches)) != len(in_batches):
        raise SystemExit(f"{config}: an episode is in two batches")
    missing = [e for e in in_batches if e not in by_id]
    if missing:
        raise SystemExit(f"{config}: batch episodes without a committed row: {missing[:3]}")
    batch_set = set(in_batches)
    # Started but never committed: cancelled while running (it would have taken one step more at
    # least) or finished and cut off while being judged or written (its length is what it did).
    folder_of_task = chunk_of_tasks(out)
    never = []
    for e in sorted(set(watch.started) - set(by_id)):
        done = watch.steps.get(e, 0)
        unfinished = e in watch.cancelled
        never.append({"id": e, "folder": folder_of_task.get(watch.tasks.get(e, ""), "?"),
                      "completed_steps": done, "cancelled": unfinished,
                      "low": min(horizon, done + 1) if unfinished else done,
                      "high": horizon if unfinished else done,
                      "running_s": watch.cancelled.get(e, time.time()) - watch.started[e]})
    lengths = {
        "batches": [by_id[e].steps for e in in_batches],
        "trained": [by_id[e].steps for e in in_batches if e not in dropped],
        "dropped_stale": [by_id[e].steps for e in in_batches if e in dropped],
        "committed": [row.steps for row in rows],
        "left_out": [row.steps for row in rows if row.id not in batch_set],
        "started_low": [row.steps for row in rows] + [b["low"] for b in never],
        "started_high": [row.steps for row in rows] + [b["high"] for b in never]}
    # Within one rollout folder (the same task batch and policy): trained against not trained.
    folders: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"in": [], "out_low": [], "out_high": []})
    for row in rows:
        side = folders[row.folder]
        if row.id in batch_set:
            side["in"].append(row.steps)
        else:
            side["out_low"].append(row.steps)
            side["out_high"].append(row.steps)
    for b in never:
        folders[b["folder"]]["out_low"].append(b["low"])
        folders[b["folder"]]["out_high"].append(b["high"])
    policies = {p: [row.steps for row in rows if row.policy == p and row.id in batch_set]
                for p in ("random", "model")}
    policies.update({f"{p}_committed": [row.steps for row in rows if row.policy == p]
                     for p in ("random", "model")})
    metrics = state.metrics.model_dump() if state.metrics is not None else {}
    length_of = {**{row.id: row.steps for row in rows}, **{b["id"]: b["high"] for b in never}}
    return {
        "config": config, "seconds": seconds,
        "cancelled_state": state.cancelled, "started_logged": len(watch.started), "never_committed": never,
        "lengths": lengths, "by_policy": policies, "by_folder": dict(sorted(folders.items())),
        "kinds": {"batches": dict(sorted(Counter(by_id[e].kind for e in in_batches).items())),
                  "left_out": dict(sorted(Counter(r.kind for r in rows if r.id not in batch_set).items()))},
        "trainer_idle_s": metrics.get("trainer_idle_s"), "rollout_idle_s": metrics.get("rollout_idle_s"),
        "overtaking": overtaking(per_round, watch.started, length_of),
        "per_round": [{"round": r, "episodes": len(b), "steps": [by_id[e].steps for e in b],
                       "folders": dict(sorted(Counter(by_id[e].folder for e in b).items())),
                       "random_policy": sum(1 for e in b if by_id[e].policy == "random"),
                       "dropped_stale": sum(1 for e in b if e in dropped),
                       "successes": sum(1 for e in b if by_id[e].reward >= 1),
                       "trained_steps": rounds[r].train.steps if rounds[r].train else None}
                      for r, b in enumerate(per_round)],
    }


def overtaking(per_round: list[list[str]], started: dict[str, float], length_of: dict[str, int]
               ) -> dict[str, list[int]]:
    """The direct measure of the mechanism: in each round, the batch's episodes that started after
    an episode still out of every batch so far ("overtakers"), and those episodes ("overtaken",
    each counted in the first round it is passed; one never committed counts with its upper
    bound). Start order is the runner's "started" line, i.e. the order of admission."""
    taken: set[str] = set()
    seen_overtaken: set[str] = set()
    ahead: list[int] = []
    behind: list[int] = []
    behind_never_trained = 0
    trained = {e for batch in per_round for e in batch}
    for batch in per_round:
        taken |= set(batch)
        if not batch:
            continue
        last = max(started.get(e, 0.0) for e in batch)
        passed = [e for e in started if e not in taken and started[e] < last]
        if not passed:
            continue
        first = min(started[e] for e in passed)
        ahead += [length_of[e] for e in batch if started.get(e, 0.0) > first and e in length_of]
        for e in passed:
            if e not in seen_overtaken and e in length_of:
                seen_overtaken.add(e)
                behind.append(length_of[e])
                behind_never_trained += e not in trained
    return {"overtakers": ahead, "overtaken": behind, "overtaken_never_trained": [behind_never_trained]}


def _mean(values: list[int]) -> float | None:
    return statistics.fmean(values) if values else None


def summarise(args: argparse.Namespace, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's runs (one per seed) pooled: the sets described, the tests, per-round means."""
    horizon = args.horizon
    pooled = {key: [x for run in runs for x in run["lengths"][key]] for key in runs[0]["lengths"]}
    mixed = [f for run in runs for f in run["by_folder"].values() if f["in"] and f["out_low"]]
    mixed_in = [x for f in mixed for x in f["in"]]
    mixed_low = [x for f in mixed for x in f["out_low"]]
    mixed_high = [x for f in mixed for x in f["out_high"]]

    def test(x: list[int], y: list[int]) -> dict[str, Any]:
        return {**mann_whitney(x, y), "perm_p": permutation(x, y, args.permutations, args.seed),
                "n": [len(x), len(y)]}

    rounds = len(runs[0]["per_round"])
    return {
        "sets": {key: describe(values, horizon) for key, values in pooled.items()},
        "by_policy": {key: describe([x for run in runs for x in run["by_policy"][key]], horizon)
                      for key in runs[0]["by_policy"]},
        "same_folder": {"trained": describe(mixed_in, horizon),
                        "not_trained_low": describe(mixed_low, horizon),
                        "not_trained_high": describe(mixed_high, horizon)},
        "tests": {"batches_vs_committed": test(pooled["batches"], pooled["committed"]),
                  "batches_vs_left_out": test(pooled["batches"], pooled["left_out"]),
                  "batches_vs_started_high": test(pooled["batches"], pooled["started_high"]),
                  "batches_vs_started_low": test(pooled["batches"], pooled["started_low"]),
                  "same_folder_low": test(mixed_in, mixed_low),
                  "same_folder_high": test(mixed_in, mixed_high)},
        "never_committed": sum(len(run["never_committed"]) for run in runs),
        "cancelled_state": sum(run["cancelled_state"] for run in runs),
        "round_means": [_mean([x for run in runs for x in run["per_round"][r]["steps"]])
                        for r in range(rounds)],
        "round_random": [sum(run["per_round"][r]["random_policy"] for run in runs) for r in range(rounds)],
        "round_dropped": [sum(run["per_round"][r]["dropped_stale"] for run in runs) for r in range(rounds)],
        "trainer_idle_s": [run["trainer_idle_s"] for run in runs],
        "loop_s": [run["seconds"] for run in runs],
        "seconds": sum(run["seconds"] for run in runs),
        "overtaking": {key: describe(values, horizon) for key, values in (
            ("overtakers", [x for run in runs for x in run["overtaking"]["overtakers"]]),
            ("overtaken", [x for run in runs for x in run["overtaking"]["overtaken"]]))},
        "overtaken_never_trained": sum(run["overtaking"]["overtaken_never_trained"][0] for run in runs),
        "overtaking_test": test([x for run in runs for x in run["overtaking"]["overtakers"]],
                                [x for run in runs for x in run["overtaking"]["overtaken"]]),
    }


# ------------------------------------------------------------------------------------- output


def _fmt(stats: dict[str, Any]) -> str:
    if not stats.get("n"):
        return f"{0:>5}"
    return (f"{stats['n']:>5}{stats['mean']:>8.2f}{stats['median']:>8.1f}{stats['one_step']:>9.0%}"
            f"{stats['at_horizon']:>9.0%}")


def _test(test: dict[str, Any]) -> str:
    if test.get("u") is None:
        return "-"
    return (f"MWU p {test['p']:.3f} (P(batch shorter) {test['p_x_shorter']:.2f}), permutation p "
            f"{test['perm_p']:.3f}, n {test['n'][0]} vs {test['n'][1]}")


def report(results: dict[str, Any]) -> None:
    args = results["args"]
    print(f"\nsteps per episode (horizon {args['horizon']}); {args['rounds']} rounds x "
          f"{args['tasks_per_round']} episodes x {args['repeats']} seeds, kinds "
          f"{', '.join(results['kinds'])}; async-N over-provisions {args['overprovision']}")
    print(f"{'config':<9}{'set':<38}{'n':>5}{'mean':>8}{'median':>8}{'1-step':>9}{'horizon':>9}")
    labels = (("batches", "(a) in batches"), ("trained", "(a') of them trained (not stale)"),
              ("dropped_stale", "(a-a') of them dropped as stale"),
              ("committed", "(b) all committed"), ("left_out", "(b-a) committed, in no batch"),
              ("started_low", "(c) started, lower bound"), ("started_high", "(c) started, upper bound"))
    for config, found in results["configs"].items():
        for key, label in labels:
            print(f"{config:<9}{label:<38}{_fmt(found['sets'][key])}")
        same = found["same_folder"]
        if same["trained"].get("n") and same["not_trained_low"].get("n"):
            print(f"{'':<9}{'same folder: trained':<38}{_fmt(same['trained'])}")
            print(f"{'':<9}{'same folder: not trained, low/high':<38}{_fmt(same['not_trained_low'])}"
                  f"  / mean {same['not_trained_high']['mean']:.2f}")
        idle = [round(t, 1) for t in found["trainer_idle_s"] if t is not None]
        loops = [round(t) for t in found["loop_s"]]
        print(f"{'':<9}never committed {found['never_committed']} (state.cancelled "
              f"{found['cancelled_state']}); trainer idle s {idle} of loop s {loops}")
        for name in ("batches_vs_committed", "batches_vs_left_out", "batches_vs_started_high",
                     "same_folder_low", "same_folder_high"):
            print(f"{'':<9}{name:<26}{_test(found['tests'][name])}")
        if config != "sync":
            over = found["overtaking"]
            print(f"{'':<9}{'overtakers (start later)':<38}{_fmt(over['overtakers'])}")
            print(f"{'':<9}{'overtaken (still out)':<38}{_fmt(over['overtaken'])}  never trained "
                  f"{found['overtaken_never_trained']}")
            print(f"{'':<9}{'overtakers_vs_overtaken':<26}{_test(found['overtaking_test'])}")
    print("\nbatch mean steps by round, seeds pooled (random-policy episodes, stale-dropped)")
    for config, found in results["configs"].items():
        print(f"{config:<9}" + "".join(
            f" r{r}: {m:.2f} ({found['round_random'][r]}, {found['round_dropped'][r]})" if m is not None
            else f" r{r}: -" for r, m in enumerate(found["round_means"])))
    print(f"\ntotal {results['seconds']:.0f} s (" + ", ".join(
        f"{c} {f['seconds']:.0f} s" for c, f in results["configs"].items()) + ")")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    root = logging.getLogger()
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)  # the runner's INFO lines go to EpisodeWatch only
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    from webgym_rl.tiny import TinyModelSettings, build_tiny_model

    started = time.perf_counter()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for config in configs:
        if config not in ("sync", "async-0", "async-N"):
            raise SystemExit(f"--configs: {config!r} is unknown; choose sync, async-0, async-N")
    tasks = write_tasks(out / "tasks" / "train.jsonl", kinds, range(args.seeds))
    model = out / "model"
    if not (model / "config.json").is_file():
        build_tiny_model(model, settings=TinyModelSettings(family="qwen3_vl", seed=args.seed, image_mean=1.0))
    began = time.perf_counter()
    boot_tasks = write_tasks(out / "tasks" / "bootstrap.jsonl", kinds,
                             range(10_000, 10_000 + args.bootstrap_tasks))
    shutil.rmtree(out / "bootstrap", ignore_errors=True)
    checkpoint = bootstrap(args, boot_tasks, model)
    print(f"bootstrap: {time.perf_counter() - began:.0f} s -> {checkpoint}", flush=True)
    watch = EpisodeWatch()
    watch.install()  # after the bootstrap: only the configurations' episodes are watched
    results: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "kinds": kinds,
        "recipe": RECIPE, "bootstrap_s": time.perf_counter() - began, "configs": {}, "runs": {}}
    for seed in range(args.seed, args.seed + args.repeats):
        for config in configs:
            found = run_config(args, config, seed, tasks, checkpoint, watch)
            results["runs"].setdefault(config, []).append(found)
            lengths = found["lengths"]
            print(f"{config} seed {seed}: {found['seconds']:.0f} s; mean steps: batches "
                  f"{statistics.fmean(lengths['batches']):.2f}, committed "
                  f"{statistics.fmean(lengths['committed']):.2f}; never committed "
                  f"{len(found['never_committed'])}", flush=True)
    for config in configs:
        results["configs"][config] = summarise(args, results["runs"][config])
    results["seconds"] = time.perf_counter() - started
    report(results)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"figures: {out / 'results.json'}")


if __name__ == "__main__":
    main()
