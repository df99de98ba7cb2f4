"""The reference site's encyclopedia: 1,500 generated articles, the same for the same seed.

`encyclopedia(seed)` builds (and caches) an `Encyclopedia` of five kinds of article (`KINDS`):
`COUNTRIES` countries, each with `CITIES_PER_COUNTRY` cities and `RIVERS_PER_COUNTRY` rivers, then
people and companies. Each `Article` has an infobox (`Article.values`: numbers, words, or the ids of
other articles, which the pages show as links), prose paragraphs that mention other articles
(`Segment` links) and categories. Titles are unique; an article's id is its title with ``_`` for
spaces (``Port_Velkor``). No third-party data: every name is made of the syllables below.

How the values relate (what a task can ask for): a country's capital is its most populous city and
its leader one of its people; a city belongs to one country; a river flows through one country
(lengths differ within a country) and ends at one of its cities; a person was born in a city (their
nationality is its country); a company has a founder and a headquarters city. `display` is the one
way a value is written, on the pages and in the tasks' answers (``1,234,567``, ``12,345 km²``).

`Encyclopedia.search` is what the search page shows: articles whose title or text holds every word,
ranked (the exact title, then titles that start with the text, then titles that hold every word,
then the text); `Encyclopedia.suggest` the closest title to a near miss ("did you mean").
"""

from __future__ import annotations

import difflib
import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["CITIES_PER_COUNTRY", "COMPANIES", "COUNTRIES", "EDITABLE", "KINDS", "LABELS", "PEOPLE",
           "RIVERS_PER_COUNTRY", "YEAR_NOW", "Article", "Category", "Encyclopedia", "Segment", "display",
           "encyclopedia", "parse_number"]

COUNTRIES = 30
CITIES_PER_COUNTRY = 12
RIVERS_PER_COUNTRY = 5
PEOPLE = 600
COMPANIES = 360
YEAR_NOW = 2026
"""The encyclopedia's present: no year in it is later."""
_MAX_DIGITS = 18
"""The longest number `parse_number` reads (an edit's value; far beyond any real one)."""

KINDS = {"country": "Countries", "city": "Cities", "river": "Rivers", "person": "People",
         "company": "Companies"}
"""The kinds of article and the title of each kind's category."""
LABELS = {
    "capital": "Capital", "leader": "Leader", "population": "Population", "area_km2": "Area",
    "founded": "Founded", "currency": "Currency", "country": "Country", "elevation_m": "Elevation",
    "length_km": "Length", "source": "Source", "mouth": "Mouth", "basin_km2": "Basin area", "born": "Born",
    "died": "Died", "birthplace": "Birthplace", "nationality": "Nationality", "occupation": "Occupation",
    "founder": "Founder", "headquarters": "Headquarters", "industry": "Industry", "employees": "Employees",
}
"""The infobox label of each value key."""
_INFOBOX = {
    "country": ("capital", "leader", "population", "area_km2", "founded", "currency"),
    "city": ("country", "population", "area_km2", "founded", "elevation_m"),
    "river": ("country", "length_km", "source", "mouth", "basin_km2"),
    "person": ("born", "died", "birthplace", "nationality", "occupation"),
    "company": ("founded", "founder", "headquarters", "industry", "employees"),
}
EDITABLE = {
    "country": ("population", "area_km2", "founded", "currency"),
    "city": ("population", "area_km2", "founded", "elevation_m"),
    "river": ("length_km", "basin_km2", "source"),
    "person": ("born", "died", "occupation"),
    "company": ("founded", "industry", "employees"),
}
"""The infobox values of each kind that the "suggest an edit" form offers (no links)."""
_LINKS = frozenset({"capital", "leader", "country", "mouth", "birthplace", "nationality", "founder",
                    "headquarters"})
_YEARS = frozenset({"founded", "born", "died"})
_UNITS = {"area_km2": " km²", "basin_km2": " km²", "length_km": " km", "elevation_m": " m"}

_SYLLABLES = ("val", "dor", "ka", "ren", "tis", "mar", "lo", "vek", "sun", "bra", "el", "qui", "nor", "ost",
              "fen", "ga", "ri", "sol", "tam", "ur", "zel", "ha", "ber", "pra", "do", "lin", "ves", "cor")
