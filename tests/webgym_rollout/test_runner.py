"""Tests of `webgym_rollout.runner`: task loading, horizons, the two schedulers, session retries and
resume after SIGKILL. Browsers, servers and datasets are real; the policies are the real random
policy, wrapped where a test needs to see the order of calls or to slow one episode down."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest
import pytest_asyncio
from click.testing import CliRunner

from webgym_rollout.runner import RolloutSettings, RunSettings, episode_id, run, run_command
from webgym_rollout.settings import EnvSettings
from webgym_rollout.trajectory.reader import read_episodes

REPO_ROOT = Path(__file__).resolve().parents[2]


def write_tasks(path: Path, seeds, task: str = "click-button", attempts_prefix: str = "") -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for seed in seeds:
            handle.write(json.dumps({
                "task_id": f"{attempts_prefix}{task}-{seed}", "task_name": f"MiniWoB {task}",
                "website": f"miniwob:{task}", "benchmark_name": "miniwob",
                "environment": f"miniwob:{task}", "env_seed": seed}) + "\n")
    return path


def _settings(tmp_path: Path, *, rollout: dict | None = None, env: dict | None = None,
              **overrides) -> RunSettings:
    values = dict(tasks=tmp_path / "tasks.jsonl", servers=("http://127.0.0.1:1",), out=tmp_path / "out",
                  progress=False, rollout=RolloutSettings(**(rollout or {})),
                  env=EnvSettings(**{"viewport": "320x240", **(env or {})}))
    values.update(overrides)
    return RunSettings(**values)


# ------------------------------------------------------------------------------ no browser needed

def test_settings_refuse_incomplete_endpoints(tmp_path):
    from webgym_core.settings import load_settings

    base = {"tasks": str(tmp_path / "t.jsonl"), "servers": ("http://127.0.0.1:1",),
            "out": str(tmp_path / "o")}
    with pytest.raises(ValueError, match=r"policy.base_url \(--policy-base-url\).*--policy-model"):
        load_settings(RunSettings, None, {**base, "policy__kind": "openai"})
    with pytest.raises(ValueError, match=r"judge.base_url \(--judge-base-url\)"):
        load_settings(RunSettings, None, {**base, "judge__kind": "rubric", "judge__endpoint__model": "m"})
    with pytest.raises(ValueError, match=r"concurrency \(--concurrency\): must be >= 1"):
        load_settings(RunSettings, None, {**base, "rollout__concurrency": 0})
    with pytest.raises(ValueError, match=r"servers \(--servers\): at least one"):
        load_settings(RunSettings, None, {**base, "servers": ()})
    assert episode_id("t", 0, 0) == episode_id("t", 0, 0) != episode_id("t", 1, 0) != episode_id("t", 0, 1)


def test_cli_help_and_clear_errors(tmp_path):
    runner = CliRunner()
    result = runner.invoke(run_command, ["--help"])
    assert result.exit_code == 0 and "Example:" in result.output and "--resume" in result.output
    write_tasks(tmp_path / "tasks.jsonl", range(2))
    base = ["--tasks", str(tmp_path / "tasks.jsonl"), "--servers", "http://127.0.0.1:1", "--out",
            str(tmp_path / "out"), "--no-progress"]
    result = runner.invoke(run_command, [*base, "--policy", "openai"])
    assert result.exit_code == 2 and "--policy-base-url" in result.output
    result = runner.invoke(run_command, base)  # MiniWoB tasks without a site server
    assert result.exit_code == 1 and "--sites-url" in result.output
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest.json").write_text('{"shards": []}')
    result = runner.invoke(run_command, [*base, "--sites-url", "http://127.0.0.1:2"])
    assert result.exit_code == 1 and "already holds a trajectory run" in result.output
    assert "--resume" in result.output


@pytest.mark.parametrize(("flag", "value"), [
    ("--servers", "127.0.0.1:18300"), ("--servers", "localhost:8300"), ("--sites-url", "127.0.0.1:8400")])
def test_a_server_url_without_its_scheme_is_refused_at_parse_time(tmp_path, flag, value):
    write_tasks(tmp_path / "tasks.jsonl", range(1))
    args = {"--tasks": str(tmp_path / "tasks.jsonl"), "--servers": "http://127.0.0.1:1",
            "--out": str(tmp_path / "out"), flag: value}
    flags = [part for pair in args.items() for part in pair]
    result = CliRunner().invoke(run_command, [*flags, "--no-progress"])
    assert result.exit_code == 2, result.output
    assert f"{flag}" in result.output and f"'{value}' has no scheme" in result.output
    assert f"write it as http://{value}" in result.output
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_a_run_whose_every_episode_failed_on_infrastructure_exits_non_zero(tmp_path):
    tasks = tmp_path / "web.jsonl"
    tasks.write_text("".join(json.dumps({"task_id": f"t{i}", "task_name": f"Find the opening hours {i}",
                                         "website": "http://127.0.0.1:9/"}) + "\n" for i in range(2)))
    result = CliRunner().invoke(run_command, ["--tasks", str(tasks), "--servers", "http://127.0.0.1:1",
                                              "--out", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 1, result.output
    assert "all 2 episodes failed on infrastructure (error:server_unavailable 2)" in result.output
    assert "no browser server answered at --servers http://127.0.0.1:1" in result.output
    assert len(read_episodes(tmp_path / "out")) == 2  # the failures are recorded all the same


# --------------------------------------------------------------------------------- real browsers


def _start_server(chromium_path: str, sites_url: str, **pool):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    settings = PoolSettings(executable_path=chromium_path, browsers=1,
                            allow_hosts=(sites_url.removeprefix("http://"),), **pool)
    return running_server(ServerSettings(host="127.0.0.1", port=0, pool=settings))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def browser_url(chromium_path, sites_url):
    async with _start_server(chromium_path, sites_url, contexts_per_browser=6) as (url, _):
        yield url


class ProbePolicy:
    """The random policy, recording the order of calls; `slow` episodes wait and scroll each step."""

    observes_elements = True

    def __init__(self, slow: dict[str, float] | None = None, *, seed: int = 0):
        from webgym_rollout.agent.policies import RandomPolicy, RandomPolicySettings

        self.inner = RandomPolicy(RandomPolicySettings(seed=seed))
        self.model_id = "probe"
        self.slow = slow or {}
        self.calls: list[tuple[str, int]] = []

    async def act(self, observation):
        self.calls.append((observation.episode_id, observation.step))
        delay = self.slow.get(observation.episode_id)
        if delay is not None:
            await asyncio.sleep(delay)
            # no elements, no words: the random policy scrolls, so this episode runs to its horizon
            observation = dataclasses.replace(observation, elements=(), instruction="")
        return await self.inner.act(observation)


def _rows(out: Path) -> list[dict]:
    return [episode.to_row() for episode in read_episodes(out)]


@pytest.mark.browser
async def test_async_mode_has_no_barrier_and_sync_mode_is_lockstep(tmp_path, sites_url, browser_url):
    tasks = write_tasks(tmp_path / "tasks.jsonl", range(6))
    ids = [episode_id(f"click-button-{s}", 0, 0) for s in range(6)]
    results = {}
    for mode in ("async", "sync"):
        probe = ProbePolicy({ids[0]: 1.2})  # the first task's episode is slow and runs 4 steps
        settings = _settings(tmp_path, tasks=tasks, servers=(browser_url,), out=tmp_path / mode,
                             rollout={"lockstep": mode == "sync", "concurrency": 3, "batch_size": 3},
                             env={"sites_url": sites_url, "horizons": {"miniwob": 4}})
        report = await run(settings, policy=probe)
        assert report.episodes == 6 and not report.errors
        rows = _rows(tmp_path / mode)
        assert sorted(r["task_id"] for r in rows) == sorted(f"click-button-{s}" for s in range(6))
        assert sum(r["num_steps"] for r in rows) == len(probe.calls) == report.steps
        results[mode] = probe.calls
    slow_last = max(i for i, (ep, _) in enumerate(results["async"]) if ep == ids[0])
    later = [i for i, (ep, _) in enumerate(results["async"]) if ep in ids[3:]]
    # async: tasks beyond the first three start (and finish) while the slow episode is still running
    assert later and min(later) < slow_last
    # sync: every call of the second batch comes after the whole first batch, steps in lockstep
    calls = results["sync"]
    order = [(ids.index(ep) // 3, step) for ep, step in calls]
    assert order == sorted(order)
    assert max(i for i, (ep, _) in enumerate(calls) if ep == ids[0]) < min(
        i for i, (ep, _) in enumerate(calls) if ep in ids[3:])


@pytest.mark.browser
async def test_judging_runs_after_the_session_closes_and_overlaps_the_next_episode(tmp_path, sites_url,
                                                                                    browser_url):
    from webgym_rollout.browser.client import BrowserClient
    from webgym_rollout.judge.judges import ProgrammaticJudge

    events: list[tuple[str, str]] = []

    class SlowJudge(ProgrammaticJudge):
        """Judges in finishing order (concurrency 1: episode order), slowly, noting open sessions."""

        count = 0

        async def score(self, request):
            number, self.count = str(self.count), self.count + 1
            events.append(("judge", number))
            async with BrowserClient(browser_url) as client:
                (health,) = await client.health()
            events.append(("sessions", str(health.active_sessions)))
            if number == "0":  # wait (bounded) for the next episode to act: it must not wait for us
                for _ in range(300):
                    if ("act", episode_id("click-button-1", 0, 0)) in events:
                        break
                    await asyncio.sleep(0.1)
            events.append(("judged", number))
            return await super().score(request)

    class RecordingProbe(ProbePolicy):
        async def act(self, observation):
            events.append(("act", observation.episode_id))
            return await super().act(observation)

    probe = RecordingProbe()
    tasks = write_tasks(tmp_path / "tasks.jsonl", range(2))
    settings = _settings(tmp_path, tasks=tasks, servers=(browser_url,), rollout={"concurrency": 1},
                         env={"sites_url": sites_url, "horizons": {"miniwob": 2}})
    report = await run(settings, policy=probe, judge=SlowJudge())
    assert report.episodes == 2
    second = episode_id("click-button-1", 0, 0)
    # the last episode had closed its session before it was judged (nothing else was running)
    assert events[events.index(("judge", "1")) + 1] == ("sessions", "0")
    # and the next episode played while the first one was being judged
    start, end = events.index(("judge", "0")), events.index(("judged", "0"))
    assert ("act", second) in events[start:end]


@pytest.mark.browser
async def test_an_undecided_judge_marks_the_episode_as_an_error(tmp_path, sites_url, browser_url):
    from webgym_rollout.judge.judges import JudgeResult, ProgrammaticJudge

    class UndecidedJudge(ProgrammaticJudge):
        async def score(self, request):
            return JudgeResult(reward=0.0, verdicts=(), judge_model="undecided",
                               error="judge_reply_invalid: no verdict line")

    tasks = write_tasks(tmp_path / "tasks.jsonl", range(1))
    settings = _settings(tmp_path, tasks=tasks, servers=(browser_url,), rollout={"concurrency": 1},
                         env={"sites_url": sites_url, "horizons": {"miniwob": 1}})
    await run(settings, policy=ProbePolicy(), judge=UndecidedJudge())
    (row,) = _rows(settings.out)
    # not a failure of the agent (reward 0, status ok): the trainer must not learn from it
    assert row["status"] == "error:judge_reply_invalid" and row["reward"] == 0.0


@pytest.mark.browser
async def test_lost_session_is_retried_on_a_fresh_one_then_recorded(tmp_path, sites_url, chromium_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [5])
    target = episode_id("click-button-5", 0, 0)

    class ExpiringPolicy(ProbePolicy):
        """Thinks longer than the server's idle timeout on the first call of the first try."""

        async def act(self, observation):
            if not self.calls:
                self.calls.append((observation.episode_id, observation.step))
                await asyncio.sleep(4.0)
                return await self.inner.act(observation)
            return await super().act(observation)

    server = _start_server(chromium_path, sites_url, contexts_per_browser=2, idle_timeout_s=2.0)
    async with server as (url, _):
        for retries, out in ((1, tmp_path / "retried"), (0, tmp_path / "failed")):
            policy = ExpiringPolicy()
            settings = _settings(tmp_path, tasks=tasks, servers=(url,), out=out,
                                 rollout={"session_retries": retries},
                                 env={"sites_url": sites_url, "horizons": {"miniwob": 3}})
            report = await run(settings, policy=policy)
            (row,) = _rows(out)
            assert row["episode_id"] == target
            if retries:
                assert report.session_retries == 1 and not report.errors
                assert row["status"] in ("ok", "timeout")
                # the failed try left nothing behind: steps restart at 0 and are contiguous
                assert [s["index"] for s in row["steps"]] == list(range(row["num_steps"]))
                assert policy.calls[0][1] == 0 and policy.calls[1][1] == 0
            else:
                assert report.errors == {"session_not_found": 1}
                assert row["status"] == "error:session_not_found" and row["reward"] == 0.0
                assert row["verdicts"] == []


