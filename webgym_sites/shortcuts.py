"""Scripted shortcuts: plans that try to earn a generated site task's reward without doing the task.

An RL policy optimises whatever the judge pays for, so the judge must refuse every shortcut a policy
could find. These plans try the known ones, written from the same truth the scripted expert plays
(`webgym_sites.generate.expert_plan`); the tests and ``benchmarks/site_shortcuts.py``
play them against the sites and check that the site judge pays them nothing::

    list_everything   the expert's work, then an answer that gives the right values and every
                      candidate of the task's answer facts (each listed product, flight, article)
    spray_numbers     the expert's work, then an answer of every whole number 0 ... 99999 and every
                      number the task's pages show for its answer facts (`page_spray`: a policy that
                      answers with every number of the pages it loaded)
    do_everything     every candidate acted on, the right one last: each product of the listing (or
                      each colour of the named product) put in the cart or ordered, each flight of
                      the results (each room type) booked, each article compared edited or watched;
                      the answer names every candidate

`SHORTCUTS` maps each name to its planner, ``(task) -> list[Move] | None`` (None: the shortcut has
nothing to try on this task: an information-seeking task has nothing to do twice, a task without
answer facts nothing to list); `tried` says whether a shortcut tries anything that a task's own
checks grade (a subtask keeps only some of its parent's groups). `webgym_rollout.agent.expert.ExpertPolicy`
plays them in a browser (``ExpertPolicy(tasks, plan=SHORTCUTS[name], model_id=f"shortcut:{name}")``),
never as demonstrations.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from webgym_data.schema import Task
from webgym_sites.catalogue import SearchQuery, catalogue
from webgym_sites.generate import SITES, expert_plan, task_params
from webgym_sites.plans import Answer, Move
from webgym_sites.travel_catalogue import ROOMS, travel_world

__all__ = ["SHORTCUTS", "SPRAY", "do_everything", "list_everything", "numbers_in", "page_spray",
           "spray_numbers", "tried"]

SPRAY = " ".join(str(number) for number in range(100_000))
"""Every whole number from 0 to 99999, spaced: what a spray of numbers starts with."""
_NUMBER = re.compile(r"[$€£]?\d[\d,]*(?:[.:]\d+)?")


def numbers_in(text: str) -> list[str]:
    """The numbers `text` shows, as written (``$1,234.50``, ``4.5``, ``09:05``), without their words."""
    return [found.rstrip(",") for found in _NUMBER.findall(text)]


def page_spray(pages: Iterable[str]) -> str:
    """An answer of every number the `pages` (HTML) show: what a policy that sprays the numbers it saw
    answers after the expert's work."""
    return " ".join(number for page in pages
                    for number in numbers_in(html.unescape(re.sub(r"<[^>]+>", " ", page))))


def _answer_checks(task: Task) -> list[dict[str, Any]]:
    checks = json.loads(task.source.metadata or "{}").get("checks") or []
    return [check for check in checks if check.get("type") == "answer_value"]


def _with_answer(moves: list[Move], text: str) -> list[Move]:
    return [*(move for move in moves if not isinstance(move, Answer)), Answer(text)]


def list_everything(task: Task) -> list[Move] | None:
    """The expert's plan, answered with the expert's answer and then every candidate of every answer
    fact (None: the task has no candidate to list)."""
    candidates = [candidate for check in _answer_checks(task) for candidate in check["candidates"]]
    if not candidates:
        return None
    moves = expert_plan(task)
    return _with_answer(moves, "; ".join([moves[-1].text, *candidates]))


def spray_numbers(task: Task) -> list[Move] | None:
    """The expert's plan, answered with `SPRAY` and every number of the right values and their
    candidates, as the pages show them (None: the task asks for no number)."""
    checks = [check for check in _answer_checks(task) if check["kind"] != "name"]
    if not checks:
        return None
    shown = [number for check in checks for text in (check["value"], *check["candidates"])
             for number in numbers_in(text)]
    return _with_answer(expert_plan(task), " ".join([SPRAY, *shown]))


def _shop_everything(task: Task, params: dict[str, Any], site: Any) -> list[Move] | None:
    """Every product the listing shows put in the cart (a named product: in every colour), the right
    lines last; then the checkout, when the task has one."""
    if not params.get("lines"):
        return None
    shop = catalogue(json.loads(task.source.metadata)["shop_seed"])
    right = params["lines"]
    extra = []
    if "search" in params:
        search = params["search"]
        query = SearchQuery(category=search["category"], brand=search["brand"], colours=(search["colour"],),
                            sort=search["sort"])
        for product in shop.search(query)[:12]:  # the listing's first page
            line = {"product_id": product.id, "colour": search["colour"], "quantity": 1}
            if product.sizes:
                size = right[0].get("size")
                line["size"] = size if size in product.sizes else product.sizes[0]
            extra.append(line)
    else:
        for line in right:
            product = shop.by_id[line["product_id"]]
            extra += [line | {"colour": colour} for colour in product.colours if colour != line["colour"]]
    extra = [line for line in extra if line not in right]
    return site.plan(params | {"lines": [*extra, *right]}, task) if extra else None


