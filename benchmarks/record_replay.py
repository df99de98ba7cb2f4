"""Recording and replaying episodes' traffic: what recording costs, what it stores, how faithful a
replay is. Everything is measured side by side in one run.

Set-up (all on 127.0.0.1, started and stopped by this script): the changing test site of
``tests/webgym_rollout/replay_sites.py`` (a page new on every load, a POST search with a per-load
nonce, a redirect, images and a script-loaded fragment); one in-process browser server; a scripted
policy (the same six actions every episode: click Search, type + Enter, back home, click Gallery, a
scroll, answer). The runner is ``webgym_rollout.runner.run``, as ``webgym-rollout run`` calls it.

Phases, each ``--episodes`` episodes at ``--concurrency``:

1. cost: runs without and with ``--record``, back to back, ``--rounds`` times (the order alternating),
   so that both runs of a pair see the same load of a shared machine; steps/s of each (end to end,
   first session to last row). The slowdown quoted is the median over the pairs (the mean of the
   steps/s is printed too, and is at the mercy of whatever else runs on the machine), with the
   CPU seconds per step of this process (runner and browser server);
2. storage: the recorded run's bodies per episode as received (before deduplication) and on disk
   (content-addressed, each distinct body once), plus the episode indexes;
3. fidelity: the site is changed (``version = 2``: new colours, images, wording) and the recorded
   run is replayed with the same script: the share of steps whose screenshot hash equals the
   recording's, and how many requests reached the site (should be 0).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/record_replay.py [--episodes 12] [--concurrency 4]
        [--rounds 8] [--json figures.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.webgym_rollout.replay_sites import ReplaySite  # noqa: E402
from webgym_rollout.actions import AgentAction  # noqa: E402
from webgym_rollout.agent.policies import PolicyOutput  # noqa: E402
from webgym_rollout.browser.pool import PoolSettings  # noqa: E402
from webgym_rollout.browser.server import ServerSettings, running_server  # noqa: E402
from webgym_rollout.runner import RolloutSettings, RunSettings, run  # noqa: E402
from webgym_rollout.settings import EnvSettings  # noqa: E402
from webgym_rollout.trajectory.reader import read_episodes  # noqa: E402
from webgym_rollout.trajectory.recordings import RecordingStore, RecordSettings  # noqa: E402


class ScriptedPolicy:
    """The same actions every episode, by step number (no model, no latency)."""

    model_id = "scripted"

    def __init__(self, site_url: str):
        self.actions = [AgentAction("left_click", coordinate=(312, 350)),
                        AgentAction("type", text="shoes", press_enter=True),
                        AgentAction("navigate", url=f"{site_url}/"),
                        AgentAction("left_click", coordinate=(312, 600)),
                        AgentAction("scroll", direction="down"),
                        AgentAction("answer", text="done")]

    async def act(self, observation) -> PolicyOutput:
        return PolicyOutput.scripted(self.actions[min(observation.step, len(self.actions) - 1)])


def _own_cpu_s() -> float:
    """CPU seconds of this process: the runner and the browser server (Chromium's renderers come and
    go with their pages, so their CPU time cannot be summed reliably)."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


def _tasks(path: Path, site: ReplaySite, n: int) -> Path:
    with path.open("w") as handle:
        for i in range(n):
            handle.write(json.dumps({"task_id": f"shop-{i}", "task_name": "Find shoes",
                                     "website": f"{site.url}/", "start_url": f"{site.url}/"}) + "\n")
    return path