@pytest.mark.browser
async def test_refused_start_url_is_recorded_without_retries(tmp_path, browser_url):
    # 127.0.0.2 is loopback but not allowlisted: the URL guard refuses it before any packet is sent
    (tmp_path / "tasks.jsonl").write_text(json.dumps(
        {"task_id": "refused", "task_name": "Open the page", "website": "http://127.0.0.2:9/"}) + "\n")
    report = await run(_settings(tmp_path, servers=(browser_url,), rollout={"session_retries": 2}))
    (row,) = _rows(tmp_path / "out")
    assert row["status"] == "error:navigation_refused" and row["num_steps"] == 0
    assert report.errors == {"navigation_refused": 1} and report.session_retries == 0


@pytest.mark.browser
class LengthPolicy:
    """Answers at once on click-button tasks and scrolls to the horizon on the others (`kinds`: the
    task kind of each episode id); notes the order in which the episodes make their first call."""

    model_id = "lengths"

    def __init__(self, kinds: dict[str, str]):
        self.kinds = kinds
        self.first_calls: list[str] = []

    async def act(self, observation):
        import time

        from webgym_rollout.actions import AgentAction
        from webgym_rollout.agent.policies import AgentSettings, scripted_reply

        if observation.episode_id not in self.first_calls:
            self.first_calls.append(observation.episode_id)
        action = (AgentAction(name="answer", text="done") if self.kinds[observation.episode_id] == "button"
                  else AgentAction(name="scroll", direction="down"))
        return scripted_reply(action, observation, AgentSettings(), self.model_id, time.perf_counter(),
                              memory="-", intention="-")


