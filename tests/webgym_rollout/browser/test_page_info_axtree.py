"""``page_info(axtree=True)`` on real pages: the accessibility tree names what the page shows, its
element ids point into the same call's element list at the element of the same role, invisible
nodes are left out, and asking for the tree leaves the element list as it was."""

from __future__ import annotations

import re

import pytest
import pytest_asyncio

from tests.support.observed_pages import browser_server, observe, observe_miniwob
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.protocol import AxNode, BrowserAction, PageInfo
from webgym_rollout.tasks.miniwob import task_url


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(chromium_path, sites):
    async with browser_server(chromium_path, sites.base_url) as url:
        yield url


def _pointed(info: PageInfo) -> list[AxNode]:
    return [node for node in info.axtree if node.element is not None]


def _check_ids(info: PageInfo) -> None:
    """Every element appears once in the tree, under its own role."""
    ids = [node.element for node in _pointed(info)]
    assert sorted(ids) == list(range(1, len(info.elements) + 1)), ids
    for node in _pointed(info):
        assert node.role == (info.elements[node.element - 1].role or "generic"), (node, info.elements)


@pytest.mark.browser
async def test_a_miniwob_tree_names_the_checkboxes_and_points_at_them(server, sites):
    page = await observe_miniwob(server, sites.base_url, "click-checkboxes", seed=3)
    info = page.info
    assert info.elements and info.axtree
    _check_ids(info)
    assert any(node.role == "text" and node.name == page.utterance for node in info.axtree)
    # The labels' words, which the instruction quotes, name the checkboxes they wrap.
    checkboxes = {node.name for node in _pointed(info) if node.role == "checkbox"}
    wanted = re.match(r"Select (.*) and click Submit\.", page.utterance).group(1).split(", ")
    assert set(wanted) <= checkboxes, (wanted, checkboxes)
    submit = next(node for node in _pointed(info) if node.role == "button")
    assert submit.name == info.elements[submit.element - 1].text == "Submit"


@pytest.mark.browser
async def test_a_login_form_reads_as_labelled_boxes_in_page_order(server, sites):
    page = await observe_miniwob(server, sites.base_url, "login-user", seed=7)
    info = page.info
    _check_ids(info)
    lines = [(node.role, node.name, node.element) for node in info.axtree]
    names = [name for _, name, _ in lines]
    boxes = [i for i, (role, _, element) in enumerate(lines) if role == "textbox" and element]
    assert len(boxes) == 2
    # The text before each box is its label, as a reader of the page sees it.
    assert names[boxes[0] - 1] == "Username" and names[boxes[1] - 1] == "Password"
    assert boxes[0] < boxes[1] < next(i for i, line in enumerate(lines) if line[0] == "button")


@pytest.mark.browser
async def test_the_tree_of_a_local_site_names_its_links_and_search_box(server, sites):
    page = await observe(server, f"{sites.base_url}/shop/?session=axtree-test")
    info = page.info
    _check_ids(info)
    assert any(node.role == "heading" and node.name == "Welcome to the Webgym Shop" for node in info.axtree)
    links = [node for node in _pointed(info) if node.role == "link"]
    assert len(links) >= 10
    for node in links:  # a link is named by its text, which the element list also reads
        assert node.name == info.elements[node.element - 1].text
    search = next(node for node in _pointed(info) if node.role == "textbox")
    assert search.name == "Search products"
    # A category link sits below its list in the tree.
    list_depth = next(node.depth for node in info.axtree if node.role == "list")
    category = next(node for node in links if node.name == "Mugs")
    assert category.depth > list_depth


@pytest.mark.browser
async def test_hidden_tab_panels_are_left_out_until_shown(server, sites):
    url = task_url(sites.base_url, "click-tab-2")
    async with BrowserClient(server) as client:
        session = await client.create_session(url, environment="miniwob:click-tab-2", seed=5)
        try:
            before = await session.page_info(elements=True, axtree=True)
            panels = [node.name for node in before.axtree if node.role == "tabpanel"]
            assert panels == ["Tab #1"]  # the other two panels are display: none
            tab = next(node for node in _pointed(before) if node.role == "tab" and node.name == "Tab #2")
            box = before.elements[tab.element - 1]
            await session.execute(BrowserAction.click(box.x + box.width / 2, box.y + box.height / 2))
            after = await session.page_info(elements=True, axtree=True)
        finally:
            await session.close()
    assert [node.name for node in after.axtree if node.role == "tabpanel"] == ["Tab #2"]
    _check_ids(after)


@pytest.mark.browser
async def test_asking_for_the_tree_leaves_the_element_list_as_it_was(server, sites):
    url = f"{sites.base_url}/shop/?session=axtree-list"
    async with BrowserClient(server) as client:
        session = await client.create_session(url)
        try:
            plain = await session.page_info(elements=True)
            both = await session.page_info(elements=True, axtree=True)
            tree_only = await session.page_info(axtree=True)
        finally:
            await session.close()
    assert plain.axtree == [] and plain.elements == both.elements
    # Without the element list the tree is the same, its nodes pointing at nothing.
    assert tree_only.elements == [] and {node.element for node in tree_only.axtree} == {None}
    assert [(n.depth, n.role, n.name) for n in tree_only.axtree] == [(n.depth, n.role, n.name)
                                                                     for n in both.axtree]
