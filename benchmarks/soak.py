"""Soak: the asynchronous loop on MiniWoB under faults injected on a schedule, then a full account.

Everything runs on 127.0.0.1: ``webgym-rl -v loop --schedule async`` (a child process of this
script) starts its own MiniWoB site server, browser server (with Chromium), CPU policy server (a
tiny random Qwen2-VL) and resident trainer (a child process). Faults, each at the n-th version
published over the whole soak (``--faults``, default ``browser@2,policy@3,trainer@5,loop@7,browser@10,
policy@11,trainer@13,loop@15,browser@18``; odd publishes fall between two full checkpoints, so a
rerun supersedes and retrains rounds):

- ``browser``: SIGKILL the browser server's Chromium (the run goes on: the pool starts a new one;
  the episodes on it restart on a fresh session or end with the error that says why);
- ``policy``: SIGKILL the policy server (the run stops with an error naming it);
- ``trainer``: SIGKILL the resident trainer (the run stops with an error naming it);
- ``loop``: SIGKILL the loop process itself.

When the run stops, this script reruns the same command (it resumes), until it finishes or the
time budget (``--minutes``, 20 at most) is spent. Then every episode ever started (from the
runner's ``episode X started`` log lines) is accounted for: committed (succeeded or failed, by
status), cancelled (the run stopped before it ended, logged), or in flight when a process was
killed (replayed by the rerun under the same id, or not needed any more). An episode started in a
run that ended without a kill and neither committed nor cancelled is *unaccounted* (must be 0).
No sample may be trained twice: no episode in two live batches, and the final trainer step is the
sum of the live rounds' steps (superseded rounds were trained from the restored checkpoint).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/soak.py [--versions 20] [--minutes 20]
        [--faults KIND@N,...] [--json out.json] [--keep DIR]

Exit status 0 when everything is accounted for and nothing was trained twice; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from loop_async_vs_sync import DEFAULT_KINDS, write_tasks  # noqa: E402  (benchmarks/)

FAULTS = ("browser", "policy", "trainer", "loop")
DEFAULT_FAULTS = "browser@2,policy@3,trainer@5,loop@7,browser@10,policy@11,trainer@13,loop@15,browser@18"
STARTED = re.compile(r"episode ([0-9a-f]{16}) started")
CANCELLED = re.compile(r"episode ([0-9a-f]{16}) cancelled")
PUBLISHED = re.compile(r"\bv(\d+) published\b")


def parse_faults(text: str) -> dict[int, list[str]]:
    """``kind@n,...`` -> {n: [kind, ...]}: which faults to inject at the n-th version published."""
    schedule: dict[int, list[str]] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        kind, _, at = entry.partition("@")
        if kind not in FAULTS or not at.isdigit() or int(at) < 1:
            raise SystemExit(f"--faults: {entry!r} is not KIND@N (KIND one of {', '.join(FAULTS)}, N >= 1)")
        schedule.setdefault(int(at), []).append(kind)
    return schedule


def _targets(loop_pid: int, kind: str) -> list[psutil.Process]:
    """The processes a fault of `kind` kills, among the loop's descendants."""
    if kind == "loop":
        return [psutil.Process(loop_pid)]
    found = []
    for process in psutil.Process(loop_pid).children(recursive=True):
        try:
            argv = process.cmdline()
        except psutil.Error:
            continue
        line = " ".join(argv)
        if (kind == "browser" and "chromium" in (argv[0] if argv else "") and "--type=" not in line
                or kind == "policy" and "serve-policy" in line
                or kind == "trainer" and "webgym_rl.loop.resident" in line):
            found.append(process)
    return found


