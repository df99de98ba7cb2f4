"""examples/my_site (docs/guides/your-site.md): the Larkspur Library, a user's own site with ground
truth and task kind. Its pages keep each session apart and its truth stays off the site's port; the
kind opens a fresh session per episode; the judge pays for the truth, not for the answer; and end to
end, through the real browser server, Chromium and the toolkit's runner, the honest scripted policy
earns 1 on every task and the one that reserves another book earns 0."""

from __future__ import annotations

import http.cookiejar
import json
import re
import shlex
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.conftest import REPO_ROOT
from tests.support.kinds import kind_registered, kinds_restored

with kinds_restored():  # importing the example registers its kind: only this module's tests see it
    from examples.my_site.judge import LibraryJudge
    from examples.my_site.kind import LibraryTask
    from examples.my_site.play import main
    from examples.my_site.site import LibrarySite, catalogue
    from examples.my_site.tasks import book_of, library_tasks
from webgym_rollout.judge import JudgeUnavailable
from webgym_rollout.settings import EnvSettings
from webgym_rollout.tasks import task_kind
from webgym_rollout.trajectory import Episode, EpisodeStatus, Step, read_episodes


@pytest.fixture(autouse=True)
def library_kind():
    """The example's kind registered for each test of this module, and gone after it."""
    with kind_registered(LibraryTask):
        yield


PAGE = REPO_ROOT / "docs" / "guides" / "your-site.md"
SESSION = "episode-one-0001"


def _browser() -> urllib.request.OpenerDirector:
    """A client with a cookie jar and no proxy, as a browser tab would hold the session cookie."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                       urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))


def _truth(site: LibrarySite, session: str, **headers: str) -> dict:
    request = urllib.request.Request(f"{site.truth_url}/truth/{session}", headers=headers)
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as reply:
        return json.load(reply)


@pytest.fixture(scope="module")
def site():
    with LibrarySite(seed=3) as running:
        yield running


def test_a_session_reserves_through_the_pages_and_the_truth_says_so(site):
    book = site.books[4]
    tab = _browser()
    with tab.open(f"{site.url}/?session={SESSION}", timeout=10) as page:
        assert "All books" in page.read().decode()
    with tab.open(f"{site.url}/book/{book.book_id}", timeout=10) as page:  # the cookie carries the session
        assert book.title in page.read().decode()
    with tab.open(f"{site.url}/book/{book.book_id}/reserve", data=b"", timeout=10) as page:
        assert page.url.endswith("/reservations") and book.title in page.read().decode()
    truth = _truth(site, SESSION)
    assert truth["reserved"] == [book.book_id] and truth["visited"][:2] == ["/", f"/book/{book.book_id}"]
    assert _truth(site, "another-session-02") == {"reserved": [], "visited": []}


def test_the_truth_is_not_on_the_site_and_refuses_a_page(site):
    with pytest.raises(urllib.error.HTTPError) as on_site:
        _browser().open(f"{site.url}/truth/{SESSION}", timeout=10)
    assert on_site.value.code == 404
    assert urlsplit(site.url).port != urlsplit(site.truth_url).port
    with pytest.raises(urllib.error.HTTPError) as from_page:
        _truth(site, SESSION, Origin=site.url)
    assert from_page.value.code == 403


def test_the_tasks_are_drawn_from_the_catalogue_and_name_their_kind():
    tasks = library_tasks("http://127.0.0.1:9", 4, seed=3)
    books = {book.book_id: book for book in catalogue(3)}
    assert len({task.task_id for task in tasks}) == 4
    for task in tasks:
        book = books[book_of(task)]
        assert book.title in task.task_name and book.book_id not in task.task_name  # the id stays hidden
        assert task.environment == "library" and task.difficulty_level == "easy"


def test_the_kind_is_found_from_the_row_and_opens_a_fresh_session_per_episode():
    (task,) = library_tasks("http://127.0.0.1:9", 1)
    first, second = task_kind(task), task_kind(task)
    assert isinstance(first, LibraryTask) and first.session_id != second.session_id
    url = first.start_url(EnvSettings())
    assert url.startswith("http://127.0.0.1:9/")
    assert parse_qs(urlsplit(url).query)["session"] == [first.session_id]
    assert first.truth_session() == first.session_id


def _episode(task, session: str, answer: str) -> Episode:
    return Episode(task=task, episode_id="e1", answer=answer,
                   steps=[Step(index=0, url=f"http://127.0.0.1:9/?session={session}")])


async def test_the_judge_pays_for_the_truth_not_for_the_answer(site):
    target, other = library_tasks(site.url, 2, seed=3)
    judge = LibraryJudge(site.truth_url)
    tab = _browser()
    for session, task in (("judged-right-0001", target), ("judged-wrong-0001", other),
                          ("judged-both-00001", target), ("judged-both-00001", other)):
        tab.open(f"{site.url}/book/{book_of(task)}/reserve?session={session}", data=b"", timeout=10).close()
    assert (await judge.score(_episode(target, "judged-right-0001", "Reserved."))).reward == 1.0
    wrong = await judge.score(_episode(target, "judged-wrong-0001", f"I reserved {target.task_name}"))
    assert wrong.reward == 0.0 and not wrong.verdicts[0].passed
    both = await judge.score(_episode(target, "judged-both-00001", "Reserved."))
    assert both.reward == 0.0 and [v.passed for v in both.verdicts] == [True, False]
    assert (await judge.score(_episode(target, "nobody-visited-01", "Reserved."))).reward == 0.0


async def test_a_truth_that_cannot_be_read_is_the_judges_failure_not_the_agents():
    (task,) = library_tasks("http://127.0.0.1:9", 1)
    with LibrarySite() as gone:
        truth_url = gone.truth_url
    with pytest.raises(JudgeUnavailable, match="could not be read"):
        await LibraryJudge(truth_url).score(_episode(task, SESSION, "Reserved."))


def _page_runs() -> tuple[list[list[str]], list[str]]:
    """The page's commands that run the example (their arguments) and the lines it shows they print."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(r"```bash\n(python -m examples\.my_site\.play .*?)```\n\n```text\n(.*?)```", text,
                      re.DOTALL)
    assert found, f"{PAGE.name}: no play commands followed by what they print"
    commands = [shlex.split(line)[3:] for line in found.group(1).splitlines()]
    return commands, found.group(2).splitlines()


@pytest.mark.browser
def test_end_to_end_the_pages_commands_print_what_it_shows(chromium_path, tmp_path, monkeypatch, capsys):
    """Through the real browser server, Chromium and the runner: the honest policy earns 1 on every
    task, the one that reserves another book 0, as the page says."""
    commands, printed = _page_runs()
    monkeypatch.chdir(tmp_path)
    for argv, expected in zip(commands, printed, strict=True):
        main(argv)
        assert capsys.readouterr().out == expected + "\n"
        out = Path(argv[argv.index("--out") + 1])
        episodes = list(read_episodes(out))
        assert len(episodes) == int(argv[argv.index("--tasks") + 1])
        reward = 0.0 if "--wrong" in argv else 1.0
        for episode in episodes:
            assert episode.status == EpisodeStatus.OK and episode.reward == reward
            assert episode.judge_model == "larkspur-truth" and episode.answer == "Reserved."
            assert urlsplit(episode.steps[-1].url).path == "/reservations"