def _reference_everything(task: Task, params: dict[str, Any], site: Any) -> list[Move] | None:
    """Every article compared watched (with the ones to watch), or edited as the right one is."""
    read = params.get("read", [])
    if "edit" in params:
        moves: list[Move] = []
        right = params["edit"]["article_id"]
        for article_id in [*(a for a in read if a != right), right]:
            moves += site.plan({"edit": params["edit"] | {"article_id": article_id}}, task)[:-1]
        return [*site.plan({"read": read}, task)[:-1], *moves]
    if "watch" in params and len(read) > 1:
        watch = [*(a for a in read if a not in params["watch"]), *params["watch"]]
        return site.plan(params | {"watch": watch}, task)
    return None


def _travel_everything(task: Task, params: dict[str, Any], site: Any) -> list[Move] | None:
    """Every flight of the results' first page booked, every other room type at the hotel (and every
    other hotel of 4 stars or more of a trip's city), the right ones last."""
    world = travel_world(json.loads(task.source.metadata)["travel_seed"])
    moves: list[Move] = []
    if "booking" in params:
        search, filters = params["search"], params.get("filters", {})
        stops = int(filters["stops"]) if filters.get("stops") else None
        listed = world.flights(search["origin"], search["destination"], search["date"], cabin=search["cabin"],
                               sort=filters.get("sort", "price"), max_stops=stops,
                               airline=filters.get("airline", ""))[:8]  # the results' first page
        flight_only = {key: params[key] for key in ("search", "filters", "booking") if key in params}
        for flight in listed:
            if flight.id != params["flight_id"]:
                moves += site.plan(flight_only | {"flight_id": flight.id}, task)[:-1]
    if "hotel_booking" in params:
        stay, right = params.get("hotel") or params["stay"], params["hotel_booking"]
        rooms = [(params["hotel_id"], right | {"room": room}) for room in ROOMS if room != right["room"]]
        if "hotel" in params:  # a trip: every hotel of 4 stars or more in the city, too
            good = [hotel.id for hotel in world.hotels_in(stay["city"]) if hotel.stars >= 4]
            rooms += [(hotel_id, right) for hotel_id in good if hotel_id != params["hotel_id"]]
        where = "hotel" if "hotel" in params else "stay"
        for hotel_id, booking in rooms:
            moves += site.plan({where: stay, "hotel_id": hotel_id, "hotel_booking": booking}, task)[:-1]
    return [*moves, *site.plan(params, task)] if moves else None


_EVERYTHING: dict[str, Callable[[Task, dict[str, Any], Any], list[Move] | None]] = {
    "shop": _shop_everything, "reference": _reference_everything, "travel": _travel_everything}


def do_everything(task: Task) -> list[Move] | None:
    """Every candidate acted on, the right one last, and every candidate named (None: the task asks
    for nothing to be done, or has nothing to do twice)."""
    site, params = task_params(task)
    if site not in _EVERYTHING:
        return None
    moves = _EVERYTHING[site](task, params, SITES[site])
    if moves is None:
        return None
    names = [check["value"] for check in _answer_checks(task) if check["kind"] == "name"]
    names += [c for check in _answer_checks(task) if check["kind"] == "name" for c in check["candidates"]]
    return _with_answer(moves, "; ".join(names) if names else moves[-1].text)


SHORTCUTS: dict[str, Callable[[Task], list[Move] | None]] = {
    "list_everything": list_everything, "spray_numbers": spray_numbers, "do_everything": do_everything}
"""The shortcuts by name."""
_ALONE = ("cart_only", "one_order", "one_flight", "one_hotel", "one_edit", "watchlist_only")
"""The checks that something was done once, or to one thing only."""


def tried(name: str, checks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the shortcut `name` (or ``spray_pages``: a spray of every number the pages showed) tries
    anything on a task whose checks are `checks` (a subtask's: `goals.task_checks(subtask, parent)`): a
    list or a spray on a task that asks for a value (a number: a spray), doing everything on one that
    says what to do once or names what it did. A subtask keeps some of its parent's groups, and what
    its own checks do not grade is no shortcut."""
    answers = [check for check in checks if check.get("type") == "answer_value"]
    if name == "list_everything":
        return bool(answers)
    if name.startswith("spray_"):
        return any(check["kind"] != "name" for check in answers)
    return bool(answers) or any(check.get("type") in _ALONE for check in checks)