_COUNTRY_ENDS = ("ia", "and", "ara", "ovia", "esh", "mark", "onia", "ey")
_CITY_ENDS = ("ford", "holm", "grad", "ville", "burg", "haven", "stad", "mouth", "ton", "bridge")
_CITY_PREFIXES = ("Port ", "New ", "Upper ", "Saint ", "Lake ")
_CURRENCIES = ("crown", "mark", "dinar", "florin", "real", "sol", "taler", "lira")
_SOURCES = ("Mount", "Lake", "the Hills of", "the Springs of", "the Glacier of")
_OCCUPATIONS = ("painter", "physicist", "novelist", "architect", "composer", "engineer", "chemist",
                "explorer", "poet", "historian", "sculptor", "economist")
_INDUSTRIES = ("shipping", "textiles", "mining", "software", "railways", "brewing", "publishing", "energy",
               "aviation", "pharmaceuticals")
_COMPANY_ENDS = ("Industries", "Works", "Holdings", "Motors", "Group", "Trading Company", "Systems", "Mills")


@dataclass(frozen=True)
class Segment:
    """A piece of a paragraph: plain text, or (with `link`) the title of the article it links to."""

    text: str
    link: str = ""
    """The linked article's id; ``""`` for plain text."""


@dataclass(frozen=True)
class Article:
    id: str
    title: str
    kind: str
    """One of `KINDS`."""
    values: dict[str, int | str] = field(hash=False, compare=False)
    """The infobox: numbers, words, or (for the `_LINKS` keys) other articles' ids."""
    paragraphs: tuple[tuple[Segment, ...], ...] = field(compare=False)
    categories: tuple[str, ...] = ()
    """The slugs of its categories."""

    @property
    def infobox_keys(self) -> tuple[str, ...]:
        return tuple(key for key in _INFOBOX[self.kind] if key in self.values)


@dataclass(frozen=True)
class Category:
    slug: str
    title: str
    members: tuple[str, ...]
    """Article ids, by title."""


def display(key: str, value: int | str) -> str:
    """How value `key` is written: years as they are, other numbers with thousands separators and
    their unit (``12,345 km²``), words as they are. Links are written by the caller (the title)."""
    if isinstance(value, int):
        return str(value) if key in _YEARS else f"{value:,}{_UNITS.get(key, '')}"
    return value


def parse_number(text: str) -> int | None:
    """A whole number written with or without thousands separators (``12,345``), of at most
    `_MAX_DIGITS` digits; None otherwise."""
    text = text.strip()
    groups = text.split(",")
    if not text or not all(g.isdigit() and g.isascii() for g in groups):
        return None
    if len(groups) > 1 and (len(groups[0]) > 3 or any(len(g) != 3 for g in groups[1:])):
        return None
    digits = "".join(groups)
    return int(digits) if len(digits) <= _MAX_DIGITS else None


def _slug(title: str) -> str:
    return title.replace(" ", "_")


class Encyclopedia:
    """The articles of one seed, by id and in kind order; the categories; search."""

    def __init__(self, seed: int, articles: Sequence[Article], categories: Sequence[Category]):
        self.seed = seed
        self.articles = tuple(articles)
        self.by_id = {a.id: a for a in self.articles}
        self.categories = {c.slug: c for c in categories}
        self._titles = {a.title.casefold(): a.id for a in self.articles}
        self._within: dict[str, list[Article]] = {}
        for a in self.articles:
            if a.kind in ("city", "river"):
                self._within.setdefault(f"{a.kind}:{a.values['country']}", []).append(a)
        self._text = {a.id: self.text(a).casefold() for a in self.articles}

    def of_kind(self, kind: str) -> list[Article]:
        return [a for a in self.articles if a.kind == kind]

    def within(self, kind: str, country_id: str) -> list[Article]:
        """The cities (`kind` ``city``) or rivers (``river``) of a country, in id order."""
        return list(self._within.get(f"{kind}:{country_id}", []))

    def title(self, article_id: str) -> str:
        return self.by_id[article_id].title

    def shown(self, article: Article, key: str) -> str:
        """Value `key` of `article` as the infobox writes it (a link as the linked title)."""
        value = article.values[key]
        return self.title(str(value)) if key in _LINKS else display(key, value)

    def text(self, article: Article) -> str:
        """What a full-text search matches: the title, the infobox and the prose."""
        box = " ".join(f"{LABELS[k]} {self.shown(article, k)}" for k in article.infobox_keys)
        prose = " ".join(s.text for p in article.paragraphs for s in p)
        return f"{article.title} {box} {prose}"

    def search(self, text: str) -> list[Article]:
        """The articles holding every word of `text`, best first (ties by title)."""
        query = " ".join(text.casefold().split())
        words = query.split()
        if not words:
            return []
        ranked = []
        for article in self.articles:
            title = article.title.casefold()
            if title == query:
                rank = 0
            elif title.startswith(query):
                rank = 1
            elif all(w in title for w in words):
                rank = 2
            elif all(w in self._text[article.id] for w in words):
                rank = 3
            else:
                continue
            ranked.append((rank, article.title, article))
        return [a for _, _, a in sorted(ranked, key=lambda r: (r[0], r[1]))]

    def suggest(self, text: str) -> str:
        """The title closest to `text` when `text` is a near miss of one (not a title itself); ``""``."""
        query = " ".join(text.casefold().split())
        if not query or query in self._titles:
            return ""
        close = difflib.get_close_matches(query, list(self._titles), n=1, cutoff=0.8)
        return self.title(self._titles[close[0]]) if close else ""


