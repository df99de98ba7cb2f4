"""Generated travel tasks: schema rows, deterministic, about real flights and hotels, and solved by
the scripted expert's plan played over the site's HTTP routes (an idle session is not)."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest

from tests.support.plan_over_http import HttpPlayer
from webgym_data.schema import Task
from webgym_rollout.tasks.sites import SiteServer
from webgym_sites.generate import expert_plan, site_tasks
from webgym_sites.goals import ANSWER_TYPES, check_fact, check_task, task_checks
from webgym_sites.plans import Goto, Press
from webgym_sites.state import new_session_id, with_session
from webgym_sites.travel_catalogue import travel_world
from webgym_sites.travel_tasks import TEMPLATES, travel_tasks

TRAVEL_SEED = 2


def _meta(task: Task) -> dict:
    return json.loads(task.source.metadata)


def test_rows_are_deterministic_distinct_schema_rows_across_the_levels():
    tasks = travel_tasks(270, seed=5, travel_seed=TRAVEL_SEED)
    again = travel_tasks(270, seed=5, travel_seed=TRAVEL_SEED)
    assert [t.to_row() for t in tasks] == [t.to_row() for t in again]
    other = travel_tasks(30, seed=6, travel_seed=TRAVEL_SEED)
    assert [t.task_id for t in other] != [t.task_id for t in tasks[:30]]
    assert len({t.task_id for t in tasks}) == 270
    levels = Counter(t.difficulty_level for t in tasks)
    assert levels == {"easy": 90, "medium": 90, "hard": 90}
    assert {_meta(t)["template"] for t in tasks} == set(TEMPLATES)
    for task in tasks:
        assert Task.from_row(task.to_row()) == task  # a valid row of the published schema
        assert task.difficulty == task.num_facts == len(task_checks(task))
        assert task.start_url.startswith("http://127.0.0.1:8400/travel/")
        assert (task.environment, task.benchmark_name) == ("site:travel", "webgym-travel")
        assert task.domain == _meta(task)["site"] == "travel"
        assert _meta(task)["travel_seed"] == TRAVEL_SEED
        answers = [c for c in task_checks(task) if c["type"] in ANSWER_TYPES]
        assert bool(task.definite_answer) == bool(answers)
        assert all(c["type"] == "answer_value" and c["candidates"] for c in answers)
        types = Counter(c["type"] for c in task_checks(task))  # a booking task: one booking, the right one
        assert not types["flight_booked"] and not types["hotel_booked"]
        assert types["one_flight"] <= 1 and types["one_hotel"] <= 1
    assert "site:travel" in {t.environment for t in site_tasks(3)}


def test_every_task_is_about_flights_and_hotels_that_exist():
    world = travel_world(TRAVEL_SEED)
    for task in travel_tasks(90, seed=5, travel_seed=TRAVEL_SEED):
        params = _meta(task)["params"]
        if "flight_id" in params:
            flight = world.flight(params["flight_id"])
            search = params["search"]
            route = (search["origin"], search["destination"], search["date"])
            assert (flight.origin, flight.destination, flight.date) == route
            assert world.by_code[flight.origin].label in task.task_name
        if "hotel_id" in params:
            hotel = world.hotel_by_id[params["hotel_id"]]
            assert hotel.name in task.task_name or world.by_code[hotel.city].city in task.task_name
        for check in task_checks(task):
            if check["type"] == "one_flight":
                assert check["flight_id"] == params["flight_id"]
            if check["type"] == "one_hotel":
                assert check["hotel_id"] == params["hotel_id"]


@pytest.fixture(scope="module")
def server():
    with SiteServer(travel_seed=TRAVEL_SEED) as sites:
        yield sites


def test_the_expert_plan_played_over_http_meets_every_fact_and_an_idle_session_does_not(server):
    tasks = travel_tasks(63, seed=5, travel_seed=TRAVEL_SEED, base_url=server.base_url)  # 7 of each template
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True, timeout=30) as client:
        for task in tasks:
            client.cookies.clear()
            session = new_session_id()
            answer = HttpPlayer(client, with_session(task.start_url, session)).play(expert_plan(task))
            assert answer == (task.definite_answer or "Done.")
            facts = server.facts(session)
            assert check_task(task, facts, answer) == [True] * task.num_facts, task.task_name
            idle = new_session_id()
            client.cookies.clear()
            client.get(with_session(task.start_url, idle))
            assert not all(check_task(task, server.facts(idle), "")), task.task_name


def test_the_answers_are_on_the_pages_the_expert_opens(server):
    tasks = [t for t in travel_tasks(27, seed=5, travel_seed=TRAVEL_SEED, base_url=server.base_url)
             if t.definite_answer]
    assert {_meta(t)["template"] for t in tasks} == {"cheapest_direct", "hotel_stars", "earliest"}
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True, timeout=30) as client:
        for task in tasks:
            player = HttpPlayer(client, with_session(task.start_url, new_session_id()))
            player.play(expert_plan(task))
            for check in task_checks(task):
                if check["type"] == "answer_value":
                    assert check["value"] in player.html, task.task_name


def test_checks_fail_on_another_flight_and_name(server):
    task = next(t for t in travel_tasks(20, seed=5, travel_seed=TRAVEL_SEED, base_url=server.base_url)
                if _meta(t)["template"] == "book_cheapest")
    params = _meta(task)["params"]
    search = params["search"]
    day = server.travel.world.day_flights(search["origin"], search["destination"], search["date"])
    other = next(f for f in day if f.id != params["flight_id"])
    chosen = Press(f"select-{params['flight_id']}")
    elsewhere = Goto(f"/travel/flight/{other.id}?cabin={search['cabin']}&passengers=1")
    plan = [elsewhere if move == chosen else move for move in expert_plan(task)]
    assert plan != expert_plan(task)
    session = new_session_id()
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True) as client:
        HttpPlayer(client, with_session(task.start_url, session)).play(plan)
    verdicts = dict(zip([(c["type"], c.get("name", "")) for c in task_checks(task)],
                        check_task(task, server.facts(session)), strict=True))
    assert verdicts[("flight_searched", "")] and not verdicts[("one_flight", "")]
    assert verdicts[("flight_booking_field", "cabin")] and verdicts[("flight_booking_field", "full_name")]
    facts = server.facts(session)
    someone = {"type": "flight_booking_field", "name": "full_name", "value": "Someone Else"}
    assert not check_fact(someone, facts)
    assert not check_fact({"type": "hotel_booked", "hotel_id": "HAAA01"}, facts)  # no hotel booked
    assert not check_fact({"type": "one_hotel", "hotel_id": "HAAA01"}, facts)
    # Then the right flight as well: the last booking is right, but it is not the only one.
    with httpx.Client(base_url=server.base_url, trust_env=False, follow_redirects=True) as client:
        HttpPlayer(client, with_session(task.start_url, session)).play(expert_plan(task))
    facts = server.facts(session)
    assert check_fact({"type": "flight_booked", "flight_id": params["flight_id"]}, facts)
    assert not check_fact({"type": "one_flight", "flight_id": params["flight_id"]}, facts)
    assert not check_fact({"type": "hotel_searched", "city": search["origin"]}, facts)
