"""`webgym-rollout run` on the local sites' generated tasks: the scripted expert solves them, the
DOM-aware random policy does not, each episode's ground truth lands in truth.jsonl (read over the
token-guarded truth listener, as a run in another process reads it) and ``--judge site`` judges by
it; `judge-eval` then measures the run's own verdicts against that truth."""

from __future__ import annotations

import dataclasses
import json

import pytest
import pytest_asyncio

from webgym_core.settings import load_settings
from webgym_rollout.judge.calibration import JudgeEvalSettings, judge_eval, make_judges
from webgym_rollout.judge.judges import JudgeSettings
from webgym_rollout.judge.truth import TRUTH_FILE, read_truth
from webgym_rollout.runner import RunSettings, run
from webgym_rollout.tasks.sites import SiteServer
from webgym_rollout.trajectory.contract import EpisodeStatus
from webgym_rollout.trajectory.reader import read_episodes
from webgym_rollout.trajectory.recordings import RecordSettings
from webgym_sites.generate import site_tasks
from webgym_sites.state import session_in


@pytest.fixture(scope="module")
def site_server():
    with SiteServer() as server:  # its own: the truth of these sessions only
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def site_browser(chromium_path, site_server):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.browser.server import ServerSettings, running_server

    pool = PoolSettings(executable_path=chromium_path, browsers=1,
                        allow_hosts=(site_server.base_url.removeprefix("http://"),), contexts_per_browser=4)
    async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (url, _):
        yield url


def _settings(tmp_path, site_server, site_browser, policy: str, tasks, out: str = "", **extra) -> RunSettings:
    path = tmp_path / f"{out or policy}.jsonl"
    path.write_text("".join(json.dumps(task.to_row()) + "\n" for task in tasks))
    return load_settings(RunSettings, None, None, tasks=str(path), servers=(site_browser,),
                         out=str(tmp_path / (out or policy)), env__sites_url=site_server.base_url,
                         policy__kind=policy, judge__kind="site", truth__truth_url=site_server.truth_url,
                         truth__truth_token=site_server.truth_token, progress=False, rollout__concurrency=3,
                         **extra)


@pytest.mark.browser
async def test_the_expert_solves_site_tasks_and_the_random_policy_does_not(tmp_path, site_server,
                                                                           site_browser):
    tasks = site_tasks(3, seed=5)  # one easy, one medium, one hard task of each site
    assert {t.difficulty_level for t in tasks} == {"easy", "medium", "hard"}
    expert = await run(_settings(tmp_path, site_server, site_browser, "expert", tasks))
    episodes = read_episodes(tmp_path / "expert")
    failed = {e.task.task_name[:60]: [v.criterion for v in e.verdicts if not v.passed] for e in episodes
              if e.reward < 1}
    assert expert.episodes == len(tasks) and expert.successes == len(tasks), failed
    assert {e.policy_model for e in episodes} == {"scripted-expert"}  # marked as demonstrations
    assert {e.judge_model for e in episodes} == {"site-truth"}
    truth = read_truth(tmp_path / "expert")
    assert set(truth) == {e.episode_id for e in episodes}
    hard = next(e for e in episodes
                if e.task.difficulty_level == "hard" and e.task.environment == "site:shop")
    assert truth[hard.episode_id][1].shop.orders  # the order the checkout placed, in the truth
    assert (tmp_path / "expert" / TRUTH_FILE).read_text().count("\n") == len(tasks)

    random = await run(_settings(tmp_path, site_server, site_browser, "random", tasks))
    random_episodes = read_episodes(tmp_path / "random")
    assert random.episodes == len(tasks)
    assert not [e for e in random_episodes if e.reward > 0 and e.task.difficulty_level != "easy"]

    # The run's own verdicts (the site judge) agree with the truth; the programmatic judge, which
    # reads the environment's reward, has none for a website and says every episode failed.
    settings = JudgeEvalSettings(trajectories=str(tmp_path / "expert"), progress=False)
    report = await judge_eval(settings, judges=make_judges(["stored", "programmatic"], JudgeSettings()),
                              tasks=tasks)
    assert report.truth  # the run folder holds truth.jsonl: its labels
    overall = {name: report.metrics(name)["all"] for name in ("stored", "programmatic")}
    assert overall["stored"].agreement == 1.0 and overall["stored"].tp == len(tasks)
    assert overall["programmatic"].fn == len(tasks) and overall["programmatic"].recall == 0.0


