"""Generated shop tasks: schema rows, deterministic, about real products, and checkable against the
ground truth of a session that does them right over the site's HTTP routes."""

from __future__ import annotations

import html
import json
import re
from collections import Counter

import httpx
import pytest

from webgym_data.schema import Task
from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.accounts import accounts
from webgym_sites.answers import read_value, stated
from webgym_sites.catalogue import catalogue
from webgym_sites.goals import ANSWER_TYPES, check_fact, check_task, task_checks
from webgym_sites.shop_tasks import TEMPLATES, shop_tasks
from webgym_sites.state import new_session_id, with_session

SHOP_SEED = 2


def _meta(task: Task) -> dict:
    return json.loads(task.source.metadata)


def test_rows_are_deterministic_distinct_schema_rows_across_the_levels():
    tasks = shop_tasks(300, seed=5, shop_seed=SHOP_SEED)
    assert [t.to_row() for t in tasks] == [t.to_row() for t in shop_tasks(300, seed=5, shop_seed=SHOP_SEED)]
    assert [t.task_id for t in shop_tasks(30, seed=6, shop_seed=SHOP_SEED)] != [t.task_id for t in tasks[:30]]
    assert len({t.task_id for t in tasks}) == 300
    levels = Counter(t.difficulty_level for t in tasks)
    assert set(levels) == {"easy", "medium", "hard"} and min(levels.values()) >= 90
    assert {_meta(t)["template"] for t in tasks} == set(TEMPLATES)
    for task in tasks:
        assert Task.from_row(task.to_row()) == task  # a valid row of the published schema
        assert task.difficulty == task.num_facts == len(task_checks(task))
        assert task.start_url.startswith("http://127.0.0.1:8400/shop/")
        answers = [c for c in task_checks(task) if c["type"] in ANSWER_TYPES]
        assert bool(task.definite_answer) == bool(answers)
        assert all(c["type"] == "answer_value" and c["candidates"] for c in answers)  # a grader's candidates
        if _meta(task)["template"] in ("add", "add_quantity", "cheapest"):  # one line, nothing else
            assert any(c["type"] == "cart_only" for c in task_checks(task))
        if "checkout" in _meta(task)["params"]:  # one order, of nothing else
            assert any(c["type"] == "one_order" for c in task_checks(task))


def test_every_task_refers_to_products_options_and_accounts_that_exist():
    shop, logins = catalogue(SHOP_SEED), {a.email: a.password for a in accounts(SHOP_SEED)}
    for task in shop_tasks(300, seed=5, shop_seed=SHOP_SEED):
        meta = _meta(task)
        assert meta["shop_seed"] == SHOP_SEED
        params = meta["params"]
        for line in params.get("lines", []):
            product = shop.by_id[line["product_id"]]
            named = product.name if "search" not in params else product.brand  # found by a search
            assert named in task.task_name and line["colour"] in product.colours
            assert ("size" in line) == bool(product.sizes) and line.get("size", "") in (*product.sizes, "")
        if "product_id" in params:
            assert shop.by_id[params["product_id"]].name in task.task_name + task.definite_answer
        if "account" in params:
            assert logins[params["account"]["email"]] == params["account"]["password"]
        for check in task_checks(task):
            if "product_id" in check:
                assert check["product_id"] in shop.by_id
            for product_id in check.get("product_ids", []):
                assert product_id in shop.by_id


def _on_page(check: dict, page: str) -> bool:
    """The page states the value of an answer check (``4.5 / 5`` is the rating 4.5 out of 5)."""
    if check["kind"] == "name":
        return check["value"] in page
    return read_value(check["kind"], check["value"]) in stated(re.sub(r"<[^>]+>", " ", page))


def _first_result(page: str) -> str:
    return re.search(r"/shop/product/(P\d{5})", page.split("id='result-count'", 1)[1]).group(1)


def _do_it_right(client: httpx.Client, task: Task) -> tuple[str, str]:
    """Do `task` through the shop's routes as a careful user would; return the session and answer."""
    params, session = _meta(task)["params"], new_session_id()
    client.get(with_session(task.start_url, session)).raise_for_status()
    if "search" in params:
        page = client.get("/shop/search", params=params["search"]).text
        found = params.get("product_id") or params["lines"][0]["product_id"]
        assert _first_result(page) == found  # the site's own search agrees with the task's answer
    if "product_id" in params:
        page = html.unescape(client.get(f"/shop/product/{params['product_id']}").text)
        for check in task_checks(task):
            if check["type"] == "answer_value":  # the page states it, as the answer must
                assert _on_page(check, page), task.task_name
    if "account" in params:
        client.post("/shop/signin", data=params["account"]).raise_for_status()
    for line in params.get("lines", []):
        added = client.post("/shop/cart/add", data={k: str(v) for k, v in line.items()})
        assert "Added" in added.text
    if "checkout" in params:
        assert "confirm-order" in client.post("/shop/checkout", data=params["checkout"]).text
        assert "Thank you for your order" in client.post("/shop/checkout/confirm").text
    return session, task.definite_answer


