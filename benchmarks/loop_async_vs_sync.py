"""Asynchronous vs synchronous RL loop, like for like: wall time to V policy versions with
``webgym-rl loop --schedule async`` and ``--schedule sync``, measured side by side in one run.

Set-up (all on 127.0.0.1, started and stopped by this script):

- the MiniWoB site server and one browser server (``webgym-rollout serve``, a subprocess) that
  every phase shares;
- the policy: a stand-in for a GPU model server (`VersionedLatencyServer`): OpenAI-compatible
  replies of the pixel-random policy (a click at a random point of the 0-1000 grid, sometimes a
  scroll; well-formed, so every step is a training sample) after a log-normal delay (median 1 s,
  p95 5 s by default), at most ``--policy-concurrency`` requests at once. It speaks the CPU policy
  server's folder protocol: ``POST /reload {"model", "version"}`` switches the version in place and
  every reply names the version that produced it (``system_fingerprint: v<N>``); both schedules
  publish each version as a folder to it (``--policy-base-url`` + ``--policy-reload-url``);
- a tiny random Qwen2-VL (`webgym_rl.tiny`) trained by the loop's resident trainer (a child process);
- the same tasks: MiniWoB pages of several kinds and seeds, drawn by the ``epoch`` sampler with
  ``--batch-episodes`` tasks per version, so both schedules play the very same task batches.

Like for like: both schedules keep the same number of episodes in flight (``--concurrency``: sync
plays each batch with that many at once; async's admission gate allows that many across all its
task batches), train the same optimizer steps per version (``--max-steps``) with the same recipe
(filtered_bc, ``success_threshold 0`` so every judged episode is a sample, the last round only),
and write a full trainer checkpoint only at the end. Async adds ``--overprovision`` episodes
beyond what the batches need (admitted under the same concurrency cap) so a batch does not wait
for the slowest episodes.

Phases: (1) ``loop --schedule sync --iterations V``; its train phases, which run with nothing beside
them, sum to the training-alone time; (2) rollout alone: the episodes of all V batches played by
the runner with the same episodes in flight and no training; (3) ``loop --schedule async``.
Reported: wall time to V versions in each schedule and the ratio sync/async (target >= 1.8x at
equal concurrency), the async time against the overlap bound max(rollout alone, training alone)
(target: the bound is >= 87 % of the async time at 8 versions), mean and max staleness of the
trained samples (target mean <= 1), idle times, samples and optimizer steps per version in each
schedule, publish time per version, and (``--publish-latency``) the publish latency of each path,
folder against memory, for the tiny model and a ~100M-parameter model (`publish_latency.py`;
target: memory >= 5x faster for ~100M).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/loop_async_vs_sync.py [--quick] [--versions 8]
        [--batch-episodes 16] [--concurrency 16] [--overprovision 8] [--max-staleness 1] [--json out.json]

``--quick`` (3 versions of 8 episodes) runs in a few minutes; ratios within one run are what count
on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import free_port, stop  # noqa: E402  (benchmarks/common.py)
from rollout_async_vs_sync import LatencyPolicyServer, start_browser_server  # noqa: E402

DEFAULT_KINDS = ("click-button", "click-link", "click-dialog", "click-tab", "click-checkboxes",
                 "click-option", "focus-text", "click-test-2")
SERVED_NAME = "stand-in"


class VersionedLatencyServer(LatencyPolicyServer):
    """The policy stand-in: the rollout benchmark's latency server (pixel-random replies after a
    log-normal delay, at most `concurrency` at once) with versioned weights, speaking the CPU policy
    server's ``/reload`` and ``/health``. A request answers with the version serving when it
    arrived (in-flight requests finish on their version, as on the CPU policy server)."""

    served_name = SERVED_NAME

    def __init__(self, concurrency: int, seed: int, median_s: float, p95_s: float):
        super().__init__(concurrency, seed)
        self._latency = (median_s, p95_s)
        self.version, self.checkpoint, self.reloads = 0, "", 0
        self.reset()

    def reset(self) -> None:
        """Every phase draws the same latency and action sequence, from version 0."""
        with self._lock:
            self.set_latency(*self._latency)
            self.version, self.reloads = 0, 0

    def get(self, path: str) -> dict[str, Any]:
        if path.endswith("/health"):
            return {"status": "ok", "version": self.version, "pid": os.getpid(), "reloads": self.reloads,
                    "checkpoint": self.checkpoint}
        return super().get(path)

    def post(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.reload(request) if path.endswith("/reload") else super().post(path, request)

    def completion_fields(self) -> dict[str, Any]:
        return {"system_fingerprint": f"v{self.version}"}

    def reload(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            previous = self.version
            self.version = int(request["version"]) if request.get("version") is not None else previous + 1
            self.checkpoint = str(request.get("model", ""))
            self.reloads += 1
        return {"model": SERVED_NAME, "checkpoint": self.checkpoint, "previous_checkpoint": "",
                "version": self.version, "previous_version": previous, "load_s": 0.0}


def write_tasks(path: Path, kinds: list[str], count: int) -> Path:
    from webgym_data.importers.miniwob import miniwob_task

    path.write_text("".join(json.dumps(miniwob_task(kinds[i % len(kinds)], i).to_row()) + "\n"
                            for i in range(count)), encoding="utf-8")
    return path


def loop_settings(args: argparse.Namespace, work: Path, schedule: str, *, tasks: Path, model: Path,
                  browser_url: str, sites_url: str, policy_url: str) -> Any:
    from webgym_rl.loop import load_recipe

    return load_recipe(
        "miniwob-cpu", tasks=str(tasks), model=str(model), out=str(work / schedule), iterations=args.versions,
        schedule=schedule, bootstrap_policy="model", servers=[browser_url], eval_every=0, seed=args.seed,
        progress=False, concurrency=args.concurrency, max_staleness=args.max_staleness,
        batch_episodes=args.batch_episodes, overprovision=args.overprovision if schedule == "async" else 0,
        checkpoint_every=args.versions, viewport="320x240", sites_url=sites_url,
        horizons={"miniwob": args.horizon},
        sampler={"kind": "epoch", "batch_size": args.batch_episodes},
        policy={"base_url": policy_url, "model": SERVED_NAME, "max_concurrency": args.concurrency,
                "reload_url": policy_url.removesuffix("/v1") + "/reload", "temperature": 1.0,
                "max_tokens": 64},
        learning_rate=1e-4, max_steps=args.max_steps, per_device_batch_size=args.per_device_batch_size,
        log_every=1000, last_k_iterations=1, success_threshold=0.0, drop_same_as_next=False)


def rollout_alone(args: argparse.Namespace, work: Path, task_files: list[Path], extra: list[Any], *,
                  browser_url: str, sites_url: str, policy_url: str) -> dict[str, Any]:
    """The episodes of every batch, plus the async run's over-provision (`extra` tasks), played by
    the runner with as many in flight as either schedule has and nothing else running, until as
    many episodes are committed as the V batches hold (the rest are cancelled, as async does)."""
    import asyncio

    from webgym_core.endpoint import Endpoint
    from webgym_rl.loop.stream import StreamPosition, TrajectoryStream
    from webgym_rollout.agent.policies import OpenAIPolicy, PolicySettings, SamplingSettings
    from webgym_rollout.runner import RolloutSettings, RunSettings, run
    from webgym_rollout.settings import EnvSettings

    tasks = work / "rollout-alone-tasks.jsonl"
    tasks.write_text("".join(f.read_text(encoding="utf-8") for f in task_files)
                     + "".join(json.dumps(t.to_row()) + "\n" for t in extra), encoding="utf-8")
    out = work / "rollout-alone"
    endpoint = Endpoint(base_url=policy_url, model=SERVED_NAME, max_concurrency=args.concurrency)
    sampling = SamplingSettings(temperature=1.0, max_tokens=64)
    settings = RunSettings(
        tasks=tasks, servers=(browser_url,), out=out, progress=False,
        rollout=RolloutSettings(concurrency=args.concurrency, shard_episodes=1),
        env=EnvSettings(viewport="320x240", sites_url=sites_url, horizons={"miniwob": args.horizon}),
        policy=PolicySettings(kind="openai", endpoint=endpoint, sampling=sampling))
    wanted = args.versions * args.batch_episodes
    stream = TrajectoryStream(lambda: [out])

    async def until_committed() -> float:
        began = time.perf_counter()
        rollout = asyncio.create_task(run(settings, policy=OpenAIPolicy(endpoint, sampling=sampling)))
        while not rollout.done():
            if (out / "manifest.json").is_file() and stream.available(StreamPosition()) >= wanted:
                break
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - began
        rollout.cancel()
        await asyncio.gather(rollout, return_exceptions=True)
        return elapsed

    wall = asyncio.run(until_committed())
    return {"wall_s": wall, "episodes": stream.available(StreamPosition()), "in_flight": args.concurrency,
            "over_provisioned": len(extra)}


def run_schedule(settings: Any) -> dict[str, Any]:
    """One loop to V versions; wall time and what each version trained on."""
    from webgym_rl.loop import run_loop
    from webgym_rl.loop.events import PolicyServing

    published: list[float] = []
    began = time.perf_counter()

    def on_event(event: Any) -> None:
        if isinstance(event, PolicyServing) and event.version > 0 and event.path != "resume":
            published.append(time.perf_counter() - began)

    result = run_loop(settings, on_event=on_event)
    wall = time.perf_counter() - began
    if len(published) != settings.iterations:
        raise SystemExit(f"{settings.out}: {len(published)} versions published, expected "
                         f"{settings.iterations}")
    trains = [record.train for record in result.rounds]
    versions = [v for v in result.state.live_versions if v.version > 0]
    # Wall time to V versions: until the V-th is published (the loop then only stops its workers).
    return {"wall_s": published[-1], "total_s": wall, "published_s": published, "state": result.state,
            "train_s": [t.seconds for t in trains], "optimizer_steps": [t.steps for t in trains],
            "samples": [t.samples for t in trains], "skipped": sum(1 for t in trains if t.skipped),
            "publish_s": [v.publish_s for v in versions]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="3 versions of 8 episodes, horizon 4, 2 optimizer steps (unless given): a "
                             "few minutes.")
    parser.add_argument("--versions", type=int, default=8,
                        help="Versions to publish per schedule (default 8).")
    parser.add_argument("--batch-episodes", type=int, default=16, help="Episodes per version (default 16).")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="Episodes in flight, in either schedule (default 16).")
    parser.add_argument("--overprovision", type=int, default=8,
                        help="Async: episodes admitted beyond what the batches need (default 8).")
    parser.add_argument("--publish-latency", action=argparse.BooleanOptionalAction, default=True,
                        help="Also measure publish latency by path for tiny and ~100M models (default on).")
    parser.add_argument("--policy-concurrency", type=int, default=32,
                        help="Requests the policy stand-in serves at once (default 32).")
    parser.add_argument("--max-staleness", type=int, default=1, help="Async staleness bound (default 1).")
    parser.add_argument("--horizon", type=int, default=6, help="Most steps per episode (default 6).")
    parser.add_argument("--max-steps", type=int, default=4, help="Optimizer steps per version (default 4).")
    parser.add_argument("--per-device-batch-size", type=int, default=2, help="Training batch (default 2).")
    parser.add_argument("--latency-median", type=float, default=1.0, help="Median latency, s (default 1).")
    parser.add_argument("--latency-p95", type=float, default=5.0, help="p95 latency, s (default 5).")
    parser.add_argument("--kinds", default=",".join(DEFAULT_KINDS), help="MiniWoB tasks, comma-separated.")
    parser.add_argument("--browsers", type=int, default=2, help="Chromium processes of the browser server.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of tasks, latencies, actions and training.")
    parser.add_argument("--out", default=None, help="Keep the loop folders here (default: a temporary one).")
    parser.add_argument("--json", default=None, help="Also write the figures to this JSON file.")
    args = parser.parse_args()
    if args.quick:  # smaller defaults; flags given explicitly still win
        quick = {"versions": 3, "batch_episodes": 8, "concurrency": 8, "horizon": 4, "max_steps": 2}
        for name, value in quick.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="loop-bench-") as tmp:
        work = Path(args.out) if args.out else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        figures = run_benchmark(args, work)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1), encoding="utf-8")


def run_benchmark(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from webgym_rl.tiny import build_tiny_model
    from webgym_rollout.tasks.sites import SiteServer

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    model = work / "model"
    if not (model / "config.json").is_file():
        build_tiny_model(model, seed=args.seed)
    # Every batch of the run and two spare: the epoch sampler draws without replacement.
    tasks = write_tasks(work / "tasks.jsonl", kinds, args.batch_episodes * (args.versions + 2))
    port = free_port()
    sites = SiteServer()  # bound now (served from the `with` below): the browser server allowlists it
    browser = start_browser_server(port, args.browsers, math.ceil(args.concurrency / args.browsers),
                                   allow=f"{sites.host}:{sites.port}")
    browser_url = f"http://127.0.0.1:{port}"
    print(f"{args.versions} versions x {args.batch_episodes} episodes ({', '.join(kinds)}), horizon "
          f"{args.horizon}; {args.max_steps} optimizer steps per version; {args.concurrency} episodes in "
          f"flight in both schedules (async over-provisions {args.overprovision}); policy concurrency "
          f"{args.policy_concurrency}, latency median {args.latency_median} s p95 {args.latency_p95} s; max "
          f"staleness {args.max_staleness}", flush=True)
    try:
        with sites, VersionedLatencyServer(args.policy_concurrency, args.seed,
                                                           args.latency_median, args.latency_p95) as policy:
            common = dict(tasks=tasks, model=model, browser_url=browser_url, sites_url=sites.base_url,
                          policy_url=policy.base_url)
            policy.reset()
            sync = run_schedule(loop_settings(args, work, "sync", **common))
            print(f"  sync   {sync['wall_s']:7.1f} s to {args.versions} versions (train phases "
                  f"{sum(sync['train_s']):.1f} s)", flush=True)
            rollouts = work / "sync" / "rollouts"
            batches = [rollouts / f"round-{i:04d}-tasks.jsonl" for i in range(args.versions)]
            # The tasks the async run's over-provision plays: the start of the next batch.
            from webgym_data.loading import load_tasks
            from webgym_data.sampler import TaskSampler

            sampler = loop_settings(args, work, "async", **common).sampler
            extra = TaskSampler(load_tasks(tasks), sampler).batch(args.versions)[:args.overprovision]
            policy.reset()
            alone = rollout_alone(args, work, batches, extra, browser_url=browser_url,
                                  sites_url=sites.base_url, policy_url=policy.base_url)
            print(f"  rollout alone {alone['wall_s']:7.1f} s ({alone['episodes']} episodes committed, "
                  f"{alone['in_flight']} in flight, {alone['over_provisioned']} over-provisioned)",
                  flush=True)
            policy.reset()
            asyn = run_schedule(loop_settings(args, work, "async", **common))
            print(f"  async  {asyn['wall_s']:7.1f} s to {args.versions} versions", flush=True)
    finally:
        stop(browser)
    latency = publish_latency(work / "publish") if args.publish_latency else None
    return report(args, sync, alone, asyn, latency)


def publish_latency(work: Path) -> dict[str, Any]:
    """Median publish latency (new weights in the trainer -> first reply by them) of the folder path
    and the in-memory path (shared memory) for the tiny model and a ~100M-parameter one
    (`publish_latency.measure_publish_latency`, 5 alternating repeats each)."""
    import statistics

    from publish_latency import build_model, measure_publish_latency

    found = {}
    for size in ("tiny", "100m"):
        measured = measure_publish_latency(build_model(work / size, size), repeats=5, paths=("folder", "shm"))
        folder, memory = (statistics.median(run["total"] for run in measured[path])
                          for path in ("folder", "shm"))
        found[size] = {"parameters": measured["parameters"], "folder_s": folder, "memory_s": memory,
                       "ratio": folder / memory}
    return found


def report(args: argparse.Namespace, sync: dict, alone: dict, asyn: dict, latency: Any) -> dict[str, Any]:
    state = asyn["state"]
    metrics = state.metrics
    training_alone = sum(sync["train_s"])
    bound = max(alone["wall_s"], training_alone)
    ratio = sync["wall_s"] / asyn["wall_s"]
    figures = {
        "sync_wall_s": sync["wall_s"], "async_wall_s": asyn["wall_s"], "ratio_sync_over_async": ratio,
        "rollout_alone_s": alone["wall_s"], "training_alone_s": training_alone, "overlap_bound_s": bound,
        "bound_over_async": bound / asyn["wall_s"], "staleness_mean": metrics.staleness_mean,
        "staleness_max": metrics.staleness_max, "staleness_histogram": metrics.staleness_histogram,
        "rollout_idle_s": metrics.rollout_idle_s, "trainer_idle_s": metrics.trainer_idle_s,
        "in_flight_max_async": metrics.in_flight_max, "cancelled_async": state.cancelled,
        "sync_samples": sync["samples"], "async_samples": asyn["samples"],
        "sync_optimizer_steps": sync["optimizer_steps"], "async_optimizer_steps": asyn["optimizer_steps"],
        "sync_published_s": sync["published_s"], "async_published_s": asyn["published_s"],
        "sync_publish_s": sync["publish_s"], "async_publish_s": asyn["publish_s"],
        "publish_latency": latency, "args": vars(args)}
    met = lambda ok: "met" if ok else "MISSED"  # noqa: E731
    print()
    print(f"wall time to {args.versions} versions at {args.concurrency} episodes in flight: sync "
          f"{sync['wall_s']:.1f} s, async {asyn['wall_s']:.1f} s: async is {ratio:.2f}x faster (target "
          f">= 1.8x: {met(ratio >= 1.8)})")
    print(f"overlap bound max(rollout alone {alone['wall_s']:.1f} s, training alone {training_alone:.1f} "
          f"s) = {bound:.1f} s: async takes {asyn['wall_s'] / bound:.2f}x the bound, the bound is "
          f"{100 * bound / asyn['wall_s']:.0f}% of it (target >= 87%: {met(bound / asyn['wall_s'] >= 0.87)})")
    print(f"staleness of trained samples: mean {metrics.staleness_mean:.2f}, max {metrics.staleness_max} "
          f"(versions behind: samples {metrics.staleness_histogram}; target mean <= 1: "
          f"{met(metrics.staleness_mean <= 1)})")
    print(f"async: rollout idle {metrics.rollout_idle_s:.1f} s, trainer idle {metrics.trainer_idle_s:.1f} s; "
          f"at most {metrics.in_flight_max} episodes in flight; {state.cancelled} over-provisioned episodes "
          "cancelled at the end")
    print(f"per version: samples sync {figures['sync_samples']} async {figures['async_samples']}; optimizer "
          f"steps sync {figures['sync_optimizer_steps']} async {figures['async_optimizer_steps']}")
    print(f"publish (trainer -> endpoint serves it, folder path), s: sync "
          f"{[round(t, 2) for t in sync['publish_s']]}, async {[round(t, 2) for t in asyn['publish_s']]}")
    print(f"versions published at (s): sync {[round(t) for t in sync['published_s']]}, "
          f"async {[round(t) for t in asyn['published_s']]}")
    for size, found in (latency or {}).items():
        target = f" (target >= 5x: {met(found['ratio'] >= 5)})" if size == "100m" else ""
        print(f"publish latency, {size} model ({found['parameters'] / 1e6:.1f}M parameters): folder "
              f"{1000 * found['folder_s']:.0f} ms, in memory {1000 * found['memory_s']:.0f} ms: "
              f"{found['ratio']:.2f}x{target}")
    return figures


if __name__ == "__main__":
    main()
