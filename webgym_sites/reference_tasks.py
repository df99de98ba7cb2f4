"""Generated reference-site tasks as rows of the published task schema, the same for the same seeds.

`reference_tasks(count, seed=..., reference_seed=...)` draws `count` tasks for the encyclopedia
served with ``--reference-seed reference_seed`` from nine templates, taken in turn so that the
levels come out about a third each (the level follows from the fact count: easy 1-3, medium 4-6,
hard 7+):

    easy    infobox         report one infobox value of a named article (information seeking)
            infobox_pair    report two infobox values of a named article (information seeking)
            watch           add a named article to the watchlist, and nothing else
    medium  birth_capital   the capital of the country where a person was born, and its population
            country_table   from a country's tables, its longest (shortest) river or its oldest city;
                            two of that article's values
            founder         who founded a company, and the year the founder was born
    hard    compare_watch   which of three articles has the largest (smallest) value; watch it alone,
                            name it
            compare_edit    which of four was founded first; suggest one edit, of one of its values
            capital_leader  which of three countries is the most populous; watch its capital and leader
                            and nothing else

Every fact has its check (`webgym_sites.goals`) in ``source.metadata["checks"]``,
beside ``params``: what a session that does the task right does (the articles it reads, in order,
the articles it watches, the edit it suggests), for the scripted expert (`expert_moves`) and the
tests. An answer fact (``answer_value``) names a number (read whole, with its unit) or a name, and
its candidates are the same value of the articles a reader weighs against the right one: the ones
compared, the other rows of the country's table, the article's neighbours in its category. A draw
with no single right answer (two articles tied) draws again.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from webgym_data.schema import Task
from webgym_sites.drawing import (
    DEFAULT_BASE_URL,
    Draw,
    Fact,
    SiteRows,
    answer_fact,
    draw_tasks,
)
from webgym_sites.encyclopedia import YEAR_NOW, Article, Encyclopedia, display, encyclopedia
from webgym_sites.plans import Answer, Choose, Fill, Goto, Move, Press

__all__ = ["BENCHMARK", "DEFAULT_BASE_URL", "TEMPLATES", "expert_moves", "reference_tasks"]

BENCHMARK = "webgym-reference"
"""The `benchmark_name` of the generated rows."""
_ROWS = SiteRows(site="reference", benchmark=BENCHMARK, domain="reference")

_QUESTIONS = {
    "capital": "What is the capital of {t}?", "leader": "Who leads {t}?",
    "population": "What is the population of {t}?",
    "area_km2": "What is the area of {t}, in square kilometres?",
    "founded": "In what year was {t} founded?", "currency": "What is the currency of {t}?",
    "country": "In which country is {t}?", "elevation_m": "At what elevation, in metres, does {t} lie?",
    "length_km": "How long is {t}, in kilometres?", "source": "Where does {t} rise?",
    "mouth": "At which city does {t} reach the sea?",
    "basin_km2": "How large is the basin of {t}, in square kilometres?",
    "born": "In what year was {t} born?", "died": "In what year did {t} die?",
    "birthplace": "In which city was {t} born?", "nationality": "Which country was {t} from?",
    "occupation": "What was the occupation of {t}?", "founder": "Who founded {t}?",
    "headquarters": "In which city does {t} have its headquarters?",
    "industry": "In which industry does {t} work?", "employees": "How many people does {t} employ?",
}
_SHORT = {"area_km2": "area", "founded": "founding year", "elevation_m": "elevation", "length_km": "length",
          "basin_km2": "basin area", "born": "year of birth", "died": "year of death",
          "employees": "number of employees"}
_SHORT |= {key: key for key in ("population", "currency", "occupation", "industry", "capital", "leader",
                                "country", "source", "mouth", "birthplace", "nationality", "founder",
                                "headquarters")}
_COMPARISONS = (  # kind, key, the question's words, largest (True) or smallest
    ("city", "population", "has the largest population", True),
    ("country", "area_km2", "has the largest area", True),
    ("river", "length_km", "is the longest", True),
    ("company", "employees", "employs the most people", True),
    ("city", "founded", "was founded earliest", False),
)
_VOCABULARIES = frozenset({"currency", "occupation", "industry", "country", "nationality"})
"""The values drawn from a short list (words; the countries): every other one of the list is a candidate."""
_EDITS = (  # kind, the key compared (earliest), the key edited, the summary's source
    ("company", "founded", "employees", "annual report"),
    ("city", "founded", "population", "census"),
)



def _read(book: Encyclopedia, article_id: str) -> Fact:
    check = {"type": "read_article", "article_id": article_id}
    return f"The article {book.title(article_id)} was opened.", check


def _named(article: Article, others: list[Article]) -> Fact:
    """The fact that the answer names `article`, not one of the `others` weighed against it."""
    return answer_fact(f"The answer names {article.title}.", "name", article.title, [a.title for a in others])


def _said(book: Encyclopedia, article: Article, key: str, others: list[Article]) -> tuple[str, Fact]:
    """How value `key` of `article` is written, and the fact that the answer gives it (a number whole, in
    its unit; a link or a word as a name) and not the same value of one of the `others` (of a value
    drawn from a short list: not another value of the list)."""
    kind = "number" if isinstance(article.values[key], int) else "name"
    shown = book.shown(article, key)
    if key in _VOCABULARIES:
        others = book.of_kind(article.kind)
    candidates = [book.shown(other, key) for other in others if key in other.values and other != article]
    return shown, answer_fact(f"The answer gives the {_SHORT[key]} {shown}.", kind, shown, candidates)


def _peers(book: Encyclopedia, article: Article) -> list[Article]:
    """The articles listed beside `article`: the cities or rivers of its country, every country, the
    people of its country, the companies of its industry."""
    if article.kind in ("city", "river"):
        return book.within(article.kind, str(article.values["country"]))
    if article.kind == "country":
        category = "countries"
    elif article.kind == "person":
        category = f"people-of-{str(article.values['nationality']).lower()}"
    else:
        category = f"{article.values['industry']}-companies"
    return [book.by_id[i] for i in book.categories[category].members]


def _watch_facts(book: Encyclopedia, ids: list[str]) -> list[Fact]:
    facts: list[Fact] = [(f"The watchlist holds {book.title(i)}.", {"type": "watchlist_has", "article_id": i})
                         for i in ids]
    return [*facts, ("The watchlist holds no other article.", {"type": "watchlist_only", "article_ids": ids})]


def _unique_best(articles: list[Article], key: str, largest: bool) -> Article | None:
    ranked = sorted(articles, key=lambda a: int(a.values[key]), reverse=largest)
    return None if ranked[0].values[key] == ranked[1].values[key] else ranked[0]


def _names(articles: list[Article]) -> str:
    titles = [a.title for a in articles]
    return ", ".join(titles[:-1]) + f" and {titles[-1]}"


# ------------------------------------------------------------------------------------ templates

def _infobox(rng: random.Random, book: Encyclopedia) -> Draw:
    article = rng.choice(book.articles)
    key = rng.choice(article.infobox_keys)
    shown, fact = _said(book, article, key, _peers(book, article))
    question = _QUESTIONS[key].format(t=f"the {article.title}" if article.kind == "river" else article.title)
    return Draw("infobox", f"Using the Webgym Reference encyclopedia: {question}",
                 [("Article", [_read(book, article.id)]), ("Answer", [fact])],
                 {"article_id": article.id, "keys": [key], "read": [article.id]}, answer=shown)


def _infobox_pair(rng: random.Random, book: Encyclopedia) -> Draw:
    article = rng.choice(book.articles)
    keys = rng.sample(article.infobox_keys, 2)
    said = [_said(book, article, key, _peers(book, article)) for key in keys]
    wanted = " and ".join(f"its {_SHORT[key]}" for key in keys)
    form = ", ".join(f"<{_SHORT[key]}>" for key in keys)
    return Draw("infobox_pair", f"Look up {article.title} in the Webgym Reference and tell me {wanted}. "
                                 f"Reply as '{form}'.",
                 [("Article", [_read(book, article.id)]), ("Answer", [fact for _, fact in said])],
                 {"article_id": article.id, "keys": keys, "read": [article.id]},
                 answer=", ".join(shown for shown, _ in said))


def _watch(rng: random.Random, book: Encyclopedia) -> Draw:
    article = rng.choice(book.articles)
    return Draw("watch", f"Add the article {article.title} to my watchlist in the Webgym Reference.",
                 [("Article", [_read(book, article.id)]), ("Watchlist", _watch_facts(book, [article.id]))],
                 {"article_id": article.id, "read": [article.id], "watch": [article.id]})


def _birth_capital(rng: random.Random, book: Encyclopedia) -> Draw:
    person = rng.choice(book.of_kind("person"))
    country = book.by_id[str(person.values["nationality"])]
    capital = book.by_id[str(country.values["capital"])]
    cities = _peers(book, capital)
    population, population_fact = _said(book, capital, "population", cities)
    instruction = (f"In the Webgym Reference, find the capital of the country where {person.title} was born, "
                   "and that capital's population. Reply as '<capital>: <population>'.")
    reads = [person.id, country.id, capital.id]
    return Draw("birth_capital", instruction,
                 [("Articles of the person, the country and its capital", [_read(book, i) for i in reads]),
                  ("Answer", [_named(capital, cities), population_fact])],
                 {"article_id": capital.id, "read": reads}, answer=f"{capital.title}: {population}")


def _country_table(rng: random.Random, book: Encyclopedia) -> Draw | None:
    country = rng.choice(book.of_kind("country"))
    kind, key, words, largest, asked = rng.choice((
        ("river", "length_km", "the longest river", True, ("length_km", "mouth")),
        ("river", "length_km", "the shortest river", False, ("length_km", "mouth")),
        ("city", "founded", "the oldest city (founded first)", False, ("founded", "elevation_m"))))
    table = book.within(kind, country.id)
    best = _unique_best(table, key, largest)
    if best is None:
        return None
    said = [_said(book, best, k, table) for k in asked]
    wanted = " and ".join(f"its {_SHORT[k]}" for k in asked)
    form = ", ".join(f"<{_SHORT[k]}>" for k in asked)
    instruction = (f"Which is {words} of {country.title} in the Webgym Reference? Give its name, {wanted}. "
                   f"Reply as '<name>, {form}'.")
    return Draw("country_table", instruction,
                 [(f"Articles of the country and the {kind}",
                   [_read(book, country.id), _read(book, best.id)]),
                  ("Answer", [_named(best, table), *(fact for _, fact in said)])],
                 {"article_id": best.id, "read": [country.id, best.id]},
                 answer=", ".join([best.title, *(shown for shown, _ in said)]))


def _founder(rng: random.Random, book: Encyclopedia) -> Draw:
    company = rng.choice(book.of_kind("company"))
    founder = book.by_id[str(company.values["founder"])]
    founders = [book.by_id[str(other.values["founder"])] for other in _peers(book, company)]
    born, born_fact = _said(book, founder, "born", founders)
    instruction = (f"Who founded {company.title}, according to the Webgym Reference, and in what year was "
                   "the founder born? Reply as '<name>, <year>'.")
    return Draw("founder", instruction,
                 [("Articles", [_read(book, company.id), _read(book, founder.id)]),
                  ("Answer", [_named(founder, founders), born_fact])],
                 {"article_id": founder.id, "read": [company.id, founder.id]},
                 answer=f"{founder.title}, {born}")


def _compare_watch(rng: random.Random, book: Encyclopedia) -> Draw | None:
    kind, key, words, largest = rng.choice(_COMPARISONS)
    articles = rng.sample(book.of_kind(kind), 3)
    best = _unique_best(articles, key, largest)
    if best is None:
        return None
    shown, fact = _said(book, best, key, articles)
    instruction = (f"In the Webgym Reference, which of {_names(articles)} {words}? Add its article to my "
                   f"watchlist and reply with its name and {_SHORT[key]} as '<name>: <{_SHORT[key]}>'.")
    return Draw("compare_watch", instruction,
                 [(f"Article of each {kind} compared", [_read(book, a.id) for a in articles]),
                  ("Watchlist", _watch_facts(book, [best.id])), ("Answer", [_named(best, articles), fact])],
                 {"article_id": best.id, "read": [a.id for a in articles], "watch": [best.id]},
                 answer=f"{best.title}: {shown}")


def _compare_edit(rng: random.Random, book: Encyclopedia) -> Draw | None:
    kind, key, edited, source = rng.choice(_EDITS)
    articles = rng.sample(book.of_kind(kind), 4)
    first = _unique_best(articles, key, largest=False)
    if first is None:
        return None
    value = max(1, round(int(first.values[edited]) * rng.uniform(1.05, 1.6)))  # never the current value
    summary, shown = f"Figure from the {YEAR_NOW} {source}", display(edited, value)
    plural = {"company": "companies", "city": "cities"}[kind]
    instruction = (f"Of the {plural} {_names(articles)}, which was founded first according to the Webgym "
                   f"Reference? Reply with its name, and suggest an edit to its article that sets its "
                   f"{_SHORT[edited]} to {shown}, with the reason '{summary}'.")
    edit = [(f"An edit of {first.title} sets its {_SHORT[edited]} to {shown}.",
             {"type": "edit_field", "article_id": first.id, "field": edited, "value": str(value)}),
            (f"The edit's reason is '{summary}'.",
             {"type": "edit_summary", "article_id": first.id, "text": summary}),
            ("No other edit was suggested.", {"type": "one_edit", "article_id": first.id})]
    return Draw("compare_edit", instruction,
                 [(f"Article of each {kind} compared", [_read(book, a.id) for a in articles]),
                  ("Answer", [_named(first, articles)]),
                  ("Edit", edit)],
                 {"article_id": first.id, "read": [a.id for a in articles],
                  "edit": {"article_id": first.id, "field": edited, "value": shown, "summary": summary}},
                 answer=first.title)


def _capital_leader(rng: random.Random, book: Encyclopedia) -> Draw | None:
    countries = rng.sample(book.of_kind("country"), 3)
    best = _unique_best(countries, "population", largest=True)
    if best is None:
        return None
    watch = [str(best.values["capital"]), str(best.values["leader"])]
    instruction = (f"In the Webgym Reference, find which of {_names(countries)} has the largest population. "
                   "Add the articles of its capital and of its leader to my watchlist (and nothing else), "
                   "and reply with the country's name.")
    return Draw("capital_leader", instruction,
                 [("Article of each country compared", [_read(book, c.id) for c in countries]),
                  ("Watchlist", _watch_facts(book, watch)), ("Answer", [_named(best, countries)])],
                 {"article_id": best.id, "read": [c.id for c in countries], "watch": watch},
                 answer=best.title)


TEMPLATES: dict[str, Callable[[random.Random, Encyclopedia], Draw | None]] = {
    "infobox": _infobox, "birth_capital": _birth_capital, "compare_watch": _compare_watch,
    "infobox_pair": _infobox_pair, "country_table": _country_table, "compare_edit": _compare_edit,
    "watch": _watch, "founder": _founder, "capital_leader": _capital_leader,
}
"""The templates, in the order `reference_tasks` takes them (easy, medium, hard, easy, ...)."""


def reference_tasks(count: int, *, seed: int = 0, reference_seed: int = 0,
                    base_url: str = DEFAULT_BASE_URL) -> list[Task]:
    """`count` distinct tasks for the encyclopedia of `reference_seed`, drawn with `seed`; start URLs
    under `base_url` (the site server's, ``http://host:port``)."""
    book = encyclopedia(reference_seed)
    return draw_tasks(_ROWS, TEMPLATES, book, count, seed=seed, data_seed=reference_seed, base_url=base_url,
                      subdomain=lambda draw: book.by_id[draw.params["article_id"]].kind)


# ------------------------------------------------------------------------------ the expert's plan

def expert_moves(params: dict[str, Any], task: Task) -> list[Move]:
    """The scripted expert's plan for a reference task (`webgym_sites.plans`): open
    the articles to read in order, watch each article to watch from its page, fill the edit form."""
    moves: list[Move] = [Goto(f"/reference/wiki/{article_id}") for article_id in params.get("read", [])]
    for article_id in params.get("watch", []):
        moves += [Goto(f"/reference/wiki/{article_id}"), Press("watch-button")]
    if "edit" in params:
        edit = params["edit"]
        moves += [Goto(f"/reference/edit/{edit['article_id']}"), Choose("field", edit["field"]),
                  Fill("value", edit["value"]), Fill("summary", edit["summary"]), Press("submit-edit")]
    return [*moves, Answer(task.definite_answer or "Done.")]

