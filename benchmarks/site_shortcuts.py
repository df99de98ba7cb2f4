"""Benchmark (issue 37): how many generated site tasks each scripted shortcut passes, per template.

Draws `--per-site` tasks of each local site (and the subtasks decomposition makes of them), plays the
scripted expert and each shortcut of `webgym_sites.shortcuts` (list_everything,
spray_numbers, do_everything; and spray_pages: the expert's work answered with every number of every
page it loaded) over the site server's HTTP routes, with a session each, and judges
every episode with the site judge (`site_verdicts`, the reward is 1 when every verdict passes). A
shortcut is tried only on the tasks it has something to try on.

With ``--before REV`` the same episodes (the same moves, answers and session facts) are judged again
by the site judge of that git revision, on the task rows that revision generates from the same
draws (a child process runs ``git archive REV``'s code): the figures before and after a change of
the checks.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/site_shortcuts.py --per-site 90 --before main
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/site_shortcuts.py --per-site 9       # quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Judges episodes by the code on PYTHONPATH: reads {"per_site", "seed", "episodes"} on stdin, writes
# per episode its reward, the answer facts it passed and their number (null for a subtask that code's
# rows do not have). The tasks are drawn again there (the same draws, that code's rows).
JUDGE = r"""
import json, sys
from webgym_data.decompose import decompose_task
from webgym_rollout.judge.site import site_verdicts
try:
    from webgym_sites.facts import SessionFacts
    from webgym_sites.generate import site_tasks
    from webgym_sites.goals import task_checks
except ImportError:  # a revision before issue 38, whose sites were webgym_rollout.tasks.websites
    from webgym_rollout.tasks.websites.facts import SessionFacts
    from webgym_rollout.tasks.websites.generate import site_tasks
    from webgym_rollout.tasks.websites.goals import task_checks

ANSWERS = ("answer", "answer_number", "answer_value")
job = json.load(sys.stdin)
parents = site_tasks(job["per_site"], seed=job["seed"])
tasks = {}
for index, parent in enumerate(parents):
    tasks[(index, "")] = (parent, None)
    for subtask in decompose_task(parent):
        tasks[(index, ",".join(subtask.fact_group_ids))] = (subtask, parent)
rewards = []
for episode in job["episodes"]:
    if (episode["index"], episode["groups"]) not in tasks:  # a subtask of groups this code does not make
        rewards.append(None)
        continue
    task, parent = tasks[(episode["index"], episode["groups"])]
    params = json.loads(task.source.metadata)["params"]
    if params != episode["params"]:
        raise SystemExit(f"task {episode['index']}: another draw than the episode's")
    verdicts = site_verdicts(task, SessionFacts.model_validate(episode["facts"]), episode["answer"], parent)
    checks = task_checks(task, parent)
    answers = [v.passed for v, c in zip(verdicts, checks) if c["type"] in ANSWERS]
    rewards.append([int(bool(verdicts) and all(v.passed for v in verdicts)), sum(answers), len(answers)])
json.dump(rewards, sys.stdout)
"""


def _play(per_site: int, seed: int) -> list[dict]:
    """Every (task, policy) episode over HTTP: the task's index and groups, its template, the policy,
    the answer, the session's facts."""
    import httpx

    from tests.support.plan_over_http import HttpPlayer
    from webgym_data.decompose import decompose_task
    from webgym_rollout.tasks.sites import SiteServer
    from webgym_sites.generate import expert_plan, site_tasks
    from webgym_sites.goals import task_checks
    from webgym_sites.shortcuts import SHORTCUTS, page_spray, tried
    from webgym_sites.state import new_session_id, with_session

    episodes = []
    with SiteServer() as server, httpx.Client(base_url=server.base_url, trust_env=False,
                                               follow_redirects=True, timeout=60) as client:
        for index, parent in enumerate(site_tasks(per_site, seed=seed, base_url=server.base_url)):
            for task in (parent, *decompose_task(parent)):
                metadata, checks = json.loads(task.source.metadata), task_checks(task, parent)
                policies = (("expert", expert_plan), *SHORTCUTS.items(), ("spray_pages", expert_plan))
                for policy, planner in policies:
                    plan = planner(task)
                    if plan is None or (policy != "expert" and not tried(policy, checks)):
                        continue
                    session = new_session_id()
                    client.cookies.clear()
                    player = HttpPlayer(client, with_session(task.start_url, session))
                    answer = player.play(plan)
                    if policy == "spray_pages":  # every number of every page the episode loaded
                        answer = page_spray(player.pages)
                    groups = ",".join(task.fact_group_ids) if task.parent_task_id else ""
                    episodes.append({"index": index, "groups": groups, "template": metadata["template"],
                                     "site": metadata["site"],
                                     "policy": policy, "params": metadata["params"], "answer": answer,
                                     "facts": server.facts(session).model_dump(mode="json")})
    return episodes