def settings_file(args: argparse.Namespace, work: Path, tasks: Path, model: Path) -> Path:
    from webgym_core.settings import settings_to_dict
    from webgym_rl.loop import load_recipe

    settings = load_recipe(
        "miniwob-cpu", tasks=str(tasks), model=str(model), out=str(work / "loop"), schedule="async",
        iterations=args.versions, eval_every=0, seed=args.seed, progress=True, concurrency=args.concurrency,
        batch_episodes=args.batch_episodes, max_staleness=1, overprovision=2, checkpoint_every=2,
        sampler={"kind": "epoch", "batch_size": args.batch_episodes}, horizons={"miniwob": 3},
        max_steps=args.max_steps, per_device_batch_size=2, log_every=1000, last_k_iterations=2,
        success_threshold=0.0, drop_same_as_next=False, policy={"max_new_tokens": 24, "max_tokens": 24})
    path = work / "soak.yaml"
    import yaml

    path.write_text(yaml.safe_dump(settings_to_dict(settings)), encoding="utf-8")
    return path


class Soak:
    """Runs the loop until it finishes, injecting the scheduled faults; records every run."""

    def __init__(self, args: argparse.Namespace, config: Path, log_path: Path):
        self.args, self.config, self.log_path = args, config, log_path
        self.schedule = parse_faults(args.faults)
        self.published = 0
        self.runs: list[dict[str, Any]] = []
        self.injected: list[dict[str, Any]] = []

    def run_once(self, deadline: float) -> dict[str, Any]:
        command = [sys.executable, "-c", "from webgym_rl.cli import main; main()", "-v", "loop", "--config",
                   str(self.config)]
        began = time.monotonic()
        process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                   env={**os.environ, "OMP_NUM_THREADS": "1"})
        run: dict[str, Any] = {"started": [], "cancelled": [], "faults": [], "killed": False}
        timer = threading.Timer(max(1.0, deadline - time.monotonic()), process.kill)
        timer.start()
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(f"==== run {len(self.runs) + 1}: {' '.join(command)}\n")
            for line in process.stderr:  # type: ignore[union-attr]
                log.write(line)
                if (match := STARTED.search(line)) is not None:
                    run["started"].append(match.group(1))
                elif (match := CANCELLED.search(line)) is not None:
                    run["cancelled"].append(match.group(1))
                elif PUBLISHED.search(line) is not None and "ResumedFrom" not in line:
                    self.published += 1
                    for kind in self.schedule.pop(self.published, []):
                        self._inject(process.pid, kind, run)
        process.wait()
        timer.cancel()
        run.update(returncode=process.returncode, seconds=time.monotonic() - began,
                   killed=run["killed"] or process.returncode == -signal.SIGKILL)
        self.runs.append(run)
        return run

    def _inject(self, loop_pid: int, kind: str, run: dict[str, Any]) -> None:
        targets = _targets(loop_pid, kind)
        for process in targets:
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        fault = {"kind": kind, "at_publish": self.published, "pids": [p.pid for p in targets]}
        print(f"  fault: {kind} at publish #{self.published} (pids {fault['pids'] or 'none found'})",
              flush=True)
        self.injected.append(fault)
        run["faults"].append(fault)
        # A killed loop loses what it was doing; a killed policy server or trainer stops the run,
        # and the loop must then cancel (and log) every episode it had in flight.
        run["killed"] = run["killed"] or (kind == "loop" and bool(targets))