class CountingGate:
    """An `EpisodeGate` that admits at once and counts."""

    def __init__(self):
        self.admitted = self.released = 0

    async def admit(self) -> None:
        self.admitted += 1

    def release(self) -> None:
        self.released += 1


@pytest.mark.browser
async def test_longest_first_starts_the_longer_episodes_first_with_the_same_results(tmp_path, sites_url,
                                                                                     browser_url):
    path = tmp_path / "tasks.jsonl"
    with path.open("w", encoding="utf-8") as handle:  # short and long tasks alternate in the file
        for seed in range(3):
            for kind in ("button", "link"):
                handle.write(json.dumps({"task_id": f"{kind}-{seed}", "task_name": f"MiniWoB click-{kind}",
                                         "website": f"miniwob:click-{kind}", "benchmark_name": "miniwob",
                                         "environment": f"miniwob:click-{kind}", "env_seed": seed}) + "\n")
    jobs = [(f"{kind}-{seed}", a) for seed in range(3) for kind in ("button", "link") for a in range(2)]
    kinds = {episode_id(task_id, a, 0): task_id.split("-")[0] for task_id, a in jobs}
    rows, starts = {}, {}
    for order in ("given", "longest"):
        policy, gate = LengthPolicy(kinds), CountingGate()
        settings = _settings(tmp_path, tasks=path, servers=(browser_url,), out=tmp_path / order,
                             rollout={"concurrency": 1, "attempts": 2, "start_order": order},
                             env={"sites_url": sites_url, "horizons": {"miniwob": 3}})
        report = await run(settings, policy=policy, gate=gate)
        assert report.episodes == 12 and not report.errors
        assert gate.admitted == gate.released == 12  # the gate admits each job once, no more
        rows[order] = sorted((r["task_id"], r["attempt"], r["num_steps"], r["status"])
                             for r in _rows(tmp_path / order))
        starts[order] = [kinds[e] for e in policy.first_calls]
    assert rows["given"] == rows["longest"]  # the same episodes: each task played its two attempts
    assert [r[:2] for r in rows["given"]] == sorted(jobs)
    assert {r[2] for r in rows["given"] if r[0].startswith("button")} == {1}
    assert {r[2] for r in rows["given"] if r[0].startswith("link")} == {3}
    assert starts["given"] == [kinds[episode_id(task_id, a, 0)] for task_id, a in jobs]
    # longest: the first group is tried (nothing is known yet); once its short episode has ended,
    # every long episode starts before the remaining short ones
    assert starts["longest"] == ["button"] + ["link"] * 6 + ["button"] * 5


