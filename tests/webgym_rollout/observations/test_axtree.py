"""`render_axtree`: the interactive elements first, then the tree, within the token budget by the
documented rule (4 characters a token) with a visible marker when cut; on synthetic trees and on
the trees of a real MiniWoB++ page and a local site."""

from __future__ import annotations

import re

import pytest
import pytest_asyncio

from tests.support.observed_pages import browser_server, observe, observe_miniwob
from webgym_rollout.browser.protocol import AxNode, Element
from webgym_rollout.observations import render_axtree
from webgym_rollout.observations.axtree import CHARS_PER_TOKEN, count_tokens

_MARKER = re.compile(r"^\.\.\. \((\d+) more lines cut to fit (\d+) tokens\)$")


def _element(role: str, text: str) -> Element:
    return Element(x=0, y=0, width=10, height=10, tag="button", role=role, text=text)


ELEMENTS = [_element("textbox", ""), _element("button", "Log in")]
NODES = [
    AxNode(depth=0, role="heading", name="Sign in", element=None),
    AxNode(depth=0, role="form", name="", element=None),
    AxNode(depth=1, role="text", name="Username", element=None),
    AxNode(depth=1, role="textbox", name="Username", element=1),
    AxNode(depth=1, role="button", name="Log in", element=2),
    AxNode(depth=0, role="text", name="Forgot your \"password\"?", element=None),
]


def test_the_elements_come_first_then_the_tree_with_ids_and_indents():
    text = render_axtree(NODES, ELEMENTS, budget_tokens=1000)
    assert text.splitlines() == [
        "Interactive elements:",
        '[1] textbox "Username"',  # the tree's accessible name, where the element's text is empty
        '[2] button "Log in"',
        "Page:",
        'heading "Sign in"',
        "form",
        '  text "Username"',
        '  [1] textbox "Username"',
        '  [2] button "Log in"',
        'text "Forgot your \\"password\\"?"',
    ]


def test_an_id_outside_the_element_list_is_not_shown():
    nodes = [AxNode(depth=0, role="button", name="Gone", element=5)]
    assert render_axtree(nodes, ELEMENTS, budget_tokens=1000).splitlines()[-1] == 'button "Gone"'


def test_every_budget_is_kept_and_a_cut_keeps_whole_lines_in_order_with_a_marker():
    nodes = NODES + [AxNode(depth=i % 5, role="text", name=f"line {i}", element=None) for i in range(200)]
    full = render_axtree(nodes, ELEMENTS, budget_tokens=100_000).splitlines()
    assert count_tokens("\n".join(full)) < 100_000 and not _MARKER.match(full[-1])
    for budget in range(1, 600, 7):
        text = render_axtree(nodes, ELEMENTS, budget_tokens=budget)
        assert len(text) <= budget * CHARS_PER_TOKEN and count_tokens(text) <= budget
        lines = text.splitlines()
        marker = _MARKER.match(lines[-1])
        if marker is None:  # a tiny budget holds only the start of the marker
            assert budget < 12 and "... (".startswith(text[:5])
            continue
        kept = lines[:-1]
        assert kept == full[:len(kept)]  # the elements first: a cut takes the page's end first
        assert int(marker.group(1)) == len(full) - len(kept) and int(marker.group(2)) == budget


def test_a_budget_below_one_token_is_refused():
    with pytest.raises(ValueError, match="budget_tokens"):
        render_axtree(NODES, ELEMENTS, budget_tokens=0)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(chromium_path, sites):
    async with browser_server(chromium_path, sites.base_url) as url:
        yield url


def _elements_section(text: str) -> list[str]:
    lines = text.splitlines()
    assert lines[0] == "Interactive elements:"
    return lines[1:lines.index("Page:")] if "Page:" in lines else lines[1:]


@pytest.mark.browser
async def test_a_miniwob_page_as_text_names_its_elements_and_its_instruction(server, sites):
    page = await observe_miniwob(server, sites.base_url, "click-checkboxes", seed=3)
    text = render_axtree(page.info.axtree, page.info.elements, budget_tokens=2000)
    section = _elements_section(text)
    assert len(section) == len(page.info.elements)
    for number, line in enumerate(section, start=1):
        assert line.startswith(f"[{number}] {page.info.elements[number - 1].role}")
    assert section[-1] == f'[{len(section)}] button "Submit"'
    for word in re.match(r"Select (.*) and click", page.utterance).group(1).split(", "):
        assert re.search(rf'^\s*\[\d+\] checkbox "{re.escape(word)}"$', text, re.M), word
    assert f'text "{page.utterance}"' in text


@pytest.mark.browser
async def test_a_local_site_page_cut_to_a_small_budget_keeps_its_elements_first(server, sites):
    page = await observe(server, f"{sites.base_url}/shop/?session=axtree-render")
    info = page.info
    full = render_axtree(info.axtree, info.elements, budget_tokens=100_000)
    assert "Welcome to the Webgym Shop" in full and '"Search products"' in full
    head = full.split("\nPage:", 1)[0]
    budget = count_tokens(head) + 40  # the elements and a few lines of the page
    assert budget < count_tokens(full) // 2
    cut = render_axtree(info.axtree, info.elements, budget_tokens=budget)
    assert count_tokens(cut) <= budget and _MARKER.match(cut.splitlines()[-1])
    # The cut fell in the page section: every element is still listed, with its id.
    section = _elements_section(cut)
    assert [line.split(" ", 1)[0] for line in section] == [f"[{i}]" for i in range(1, len(info.elements) + 1)]
    page_lines = cut.split("\nPage:\n", 1)[1].splitlines()[:-1]
    assert page_lines and page_lines == full.split("\nPage:\n", 1)[1].splitlines()[:len(page_lines)]
