"""The reference site over real HTTP on a real SiteServer: determinism, sessions, search, forms."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.encyclopedia import display, encyclopedia, parse_number
from webgym_sites.facts import SessionFacts
from webgym_sites.goals import check_fact
from webgym_sites.state import COOKIE, new_session_id, with_session


@pytest.fixture(scope="module")
def server():
    with SiteServer(reference_seed=0) as sites:
        yield sites


def _client(server: SiteServer) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True, timeout=30)


def test_the_encyclopedia_is_consistent_and_the_same_for_the_same_seed():
    book = encyclopedia(0)
    assert len(book.articles) == 1500 and len({a.title.casefold() for a in book.articles}) == 1500
    for country in book.of_kind("country"):
        cities = book.within("city", country.id)
        capital = book.by_id[country.values["capital"]]
        assert capital in cities
        assert capital.values["population"] == max(c.values["population"] for c in cities)
        assert book.by_id[country.values["leader"]].values["nationality"] == country.id
        lengths = [r.values["length_km"] for r in book.within("river", country.id)]
        assert len(lengths) == len(set(lengths)) >= 2
    for article in book.articles:  # every link of the prose and the infobox names an article
        assert all(s.link in book.by_id for p in article.paragraphs for s in p if s.link)
    assert parse_number("12,345") == 12345 and parse_number("12345") == 12345
    assert parse_number("1,23") is None and parse_number("12a") is None and parse_number("") is None
    assert display("population", 1234567) == "1,234,567" and display("founded", 1874) == "1874"


def test_same_seed_same_pages_other_seed_other_pages():
    book = encyclopedia(3)
    country = book.of_kind("country")[0]
    paths = ["/reference/", f"/reference/wiki/{country.id}", "/reference/search?q=river&page=2",
             "/reference/category/people?page=3", "/reference/lists/rivers-by-length?page=2",
             f"/reference/talk/{country.id}", f"/reference/history/{country.id}",
             f"/reference/edit/{country.id}"]

    def pages(seed: int) -> list[bytes]:
        with SiteServer(reference_seed=seed) as sites, _client(sites) as client:
            client.get(with_session("/reference/", "same-session-id"))
            return [client.get(path).content for path in paths]

    first = pages(3)
    assert all(page.startswith(b"<!DOCTYPE html>") for page in first)
    assert pages(3) == first
    assert pages(4) != first


def test_sessions_keep_their_own_reads_watchlists_and_random_draws(server):
    articles = server.reference.encyclopedia.articles
    sessions = [new_session_id(), new_session_id()]
    with _client(server) as client:
        for index, session in enumerate(sessions):
            client.cookies.clear()
            client.get(with_session("/reference/", session))
            client.get(f"/reference/wiki/{articles[index].id}")
            page = client.post("/reference/watchlist/add", data={"id": articles[index].id})
            assert "id='notice'" in page.text and "Watchlist (1)" in page.text
        client.cookies.clear()
        client.get(with_session("/reference/watchlist", sessions[0]))
        listed = client.get("/reference/watchlist").text
        assert articles[0].title in listed and articles[1].title not in listed
        draws = [client.get("/reference/random").url.path for _ in range(4)]
        assert len(set(draws)) > 1
    for index, session in enumerate(sessions):
        facts = server.facts(session).reference
        randoms = tuple(path.removeprefix("/reference/wiki/") for path in draws) if index == 0 else ()
        assert facts.read == (articles[index].id, *randoms) and facts.watchlist == (articles[index].id,)
        assert facts.seed == 0 and facts.edits == ()
    assert server.facts(new_session_id()).reference is None
    # The random article follows the session: a second server, the same session id, the same draws.
    with SiteServer(reference_seed=0) as other, _client(other) as client:
        client.get(with_session("/reference/", sessions[0]))
        assert [client.get("/reference/random").url.path for _ in range(4)] == draws


def test_watch_and_unwatch_from_the_article_and_the_watchlist(server):
    article = server.reference.encyclopedia.of_kind("river")[3]
    with _client(server) as client:
        page = client.get(f"/reference/wiki/{article.id}").text
        assert "id='watch-button'" in page
        client.post("/reference/watchlist/add", data={"id": article.id})
        client.post("/reference/watchlist/add", data={"id": article.id})  # twice: still once
        assert "id='unwatch-button'" in client.get(f"/reference/wiki/{article.id}").text
        session = client.cookies[COOKIE]
        assert server.facts(session).reference.watchlist == (article.id,)
        page = client.post("/reference/watchlist/remove", data={"id": article.id}).text
        assert "Removed" in page and "watchlist-empty" in page
        assert client.post("/reference/watchlist/add", data={"id": "No_Such_Article"}).status_code == 200
    assert server.facts(session).reference.watchlist == ()


def test_search_ranks_titles_first_paginates_and_suggests_near_misses(server):
    book = server.reference.encyclopedia
    country = book.of_kind("country")[5]
    with _client(server) as client:
        page = client.get("/reference/search", params={"q": country.title}).text
        first = re.search(r"<ol id='results'[^>]*><li><a href='/reference/wiki/([^']+)'", page).group(1)
        assert first == country.id and "did-you-mean" not in page
        count = int(re.search(r"(\d+) results", client.get("/reference/search?q=river").text).group(1))
        assert count >= 150
        second = client.get("/reference/search?q=river&page=2").text
        assert "page 2 of" in second and "« Previous" in second and "Next »" in second
        near = country.title[:-1] + ("x" if country.title[-1] != "x" else "y")
        page = client.get("/reference/search", params={"q": near}).text
        hint = rf"id='did-you-mean'>Did you mean <a href='[^']+'>{re.escape(country.title)}</a>"
        assert re.search(hint, page)
        assert "did-you-mean" not in client.get("/reference/search?q=zzzzqqqq").text
        session = client.cookies[COOKIE]
    typed = (country.title, "river", "river", near, "zzzzqqqq")
    assert server.facts(session).searches == tuple(f"reference: {text}" for text in typed)


def test_links_tables_sections_categories_and_lists(server):
    book = server.reference.encyclopedia
    country = book.of_kind("country")[2]
    with _client(server) as client:
        page = client.get(f"/reference/wiki/{country.id}").text
        assert "<details id='section-cities' open>" in page and "<details id='section-rivers'>" in page
        capital = book.by_id[country.values["capital"]]
        first_row = r"<td>1</td><td><a href='/reference/wiki/([^']+)'>[^<]+</a></td><td>([\d,]+)</td>"
        row = re.search(first_row, page)
        assert row.groups() == (capital.id, f"{capital.values['population']:,}")
        links = set(re.findall(r"href='(/reference/[^']+)'", page))
        assert len(links) > 20
        for link in sorted(links):
            assert client.get(html.unescape(link)).status_code == 200, link
        people = client.get("/reference/category/people").text
        assert "600 articles · page 1 of 15" in people and "Next »" in people
        last = client.get("/reference/category/people?page=99").text
        assert "page 15 of 15" in last and "Next »" not in last
        rivers = client.get("/reference/lists/rivers-by-length").text
        lengths = [parse_number(n) for n in re.findall(r"<td>([\d,]+) km</td>", rivers)]
        assert len(lengths) == 50 and lengths == sorted(lengths, reverse=True)
        assert client.get("/reference/wiki/No_Such_Article").status_code == 404
        assert client.get("/reference/nothing").status_code == 404
        assert client.get("/reference").url.path == "/reference/"


def test_the_edit_form_validates_each_field_and_records_an_accepted_suggestion(server):
    company = server.reference.encyclopedia.of_kind("company")[7]
    path = f"/reference/edit/{company.id}"
    with _client(server) as client:
        page = client.post(path, data={"field": "founder", "value": "", "summary": "short"}).text
        assert all(f"id='error-{name}'" in page for name in ("field", "value", "summary"))
        reason = "A long enough reason"
        page = client.post(path, data={"field": "founded", "value": "3020", "summary": reason}).text
        assert "must be a year from 1000 to 2026" in page and "value='3020'" in page
        assert "A long enough reason</textarea>" in page  # kept for the next try
        current = f"{company.values['employees']:,}"
        page = client.post(path, data={"field": "employees", "value": current, "summary": reason}).text
        assert "That is already the employees." in page
        page = client.post(path, data={"field": "employees", "value": "12,34", "summary": reason})
        assert "must be a whole number" in page.text
        session = client.cookies[COOKIE]
        assert server.facts(session).reference.edits == ()
        page = client.post(path, data={"field": "employees", "value": " 1,234,567 ",
                                       "summary": "Figure from   the annual report"})
        assert page.url.path == "/reference/edits" and "1234567" in page.text
    facts = server.facts(session)
    assert SessionFacts.model_validate_json(facts.model_dump_json()) == facts  # as the truth listener sends
    edit = facts.reference.edits[0]
    assert (edit.article_id, edit.field, edit.value, edit.summary) == (
        company.id, "employees", "1234567", "Figure from the annual report")
    field = {"type": "edit_field", "article_id": company.id, "field": "employees"}
    assert check_fact(field | {"value": "1,234,567"}, facts)
    assert not check_fact(field | {"value": "123456"}, facts)
    summary = {"type": "edit_summary", "article_id": company.id}
    assert check_fact(summary | {"text": "from the ANNUAL report"}, facts)
    assert not check_fact(summary | {"text": "census"}, facts)


def test_answer_numbers_are_checked_whole():
    check = {"type": "answer_number", "value": 1234}
    empty = SessionFacts(session_id="x" * 10)
    assert check_fact(check, empty, "It is 1,234 km long.") and check_fact(check, empty, "1234")
    for wrong in ("11,234 km", "1,234.5", "12,340", "1,2345", ""):
        assert not check_fact(check, empty, wrong), wrong
    for kind in ("read_article", "watchlist_has"):
        assert not check_fact({"type": kind, "article_id": "Anything"}, empty)
    assert not check_fact({"type": "watchlist_only", "article_ids": []}, empty)


def test_an_edit_value_of_too_many_digits_is_named_not_raised(server):
    """Python reads no integer of more than 4,300 digits: such a value raised in the handler."""
    company = server.reference.encyclopedia.of_kind("company")[3]
    with _client(server) as client:
        for value in ("9" * 5000, "1" + ",000" * 1500):
            page = client.post(f"/reference/edit/{company.id}",
                               data={"field": "employees", "value": value, "summary": "A long enough reason"})
            assert page.status_code == 200 and "must be a whole number" in page.text
    assert parse_number("9" * 18) == 10**18 - 1 and parse_number("9" * 19) is None