async def test_resume_after_sigkill_has_every_episode_exactly_once(tmp_path, sites_url, browser_url):
    tasks = write_tasks(tmp_path / "tasks.jsonl", range(10))
    out = tmp_path / "out"
    command = [sys.executable, "-c", "from webgym_rollout.cli import main; main()", "run",
               "--tasks", str(tasks), "--servers", browser_url, "--sites-url", sites_url, "--out", str(out),
               "--attempts", "2", "--concurrency", "2", "--shard-episodes", "1", "--horizons", "miniwob=4",
               "--viewport", "320x240", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    first = await asyncio.create_subprocess_exec(*command, env=env, stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.STDOUT)
    manifest = out / "manifest.json"
    listed = 0
    try:
        async with asyncio.timeout(120):
            while listed < 1:
                if first.returncode is not None:
                    pytest.fail(f"the run ended before it was killed: {(await first.stdout.read()).decode()}")
                await asyncio.sleep(0.05)
                if manifest.exists():
                    try:
                        listed = sum(len(s["episodes"]) for s in json.loads(manifest.read_text())["shards"])
                    except (json.JSONDecodeError, KeyError):
                        continue  # never partial (atomic rename), but be safe
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert first.returncode == -signal.SIGKILL
    killed_at = sum(len(s["episodes"]) for s in json.loads(manifest.read_text())["shards"])
    assert 1 <= killed_at < 20, "the kill must land mid-run"

    second = await asyncio.create_subprocess_exec(*command, "--resume", env=env,
                                                  stdout=asyncio.subprocess.PIPE,
                                                  stderr=asyncio.subprocess.STDOUT)
    output = (await second.communicate())[0].decode()
    assert second.returncode == 0, output
    skipped = int(re.search(r"\((\d+) already done\)", output).group(1))
    assert killed_at <= skipped < 20  # a shard renamed just before the kill is adopted, not redone
    rows = _rows(out)
    keys = sorted((r["task_id"], r["attempt"]) for r in rows)
    assert keys == sorted((f"click-button-{s}", a) for s in range(10) for a in range(2))
    assert len({r["episode_id"] for r in rows}) == 20


@pytest.mark.browser
async def test_agent_mistakes_are_data_and_answer_ends_the_episode(tmp_path, sites_url, browser_url,
                                                                   scripted_openai):
    from webgym_rollout.actions import AgentAction
    from webgym_rollout.agent.protocol import format_response

    replies = [
        "I am not sure.",  # no tool call: a parse error, a no-op step
        format_response(AgentAction(name="navigate", url="http://127.0.0.2:9/")),  # refused by the guard
        format_response(AgentAction(name="left_click", coordinate=(500, 500)), memory="clicked"),
        format_response(AgentAction(name="answer", text="The page says hello"), memory="done"),
    ]
    llm = scripted_openai(replies, model="scripted")
    (tmp_path / "tasks.jsonl").write_text(json.dumps(
        {"task_id": "form", "task_name": "Read the form page", "website": f"{sites_url}/sandbox/form.html",
         "benchmark_name": "sandbox", "difficulty": 2}) + "\n")
    from webgym_core.endpoint import Endpoint
    from webgym_rollout.agent.policies import PolicySettings

    policy = PolicySettings(kind="openai", endpoint=Endpoint(base_url=llm.base_url, model="scripted"))
    report = await run(_settings(tmp_path, servers=(browser_url,), policy=policy))
    (row,) = _rows(tmp_path / "out")
    assert row["status"] == "ok" and row["answer"] == "The page says hello"
    assert row["num_steps"] == 4 == len(llm.requests) == report.steps
    unparsed, refused, click, answer = row["steps"]
    assert unparsed["action"] == "" and "no <tool_call>" in unparsed["action_error"]
    assert json.loads(refused["action"])["action"] == "navigate" and "127.0.0.2" in refused["action_error"]
    assert click["action_error"] == "" and click["memory"] == "clicked"
    assert answer["memory"] == "done" and not answer["same_as_next"]
    # the screenshots travelled inline to the policy, never as paths
    assert all("data:image/png;base64," in json.dumps(r["messages"]) for r in llm.requests)
    assert row["reward"] == 0.0 and report.parse_errors == 1  # the programmatic judge: no env reward


@pytest.mark.browser
async def test_the_sampler_picks_the_tasks_of_the_run(tmp_path, sites_url, browser_url):
    from webgym_data.loading import load_tasks
    from webgym_data.sampler import SamplerSettings, TaskSampler

    tasks = write_tasks(tmp_path / "tasks.jsonl", range(6))
    sampler = SamplerSettings(kind="epoch", batch_size=2, seed=4)
    expected = sorted(t.task_id for t in TaskSampler(load_tasks(tasks), sampler).batch(1))
    settings = _settings(tmp_path, tasks=tasks, servers=(browser_url,), iteration=1, sampler=sampler,
                         horizon_table="test", env={"sites_url": sites_url, "horizons": {"miniwob": 1}})
    report = await run(settings, policy=ProbePolicy())
    assert report.episodes == 2
    rows = _rows(settings.out)
    assert sorted(r["task_id"] for r in rows) == expected and all(r["iteration"] == 1 for r in rows)


def test_every_invalid_task_row_is_reported_at_once(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", range(2))
    with tasks.open("a", encoding="utf-8") as handle:
        handle.write('{"task_name": "", "website": "x.org"}\n{not json\n')
    result = CliRunner().invoke(run_command, ["--tasks", str(tasks), "--servers", "http://127.0.0.1:1",
                                              "--out", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 1
    assert "row 2, field 'task_name'" in result.output and "row 3: invalid JSON" in result.output


@pytest.mark.browser
async def test_skip_invalid_runs_the_valid_rows_and_records_the_others(tmp_path, sites_url, browser_url):
    tasks = write_tasks(tmp_path / "tasks.jsonl", range(2))
    with tasks.open("a", encoding="utf-8") as handle:
        handle.write('{"task_name": "", "website": "x.org"}\n')
    settings = _settings(tmp_path, tasks=tasks, servers=(browser_url,), skip_invalid=True,
                         env={"sites_url": sites_url, "horizons": {"miniwob": 1}})
    report = await run(settings, policy=ProbePolicy())
    assert (report.episodes, report.invalid_rows) == (2, 1)
    (invalid,) = json.loads((tmp_path / "out" / "manifest.json").read_text())["run"]["invalid_task_rows"]
    assert invalid["row"] == 2 and invalid["field"] == "task_name" and invalid["file"].endswith("tasks.jsonl")


@pytest.mark.browser
async def test_a_cancelled_run_gives_its_browser_sessions_back(tmp_path, sites_url, chromium_path):
    from webgym_rollout.browser.client import BrowserClient

    tasks = write_tasks(tmp_path / "tasks.jsonl", range(3))
    slow = {episode_id(f"click-button-{s}", 0, 0): 30.0 for s in range(3)}  # every episode waits
    probe = ProbePolicy(slow)
    async with _start_server(chromium_path, sites_url, contexts_per_browser=4) as (browser_url, _), \
            BrowserClient([browser_url]) as client:  # a server of its own: its sessions are this test's
        settings = _settings(tmp_path, tasks=tasks, servers=(browser_url,), out=tmp_path / "out",
                             rollout={"concurrency": 3},
                             env={"sites_url": sites_url, "horizons": {"miniwob": 4}})
        rollout = asyncio.create_task(run(settings, policy=probe))
        while len(probe.calls) < 3:  # all three episodes hold a session and wait for the policy
            await asyncio.sleep(0.05)
        (health,) = await client.health()
        assert health.active_sessions == 3
        rollout.cancel()
        with pytest.raises(asyncio.CancelledError):
            await rollout
        (health,) = await client.health()
        assert health.active_sessions == 0  # closed at once, not at the server's idle timeout


# ------------------------------------------------------------------- bugs are reported, never hidden

def test_the_run_report_gives_both_success_rates():
    from webgym_rollout.runner import RunReport

    report = RunReport(out=Path("out"), episodes=10, skipped=0, steps=40, successes=3,
                       errors={"internal": 1, "browser_crashed": 1}, elapsed_s=1.0, session_retries=0,
                       parse_errors=0, internal_errors=1, first_internal_error="TypeError: x")
    assert report.evaluated == 8
    line = report.success_line()
    assert "3/8 (38%) of evaluated episodes" in line
    assert "3/10 (30%) with infrastructure failures counted as failures" in line


@pytest.mark.browser
async def test_a_bug_is_recorded_as_error_internal_and_reported_loudly(tmp_path, sites_url, browser_url,
                                                                       caplog):
    from webgym_rollout.judge.judges import ProgrammaticJudge

    buggy_episode = episode_id("click-button-0", 0, 0)

    class BuggyPolicy(ProbePolicy):
        async def act(self, observation):
            if observation.episode_id == buggy_episode:
                return {}["no such key"]  # a bug while playing
            return await super().act(observation)

    class BuggyJudge(ProgrammaticJudge):
        calls = 0

        async def score(self, request):
            BuggyJudge.calls += 1
            if BuggyJudge.calls == 1:
                raise TypeError("unhashable type: 'list'")  # a bug while judging (the first episode judged)
            return await super().score(request)

    tasks = write_tasks(tmp_path / "tasks.jsonl", range(3))
    settings = _settings(tmp_path, tasks=tasks, servers=(browser_url,), rollout={"concurrency": 1},
                         env={"sites_url": sites_url, "horizons": {"miniwob": 1}})
    with caplog.at_level("INFO", logger="webgym_rollout.runner"):
        report = await run(settings, policy=BuggyPolicy(), judge=BuggyJudge())
    statuses = sorted(row["status"] for row in _rows(settings.out))
    assert statuses.count("error:internal") == 2 and len(statuses) == 3  # every episode written
    assert report.internal_errors == 2 and report.errors == {"internal": 2}
    assert report.first_internal_error.startswith("KeyError: 'no such key' (webgym_rollout/test_runner.py:")
    assert report.first_internal_error.endswith("in act)")
    # each bug's traceback is logged when it happens ...
    tracebacks = [r for r in caplog.records if r.exc_info and "error:internal" in r.getMessage()]
    assert [type(r.exc_info[1]) for r in tracebacks] == [KeyError, TypeError]
    # ... and the run ends with one warning that counts them and asks for a report
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING" and "please report" in r.getMessage()]
    message = warning.getMessage()
    assert "2 of 3 episodes ended with error:internal: this is a bug, please report it" in message
    assert "KeyError: 'no such key'" in message


def test_a_mistyped_miniwob_task_is_refused_before_any_browser_with_the_close_names(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", range(2), task="click-tset")
    result = CliRunner().invoke(run_command, ["--tasks", str(tmp_path / "tasks.jsonl"), "--servers",
                                              "http://127.0.0.1:1", "--sites-url", "http://127.0.0.1:2",
                                              "--out", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 1, result.output
    assert "environment 'miniwob:click-tset': the miniwob package has no task 'click-tset'" in result.output
    assert "did you mean 'miniwob:click-test'" in result.output
    assert "--create-timeout-s" not in result.output and not (tmp_path / "out").exists()