def account(out: Path, runs: list[dict[str, Any]], versions: int) -> dict[str, Any]:
    """Every started episode accounted for; nothing trained twice (see the module docstring)."""
    from webgym_rollout.trajectory.reader import read_episodes

    committed = {e.episode_id: e for chunk in sorted((out / "rollouts").glob("chunk-*")) if chunk.is_dir()
                 for e in read_episodes(chunk)}
    rows = sum(len(read_episodes(c)) for c in (out / "rollouts").glob("chunk-*") if c.is_dir())
    statuses = Counter(e.status.value for e in committed.values())
    starts = [i for run in runs for i in run["started"]]
    cancelled = {i for run in runs for i in run["cancelled"]}
    in_flight_at_kill: set[str] = set()
    unaccounted: list[str] = []
    for n, run in enumerate(runs):
        later = {i for r in runs[n + 1:] for i in r["started"]}
        for episode in set(run["started"]):
            if episode in committed or episode in run["cancelled"]:
                continue
            if run["killed"] or episode in later:
                in_flight_at_kill.add(episode)
            else:
                unaccounted.append(episode)
    state = json.loads((out / "loop_state.json").read_text())
    live = [v["version"] for v in state["versions"] if not v["superseded"]]
    rounds = [state["rounds"][str(r)] for r in range(versions) if str(r) in state["rounds"]]
    batch_ids = [i for r in rounds if r.get("batch") for i in r["batch"]["episodes"]]
    finished = len(rounds) == versions and all(r.get("train") for r in rounds)
    trained_once = (len(batch_ids) == len(set(batch_ids)) and set(batch_ids) <= set(committed)
                    and finished and rounds[-1]["train"]["trainer_step"] == sum(r["train"]["steps"]
                                                                                for r in rounds))
    return {
        "episodes_started": len(starts), "distinct_started": len(set(starts)),
        "committed": len(committed), "committed_rows": rows,
        "committed_by_status": dict(sorted(statuses.items())),
        "replayed_starts": len(starts) - len(set(starts)),
        "cancellations_logged": sum(len(run["cancelled"]) for run in runs),
        "cancelled": len(cancelled - set(committed)), "in_flight_at_a_kill": len(in_flight_at_kill),
        "unaccounted": len(unaccounted), "unaccounted_ids": unaccounted[:10],
        "finished": finished, "live_versions": live,
        "superseded_versions": [v["version"] for v in state["versions"] if v["superseded"]],
        "superseded_rounds": len(state["superseded"]), "batched_episodes": len(batch_ids),
        "trained_once": trained_once, "committed_once": rows == len(committed),
        "state_cancelled": state.get("cancelled", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=20, help="Versions the loop trains (default 20).")
    parser.add_argument("--batch-episodes", type=int, default=4, help="Episodes per version (default 4).")
    parser.add_argument("--concurrency", type=int, default=4, help="Episodes in flight (default 4).")
    parser.add_argument("--max-steps", type=int, default=4, help="Optimizer steps per version (default 4).")
    parser.add_argument("--faults", default=DEFAULT_FAULTS,
                        help="KIND@N,...: inject KIND (browser, policy, trainer, loop) at the N-th publish.")
    parser.add_argument("--minutes", type=float, default=20.0, help="Time budget, at most 20 (default 20).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="Write the account as JSON here.")
    parser.add_argument("--keep", type=Path, help="Work in this folder and keep it (default: a temp folder).")
    args = parser.parse_args()
    if not 0 < args.minutes <= 20:
        parser.error("--minutes must be in (0, 20]")
    parse_faults(args.faults)
    with tempfile.TemporaryDirectory(prefix="webgym-soak-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = soak(args, work)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    ok = result["account"]["unaccounted"] == 0 and result["account"]["trained_once"] and \
        result["account"]["committed_once"]
    print("PASS: every episode accounted for, nothing trained twice" if ok else "FAIL", flush=True)
    raise SystemExit(0 if ok else 1)


def soak(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from webgym_rl.tiny import build_tiny_model

    began = time.monotonic()
    deadline = began + args.minutes * 60
    model = work / "tiny-model"
    if not model.exists():
        build_tiny_model(model, seed=args.seed)
    tasks = write_tasks(work / "tasks.jsonl", list(DEFAULT_KINDS), args.batch_episodes * (args.versions + 4))
    config = settings_file(args, work, tasks, model)
    soak_ = Soak(args, config, work / "soak.log")
    print(f"soak: {args.versions} versions, faults {args.faults}, log {work / 'soak.log'}", flush=True)
    while time.monotonic() < deadline:
        run = soak_.run_once(deadline)
        print(f"  run {len(soak_.runs)}: exit {run['returncode']} after {run['seconds']:.0f} s, "
              f"{len(run['started'])} episodes started, {len(run['cancelled'])} cancelled", flush=True)
        if run["returncode"] == 0:
            break
    account_ = account(work / "loop", soak_.runs, args.versions)
    return {"seconds": time.monotonic() - began, "runs": len(soak_.runs),
            "exit_codes": [r["returncode"] for r in soak_.runs], "faults": soak_.injected,
            "faults_not_reached": {str(k): v for k, v in soak_.schedule.items()},
            "account": account_}


if __name__ == "__main__":
    main()