@pytest.mark.browser
async def test_a_recorded_checkout_replays_with_the_same_screenshots_and_verdict(tmp_path, site_server,
                                                                                 site_browser):
    checkout = next(t for t in site_tasks(9, seed=11, sites=("shop",))
                    if json.loads(t.source.metadata)["template"] == "checkout")
    recorded = _settings(tmp_path, site_server, site_browser, "expert", [checkout])
    recorded = dataclasses.replace(recorded, traffic=RecordSettings(record=True))
    assert (await run(recorded)).successes == 1
    replayed = dataclasses.replace(recorded, out=tmp_path / "replayed",
                                   traffic=RecordSettings(replay=str(tmp_path / "expert")))
    visits_before = len(site_server.facts(_session(tmp_path / "expert")).visited)
    report = await run(replayed)
    [original], [replay] = read_episodes(tmp_path / "expert"), read_episodes(tmp_path / "replayed")
    assert report.successes == 1 and replay.reward == original.reward == 1.0
    assert [s.screenshot_sha256 for s in replay.steps] == [s.screenshot_sha256 for s in original.steps]
    assert len(original.steps) > 15  # product options, a cart, a validated form, the modal
    # The replay never reached the site: the recorded session's pages were served from the recording.
    assert len(site_server.facts(_session(tmp_path / "expert")).visited) == visits_before


def _session(run_dir) -> str:
    [episode] = read_episodes(run_dir)
    return session_in(step.url for step in episode.steps)


@pytest.mark.browser
async def test_shortcuts_played_in_chromium_earn_nothing_where_the_expert_earns_all(tmp_path, site_server,
                                                                                  site_browser):
    by_template = {json.loads(t.source.metadata)["template"]: t for t in site_tasks(9, seed=5)}
    tried = {"list_everything": ("best_rated", "country_table", "earliest"),
             "spray_numbers": ("rating", "founder", "hotel_stars"),
             "do_everything": ("cheapest", "compare_edit", "book_hotel")}  # a task of each site each
    roomy = {"env__train_horizons": (150, 150, 150)}  # doing everything takes more steps than the task
    tasks = [by_template[template] for templates in tried.values() for template in templates]
    expert = await run(_settings(tmp_path, site_server, site_browser, "expert", tasks, **roomy))
    assert expert.episodes == expert.successes == len(tasks)
    for name, templates in tried.items():
        chosen = [by_template[template] for template in templates]
        # as `webgym-rollout run --policy expert --policy-shortcut NAME` plays it
        settings = _settings(tmp_path, site_server, site_browser, "expert", chosen, out=name,
                             policy__shortcut=name, **roomy)
        report = await run(settings)
        episodes = read_episodes(tmp_path / name)
        assert report.episodes == len(chosen) and report.successes == 0, name
        for episode in episodes:  # played to the end and answered, in a real browser; judged by the truth
            assert episode.status == EpisodeStatus.OK and episode.answer, (name, episode.status)
            assert episode.policy_model == f"shortcut:{name}" and episode.judge_model == "site-truth"
            assert episode.reward == 0.0 and not all(v.passed for v in episode.verdicts)
    done = read_truth(tmp_path / "do_everything")
    edits = [facts.reference.edits for _, facts in done.values() if facts.reference and facts.reference.edits]
    assert edits and len(edits[0]) == 4  # every article compared was edited


@pytest.mark.browser
async def test_a_truth_read_that_fails_loses_only_its_truth_line(tmp_path, site_server, site_browser, caplog):
    # The truth errors are the sites' own (SitesError), not RolloutErrors: the runner still catches
    # them, keeps the episode and logs what it lost.
    from webgym_sites.errors import TruthUnavailable

    asked = []

    def truth(session_id: str):
        asked.append(session_id)
        raise TruthUnavailable(f"http://127.0.0.2:9/facts: refused ({session_id})")

    tasks = site_tasks(1, seed=5, sites=("shop",))
    settings = dataclasses.replace(_settings(tmp_path, site_server, site_browser, "expert", tasks),
                                   judge=JudgeSettings(kind="programmatic"))
    with caplog.at_level("WARNING", logger="webgym_rollout.runner"):
        report = await run(settings, truth=truth)
    (episode,) = read_episodes(tmp_path / "expert")
    assert report.episodes == 1 and not episode.status.is_error
    assert asked and asked[0] == _session(tmp_path / "expert")
    assert not (tmp_path / "expert" / TRUTH_FILE).exists() or read_truth(tmp_path / "expert") == {}
    assert f"episode {episode.episode_id}: its ground truth could not be read" in caplog.text
    assert "127.0.0.2:9/facts: refused" in caplog.text
