"""What a start order can gain in a finite rollout: a discrete-event model of the asynchronous
schedule of ``rollout_async_vs_sync.py`` (no browsers, no servers; a few seconds).

The model: `--concurrency` episode slots; each step waits for one of `--policy-concurrency` policy
slots (first come, first served), holds it for a log-normal latency (median 1 s, p95 5 s, as the
benchmark's stand-in), then spends `--browser-s` in the browser. An episode's steps are drawn up
front: each step ends it with probability `p` until its budget. Three start orders of the same
episodes and latencies: given (the task order), by what a group tells (``longest`` by the group's
true mean steps, the best a grouped estimate can do) and an oracle that knows each episode's steps.
Two workloads: the benchmark's (8 MiniWoB kinds, one budget of 8, a stop probability per kind that
gives their measured means) and web-like tasks (budgets 10 / 20 / 30 by difficulty, p 0.05).
Printed per workload and run length: end-to-end steps/s as a fraction of the policy bound and the
drain after the last start, means over `--repeats` draws.

    python benchmarks/drain_model.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
from collections import deque

MINIWOB_STOP = (0.03, 0.1, 0.0, 0.05, 0.12, 0.1, 0.13, 0.08)  # per kind: means 5.5-8 of 8 steps


def simulate(steps: list[int], order: list[int], args: argparse.Namespace, seed: int) -> tuple[float, float]:
    """(wall seconds, seconds after the last start) of playing `steps` in `order`."""
    rng = random.Random(seed)
    sigma = math.log(args.latency_p95 / args.latency_median) / 1.6448536269514722
    mu = math.log(args.latency_median)
    events: list[tuple[float, int, int, int]] = []  # (time, 0 reply / 1 browser done, episode, steps left)
    waiting: deque[tuple[int, int]] = deque()
    free, started, last_start, end = args.policy_concurrency, 0, 0.0, 0.0

    def ask(now: float, episode: int, left: int) -> None:
        nonlocal free
        if free:
            free -= 1
            heapq.heappush(events, (now + rng.lognormvariate(mu, sigma), 0, episode, left))
        else:
            waiting.append((episode, left))

    def start(now: float) -> None:
        nonlocal started, last_start
        if started < len(order):
            episode, started, last_start = order[started], started + 1, now
            ask(now, episode, steps[episode])

    for _ in range(min(args.concurrency, len(order))):
        start(0.0)
    while events:
        now, kind, episode, left = heapq.heappop(events)
        if kind == 0:
            free += 1
            if waiting:
                ask(now, *waiting.popleft())
            heapq.heappush(events, (now + args.browser_s, 1, episode, left - 1))
        elif left == 0:
            end = now
            start(now)
        else:
            ask(now, episode, left)
    return end, end - last_start


def draw(n: int, workload: str, rng: random.Random) -> tuple[list[int], list[float]]:
    """Each episode's steps and its group's true mean steps."""
    groups = [(8, p) for p in MINIWOB_STOP] if workload == "miniwob" else [(10, .05), (20, .05), (30, .05)]
    steps, group_of = [], []
    for i in range(n):
        budget, stop = groups[i % len(groups)]
        k = 1
        while k < budget and rng.random() > stop:
            k += 1
        steps.append(k)
        group_of.append(i % len(groups))
    means = {g: statistics.fmean(s for s, h in zip(steps, group_of, strict=True) if h == g)
             for g in set(group_of)}
    return steps, [means[g] for g in group_of]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=40)
    parser.add_argument("--policy-concurrency", type=int, default=32)
    parser.add_argument("--latency-median", type=float, default=1.0)
    parser.add_argument("--latency-p95", type=float, default=5.0)
    parser.add_argument("--browser-s", type=float, default=0.6, help="Browser time per step (default 0.6 s).")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    sigma = math.log(args.latency_p95 / args.latency_median) / 1.6448536269514722
    bound = args.policy_concurrency / (args.latency_median * math.exp(sigma ** 2 / 2))
    for workload in ("miniwob", "web"):
        for n in (96, 480):
            figures: dict[str, list[tuple[float, float]]] = {"given": [], "longest": [], "oracle": []}
            for repeat in range(args.repeats):
                steps, expected = draw(n, workload, random.Random(repeat))
                orders = {"given": list(range(n)), "longest": sorted(range(n), key=lambda i: -expected[i]),
                          "oracle": sorted(range(n), key=lambda i: -steps[i])}
                for name, order in orders.items():
                    wall, drain = simulate(steps, order, args, seed=1000 + repeat)
                    figures[name].append((sum(steps) / wall / bound, drain))
            print(f"{workload:<8} {n:>4} episodes: " + "; ".join(
                f"{name} {100 * statistics.fmean(f for f, _ in v):.0f}% of the bound, drain "
                f"{statistics.fmean(d for _, d in v):.1f} s" for name, v in figures.items()), flush=True)


if __name__ == "__main__":
    main()