# ------------------------------------------------------------------------------------- building

class _Names:
    """Unique titles across the encyclopedia."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()

    def word(self, syllables: tuple[int, ...] = (2, 2, 3)) -> str:
        return "".join(self.rng.choice(_SYLLABLES) for _ in range(self.rng.choice(syllables))).capitalize()

    def unique(self, make: Callable[[], str]) -> str:
        while True:
            title = make()
            if title.casefold() not in self.used and len(title) >= 5:
                self.used.add(title.casefold())
                return title


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def _link(articles: dict[str, dict], key: str) -> Segment:
    return Segment(articles[key]["title"], key)


def _prose(kind: str, a: dict, arts: dict[str, dict], rng: random.Random) -> tuple[tuple[Segment, ...], ...]:
    """The paragraphs of article `a` (a draft dict), mentioning the articles its values name."""
    t, v, S = a["title"], a["values"], Segment
    if kind == "country":
        cities = sorted(a["cities"], key=lambda c: -arts[c]["values"]["population"])
        first = (S(f"{t} is a country founded in {v['founded']}. Its capital and largest city is "),
                 _link(arts, v["capital"]),
                 S(f"; its currency is the {v['currency']}. The country is led by "),
                 _link(arts, v["leader"]), S("."))
        second = (S("Other large cities include "), _link(arts, cities[1]), S(", "), _link(arts, cities[2]),
                  S(" and "), _link(arts, cities[3]), S(". Among its rivers is the "),
                  _link(arts, rng.choice(a["rivers"])), S("."))
        return first, second
    if kind == "city":
        return ((S(f"{t} is a city in "), _link(arts, v["country"]),
                 S(f", founded in {v['founded']}. It lies {display('elevation_m', v['elevation_m'])} above "
                   f"sea level and has a population of {display('population', v['population'])}.")),)
    if kind == "river":
        return ((S(f"The {t} rises at {v['source']} in "), _link(arts, v["country"]),
                 S(f" and runs for {display('length_km', v['length_km'])} before it reaches the sea at "),
                 _link(arts, v["mouth"]), S(".")),)
    if kind == "person":
        life = f"born {v['born']}" + (f", died {v['died']}" if "died" in v else "")
        paragraphs = [(S(f"{t} ({life}) was {_a(v['occupation'])} from "), _link(arts, v["nationality"]),
                       S(", born in "), _link(arts, v["birthplace"]), S("."))]
        for company in a.get("founded_companies", []):
            paragraphs.append((S(f"In {arts[company]['values']['founded']} {t.split()[0]} founded "),
                               _link(arts, company), S(".")))
        return tuple(paragraphs)
    return ((S(f"{t} is {_a(v['industry'])} company founded in {v['founded']} by "),
             _link(arts, v["founder"]),
             S(". Its headquarters are in "), _link(arts, v["headquarters"]),
             S(f", and it employs {display('employees', v['employees'])} people.")),)


@functools.lru_cache(maxsize=4)
def encyclopedia(seed: int) -> Encyclopedia:
    """The encyclopedia of `seed` (built once per seed and cached; immutable)."""
    rng = random.Random(f"reference-encyclopedia:{seed}")
    names = _Names(rng)
    arts: dict[str, dict] = {}  # drafts by id, in the order they are made

    def add(kind: str, title: str, values: dict, **extra) -> str:
        key = _slug(title)
        arts[key] = {"kind": kind, "title": title, "values": values, **extra}
        return key

    countries = [add("country", names.unique(lambda: names.word((2, 3)) + rng.choice(_COUNTRY_ENDS)),
                     {"founded": rng.randint(1200, 1990), "currency": rng.choice(_CURRENCIES),
                      "area_km2": rng.randint(8_000, 900_000)}, cities=[], rivers=[], people=[])
                 for _ in range(COUNTRIES)]
    for country in countries:
        for _ in range(CITIES_PER_COUNTRY):
            title = names.unique(lambda: (rng.choice(_CITY_PREFIXES) if rng.random() < 0.2 else "")
                                 + names.word((1, 2)) + rng.choice(_CITY_ENDS))
            population = int(rng.lognormvariate(11.2, 1.1)) + 800
            city = add("city", title, {"country": country, "population": population,
                                       "area_km2": rng.randint(12, 2_400), "founded": rng.randint(900, 1950),
                                       "elevation_m": rng.randint(2, 2_600)})
            arts[country]["cities"].append(city)
        cities = arts[country]["cities"]
        capital = max(cities, key=lambda c: arts[c]["values"]["population"])
        total = sum(arts[c]["values"]["population"] for c in cities)
        arts[country]["values"] |= {"capital": capital, "population": int(total * rng.uniform(1.6, 3.4))}
        lengths: set[int] = set()
        for _ in range(RIVERS_PER_COUNTRY):
            length = rng.randint(40, 3_200)
            while length in lengths:
                length = rng.randint(40, 3_200)
            lengths.add(length)
            title = names.unique(lambda: names.word() + " River")
            river = add("river", title, {"country": country, "length_km": length,
                                         "source": f"{rng.choice(_SOURCES)} {names.word((2,))}",
                                         "mouth": rng.choice(cities),
                                         "basin_km2": length * rng.randint(20, 90)})
            arts[country]["rivers"].append(river)
    firsts = sorted({names.word((2,)) for _ in range(90)})
    all_cities = [k for k, a in arts.items() if a["kind"] == "city"]
    people = []
    for _ in range(PEOPLE):
        title = names.unique(lambda: f"{rng.choice(firsts)} {names.word((2, 3))}")
        birthplace = rng.choice(all_cities)
        born = rng.randint(1780, 1995)
        values = {"born": born, "birthplace": birthplace,
                  "nationality": arts[birthplace]["values"]["country"],
                  "occupation": rng.choice(_OCCUPATIONS)}
        if born < 1935:
            values["died"] = born + rng.randint(38, 96)
        people.append(add("person", title, values, founded_companies=[]))
        arts[values["nationality"]]["people"].append(people[-1])
    for country in countries:
        pool = arts[country]["people"] or people
        leader = rng.choice([p for p in pool if "died" not in arts[p]["values"]] or pool)
        arts[leader]["values"]["occupation"] = "politician"
        arts[country]["values"]["leader"] = leader
    founders = [p for p in people if arts[p]["values"]["occupation"] != "politician"]
    for _ in range(COMPANIES):
        founder = rng.choice(founders)
        born = arts[founder]["values"]["born"]
        title = names.unique(lambda: f"{names.word((2,))} {rng.choice(_COMPANY_ENDS)}")
        company = add("company", title, {"founded": min(YEAR_NOW - 1, born + rng.randint(22, 60)),
                                         "founder": founder, "headquarters": rng.choice(all_cities),
                                         "industry": rng.choice(_INDUSTRIES),
                                         "employees": int(rng.lognormvariate(7, 1.6)) + 12})
        arts[founder]["founded_companies"].append(company)

    groups: dict[str, tuple[str, list[str]]] = {
        slug: (title, []) for slug, title in
        [(t.lower(), t) for t in KINDS.values()]
        + [(f"cities-of-{c.lower()}", f"Cities of {arts[c]['title']}") for c in countries]
        + [(f"people-of-{c.lower()}", f"People of {arts[c]['title']}") for c in countries]
        + [(f"{o}s", f"{o.capitalize()}s") for o in (*_OCCUPATIONS, "politician")]
        + [(f"{i}-companies", f"{i.capitalize()} companies") for i in _INDUSTRIES]}
    articles = []
    for key, a in arts.items():
        v = a["values"]
        slugs = [KINDS[a["kind"]].lower()]
        if a["kind"] == "city":
            slugs.append(f"cities-of-{v['country'].lower()}")
        if a["kind"] == "person":
            slugs += [f"people-of-{v['nationality'].lower()}", f"{v['occupation']}s"]
        if a["kind"] == "company":
            slugs.append(f"{v['industry']}-companies")
        for slug in slugs:
            groups[slug][1].append(key)
        paragraphs = _prose(a["kind"], a, arts, random.Random(f"reference-prose:{seed}:{key}"))
        articles.append(Article(id=key, title=a["title"], kind=a["kind"], values=dict(v),
                                paragraphs=paragraphs, categories=tuple(slugs)))
    categories = [Category(slug, title, tuple(sorted(members, key=lambda k: arts[k]["title"])))
                  for slug, (title, members) in groups.items()]
    return Encyclopedia(seed, articles, categories)