@pytest.fixture(scope="module")
def server():
    with SiteServer(shop_seed=SHOP_SEED) as sites:
        yield sites


def test_a_session_that_does_the_task_meets_every_fact_and_an_idle_one_does_not(server):
    tasks = shop_tasks(90, seed=5, shop_seed=SHOP_SEED, base_url=server.base_url)  # 10 of each template
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True, timeout=30) as client:
        for task in tasks:
            client.cookies.clear()
            session, answer = _do_it_right(client, task)
            facts = server.facts(session)
            assert check_task(task, facts, answer) == [True] * task.num_facts, task.task_name
            idle = new_session_id()
            client.cookies.clear()
            client.get(with_session(task.start_url, idle))
            assert not all(check_task(task, server.facts(idle), "")), task.task_name


def test_checks_fail_on_the_wrong_option_and_quantity(server):
    shop = catalogue(SHOP_SEED)
    task = next(t for t in shop_tasks(40, seed=5, shop_seed=SHOP_SEED, base_url=server.base_url)
                if _meta(t)["template"] == "add_quantity"
                and len(shop.by_id[_meta(t)["params"]["lines"][0]["product_id"]].colours) > 1)
    line = dict(_meta(task)["params"]["lines"][0])
    line["colour"] = next(c for c in shop.by_id[line["product_id"]].colours if c != line["colour"])
    line["quantity"] += 1
    session = new_session_id()
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True) as client:
        client.get(with_session(task.start_url, session))
        client.post("/shop/cart/add", data={k: str(v) for k, v in line.items()})
    keys = [(c["type"], c.get("name", "")) for c in task_checks(task)]
    verdicts = dict(zip(keys, check_task(task, server.facts(session)), strict=True))
    assert verdicts[("cart_has", "")] and not verdicts[("cart_option", "colour")]
    assert not verdicts[("cart_quantity", "")]
    assert verdicts.get(("cart_option", "size"), True)  # the size was right
    with pytest.raises(ValueError, match="unknown check type"):
        check_fact({"type": "nonsense"}, server.facts(session))


def test_one_line_and_one_order_mean_nothing_else(server):
    shop = catalogue(SHOP_SEED)
    task = next(t for t in shop_tasks(60, seed=5, shop_seed=SHOP_SEED, base_url=server.base_url)
                if _meta(t)["template"] == "checkout"
                and len(shop.by_id[_meta(t)["params"]["lines"][0]["product_id"]].colours) > 1)
    params = _meta(task)["params"]
    right = params["lines"][0]
    colour = next(c for c in shop.by_id[right["product_id"]].colours if c != right["colour"])
    other = right | {"colour": colour, "quantity": 1}
    types = [(c["type"], c.get("name", "")) for c in task_checks(task)]
    assert ("one_order", "") in types and ("order_has", "") not in types
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True) as client:
        session = new_session_id()
        client.get(with_session(task.start_url, session))
        for line in (other, right):  # the right line, and the same product in another colour
            client.post("/shop/cart/add", data={k: str(v) for k, v in line.items()})
        both = check_task(task, server.facts(session))  # the cart: two lines of one product
        assert check_fact({"type": "cart_only", "product_ids": [right["product_id"]]}, server.facts(session))
        assert not check_fact({"type": "cart_option", "product_id": right["product_id"], "name": "colour",
                               "value": right["colour"]}, server.facts(session))  # one of them is not blue
        client.post("/shop/checkout", data=params["checkout"])
        client.post("/shop/checkout/confirm")
        verdicts = dict(zip(types, check_task(task, server.facts(session)), strict=True))
        assert verdicts[("one_order", "")] and not verdicts[("order_option", "colour")]
        assert not verdicts[("order_quantity", "")] and not all(both)
        # a second order, of the right line alone: the last order is right, but not the only one
        client.post("/shop/cart/add", data={k: str(v) for k, v in right.items()})
        client.post("/shop/checkout", data=params["checkout"])
        client.post("/shop/checkout/confirm")
        verdicts = dict(zip(types, check_task(task, server.facts(session)), strict=True))
        assert not verdicts[("one_order", "")] and verdicts[("order_option", "colour")]
        assert check_fact({"type": "order_only", "product_ids": [right["product_id"]]}, server.facts(session))
