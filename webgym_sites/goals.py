"""A generated site task's facts in machine-checkable form, and their check against the ground truth.

Each fact of a generated task's rubric (`Task.evaluator_reference`) comes with one `check`, a JSON
object kept in the task's ``source.metadata`` under ``"checks"``, in the order of the facts (group
by group). `check_fact` decides one against a session's `SessionFacts` and the agent's final answer;
`check_task` decides every fact of a task. The checks (``type`` and its fields)::

    visited         path            a page with this path (any query) was loaded
    visited_any     prefixes        a page whose path starts with one of these was loaded
    answer_value    kind, value, candidates     the answer gives this value of this kind (``price``,
                                    ``rating``, ``number``, ``time``, ``date``, ``name``), names none
                                    of the candidates (the other values the task's pages offer) and,
                                    but for a name, no value of the kind the task does not ask for
                                    (`webgym_sites.answers`)
    answer          texts           rows made before ``answer_value``: each text that states a value
                                    is that value (no candidates), any other is a name that must
                                    appear as whole words
    answer_number   value           rows made before ``answer_value``: a whole number (or a rating,
                                    ``4.5``), no candidates
    cart_has        product_id      a cart line of this product
    cart_option     product_id, name, value     the product has cart lines, each with this option value
    cart_quantity   product_id, quantity        its cart lines add up to this quantity
    cart_only       product_ids     the cart holds these products and no other
    order_has       product_id      the session's last order has a line of this product
    order_option    product_id, name, value     ... every line of it with this option value
    order_quantity  product_id, quantity        ... adding up to this quantity
    order_only      product_ids     the last order holds these products and no other
    one_order       product_ids     the session placed one order, and it holds these products and no other
    order_field     name, value     the last order's field (``shipping``, ``postcode``, ``full_name``,
                                    ``city``, ``account``) equals value (case and spacing ignored)
    signed_in       account         the session signed in to this account at least once
    read_article    article_id      the reference site's article was opened
    watchlist_has   article_id      the reference watchlist holds this article
    watchlist_only  article_ids     the watchlist holds these articles and no other
    edit_field      article_id, field, value    an edit suggestion of this article sets this infobox
                                    value (numbers compared whole, text with case and spacing ignored)
    edit_summary    article_id, text            an edit suggestion of this article explains itself
                                    with a summary that contains this text (case and spacing ignored)
    one_edit        article_id      the session suggested one edit, of this article

    flight_searched origin, destination, date   the travel site showed the results of this route
                                    (airport codes) on this day (``YYYY-MM-DD``)
    hotel_searched  city            the travel site showed the hotels of this city (airport code)
    flight_booked   flight_id       the session's last flight booking is of this flight
    one_flight      flight_id       the session booked one flight, this one
    flight_booking_field  name, value   the last flight booking's field (``cabin``, ``passengers``,
                                    ``seat``, ``full_name``, ``email``, ``passport``) equals value
                                    (case and spacing ignored)
    hotel_booked    hotel_id        the session's last hotel booking is at this hotel
    one_hotel       hotel_id        the session booked one hotel room, at this hotel
    hotel_booking_field   name, value   its field (``room``, ``checkin``, ``nights``, ``full_name``,
                                    ``email``) equals value (case and spacing ignored)

The answer is read once for the whole task (`check_task`, or `check_fact` given the task's other
checks): a value that another of the task's answer facts asks for is no second answer
(``Velkford, 1032, 1375`` gives a founding year and an elevation). The old answer checks follow the
same rule, but with no candidates a list of the task's names still passes their name facts:
regenerate such rows (``webgym-rollout site-tasks``).

A session that never reached the shop fails every shop check; one that never reached the reference
site fails its checks (``read_article`` ... ``one_edit``), one that never reached the travel site
its own (``flight_searched`` ... ``hotel_booking_field``). The answer checks need no site.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from webgym_data.schema import Task
from webgym_sites.answers import ANY_UNIT, Value, answer_gives, read_value, stated
from webgym_sites.facts import LineFacts, OrderFacts, SessionFacts

__all__ = ["ANSWER_TYPES", "CHECK_TYPES", "answer_names", "answer_values", "check_fact", "check_task",
           "task_checks"]

ANSWER_TYPES = ("answer_value", "answer", "answer_number")
"""The checks of the final answer (the others check the session's record)."""
_REFERENCE_TYPES = ("read_article", "watchlist_has", "watchlist_only", "edit_field", "edit_summary",
                    "one_edit")
_TRAVEL_TYPES = ("flight_searched", "hotel_searched", "flight_booked", "one_flight", "flight_booking_field",
                 "hotel_booked", "one_hotel", "hotel_booking_field")
CHECK_TYPES = ("visited", "visited_any", *ANSWER_TYPES, "cart_has", "cart_option", "cart_quantity",
               "cart_only", "order_has", "order_option", "order_quantity", "order_only", "one_order",
               "order_field", "signed_in", *_REFERENCE_TYPES, *_TRAVEL_TYPES)


def _norm(text: Any) -> str:
    return " ".join(str(text).split()).casefold()


def _paths(facts: SessionFacts) -> list[str]:
    return [page.split("?", 1)[0] for page in facts.visited]


def _lines_check(kind: str, check: Mapping[str, Any], lines: tuple[LineFacts, ...]) -> bool:
    if kind == "only":
        return bool(lines) and {line.product_id for line in lines} == set(check["product_ids"])
    own = [line for line in lines if line.product_id == check["product_id"]]
    if kind == "has":
        return bool(own)
    if kind == "option":  # every line of it: one line per colour is not "the one in blue"
        return bool(own) and all(line.options.get(check["name"]) == check["value"] for line in own)
    if kind == "quantity":
        return bool(own) and sum(line.quantity for line in own) == int(check["quantity"])
    raise ValueError(f"unknown line check {kind!r}")


def _last_order(facts: SessionFacts) -> OrderFacts | None:
    return facts.shop.orders[-1] if facts.shop is not None and facts.shop.orders else None


def _travel_check(kind: str, check: Mapping[str, Any], facts: SessionFacts) -> bool:
    """A check of the travel site's record (``flight_searched`` ... ``hotel_booking_field``)."""
    travel = facts.travel
    if travel is None:
        return False
    if kind == "flight_searched":
        return f"{check['origin']}-{check['destination']} {check['date']}" in travel.flight_searches
    if kind == "hotel_searched":
        return check["city"] in travel.hotel_searches
    bookings = travel.flights if "flight" in kind else travel.hotels
    if not bookings or (kind.startswith("one_") and len(bookings) != 1):
        return False
    last = bookings[-1]
    if kind in ("flight_booked", "one_flight"):
        return last.flight_id == check["flight_id"]
    if kind in ("hotel_booked", "one_hotel"):
        return last.hotel_id == check["hotel_id"]
    return _norm(getattr(last, check["name"])) == _norm(check["value"])


def answer_values(check: Mapping[str, Any]) -> list[tuple[Value, list[Value]]]:
    """The values an answer check asks for, each with its candidates; empty for another check. An old
    ``answer`` text that states no value is a name; an old ``answer_number`` is a number in any unit,
    or with a point a rating."""
    kind = check.get("type")
    if kind == "answer_value":
        return [(read_value(check["kind"], check["value"]),
                 [read_value(check["kind"], text) for text in check.get("candidates", [])])]
    if kind == "answer":
        said = [(stated(text), text) for text in check["texts"]]
        return [(values[0] if values else read_value("name", text), []) for values, text in said]
    if kind == "answer_number":
        number = str(check["value"])
        if "." in number:
            return [(read_value("rating", number), [])]
        return [(Value("number", read_value("number", number).amount, ANY_UNIT), [])]
    return []


def answer_names(checks: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """The names the answer checks of a task ask for, and their candidates (as written)."""
    names, candidates = [], []
    for check in checks:
        if check.get("type") == "answer_value" and check.get("kind") == "name":
            names.append(check["value"])
            candidates += check.get("candidates", [])
        elif check.get("type") == "answer":
            names += [text for text in check["texts"] if not stated(text)]
    return names, candidates


def _answer_check(check: Mapping[str, Any], answer: str, others: Sequence[Mapping[str, Any]]) -> bool:
    wanted = answer_values(check)
    asked = [value for other in others if other is not check for value, _ in answer_values(other)]
    asked += [value for value, _ in wanted]
    return all(answer_gives(answer, value, candidates=candidates, asked=asked)
               for value, candidates in wanted)


def check_fact(check: Mapping[str, Any], facts: SessionFacts, answer: str = "",
               others: Sequence[Mapping[str, Any]] = ()) -> bool:
    """Whether the fact that `check` describes holds for a session with `facts` and final `answer`;
    `others` are the task's other checks (the values its other answer facts ask for are no second
    answer)."""
    kind = check.get("type")
    if kind in ANSWER_TYPES:
        return _answer_check(check, answer, others)
    if kind in _REFERENCE_TYPES:
        return _reference_check(kind, check, facts)
    if kind in _TRAVEL_TYPES:
        return _travel_check(kind, check, facts)
    if kind == "visited":
        return check["path"] in _paths(facts)
    if kind == "visited_any":
        return any(path.startswith(tuple(check["prefixes"])) for path in _paths(facts))
    shop = facts.shop
    if kind == "signed_in":
        return shop is not None and check["account"] in shop.sign_ins
    if isinstance(kind, str) and kind.startswith("cart_"):
        return shop is not None and _lines_check(kind.removeprefix("cart_"), check, shop.cart)
    if kind == "one_order":
        return (shop is not None and len(shop.orders) == 1
                and _lines_check("only", check, shop.orders[0].lines))
    if kind == "order_field":
        order = _last_order(facts)
        return order is not None and _norm(getattr(order, check["name"])) == _norm(check["value"])
    if isinstance(kind, str) and kind.startswith("order_"):
        order = _last_order(facts)
        return order is not None and _lines_check(kind.removeprefix("order_"), check, order.lines)
    raise ValueError(f"unknown check type {kind!r}: expected one of {', '.join(CHECK_TYPES)}")


def _edit_value(value: Any) -> str:
    text = _norm(value)
    return text.replace(",", "") if re.fullmatch(r"[\d,]+", text) else text


def _reference_check(kind: str, check: Mapping[str, Any], facts: SessionFacts) -> bool:
    """The reference site's checks."""
    record = facts.reference
    if record is None:
        return False
    if kind == "read_article":
        return check["article_id"] in record.read
    if kind == "watchlist_has":
        return check["article_id"] in record.watchlist
    if kind == "watchlist_only":
        return bool(record.watchlist) and set(record.watchlist) == set(check["article_ids"])
    if kind == "one_edit":
        return len(record.edits) == 1 and record.edits[0].article_id == check["article_id"]
    edits = [edit for edit in record.edits if edit.article_id == check["article_id"]]
    if kind == "edit_field":
        wanted = _edit_value(check["value"])
        return any(e.field == check["field"] and _edit_value(e.value) == wanted for e in edits)
    return any(_norm(check["text"]) in _norm(e.summary) for e in edits)  # edit_summary


def task_checks(task: Task, parent: Task | None = None) -> list[dict[str, Any]]:
    """The checks of a generated site task, one per fact; ValueError when it has none or they do not
    match its facts one to one.

    A subtask made by decomposition keeps its parent's metadata (the parent's checks) and some of
    its fact groups: given the `parent`, its checks are those of its groups."""
    checks = json.loads(task.source.metadata or "{}").get("checks")
    if (task.parent_task_id and parent is not None and isinstance(checks, list)
            and len(checks) == parent.num_facts):
        slices, start = {}, 0
        for group in parent.evaluator_reference:
            slices[group.id] = checks[start:start + len(group.facts)]
            start += len(group.facts)
        if all(group.id in slices for group in task.evaluator_reference):
            checks = [check for group in task.evaluator_reference for check in slices[group.id]]
    if not isinstance(checks, list) or len(checks) != task.num_facts:
        raise ValueError(f"task {task.task_id}: expected {task.num_facts} checks in source.metadata, "
                         f"got {len(checks) if isinstance(checks, list) else 'none'}")
    return checks


def check_task(task: Task, facts: SessionFacts, answer: str = "", parent: Task | None = None) -> list[bool]:
    """Whether each fact of `task` (a subtask: with its `parent`) holds, in rubric order, for a session
    with `facts` and `answer` (read once for all of the task's answer facts)."""
    checks = task_checks(task, parent)
    return [check_fact(check, facts, answer, checks) for check in checks]
