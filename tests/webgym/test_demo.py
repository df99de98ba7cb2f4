"""`webgym demo --size tiny` as a user runs it (a real subprocess): every output folder loads, the
summary matches the data, and nothing it started outlives it, also when it is stopped with Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Ctrl-C as a terminal user has it: a parent started without job control (a CI script's background job)
# hands its children SIGINT ignored, and Python then never raises KeyboardInterrupt.
_DEMO = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
         "from webgym.cli import main; main()")


class _Demo:
    """`webgym demo --size tiny` in a subprocess, with a thread that records every process it starts.

    Chromium is launched detached (its own session) by Playwright's driver, so after the demo exits
    only the recorded (pid, start time) pairs can tell whether any of them outlived it."""

    def __init__(self, out: Path):
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-c", _DEMO, "demo", "--out", str(out), "--size", "tiny"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        self.seen: dict[tuple[int, float], str] = {}
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        root = psutil.Process(self.process.pid)
        while self.process.poll() is None:
            with contextlib.suppress(psutil.Error):
                for child in root.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        self.seen.setdefault((child.pid, child.create_time()), child.name())
            time.sleep(0.05)

    def names(self) -> list[str]:
        return sorted(set(self.seen.values()))

    def left_running(self) -> list[str]:
        left = []
        for (pid, started), name in self.seen.items():
            with contextlib.suppress(psutil.NoSuchProcess):
                process = psutil.Process(pid)
                if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{pid} {name}")
        return left

    def assert_nothing_left(self) -> None:
        self._watcher.join(timeout=10)
        # A process that is still closing gets a short grace period; one that stays is a leak.
        deadline = time.monotonic() + 15
        while self.left_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not self.left_running()
        sid = self.process.pid
        same_session = []
        for process in psutil.process_iter(["name"]):
            with contextlib.suppress(OSError, psutil.Error):
                if os.getsid(process.pid) == sid and process.status() != psutil.STATUS_ZOMBIE:
                    same_session.append(f"{process.pid} {process.info['name']}")
        assert not same_session


def _load(folder: Path, cache: Path, **kwargs):
    import datasets

    # A cache of its own per folder: offline, `datasets` would serve an earlier folder of the same name.
    return datasets.load_dataset(str(folder), cache_dir=str(cache / folder.parent.name / folder.name),
                                 **kwargs)


def test_tiny_demo_outputs_load_and_nothing_is_left_running(tmp_path):
    import torch

    from webgym_rl.modeling import load_model, load_processor

    out = tmp_path / "demo"
    demo = _Demo(out)
    _, stderr = demo.process.communicate(timeout=600)
    assert demo.process.returncode == 0, stderr[-3000:]
    assert any("chrom" in name.lower() for name in demo.names()), demo.names()
    demo.assert_nothing_left()
    for stage in range(1, 10):
        assert f"[{stage}/9]" in stderr

    summary = json.loads((out / "summary.json").read_text())
    folders = {name: Path(path) for name, path in summary["folders"].items()}
    cache = tmp_path / "hf-cache"

    tasks = _load(folders["task dataset"], cache)
    assert set(tasks) == {"train", "test"}
    rows = [*tasks["train"], *tasks["test"]]
    assert len(tasks["train"]) == summary["tasks"]["train"] and len(tasks["test"]) == summary["tasks"]["test"]
    sample = [json.loads(line) for line in (Path(__file__).parents[2] / "webgym" / "sample_tasks.jsonl")
              .read_text().splitlines()]
    seeds = {r["task_id"] for r in rows if r["benchmark_name"] == "webgym-sample" and not r["parent_task_id"]}
    assert seeds == {s["task_id"] for s in sample}
    miniwob = [r for r in rows if r["environment"].startswith("miniwob:")]
    assert sorted((r["environment"], r["env_seed"]) for r in miniwob) == sorted(
        (f"miniwob:{name}", seed) for name in ("click-button-sequence", "click-collapsible")
        for seed in (0, 1))
    assert summary["tasks"]["subtasks"] == sum(1 for r in rows if r["parent_task_id"]) > 0
    sites = [r for r in rows if r["environment"].startswith("site:") and not r["parent_task_id"]]
    assert summary["tasks"]["sites"] == summary["sites"]["tasks"] == len(sites) >= 2

    # The site tasks: the expert solved each (judged by the truth), its recording replayed identically.
    expert = _load(folders["trajectories (site tasks, expert)"], cache, split="test")
    assert set(expert["policy_model"]) == {"scripted-expert"} and set(expert["judge_model"]) == {"site-truth"}
    assert summary["rollouts"]["site_expert"]["successes"] == len(expert) == len(sites)
    replay = summary["sites"]["replay"]
    assert (replay["episodes"], replay["matched"]) == (len(sites), len(sites))
    random = _load(folders["trajectories (site tasks, random)"], cache, split="test")
    assert summary["rollouts"]["site_random"]["successes"] == sum(r >= 1.0 for r in random["reward"])

    # The baselines and both rounds' versions played the same held-out seeds, none of them a training seed;
    # round 0 rolled out the scripted policy on the training seeds, round 1 the bootstrapped policy.
    heldout = summary["tasks"]["miniwob_heldout"]
    played, solved = {}, {}
    for name, key, split, model in (
            ("trajectories (bootstrap)", "bootstrap", "train", "random"),
            ("trajectories (own rollouts)", "own_rollouts", "train", "tiny-qwen3vl"),
            ("trajectories (pixel-random)", "pixel_random", "test", "pixel_random"),
            ("trajectories (DOM-aware random)", "dom_random", "test", "random"),
            ("trajectories (bootstrap, held-out)", "bootstrap_eval", "test", "tiny-qwen3vl"),
            ("trajectories (trained)", "trained", "test", "tiny-qwen3vl")):
        episodes = _load(folders[name], cache, split=split)
        measured = summary["rollouts"][key]
        expected = {"bootstrap": summary["tasks"]["miniwob_train"], "own_rollouts": 2 * 2}.get(key, heldout)
        assert measured["episodes"] == len(episodes) == expected
        assert measured["successes"] == sum(r >= 1.0 for r in episodes["reward"])
        assert measured["steps"] == sum(episodes["num_steps"])
        assert measured["valid_actions"] == sum(1 for row in episodes for s in row["steps"] if s["action"])
        low, high = measured["wilson_95"]
        assert 0 <= low <= measured["success_rate"] <= high <= 1 and high > low
        assert set(episodes["policy_model"]) == {model}
        played[key] = sorted(zip(episodes["environment"], episodes["env_seed"], strict=True))
        solved[key] = dict(zip(zip(episodes["environment"], episodes["env_seed"], strict=True),
                               (r >= 1.0 for r in episodes["reward"]), strict=True))
    assert played["pixel_random"] == played["dom_random"] == played["bootstrap_eval"] == played["trained"]
    assert {seed for _, seed in played["trained"]} == set(summary["heldout"]["seeds"])
    training_seeds = {seed for _, seed in played["bootstrap"]}
    assert not {seed for _, seed in played["trained"]} & training_seeds
    assert {seed for _, seed in played["own_rollouts"]} <= training_seeds
    assert summary["rollouts"]["pixel_random"]["valid_action_rate"] == 1.0
    assert summary["heldout"]["modes"] == ["elements"]

    # Both rounds were evaluated, and the round-1 version is paired with the bootstrap seed by seed.
    assert [(r["round"], r["rollout"], r["eval"]) for r in summary["rounds"]] == [
        (0, "bootstrap", "bootstrap_eval"), (1, "own_rollouts", "trained")]
    pair = summary["paired"]["trained_vs_bootstrap"]
    before, after = solved["bootstrap_eval"], solved["trained"]
    assert pair["tasks"] == heldout
    assert pair["won"] == sum(after[k] and not before[k] for k in after)
    assert pair["lost"] == sum(before[k] and not after[k] for k in after)
    assert (pair["p"] is None) == (pair["won"] + pair["lost"] == 0)
    assert summary["improved"] == (summary["rollouts"]["trained"]["successes"]
                                   > summary["rollouts"]["bootstrap_eval"]["successes"])

    # The trained checkpoint reloads and differs from the tiny model it started from.
    trained = load_model(folders["checkpoint (trained)"])
    load_processor(folders["checkpoint (trained)"])
    start = load_model(out / "models" / "tiny-qwen3vl")
    changed = [name for name, tensor in trained.state_dict().items()
               if not torch.equal(tensor, start.state_dict()[name])]
    assert changed and summary["bootstrap_training"]["steps"] >= 1
    # Round 0 imitates the scripted policy's episodes, successful or not.
    assert summary["bootstrap_training"]["trajectories_kept"] == summary["rollouts"]["bootstrap"]["episodes"]
    assert "steps" in summary["training"] or "skipped" in summary["training"]

    for name, key, title in (("report (bootstrap)", "bootstrap", "Round 0 (bootstrap): the scripted"),
                             ("report (own rollouts)", "own_rollouts", "Round 1: the bootstrapped policy"),
                             ("report (trained)", "trained", "Round 1 policy: ")):
        html = folders[name].read_text()
        assert f"data-episodes='{summary['rollouts'][key]['episodes']}'" in html
        assert f"<h1>{title}" in html  # titled by what the episodes are, not by their folder
    comparison = folders["report (held-out comparison)"].read_text()
    assert all(label in comparison for label in ("pixel-random", "DOM-aware random", "round 0 (bootstrap)",
                                                 "round 1 (own rollouts)"))
    heldout = summary["rollouts"]["trained"]["episodes"]
    assert (f"<h1>Held-out evaluation: {heldout} click-button-sequence + click-collapsible tasks, 4 policies "
            "side by side</h1>") in comparison
    # Four policies, not versions of one: no learning curve, and no judge agreement between policies.
    assert "Learning curve" not in comparison and "id='judges'" not in comparison
    assert folders["held-out comparison (chart)"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A run's summary.json records as the README's figures are recorded (scripts/demo_figures.py).
    from tests.test_demo_figures import figures

    entry = figures().record(json.loads((out / "summary.json").read_text()), "tiny")
    assert entry["heldout"]["trained"] == summary["rollouts"]["trained"]["successes"]
    assert entry["size"] == "tiny" and entry["trained_vs_bootstrap"]["won"] == pair["won"]
    # The printed summary names both baselines and carries the trained policy's measured figures.
    printed = " ".join(stderr.split())
    rate = 100 * summary["rollouts"]["trained"]["valid_action_rate"]
    assert f"parsed into a valid action in {rate:.1f}%" in printed
    assert "pixel-random" in printed and "DOM-aware random" in printed
    assert f"seed by seed it won {pair['won']} and lost {pair['lost']}" in printed


def test_ctrl_c_stops_the_demo_and_everything_it_started(tmp_path):
    demo = _Demo(tmp_path / "demo")
    process = demo.process
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    try:
        # Interrupt as soon as the browsers run and the first rollout has begun (the tiny demo is short:
        # waiting longer risks interrupting a demo that has already finished).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None and not (
                any("[3/9]" in line for line in lines) and any("chrom" in n.lower() for n in demo.names())):
            time.sleep(0.05)
        ended = "the demo ended before it could be interrupted:\n"
        assert process.poll() is None, ended + "".join(lines)[-3000:]
        assert any("chrom" in name.lower() for name in demo.names()), demo.names()
        os.kill(process.pid, signal.SIGINT)
        process.wait(timeout=120)
        reader.join(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode != 0, "".join(lines)[-3000:]
    rest = "".join(lines)
    assert "[9/9]" not in rest
    demo.assert_nothing_left()


def test_the_summary_gives_both_rates_and_says_when_a_bug_ended_episodes(tmp_path):
    """Cheap (no demo run): the summary's figures, table and notes from small trajectory folders."""
    from rich.console import Console

    from webgym.demo import _figures, _internal_errors, _notes, _paired, _summary_table
    from webgym_data.schema import Task
    from webgym_rollout.trajectory.contract import Episode, EpisodeStatus
    from webgym_rollout.trajectory.reader import read_episodes
    from webgym_rollout.trajectory.writer import TrajectoryWriter

    def folder(name: str, statuses: list[tuple[str, float]]) -> Path:
        out = tmp_path / name
        with TrajectoryWriter(out) as writer:
            for i, (status, reward) in enumerate(statuses):
                task = Task.from_row({"task_id": f"t{i}", "task_name": "Click",
                                      "website": "miniwob:click-test", "benchmark_name": "miniwob"})
                writer.add(Episode(task=task, episode_id=f"{name}-{i}", reward=reward,
                                   status=EpisodeStatus(status)))
        return out

    outcomes = {"pixel_random": [("ok", 1.0), ("ok", 0.0), ("ok", 0.0), ("ok", 0.0)],
                "dom_random": [("ok", 1.0), ("ok", 1.0), ("error:browser_crashed", 0.0), ("ok", 0.0)],
                "trained": [("ok", 1.0), ("error:internal", 0.0), ("error:internal", 0.0), ("timeout", 0.0)],
                "bootstrap_eval": [("ok", 0.0), ("ok", 0.0), ("ok", 0.0), ("ok", 1.0)],
                "bootstrap": [("ok", 1.0)]}
    runs = {}
    for key, statuses in outcomes.items():
        out = folder(key, statuses)
        stats = {**read_episodes(out).stats().as_dict(), "steps_per_s": 1.0, "out": str(out)}
        runs[key] = _figures(stats, _internal_errors(out))
    trained = runs["trained"]
    assert (trained["episodes"], trained["errors"], trained["evaluated"]) == (4, 2, 2)
    assert trained["internal_errors"] == 2
    assert trained["success_rate"] == 0.25 and trained["success_rate_evaluated"] == 0.5
    dom = runs["dom_random"]
    assert dom["internal_errors"] == 0 and dom["success_rate_evaluated"] == 2 / 3

    assert trained["wilson_95"][0] < 0.25 < trained["wilson_95"][1]
    # Seed by seed: the trained run solved t0 (the bootstrap did not) and failed t3 (the bootstrap solved it).
    pair = _paired(tmp_path / "bootstrap_eval", tmp_path / "trained")
    assert (pair["tasks"], pair["won"], pair["lost"], pair["p"]) == (4, 1, 1, 1.0)
    assert _paired(tmp_path / "pixel_random", tmp_path / "dom_random")["won"] == 1

    summary = {"rollouts": runs, "internal_errors": 2, "heldout": {"tasks": ["click-test"]},
               "training": {"skipped": "no successes"}, "model": {}, "paired": {"trained_vs_bootstrap": pair},
               "tasks": {"train": 1, "test": 4, "sample_web": 0, "subtasks": 0, "miniwob": 5}}
    notes = _notes(summary)
    assert notes[0].startswith("WARNING: 2 episodes ended with error:internal (trained 2): this is a bug, "
                               "please report it")
    console = Console(width=200, record=True)
    console.print(_summary_table(summary))
    table = console.export_text()
    assert "failures left out" in table and "1/2 (50.0%)" in table and "2/3 (66.7%)" in table
    assert "infrastructure failures counted" in table and "1/4 (25.0%)" in table
    assert "error:internal" in table
    assert "won 1, lost 1, p 1" in table and "round 0 (bootstrap)" in table
    assert any("did not improve on the bootstrap: 1 -> 1 of 4" in note for note in notes)
    summary["rollouts"]["trained"]["internal_errors"], summary["internal_errors"] = 0, 0
    assert not _notes(summary)[0].startswith("WARNING")


