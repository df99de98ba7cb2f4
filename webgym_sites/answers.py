"""What a final answer states, read as a person grading it reads it, and the rule an answer fact passes by.

An answer fact asks for one value of one kind (`KINDS`). The answer is read into mentions: each number,
with the words around it, becomes the values its form allows; the task's own names are found as
whole words::

    price    $23.99, 23.99, USD 23.99, 23.99 dollars, $1,234.50, 1234.50, $24
    rating   4.5 out of 5, 4.5/5, 4.5 stars, 4-star, rated 4.5, ★★★★, or a bare 4.5 (or 0 to 5)
    number   1,234,567, 1234567, 208 reviews, 1,234 km, 12,345 km², 12345 square kilometres
    time     09:05, 9:05, 9:05 am, 21:05, 9 pm
    date     2027-03-14, 14 March 2027, March 14, 2027, Sunday 14 March 2027, 14 Mar
    name     a product, an article, an airline, a currency...: case, spacing and punctuation ignored

A number inside a date, a time, a price or a labelled rating is read once, as that (the 5 of
``4.5/5`` is no value, nor the 14 of ``14 March``). An unlabelled number is read as every kind its
form allows: ``23.99`` is a price, ``4.5`` a rating, ``4`` a number or a rating (not when a word
such as ``reviews`` follows it), ``1,234`` a number in any unit.

`answer_gives` decides one fact: the answer names the wanted value, it names none of the fact's
candidates (the other values the task's pages offer: the listing's other products, the other
flights, the articles compared), and, for every kind but a name, every value of the wanted kind it
names is one the task asks for (the fact's own, or another answer fact's: ``asked``). So a list of
candidates fails, and so does a spray of numbers, whatever the candidates; a name is recognised
only among the fact's value, its candidates and the names asked. `answer_holds` applies the same
rule to a task's definite answer.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = ["ANY_UNIT", "KINDS", "Value", "answer_gives", "answer_holds", "read_value", "stated"]

KINDS = ("name", "price", "rating", "number", "time", "date")
"""The kinds of value an answer fact asks for."""
ANY_UNIT = "*"
"""The unit of a wanted number said in any unit."""


@dataclass(frozen=True)
class Value:
    """One value as the judge compares it."""

    kind: str
    """One of `KINDS`."""
    amount: Any
    """price: cents; rating: tenths of a point; number: the whole number; time: minutes after
    midnight; date: (year or 0, month, day); name: the words, lower case, single-spaced."""
    unit: str = ""
    """A number's unit: ``km``, ``m``, ``km²``, ``""`` (a count, a year, or not said) or, in a value
    wanted, ``*`` (any unit: an old row's number, `ANY_UNIT`)."""


@dataclass(frozen=True)
class _Mention:
    readings: tuple[Value, ...]


_FLAGS = re.IGNORECASE
_INT = r"\d{1,3}(?:[,\u00a0\u202f]\d{3})+|\d+"
_NUM = rf"(?:{_INT})(?:\.\d{{1,2}})?"
_END = r"(?!\d|[.,]\d)"
_MONTH = (r"(?P<month>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
          r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?(?![a-z])")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_YEAR = r"(?:,?\s+(?P<year>\d{4})(?!\d))?"
_DATES = (
    re.compile(r"(?<!\d)(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})(?!\d)"),
    re.compile(r"(?<![\w.,])(?P<day>\d{1,2})(?:st|nd|rd|th)?(?:\s+of)?\s+" + _MONTH + _YEAR,
               _FLAGS),
    re.compile(r"(?<![\w])" + _MONTH + r"\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?(?!\d)" + _YEAR,
               _FLAGS),
)
_TIMES = (
    re.compile(r"(?<![\d:.,])(?P<h>\d{1,2}):(?P<m>\d{2})(?!\d)(?:\s*(?P<half>[ap])\.?\s?m\b\.?)?", _FLAGS),
    re.compile(r"(?<![\w:.,])(?P<h>\d{1,2})\s*(?P<half>[ap])\.?\s?m\b\.?", _FLAGS),
)
_PRICES = (
    re.compile(rf"(?:US\$|USD\s?|[$€£]\s?)(?P<num>{_NUM}){_END}", _FLAGS),
    re.compile(rf"(?<![\w.,])(?P<num>{_NUM}){_END}\s?(?:USD|US\s?dollars?|dollars?)\b", _FLAGS),
)
_OUT_OF_5 = r"(?:/\s*5(?:\.0)?|out\s+of\s+(?:5(?:\.0)?|five))(?![\d.]\d)"
_RATINGS = (
    re.compile(rf"(?<![\w.,])(?P<num>\d(?:\.\d)?)\s*{_OUT_OF_5}(?:\s*stars?\b)?", _FLAGS),
    re.compile(rf"(?<![\w.,])(?P<num>\d(?:\.\d)?)(?:\s*|-)stars?\b(?:\s*{_OUT_OF_5})?", _FLAGS),
    re.compile(rf"\brat(?:ed|ing)(?:\s+of|:)?\s*(?P<num>\d(?:\.\d)?)(?![\d.,]\d|\d)(?:\s*{_OUT_OF_5})?"
               r"(?:\s*stars?\b)?", _FLAGS),
    re.compile(r"(?P<stars>★+)☆*"),
)
_MEASURES = re.compile(
    rf"(?<![\w.,])(?P<num>{_INT})(?![\d]|[.,]\d)\s*(?P<unit>km²|km2|km\^2|sq\.?\s*km|square\s+kilomet(?:re|er)s?"
    r"|km|kilomet(?:re|er)s?|m|met(?:re|er)s?)(?![a-z\d²])", _FLAGS)
_BARE = re.compile(rf"(?<![\w.,:/$€£-])(?P<int>{_INT})(?:\.(?P<frac>\d+))?(?!\w|[.,:/]\d)")
_NOT_STARS = re.compile(r"\s*(?:reviews?|ratings?|nights?|people|persons?|passengers?|adults?|stops?|rooms?"
                        r"|employees?|residents?|inhabitants?|years?|days?|hours?|minutes?)\b", _FLAGS)
_MASK = "\x00"


def _whole(text: str) -> int:
    return int(text) if text.isdigit() else int(re.sub(r"[,\u00a0\u202f]", "", text))


def _decimal(text: str) -> Decimal:
    return Decimal(re.sub(r"[,\u00a0\u202f]", "", text))


def _date(match: re.Match[str]) -> Value | None:
    month = match["month"]
    number = int(month) if month.isdigit() else 1 + _MONTHS.index(month[:3].lower())
    day, year = int(match["day"]), int(match["year"] or 0)
    try:
        dt.date(year or 2000, number, day)  # a leap year when the year is not said: 29 February is a day
    except ValueError:
        return None
    return Value("date", (year, number, day))


def _time(match: re.Match[str]) -> Value | None:
    hours, minutes, half = int(match["h"]), int(match.groupdict().get("m") or 0), match["half"]
    if half:
        if not 1 <= hours <= 12:
            return None
        hours = hours % 12 + (12 if half.lower() == "p" else 0)
    return Value("time", hours * 60 + minutes) if hours < 24 and minutes < 60 else None


def _rating(match: re.Match[str]) -> Value:
    if match.groupdict().get("stars"):
        return Value("rating", 10 * len(match["stars"]))
    return Value("rating", int(_decimal(match["num"]) * 10))


def _price(match: re.Match[str]) -> Value:
    return Value("price", int(_decimal(match["num"]) * 100))


def _measure(match: re.Match[str]) -> Value:
    unit = match["unit"].lower()
    unit = "km²" if unit.startswith(("km2", "km²", "km^", "sq")) else "km" if unit.startswith("k") else "m"
    return Value("number", _whole(match["num"]), unit)


_LABELLED = ((_DATES, _date), (_TIMES, _time), (_PRICES, _price), (_RATINGS, _rating),
             ((_MEASURES,), _measure))
"""The forms that label a number, in the order they claim it."""


@functools.lru_cache(maxsize=16)
def _labelled(text: str) -> tuple[tuple[_Mention, ...], str]:
    """The values `text` states in a labelled form, in the order of the forms that claim them, and the
    text with them blanked out (the same answer is read once for all of a task's facts)."""
    found: list[_Mention] = []
    for patterns, read in _LABELLED:
        for pattern in patterns:
            chars: list[str] | None = None
            for match in pattern.finditer(text):
                value = read(match)
                if value is not None:
                    found.append(_Mention((value,)))
                    chars = chars or list(text)
                    chars[match.start():match.end()] = _MASK * (match.end() - match.start())
            text = "".join(chars) if chars else text
    return tuple(found), text


def _mentions(text: str) -> Iterator[_Mention]:
    """Every value `text` states (see the module): the labelled ones, then the bare numbers, read as
    they come (a spray is refused at its first number, not after its last)."""
    found, rest = _labelled(text)
    yield from found
    for match in _BARE.finditer(rest):
        frac = match["frac"]
        if frac is None:
            whole = _whole(match["int"])
            readings = [Value("number", whole)]
            if whole <= 5 and not _NOT_STARS.match(rest, match.end()):
                readings.append(Value("rating", whole * 10))
            yield _Mention(tuple(readings))
        elif len(frac) == 2:
            yield _Mention((Value("price", _whole(match["int"]) * 100 + int(frac)),))
        elif len(frac) == 1 and _whole(match["int"]) * 10 + int(frac) <= 50:
            yield _Mention((Value("rating", _whole(match["int"]) * 10 + int(frac)),))


def _phrase(text: str) -> str:
    """`text`'s words: lower case, accents and punctuation dropped, single-spaced."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", text.casefold()) if not unicodedata.combining(c))
    return " ".join(re.sub(r"[^0-9a-z]+", " ", plain).split())


@functools.lru_cache(maxsize=4096)
def read_value(kind: str, text: str) -> Value:
    """The value of `kind` that `text` states (``4.5 out of 5``: rating 45); ValueError when it states
    none (a name is its words)."""
    if kind not in KINDS:
        raise ValueError(f"unknown answer kind {kind!r}: expected one of {', '.join(KINDS)}")
    if kind == "name":
        words = _phrase(text)
        if not words:
            raise ValueError(f"no name in {text!r}")
        return Value("name", words)
    for mention in _mentions(str(text)):
        for reading in mention.readings:
            if reading.kind == kind:
                return reading
    raise ValueError(f"no {kind} in {text!r}")


def stated(text: str) -> list[Value]:
    """The values `text` states, each by its first reading (``4`` alone: the number 4), in the order the
    forms claim them; empty when it states only words."""
    return [mention.readings[0] for mention in _mentions(text)]


def _names_in(answer: str, names: Iterable[Value]) -> set[Value]:
    """The `names` the answer names as whole words; a longer name claims its words first (``Port
    Velkor`` is not also ``Velkor``)."""
    said = f" {_phrase(answer)} "
    taken = [False] * len(said)
    found = set()
    for name in sorted(set(names), key=lambda n: -len(n.amount)):
        needle, start = f" {name.amount} ", 0
        while (at := said.find(needle, start)) >= 0:
            span = range(at + 1, at + len(needle) - 1)
            if not any(taken[i] for i in span):
                found.add(name)
                for i in span:
                    taken[i] = True
            start = at + 1
    return found


def _fits(reading: Value, wanted: Value) -> bool:
    """`reading` is a value of `wanted`'s kind (a number in no unit fits any unit; one in a unit fits
    only that unit, or `ANY_UNIT`)."""
    if reading.kind != wanted.kind:
        return False
    return reading.unit in (wanted.unit, "") or wanted.unit == ANY_UNIT


def _same(reading: Value, wanted: Value) -> bool:
    if not _fits(reading, wanted):
        return False
    if reading.kind == "date":  # a date said without its year is the same day of any year
        (year, month, day), (w_year, w_month, w_day) = reading.amount, wanted.amount
        return (month, day) == (w_month, w_day) and (not year or not w_year or year == w_year)
    return reading.amount == wanted.amount


def answer_gives(answer: str, wanted: Value, *, candidates: Sequence[Value] = (),
                 asked: Sequence[Value] = ()) -> bool:
    """Whether `answer` gives `wanted` as a person grading it would accept: it names `wanted`, no
    candidate (unless the task asks for it too: `asked`), and, but for a name, no value of `wanted`'s
    kind that neither `wanted` nor `asked` is."""
    allowed = (wanted, *asked)
    if wanted.kind == "name":
        named = _names_in(answer, [wanted, *candidates, *(v for v in asked if v.kind == "name")])
        return wanted in named and not any(c in named and c not in allowed for c in candidates)
    given = False
    for mention in _mentions(answer):
        if not any(_fits(reading, wanted) for reading in mention.readings):
            continue
        if not any(_same(reading, value) for reading in mention.readings for value in allowed):
            return False  # another value of the kind: a second answer, a candidate, a spray
        given = given or any(_same(reading, wanted) for reading in mention.readings)
    return given


def answer_holds(expected: str, answer: str, *, names: Iterable[str] = (),
                 candidates: Iterable[str] = ()) -> bool:
    """Whether `answer` states what the definite answer `expected` states, by the rule of `answer_gives`:
    each value `expected` states (``$12.95``; ``4.5 out of 5, 208 reviews``) and each of the task's
    `names` it contains, and no other value of those kinds, no other of the `candidates` names. An
    `expected` with neither must appear in the answer whole (case and spacing ignored; ``abc`` is not
    in ``abcd``)."""
    values = stated(expected)
    known = [read_value("name", name) for name in names if _phrase(name)]
    named = list(_names_in(expected, known))
    if not values and not named:
        words = _phrase(expected)
        return bool(words) and f" {words} " in f" {_phrase(answer)} "
    others = [read_value("name", name) for name in candidates if _phrase(name)]
    return (all(answer_gives(answer, value, asked=values) for value in values)
            and all(answer_gives(answer, name, candidates=others, asked=named) for name in named))
