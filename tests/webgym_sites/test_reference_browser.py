"""The reference site in a real Chromium: a near-miss search, a collapsed table, watch, suggest an edit."""

from __future__ import annotations

import pytest

from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.state import new_session_id, with_session


@pytest.mark.browser
async def test_search_read_watch_and_suggest_an_edit(chromium):
    with SiteServer(reference_seed=0) as sites:
        book = sites.reference.encyclopedia
        country = book.of_kind("country")[4]
        longest = max(book.within("river", country.id), key=lambda r: r.values["length_km"])
        session = new_session_id()
        context = await chromium.new_context(viewport={"width": 1280, "height": 720})
        try:
            page = await context.new_page()
            await page.goto(with_session(f"{sites.base_url}/reference/", session))
            await page.fill("#search", country.title[:-1])  # a near miss of the title
            await page.press("#search", "Enter")
            await page.click("#did-you-mean a")
            await page.get_by_role("link", name=country.title, exact=True).first.click()
            await page.wait_for_selector("#article-title")
            rivers = page.locator("#rivers-table")
            assert not await rivers.is_visible()  # the section starts collapsed
            await page.click("#section-rivers summary")
            await rivers.get_by_role("link", name=longest.title, exact=True).click()
            await page.wait_for_url(f"**/reference/wiki/{longest.id}")
            await page.click("#watch-button")
            await page.wait_for_url("**/reference/watchlist?*")
            assert await page.text_content("#watchlist-link") == "Watchlist (1)"
            await page.goto(f"{sites.base_url}/reference/edit/{longest.id}")
            await page.select_option("#field", "length_km")
            await page.fill("#value", "not a number")
            await page.click("#submit-edit")
            assert "whole number" in await page.text_content("#error-value")
            await page.fill("#value", "1,234")
            await page.fill("#summary", "Measured again in 2026")
            await page.click("#submit-edit")
            await page.wait_for_url("**/reference/edits")
        finally:
            await context.close()
        facts = sites.facts(session)
        assert facts.searches == (f"reference: {country.title[:-1]}", f"reference: {country.title}")
        assert facts.reference.read == (country.id, longest.id)
        assert facts.reference.watchlist == (longest.id,)
        (edit,) = facts.reference.edits
        assert (edit.article_id, edit.field, edit.value) == (longest.id, "length_km", "1234")


@pytest.mark.browser
async def test_an_edit_outside_ascii_reaches_the_facts_as_typed(chromium):
    value, summary = "Złoty polski", "Corrigé d'après la banque centrale: 東京 ½ — naïve café"
    with SiteServer(reference_seed=0) as sites:
        country = sites.reference.encyclopedia.of_kind("country")[2]
        session = new_session_id()
        context = await chromium.new_context(viewport={"width": 1280, "height": 720})
        try:
            page = await context.new_page()
            await page.goto(with_session(f"{sites.base_url}/reference/edit/{country.id}", session))
            await page.select_option("#field", "currency")
            await page.fill("#value", value)
            await page.fill("#summary", summary)
            await page.click("#submit-edit")
            await page.wait_for_url("**/reference/edits")
        finally:
            await context.close()
        (edit,) = sites.facts(session).reference.edits
        assert (edit.article_id, edit.field) == (country.id, "currency")
        assert (edit.value, edit.summary) == (value, summary)