def test_the_heldout_chart_puts_the_four_policies_side_by_side_with_their_titles(tmp_path, monkeypatch):
    """Cheap (no demo run): the chart and the titles from a summary's figures."""
    from webgym.demo import _heldout_chart, _heldout_title, _viewer_titles
    from webgym_rollout.report import charts

    drawn = {}
    monkeypatch.setattr(charts, "write_rate_bars", lambda rates, path, **kwargs: drawn.update(
        rates=rates, path=path, **kwargs) or path)
    runs = {key: {"successes": won, "episodes": 24, "errors": errors} for key, won, errors in (
        ("pixel_random", 0, 0), ("dom_random", 5, 1), ("bootstrap_eval", 0, 0), ("trained", 21, 0),
        ("bootstrap", 25, 0), ("own_rollouts", 16, 0))}
    runs["bootstrap"]["episodes"], runs["own_rollouts"]["episodes"] = 120, 96
    summary = {"rollouts": {**runs, "site_expert": {"episodes": 9}, "site_random": {"episodes": 9}},
               "heldout": {"tasks": ["click-button-sequence", "click-collapsible"]},
               "sites": {"tasks": 9, "names": ["reference", "shop", "travel"]}}
    assert _heldout_chart(summary, tmp_path / "heldout.png", {}) == tmp_path / "heldout.png"
    assert [(name, rate.successes, rate.trials) for name, rate in drawn["rates"]] == [
        ("pixel-random", 0, 24), ("DOM-aware random", 5, 23), ("round 0 (bootstrap)", 0, 24),
        ("round 1 (own rollouts)", 21, 24)]  # infrastructure failures left out, as in the report
    assert drawn["title"] == _heldout_title(summary) == (
        "Held-out evaluation: 24 click-button-sequence + click-collapsible tasks, 4 policies side by side")
    assert "version" not in drawn["x_label"]
    titles = _viewer_titles(summary)
    assert "120 training episodes" in titles["bootstrap"] and "96 training episodes" in titles["own_rollouts"]
    assert titles["site_expert"].startswith("Site tasks: the scripted expert on 9 tasks of the local sites "
                                            "(reference, shop, travel)")
