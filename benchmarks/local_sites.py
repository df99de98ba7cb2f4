"""Benchmark: the local sites end to end, with the toolkit's own commands, against their ground truth.

What a user runs, each as a child process of the real CLI::

    webgym-rollout site-tasks --per-site N        generated tasks of the shop, travel and reference sites
    webgym-data build --seeds ...                 dedupe, taxonomy, decomposition, the site split
                                                  (one site of the three in the test split)
    webgym-rollout serve-sites --truth-port ...   the sites, the truth listener (bearer token)
    webgym-rollout serve --allow-hosts HOST:PORT  Chromium behind the egress guard (the site port only)
    webgym-rollout run --policy expert|random --judge site --truth-url ...   both splits of the build
    webgym-rollout run --policy expert --policy-shortcut NAME ...            each shortcut, both splits
    webgym-rollout judge-eval RUN --judges stored,programmatic,rubric        against the truth

then prints the success of the scripted expert and of the DOM-aware random policy per split, level
and site (tasks and the subtasks decomposition made), and the figures of three judges against the
ground truth, pooled over both policies' episodes: the run's own verdicts (``stored``, the site
judge), the programmatic judge (the environment's reward: a website keeps none) and a scripted
LLM judge (the rubric judge through a real OpenAI-protocol server on 127.0.0.1 whose replies come
from a text-only heuristic: it reads the visited URLs and titles and the answer, never the
screenshots, and is right only some of the time).

The shortcuts (issue 37: `webgym_sites.shortcuts`: list_everything, spray_numbers,
do_everything) play every task too: their success per site under the site judge (must be 0), and
each judge's pass rate on their episodes, with the judges ``judge-eval`` flags for passing one
the truth fails (its JSON and HTML reports are under OUT/judge-eval).

Acceptance (issue 29): the expert succeeds on >= 95 % of the built tasks; the random policy on few
of the medium and hard ones. Issue 37: every shortcut earns 0 under the site judge.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/local_sites.py                  # 100 tasks per site
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/local_sites.py --per-site 9 --out /tmp/sites
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import free_port, stop
from tests.support.scripted_openai import ScriptedOpenAI

BIN = Path(sys.executable).parent
TARGET_EXPERT = 0.95
SHORTCUT_NAMES = ("list_everything", "spray_numbers", "do_everything")
ROOMY = ("150", "150", "150")
"""The shortcuts' step budgets (easy, medium, hard): a shortcut is refused by the judge, not cut short."""


def _cli(*args: str, env: dict | None = None) -> None:
    began = time.perf_counter()
    subprocess.run([str(BIN / args[0]), *args[1:]], check=True, env=env, stdout=subprocess.DEVNULL)
    print(f"  {' '.join(args[:2])}: {time.perf_counter() - began:.1f} s", flush=True)


