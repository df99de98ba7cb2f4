"""Asynchronous vs synchronous RL loop: wall time to V policy versions with ``webgym-rl loop --mode
async`` and ``--mode sync``, measured side by side in one run (issue 15, item 7).

Set-up (all on 127.0.0.1, started and stopped by this script):

- the MiniWoB site server and one browser server (``webgym-rollout serve``, a subprocess) that
  every phase shares;
- the policy: a stand-in for a GPU model server (`VersionedLatencyServer`): OpenAI-compatible
  replies of the pixel-random policy (a click at a random point of the 0-1000 grid, sometimes a
  scroll; well-formed, so every step is a training sample) after a log-normal delay (median 1 s,
  p95 5 s by default), at most ``--policy-concurrency`` requests at once. It speaks the CPU policy
  server's weight-update protocol: ``POST /reload {"model", "version"}`` switches the version in
  place and every reply names the version that produced it (``system_fingerprint: v<N>``), so the
  loops drive it exactly as they drive the CPU policy server (``--policy-base-url`` +
  ``--policy-reload-url``);
- a tiny random Qwen2-VL (`webgym_rl.tiny`) trained on CPU in the loop's process;
- the same tasks: MiniWoB pages of several kinds and seeds, drawn by the ``epoch`` sampler with
  ``--batch-episodes`` tasks per version, so both loops play the very same task batches;
- the same training per version: filtered_bc with ``success_threshold 0`` (every judged episode is
  trained on: the random policy rarely succeeds, and both modes must train on the same amount of
  data), ``--max-steps`` optimizer steps on the batch of that version only.

Phases: (1) rollout alone: the episodes of all V batches played by the runner with no training,
as many in flight as the async loop may have (``(max_staleness + 1) x --concurrency``); (2)
``loop --mode sync --iterations V`` (each iteration rolls out its batch, then trains); its train
phases, which run with nothing beside them, sum to the training-alone time; (3) ``loop --mode
async --iterations V``. Reported: wall time to V versions in each mode and the ratio sync/async
(target >= 1.8x), the async time against the overlap bound max(rollout alone, training alone)
(target: async within 1.15x of the bound, i.e. the bound is >= 87 % of the async time), mean and
max staleness of the trained samples (target mean <= 1), idle times, samples and optimizer steps
per version in each mode.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/loop_async_vs_sync.py [--quick] [--versions 6]
        [--batch-episodes 16] [--concurrency 16] [--max-staleness 1] [--json out.json]

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

from common import free_port  # noqa: E402  (benchmarks/common.py)
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


def loop_settings(args: argparse.Namespace, work: Path, mode: str, *, tasks: Path, model: Path,
                  browser_url: str, sites_url: str, policy_url: str) -> Any:
    from webgym_core.endpoint import Endpoint
    from webgym_rl.async_loop import AsyncSettings
    from webgym_rl.loop import LoopSettings
    from webgym_rl.samples import Objective, SampleSelection
    from webgym_rl.services import PolicyEndpointSettings
    from webgym_rl.train import TrainingSettings
    from webgym_rollout.env import EnvSettings
    from webgym_rollout.policy import SamplingSettings
    from webgym_rollout.runner import RolloutSettings
    from webgym_rollout.sampler import SamplerSettings

    return LoopSettings(
        tasks=str(tasks), model=str(model), out=str(work / mode), iterations=args.versions, split="train",
        bootstrap_policy="model", servers=[browser_url], eval_every=0, seed=args.seed, progress=False,
        rollout=RolloutSettings(concurrency=args.concurrency, mode=mode),
        async_loop=AsyncSettings(max_staleness=args.max_staleness, batch_episodes=args.batch_episodes),
        env=EnvSettings(viewport="320x240", sites_url=sites_url, miniwob_horizon=args.horizon),
        sampler=SamplerSettings(kind="epoch", batch_size=args.batch_episodes),
        policy=PolicyEndpointSettings(
            endpoint=Endpoint(base_url=policy_url, model=SERVED_NAME,
                              max_concurrency=(args.max_staleness + 1) * args.concurrency),
            reload_url=policy_url.removesuffix("/v1") + "/reload",
            sampling=SamplingSettings(temperature=1.0, max_tokens=64)),
        training=TrainingSettings(
            objective=Objective.FILTERED_BC, learning_rate=1e-4, max_steps=args.max_steps,
            per_device_batch_size=args.per_device_batch_size, log_with="none", log_every=1000,
            samples=SampleSelection(last_k_iterations=1, success_threshold=0.0, drop_same_as_next=False)))


def rollout_alone(args: argparse.Namespace, work: Path, task_files: list[Path], *, browser_url: str,
                  sites_url: str, policy_url: str) -> dict[str, Any]:
    """The episodes of every batch played by the runner, nothing else running."""
    import asyncio

    from webgym_core.endpoint import Endpoint
    from webgym_rollout.env import EnvSettings
    from webgym_rollout.policy import OpenAIPolicy, PolicySettings, SamplingSettings
    from webgym_rollout.runner import RolloutSettings, RunSettings, run

    tasks = work / "rollout-alone-tasks.jsonl"
    tasks.write_text("".join(f.read_text(encoding="utf-8") for f in task_files), encoding="utf-8")
    in_flight = (args.max_staleness + 1) * args.concurrency
    endpoint = Endpoint(base_url=policy_url, model=SERVED_NAME, max_concurrency=in_flight)
    sampling = SamplingSettings(temperature=1.0, max_tokens=64)
    settings = RunSettings(
        tasks=tasks, servers=(browser_url,), out=work / "rollout-alone", progress=False,
        rollout=RolloutSettings(concurrency=in_flight, mode="async", shard_episodes=1),
        env=EnvSettings(viewport="320x240", sites_url=sites_url, miniwob_horizon=args.horizon),
        policy=PolicySettings(kind="openai", endpoint=endpoint, sampling=sampling))
    began = time.perf_counter()
    report = asyncio.run(run(settings, policy=OpenAIPolicy(endpoint, sampling=sampling)))
    return {"wall_s": time.perf_counter() - began, "episodes": report.episodes, "steps": report.steps,
            "errors": report.errors, "in_flight": in_flight}


def run_mode(settings: Any) -> dict[str, Any]:
    """One loop to V versions; wall time and what each version trained on."""
    from webgym_rl.loop import run_loop

    published: list[float] = []
    began = time.perf_counter()

    def on_event(kind: str, detail: dict[str, Any]) -> None:
        if kind == "version_published" or (kind == "phase_done" and detail["phase"] == "train"):
            published.append(time.perf_counter() - began)

    result = run_loop(settings, on_event=on_event)
    wall = time.perf_counter() - began
    if len(published) != settings.iterations:
        raise SystemExit(f"{settings.out}: {len(published)} versions published, "
                         f"expected {settings.iterations}")
    trains = [record.get("train", {}) for record in result.iterations]
    state = json.loads((Path(settings.out) / "loop_state.json").read_text(encoding="utf-8"))
    # Wall time to V versions: until the V-th is published (the loop then only stops its workers).
    return {"wall_s": published[-1], "total_s": wall, "published_s": published, "state": state,
            "train_s": [float(t.get("seconds", 0.0)) for t in trains],
            "optimizer_steps": [t.get("steps", 0) for t in trains],
            "samples": [int((t.get("counts") or {}).get("steps_kept", 0)) for t in trains],
            "skipped": sum(1 for t in trains if t.get("skipped"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="3 versions of 8 episodes, horizon 4, 2 optimizer steps (unless given): a "
                             "few minutes.")
    parser.add_argument("--versions", type=int, default=6, help="Versions to publish per mode (default 6).")
    parser.add_argument("--batch-episodes", type=int, default=16, help="Episodes per version (default 16).")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="Episodes in flight per rollout (sync: the batch at once; default 16).")
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
    import subprocess

    from webgym_rl.tiny import build_tiny_model
    from webgym_rollout.sites import SiteServer

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    model = work / "model"
    if not (model / "config.json").is_file():
        build_tiny_model(model, seed=args.seed)
    # Every batch of the run and two spare: the epoch sampler draws without replacement.
    tasks = write_tasks(work / "tasks.jsonl", kinds, args.batch_episodes * (args.versions + 2))
    port = free_port()
    in_flight = (args.max_staleness + 1) * args.concurrency
    browser = start_browser_server(port, args.browsers, math.ceil(in_flight / args.browsers))
    browser_url = f"http://127.0.0.1:{port}"
    print(f"{args.versions} versions x {args.batch_episodes} episodes ({', '.join(kinds)}), horizon "
          f"{args.horizon}; {args.max_steps} optimizer steps per version; concurrency {args.concurrency}, "
          f"policy concurrency {args.policy_concurrency}, latency median {args.latency_median} s p95 "
          f"{args.latency_p95} s; max staleness {args.max_staleness}", flush=True)
    try:
        with SiteServer() as sites, VersionedLatencyServer(args.policy_concurrency, args.seed,
                                                           args.latency_median, args.latency_p95) as policy:
            common = dict(tasks=tasks, model=model, browser_url=browser_url, sites_url=sites.base_url,
                          policy_url=policy.base_url)
            policy.reset()
            sync = run_mode(loop_settings(args, work, "sync", **common))
            print(f"  sync   {sync['wall_s']:7.1f} s to {args.versions} versions (train phases "
                  f"{sum(sync['train_s']):.1f} s)", flush=True)
            batches = [work / "sync" / f"iter-{i:04d}" / "tasks.jsonl" for i in range(args.versions)]
            policy.reset()
            alone = rollout_alone(args, work, batches, browser_url=browser_url, sites_url=sites.base_url,
                                  policy_url=policy.base_url)
            print(f"  rollout alone {alone['wall_s']:7.1f} s ({alone['episodes']} episodes, {alone['steps']} "
                  f"steps, {alone['in_flight']} in flight)", flush=True)
            policy.reset()
            asyn = run_mode(loop_settings(args, work, "async", **common))
            print(f"  async  {asyn['wall_s']:7.1f} s to {args.versions} versions", flush=True)
    finally:
        browser.terminate()
        try:
            browser.wait(timeout=30)
        except subprocess.TimeoutExpired:
            browser.kill()
    return report(args, sync, alone, asyn)


def report(args: argparse.Namespace, sync: dict, alone: dict, asyn: dict) -> dict[str, Any]:
    record = asyn["state"]["async"]
    metrics = record["metrics"]
    training_alone = sum(sync["train_s"])
    bound = max(alone["wall_s"], training_alone)
    ratio = sync["wall_s"] / asyn["wall_s"]
    async_train = [batch.get("train", {})
                   for _, batch in sorted(record["batches"].items(), key=lambda kv: int(kv[0]))]
    figures = {
        "sync_wall_s": sync["wall_s"], "async_wall_s": asyn["wall_s"], "ratio_sync_over_async": ratio,
        "rollout_alone_s": alone["wall_s"], "training_alone_s": training_alone, "overlap_bound_s": bound,
        "bound_over_async": bound / asyn["wall_s"], "staleness_mean": metrics["staleness_mean"],
        "staleness_max": metrics["staleness_max"], "staleness_histogram": metrics["staleness_histogram"],
        "rollout_idle_s": metrics["rollout_idle_s"], "trainer_idle_s": metrics["trainer_idle_s"],
        "sync_samples": sync["samples"], "async_samples": [int(t.get("samples", 0)) for t in async_train],
        "sync_optimizer_steps": sync["optimizer_steps"],
        "async_optimizer_steps": [t.get("steps", 0) for t in async_train],
        "sync_published_s": sync["published_s"], "async_published_s": asyn["published_s"],
        "args": vars(args)}
    print()
    print(f"wall time to {args.versions} versions: sync {sync['wall_s']:.1f} s, async {asyn['wall_s']:.1f} "
          f"s: async is {ratio:.2f}x faster (target >= 1.8x)")
    print(f"overlap bound max(rollout alone {alone['wall_s']:.1f} s, training alone {training_alone:.1f} "
          f"s) = {bound:.1f} s: async takes {asyn['wall_s'] / bound:.2f}x the bound, the bound is "
          f"{100 * bound / asyn['wall_s']:.0f}% of it (target >= 87%)")
    print(f"staleness of trained samples: mean {metrics['staleness_mean']:.2f}, max "
          f"{metrics['staleness_max']} (versions behind: samples {metrics['staleness_histogram']}; "
          "target mean <= 1)")
    print(f"idle (async): rollout {metrics['rollout_idle_s']:.1f} s, trainer "
          f"{metrics['trainer_idle_s']:.1f} s")
    print(f"per version: samples sync {figures['sync_samples']} async {figures['async_samples']}; optimizer "
          f"steps sync {figures['sync_optimizer_steps']} async {figures['async_optimizer_steps']}")
    print(f"versions published at (s): sync {[round(t) for t in sync['published_s']]}, "
          f"async {[round(t) for t in asyn['published_s']]}")
    return figures


if __name__ == "__main__":
    main()