def _judge(code: Path, per_site: int, seed: int, episodes: list[dict]) -> list[int | None]:
    job = json.dumps({"per_site": per_site, "seed": seed, "episodes": episodes})
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run([sys.executable, "-c", JUDGE], input=job, capture_output=True, text=True, env=env,
                          cwd=code, check=False)
    if done.returncode:
        raise SystemExit(f"judging with {code} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-site", type=int, default=90, help="tasks per site (a ninth of each template)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--before", default="", help="a git revision whose site judge judges them too")
    args = parser.parse_args()
    began = time.perf_counter()
    episodes = _play(args.per_site, args.seed)
    print(f"{len(episodes)} episodes played in {time.perf_counter() - began:.0f} s", flush=True)
    judges = {"after": ROOT}
    with tempfile.TemporaryDirectory() as scratch:
        if args.before:
            archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True,
                                     check=True)
            subprocess.run(["tar", "-x", "-C", scratch], input=archive.stdout, check=True)
            judges = {"before": Path(scratch), **judges}
        rewards = {name: _judge(code, args.per_site, args.seed, episodes) for name, code in judges.items()}
    print(f"judged in {time.perf_counter() - began:.0f} s (seed {args.seed}, {args.per_site} tasks per "
          "site)\n")
    policies = ["expert", "list_everything", "spray_numbers", "spray_pages", "do_everything"]
    judged = [(episode, {name: rewards[name][n] for name in judges}) for n, episode in enumerate(episodes)]
    for kind, chosen in (("tasks", lambda e: not e["groups"]), ("subtasks", lambda e: bool(e["groups"]))):
        _table(kind, [(episode, by_judge) for episode, by_judge in judged
                      if chosen(episode) and None not in by_judge.values()], policies)


def _table(kind: str, judged: list[tuple[dict, dict]], policies: list[str]) -> None:
    """Per template and policy: episodes passed / tried (each judge, ``before -> after``); after the
    slash of a shortcut that answers, the answer facts passed / tried."""
    if not judged:
        return
    tried: Counter = Counter()
    passed: dict[str, Counter] = {name: Counter() for name in judged[0][1]}
    facts: dict[str, Counter] = {name: Counter() for name in judged[0][1]}
    for episode, by_judge in judged:
        key = (episode["site"], episode["template"], episode["policy"])
        tried[key] += 1
        for name, (reward, right, asked) in by_judge.items():
            passed[name][key] += reward
            facts[name][key + ("right",)] += right
            facts[name][key + ("asked",)] += asked
    print(f"{kind}: episodes passed / tried ({' -> '.join(passed)}); [answer facts passed / asked]")
    print("| site | template | " + " | ".join(policies) + " |")
    print("|---|---|" + "---|" * len(policies))
    for site, template in sorted({(s, t) for s, t, _ in tried}):
        cells = []
        for policy in policies:
            key = (site, template, policy)
            cell = " -> ".join(f"{passed[name][key]}/{tried[key]}" for name in passed) if tried[key] else "-"
            if tried[key] and policy in ("list_everything", "spray_numbers", "spray_pages"):
                cell += " [" + " -> ".join(f"{facts[name][key + ('right',)]}/{facts[name][key + ('asked',)]}"
                                           for name in passed) + "]"
            cells.append(cell)
        print(f"| {site} | {template} | " + " | ".join(cells) + " |")
    totals = []
    for policy in policies:
        keys = [key for key in tried if key[2] == policy]
        count = sum(tried[key] for key in keys)
        if not count:
            totals.append("-")
            continue
        cell = " -> ".join(f"{sum(passed[name][key] for key in keys)}/{count}" for name in passed)
        if policy in ("list_everything", "spray_numbers", "spray_pages"):
            right = {name: sum(facts[name][key + ("right",)] for key in keys) for name in passed}
            asked = {name: sum(facts[name][key + ("asked",)] for key in keys) for name in passed}
            cell += " [" + " -> ".join(f"{right[name]}/{asked[name]}" for name in passed) + "]"
        totals.append(cell)
    print("| all | | " + " | ".join(totals) + " |")
    print()


if __name__ == "__main__":
    main()
