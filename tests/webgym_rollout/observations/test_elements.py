"""`render_elements` on a real MiniWoB++ page: a checkbox or radio button is listed by its label
(its ``value`` is "on" on these pages), so a text-only policy can tell the choices apart."""

from __future__ import annotations

import re

import pytest
import pytest_asyncio

from tests.support.observed_pages import browser_server, observe_miniwob
from webgym_rollout.observations import render_elements


@pytest_asyncio.fixture
async def server(chromium_path, sites):
    async with browser_server(chromium_path, sites.base_url) as url:
        yield url


@pytest.mark.browser
@pytest.mark.parametrize(("task", "role", "pattern"), [
    ("click-checkboxes", "checkbox", r"Select (.*) and click"),
    ("click-option", "radio", r'Select (.*) and click'),
])
async def test_choices_are_listed_by_their_labels(server, sites, task, role, pattern):
    page = await observe_miniwob(server, sites.base_url, task, seed=3)
    text = render_elements(page.info.elements)
    labels = re.findall(rf'^\[\d+\] {role} "([^"]*)"', text, re.M)
    assert labels and "on" not in labels
    wanted = [word.strip() for word in re.search(pattern, page.utterance).group(1).split(",") if word.strip()]
    assert wanted and set(wanted) <= set(labels), (wanted, labels)