async def main(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="record-replay-"))
    results: dict = {"episodes": args.episodes, "concurrency": args.concurrency, "rounds": args.rounds}
    with ReplaySite() as site:
        tasks = _tasks(work / "tasks.jsonl", site, args.episodes)
        policy = ScriptedPolicy(site.url)
        pool = PoolSettings(browsers=1, contexts_per_browser=args.concurrency, allow_hosts=("127.0.0.1",))
        async with running_server(ServerSettings(port=0, pool=pool)) as (url, _):
            def settings(out: str, **traffic) -> RunSettings:
                return RunSettings(tasks=tasks, servers=(url,), out=work / out, progress=False,
                                   rollout=RolloutSettings(concurrency=args.concurrency),
                                   env=EnvSettings(viewport="640x400"), traffic=RecordSettings(**traffic))

            await run(settings("warm-up"), policy=policy)  # browsers and contexts warm for both
            speeds: dict[str, list[float]] = {"off": [], "record": []}
            cpu: dict[str, list[float]] = {"off": [], "record": []}
            for i in range(args.rounds):
                for mode in ("off", "record") if i % 2 == 0 else ("record", "off"):
                    cpu_before = _own_cpu_s()
                    report = await run(settings(f"{mode}-{i}", record=mode == "record"), policy=policy)
                    assert report.episodes == args.episodes and not report.errors, report
                    speeds[mode].append(report.steps_per_s)
                    cpu[mode].append((_own_cpu_s() - cpu_before) / report.steps)
            off, rec = (sum(v) / len(v) for v in (speeds["off"], speeds["record"]))
            pairs = sorted(1 - r / o for o, r in zip(speeds["off"], speeds["record"], strict=True))
            results["steps_per_s"] = {"off": off, "record": rec, "rounds": speeds}
            results["record_slowdown"] = 1 - rec / off
            results["record_slowdown_median_round"] = statistics.median(pairs)
            results["cpu_s_per_step"] = {mode: statistics.fmean(v) for mode, v in cpu.items()}

            recorded = work / "record-0"
            stats = RecordingStore(recorded).stats()
            mb = 2 ** 20
            results["storage_mb_per_episode"] = {
                "bodies_before_dedup": stats.recorded_bytes / stats.episodes / mb,
                "bodies_after_dedup": stats.stored_bytes / stats.episodes / mb,
                "indexes": stats.index_bytes / stats.episodes / mb,
                "total_on_disk": (stats.stored_bytes + stats.index_bytes) / stats.episodes / mb,
                "distinct_bodies": stats.bodies}

            site.version = 2
            hits = sum(site.hits.values())
            replay = await run(settings("replayed", replay=str(recorded)), policy=policy)
            assert replay.episodes == args.episodes, replay
            results["site_requests_during_replay"] = sum(site.hits.values()) - hits
            before = {(e.task.task_id, e.attempt): [s.screenshot_sha256 for s in e.steps]
                      for e in read_episodes(recorded)}
            matched = total = 0
            for episode in read_episodes(work / "replayed"):
                hashes = before[(episode.task.task_id, episode.attempt)]
                for i, step in enumerate(episode.steps):
                    total += 1
                    matched += i < len(hashes) and hashes[i] == step.screenshot_sha256
            results["replay_fidelity"] = {"matched_steps": matched, "steps": total, "share": matched / total}
            results["replay_steps_per_s"] = replay.steps_per_s
    return results


def _print(results: dict) -> None:
    speed, storage = results["steps_per_s"], results["storage_mb_per_episode"]
    fidelity = results["replay_fidelity"]
    print(f"episodes per run: {results['episodes']} at concurrency {results['concurrency']}, "
          f"{results['rounds']} rounds")
    print(f"recording slowdown: {results['record_slowdown_median_round']:.1%} of the steps/s (median of "
          f"{results['rounds']} back-to-back pairs; target < 10 %); mean steps/s {speed['off']:.2f} without, "
          f"{speed['record']:.2f} with --record ({results['record_slowdown']:.1%})")
    cpu = results["cpu_s_per_step"]
    print(f"CPU seconds per step of the runner + browser server process: {cpu['off']:.3f} without, "
          f"{cpu['record']:.3f} with --record (+{cpu['record'] / cpu['off'] - 1:.1%})")
    print(f"storage per episode: bodies {storage['bodies_before_dedup']:.4f} MB as received, "
          f"{storage['bodies_after_dedup']:.4f} MB deduplicated, indexes {storage['indexes']:.4f} MB; "
          f"on disk {storage['total_on_disk']:.4f} MB ({storage['distinct_bodies']} distinct bodies)")
    print(f"replay after changing the site: {fidelity['matched_steps']}/{fidelity['steps']} screenshots "
          f"match the recording ({fidelity['share']:.1%}, target >= 95 %); requests that reached the site: "
          f"{results['site_requests_during_replay']}; replay steps/s {results['replay_steps_per_s']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    figures = asyncio.run(main(options))
    _print(figures)
    if options.json:
        options.json.write_text(json.dumps(figures, indent=2))