def _wait(url: str, headers: dict | None = None, timeout_s: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, headers=headers, trust_env=False, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")
        time.sleep(0.3)


def text_judge(body: dict) -> str:
    """A scripted LLM judge that reads only the text of a question: the answer, the pages' URLs and
    titles. A fact holds when the answer was given and one of the fact's names or numbers shows in
    the pages or the answer (an order or a booking needs its confirmation page)."""
    text = next(part["text"] for part in body["messages"][-1]["content"] if part["type"] == "text")
    answer = text.split("The agent's final answer:\n", 1)[1].split("\n\n", 1)[0].strip()
    if "Reference answer:" in text:
        reference = re.search(r"^Reference answer: (.*)$", text, re.M).group(1)
        holds = " ".join(reference.split()).casefold() in " ".join(answer.split()).casefold()
        return f"The answer {'agrees' if holds else 'differs'}.\nVERDICT: {'PASS' if holds else 'FAIL'}"
    if answer == "(no answer)":
        return "No answer was given.\nVERDICT: FAIL"
    if "is every claim in the final answer visible" in text:
        return "The answer reads plausibly.\nVERDICT: PASS"
    fact = re.search(r"establish fact \d+ \('(.*?)'\), as shown", text, re.S)
    seen = "\n".join(line for line in text.splitlines() if line.startswith("step ")).casefold()
    words = re.findall(r"\b(?:[A-Z][\w'-]{3,}|\d[\d.,/:]*\d|\d)\b", fact.group(1) if fact else "")
    holds = any(word.casefold() in seen or word.casefold() in answer.casefold() for word in words)
    if fact and re.search(r"\b(order|booking|booked)\b", fact.group(1), re.I):
        holds = holds and any(mark in seen for mark in ("/order/", "/booking/", "/hotel-booking/"))
    return f"Judged from the pages and the answer.\nVERDICT: {'PASS' if holds else 'FAIL'}"


def _episodes(run: Path) -> list:
    from webgym_rollout.trajectory.reader import read_episodes

    return list(read_episodes(run))


def _rate(counter: Counter, key) -> str:
    done, ok = counter[(key, "n")], counter[(key, "ok")]
    return f"{ok}/{done} ({100 * ok / done:.1f} %)" if done else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-site", type=int, default=100, help="Generated tasks per site.")
    parser.add_argument("--out", type=Path, default=Path("out/bench-local-sites"))
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.perf_counter()
    print(f"local sites: {args.per_site} tasks per site -> {out}", flush=True)
    _cli("webgym-rollout", "site-tasks", "--out", str(out / "seeds" / "local_sites" / "tasks.jsonl"),
         "--per-site", str(args.per_site))
    # One site of the three goes to the test split (sites never straddle the split).
    _cli("webgym-data", "build", "--seeds", str(out / "seeds"), "--out", str(out / "tasks"), "--no-progress",
         "--test-size", str(args.per_site * 5 // 2), "--max-test-fraction", "0.5")
    import datasets

    built = datasets.load_dataset(str(out / "tasks"))
    print("  load_dataset: " + ", ".join(f"{split} {len(rows)}" for split, rows in built.items()), flush=True)

    token = secrets.token_urlsafe(16)
    env = {**os.environ, "WEBGYM_TRUTH_TOKEN": token}
    site_port, truth_port, browser_port = free_port(), free_port(), free_port()
    sites_url, truth_url = f"http://127.0.0.1:{site_port}", f"http://127.0.0.1:{truth_port}"
    servers = [subprocess.Popen([str(BIN / "webgym-rollout"), "serve-sites", "--port", str(site_port),
                                 "--truth-port", str(truth_port)], env=env, stdout=subprocess.DEVNULL)]
    try:
        _wait(f"{truth_url}/health", {"Authorization": f"Bearer {token}"})
        servers.append(subprocess.Popen(
            [str(BIN / "webgym-rollout"), "serve", "--port", str(browser_port), "--allow-hosts",
             f"127.0.0.1:{site_port}"], env=env, stdout=subprocess.DEVNULL))
        _wait(f"http://127.0.0.1:{browser_port}/health", timeout_s=120)
        runs: dict[tuple[str, str], Path] = {}
        for policy in ("expert", "random", *SHORTCUT_NAMES):
            kind = [policy]
            if policy in SHORTCUT_NAMES:  # doing everything takes more steps than the task: room for it
                kind = ["expert", "--policy-shortcut", policy, "--train-horizons", *ROOMY, "--test-horizons",
                        *ROOMY]
            for split in built:
                runs[(policy, split)] = out / "runs" / f"{policy}-{split}"
                _cli("webgym-rollout", "run", "--tasks", str(out / "tasks"), "--split", split, "--servers",
                     f"http://127.0.0.1:{browser_port}", "--sites-url", sites_url, "--policy", *kind,
                     "--judge", "site", "--truth-url", truth_url, "--concurrency", str(args.concurrency),
                     "--no-progress", "--out", str(runs[(policy, split)]), env=env)
        counts: dict[str, Counter] = defaultdict(Counter)
        for (policy, split), run in runs.items():
            for episode in _episodes(run):
                task = episode.task
                kind = "subtask" if task.parent_task_id else "task"
                for key in ("all", f"split {split}", f"{kind}s", f"{kind}s {task.difficulty_level}",
                            f"site {task.environment.partition(':')[2]}"):
                    counts[policy][(key, "n")] += 1
                    counts[policy][(key, "ok")] += episode.success
        levels = ("easy", "medium", "hard")
        keys = ["all", *(f"split {s}" for s in built), "tasks", *(f"tasks {lv}" for lv in levels),
                "subtasks", *(f"subtasks {lv}" for lv in levels),
                *sorted({k for k, _ in counts["expert"] if k.startswith("site ")})]
        print(f"\n{'':<18} {'scripted expert':>22} {'DOM-aware random':>22}")
        for key in keys:
            print(f"{key:<18} {_rate(counts['expert'], key):>22} {_rate(counts['random'], key):>22}")
        expert_rate = counts["expert"][("all", "ok")] / max(1, counts["expert"][("all", "n")])
        print(f"expert success {100 * expert_rate:.1f} % (target >= {100 * TARGET_EXPERT:.0f} %: "
              f"{'met' if expert_rate >= TARGET_EXPERT else 'MISSED'})")
        _shortcut_table(runs, out / "tasks")

        # Judges against the truth, pooled over both policies' episodes of both splits.
        from webgym_rollout.judge.metrics import JudgeMetrics

        pooled: dict[str, Counter] = defaultdict(Counter)
        passes: dict[str, Counter] = defaultdict(Counter)  # judge -> (policy, n | passed | true)
        flags: dict[str, list[str]] = defaultdict(list)  # judge -> shortcut episodes it passes, truth 0
        with ScriptedOpenAI(text_judge) as llm:
            for (policy, split), run in runs.items():
                report = out / "judge-eval" / f"{policy}-{split}.json"
                _cli("webgym-rollout", "judge-eval", str(run), "--truth", "--judges",
                     "stored,programmatic,rubric", "--judge-base-url", llm.base_url, "--judge-model",
                     "text-judge", "--no-progress", "--out", str(report), "--html",
                     str(report.with_suffix(".html")), env=env)
                data = json.loads(report.read_text())
                for judge, by_policy in data["by_policy"].items():
                    for figures in by_policy.values():
                        passes[judge][(policy, "n")] += figures["n"]
                        passes[judge][(policy, "passed")] += figures["tp"] + figures["fp"]
                        passes[judge][(policy, "true")] += figures["tp"] + figures["fn"]
                    flags[judge] += data["shortcut_passes"][judge]
                if policy in SHORTCUT_NAMES:
                    continue  # the judges' table below pools the expert's and random's episodes, as before
                for judge, levels in data["metrics"].items():
                    for level, figures in levels.items():
                        for field in ("tp", "fp", "tn", "fn"):
                            pooled[(judge, level)][field] += figures[field]
        total = counts["expert"][("all", "n")] + counts["random"][("all", "n")]
        print(f"\njudges against the truth, {total} episodes of both policies pooled")
        print(f"{'judge':<14} {'level':<8} {'n':>5} {'agree':>7} {'prec':>7} {'recall':>7} {'kappa':>7}")
        for (judge, level), c in sorted(pooled.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
            m = JudgeMetrics(tp=c["tp"], fp=c["fp"], tn=c["tn"], fn=c["fn"])
            print(f"{judge:<14} {level:<8} {m.n:>5} {_pct(m.agreement):>7} {_pct(m.precision):>7} "
                  f"{_pct(m.recall):>7} {_num(m.kappa):>7}")
        policies = ("expert", "random", *SHORTCUT_NAMES)
        print("\neach judge's passes per policy (passed/episodes, both splits; truth successes in brackets)")
        print(f"{'judge':<14} " + " ".join(f"{name:>22}" for name in policies) + "  flagged")
        for judge, c in passes.items():
            cells = [f"{c[(p, 'passed')]}/{c[(p, 'n')]} ({c[(p, 'true')]})" for p in policies]
            flag = f"FLAGGED: {len(flags[judge])} shortcut episodes the truth fails" if flags[judge] else "no"
            print(f"{judge:<14} " + " ".join(f"{cell:>22}" for cell in cells) + f"  {flag}")
            if flags[judge]:
                print(f"{'':<14} e.g. {', '.join(flags[judge][:8])}")
    finally:
        for process in reversed(servers):
            stop(process)
    print(f"\nwall {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f}")


def _shortcut_table(runs: dict[tuple[str, str], Path], built: Path) -> None:
    """Each shortcut's success under the site judge per site, on the episodes where it tried something
    the task's own checks grade (must be 0: `shortcuts.tried`), and on the others (a subtask that
    grades only the parent's work the shortcut did too, or a planner with nothing to try)."""
    from webgym_data.loading import load_tasks
    from webgym_sites.goals import task_checks
    from webgym_sites.shortcuts import SHORTCUTS, tried

    tasks = {task.task_id: task for task in load_tasks(built, split=None)}  # with their truth (metadata)
    counts: dict[str, Counter] = defaultdict(Counter)
    paid: list[str] = []
    for (policy, _split), run in runs.items():
        if policy not in SHORTCUT_NAMES:
            continue
        for episode in _episodes(run):
            task = tasks[episode.task.task_id]
            parent = tasks.get(task.parent_task_id) if task.parent_task_id else None
            graded = SHORTCUTS[policy](task) is not None and tried(policy, task_checks(task, parent))
            for key in ("all", f"site {task.environment.partition(':')[2]}"):
                counts[policy][(key, "tried n" if graded else "other n")] += 1
                counts[policy][(key, "tried ok" if graded else "other ok")] += episode.success
            if graded and episode.success:
                paid.append(f"{policy}:{task.task_id}")
    keys = ["all", *sorted({k for c in counts.values() for k, _ in c if k.startswith("site ")})]
    print("\nshortcuts under the site judge: successes / episodes where it tried something graded "
          "(target 0); [successes / the other episodes]")
    print(f"{'':<18} " + " ".join(f"{name:>26}" for name in SHORTCUT_NAMES))
    for key in keys:
        cells = [f"{c[(key, 'tried ok')]}/{c[(key, 'tried n')]} "
                 f"[{c[(key, 'other ok')]}/{c[(key, 'other n')]}]"
                 for c in (counts[n] for n in SHORTCUT_NAMES)]
        print(f"{key:<18} " + " ".join(f"{cell:>26}" for cell in cells))
    print(f"shortcut successes where tried: {len(paid)} (target 0: {'met' if not paid else 'MISSED'})"
          + (": " + ", ".join(paid) if paid else ""))


def _order(level: str) -> int:
    return ("easy", "medium", "hard", "unknown", "all").index(level) if level in (
        "easy", "medium", "hard", "unknown", "all") else 9


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
