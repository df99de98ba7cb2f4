"""The task taxonomy (6 domains x 4 subdomains, in the style of Mind2Web-2) and how tasks get one.

`assign_taxonomy` gives each task a ``(domain, subdomain)`` pair from `TAXONOMY`: tasks that already
have a pair from the table keep it; the others are classified by the LLM when a client is given
(cached, each reply checked against the table) and by `rule_taxonomy` otherwise, or when the LLM's
replies stay invalid. `rule_taxonomy` is deterministic and cheap (under 10 microseconds a task): it
scores each subdomain from the site (a table of well-known sites, keywords inside the host name,
words of the URL path) and from the words of the instruction. `rule_taxonomies` gives the same pairs
for many tasks at once, counted on columns (what a build uses).

Errors: the `webgym_data.llm` tree; `LLMUnavailable` and `LLMRequestRejected` are raised (one error),
`LLMReplyInvalid` falls back to the rules for that task.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

from webgym_data.llm import LLMClient, LLMReplyInvalid, gather_all, run_sync
from webgym_data.schema import Task

__all__ = [
    "DEFAULT_TAXONOMY",
    "TAXONOMY",
    "TAXONOMY_PROMPT_VERSION",
    "aassign_taxonomy",
    "assign_taxonomy",
    "is_valid_taxonomy",
    "rule_taxonomies",
    "rule_taxonomy",
    "taxonomy_messages",
]

logger = logging.getLogger(__name__)

TAXONOMY_PROMPT_VERSION = "taxonomy-v1"

TAXONOMY: dict[str, tuple[str, ...]] = {
    "Shopping": ("General Merchandise", "Fashion & Beauty", "Electronics & Technology", "Home & Grocery"),
    "Travel": ("Flights", "Lodging", "Ground Transportation", "Trip Planning & Destinations"),
    "Information & Research": ("Search & Reference", "Science & Academia", "News & Current Events",
                               "Government & Public Services"),
    "Entertainment & Media": ("Movies & TV", "Music & Podcasts", "Games", "Sports"),
    "Local Services & Lifestyle": ("Food & Dining", "Health & Wellness", "Housing & Real Estate",
                                   "Automotive"),
    "Work, Finance & Education": ("Jobs & Careers", "Education & Courses", "Software & Developer Tools",
                                  "Finance & Business"),
}

# Subdomain names are unique across domains, so a subdomain names its domain.
_DOMAIN_OF: dict[str, str] = {sub: domain for domain, subs in TAXONOMY.items() for sub in subs}
_SUBDOMAINS: tuple[str, ...] = tuple(_DOMAIN_OF)
DEFAULT_TAXONOMY = ("Information & Research", "Search & Reference")
"""What the rules give a task with no clue at all (most such tasks are look-ups)."""

# -- rule tables -----------------------------------------------------------------------------------
# Instruction words per subdomain (singular; plurals are added). Words that mean different things in
# different areas ("book", "game", "ticket") are left out on purpose: a missing clue beats a wrong one.
_WORDS: dict[str, str] = {
    "General Merchandise": "buy purchase cart checkout shop shopping store deal discount coupon cheapest "
                           "seller marketplace product item shipping wishlist refund",
    "Fashion & Beauty": "shoe sneaker dress shirt jacket jeans pants clothing apparel fashion makeup "
                        "cosmetic skincare perfume fragrance jewelry necklace handbag sunglasses boot "
                        "hoodie lipstick beauty sweater coat",
    "Electronics & Technology": "laptop phone smartphone iphone tablet ipad headphone earbud camera monitor "
                                "keyboard gpu cpu processor ssd charger electronics macbook router speaker "
                                "smartwatch printer television",
    "Home & Grocery": "grocery groceries furniture sofa couch mattress appliance cookware vacuum decor "
                      "garden gardening lawn drill toy stroller diaper pet detergent bedding",
    "Flights": "flight airline airport airfare plane boarding departure layover nonstop roundtrip",
    "Lodging": "hotel motel hostel resort airbnb lodging accommodation suite inn checkin",
    "Ground Transportation": "train rail amtrak bus greyhound taxi uber lyft shuttle ferry subway metro "
                             "transit commute rental",
    "Trip Planning & Destinations": "trip travel itinerary vacation tour attraction destination sightseeing "
                                    "cruise traveler tourist",
    "Search & Reference": "wikipedia define definition dictionary meaning translate translation encyclopedia "
                          "synonym pronunciation weather forecast calculator conversion",
    "Science & Academia": "paper arxiv research journal citation scholar thesis publication physics "
                          "chemistry biology theorem dataset experiment nasa planet species scientist",
    "News & Current Events": "news headline breaking election politics reporter journalist newspaper "
                             "editorial",
    "Government & Public Services": "government tax irs permit law legal regulation census dmv vote "
                                    "voter senator congress embassy passport visa",
    "Movies & TV": "movie film cinema showtime trailer actor actress director episode netflix imdb streaming "
                   "tv documentary oscar anime sitcom",
    "Music & Podcasts": "music song album band concert lyrics playlist spotify podcast singer guitar vinyl "
                        "radio musician",
    "Games": "gaming videogame steam xbox playstation nintendo twitch esport chess boardgame minecraft "
             "fortnite gamestop",
    "Sports": "sport nba nfl mlb nhl fifa soccer football basketball baseball hockey tennis golf league "
              "stadium olympic espn athlete marathon championship tournament ufc cricket",
    "Food & Dining": "recipe restaurant food dinner lunch breakfast cuisine menu cook cooking bake baking "
                     "ingredient dish vegan vegetarian pizza burger sushi coffee cafe dessert",
    "Health & Wellness": "health doctor hospital clinic pharmacy medicine medication drug symptom disease "
                         "vaccine dentist therapy fitness gym workout yoga nutrition diet calorie",
    "Housing & Real Estate": "apartment rent lease house condo realtor zillow mortgage property bedroom "
                             "landlord tenant mover plumber",
    "Automotive": "car vehicle truck suv sedan dealer dealership tesla toyota honda ford bmw tire mechanic "
                  "motorcycle mpg",
    "Jobs & Careers": "job career hiring resume salary internship employer recruiter linkedin vacancy "
                      "interview occupation",
    "Education & Courses": "course class lesson tutorial degree university college school "
                           "student tuition admission scholarship coursera udemy curriculum exam certificate",
    "Software & Developer Tools": "github repository repo commit api python javascript "
                                  "npm pypi docker developer programming software huggingface stackoverflow "
                                  "linux bug",
    "Finance & Business": "stock invest investment bank banking loan credit finance financial crypto "
                          "bitcoin currency dividend etf fund insurance revenue earnings",
}

# Keywords that may appear anywhere inside a host name ("cheapflights", "allrecipes"). Only words
# that are rarely part of an unrelated word.
_HOST_WORDS: dict[str, str] = {
    "General Merchandise": "shop store deals outlet",
    "Fashion & Beauty": "fashion beauty cosmetic apparel clothing shoes jewel",
    "Electronics & Technology": "electronic gadget laptop",
    "Home & Grocery": "grocer furniture homedepot garden",
    "Flights": "flight airline airways airport",
    "Lodging": "hotel hostel resort booking lodging",
    "Ground Transportation": "railway rail transit carrental",
    "Trip Planning & Destinations": "travel trip tour vacation",
    "Search & Reference": "dictionary wiki weather translate",
    "Science & Academia": "science scholar journal research",
    "News & Current Events": "news times herald tribune",
    "Government & Public Services": "gov",
    "Movies & TV": "movie film cinema tv",
    "Music & Podcasts": "music song lyrics radio podcast",
    "Games": "game gaming",
    "Sports": "sport espn nba nfl mlb nhl fifa",
    "Food & Dining": "recipe food restaurant kitchen cook pizza",
    "Health & Wellness": "health clinic pharmacy medical hospital fitness",
    "Housing & Real Estate": "realty realtor estate apartment homes",
    "Automotive": "cars auto motor",
    "Jobs & Careers": "job career",
    "Education & Courses": "edu academy learn course school university college",
    "Software & Developer Tools": "github gitlab code",
    "Finance & Business": "bank finance invest capital money credit",
}

# Well-known sites. A site listed here decides the subdomain unless the instruction says clearly
# otherwise; the generic ones (search engines, maps) are only a weak hint.
_SITES: dict[str, str] = {
    "General Merchandise": "amazon.com ebay.com walmart.com target.com costco.com etsy.com "
                           "aliexpress.com temu.com",
    "Fashion & Beauty": "nike.com adidas.com zara.com hm.com sephora.com ulta.com macys.com "
                        "nordstrom.com uniqlo.com",
    "Electronics & Technology": "bestbuy.com newegg.com apple.com samsung.com bhphotovideo.com dell.com",
    "Home & Grocery": "ikea.com wayfair.com homedepot.com lowes.com instacart.com kroger.com "
                      "wholefoodsmarket.com chewy.com petsmart.com",
    "Flights": "kayak.com google.com/travel/flights united.com delta.com aa.com southwest.com "
               "jetblue.com flightaware.com skyscanner.com ryanair.com",
    "Lodging": "booking.com airbnb.com hotels.com marriott.com hilton.com vrbo.com agoda.com",
    "Ground Transportation": "amtrak.com greyhound.com uber.com lyft.com hertz.com enterprise.com "
                             "avis.com budget.com rentalcars.com mta.info",
    "Trip Planning & Destinations": "expedia.com tripadvisor.com google.com/maps maps.google.com "
                                    "nps.gov viator.com carnival.com",
    "Search & Reference": "wikipedia.org merriam-webster.com dictionary.cambridge.org dictionary.com "
                          "weather.com accuweather.com",
    "Science & Academia": "arxiv.org wolframalpha.com scholar.google.com nature.com "
                          "pubmed.ncbi.nlm.nih.gov semanticscholar.org nasa.gov",
    "News & Current Events": "bbc.com bbc.co.uk cnn.com nytimes.com reuters.com theguardian.com "
                             "apnews.com",
    "Government & Public Services": "usa.gov irs.gov ssa.gov dmv.ca.gov",
    "Movies & TV": "imdb.com netflix.com rottentomatoes.com hulu.com fandango.com amctheatres.com",
    "Music & Podcasts": "spotify.com soundcloud.com last.fm genius.com bandcamp.com discogs.com",
    "Games": "store.steampowered.com steampowered.com ign.com twitch.tv gamestop.com nintendo.com "
             "playstation.com xbox.com leagueoflegends.com chess.com",
    "Sports": "espn.com nba.com nfl.com mlb.com nhl.com fifa.com olympics.com uefa.com",
    "Food & Dining": "allrecipes.com yelp.com opentable.com doordash.com ubereats.com grubhub.com "
                     "foodnetwork.com seriouseats.com",
    "Health & Wellness": "webmd.com mayoclinic.org cvs.com walgreens.com healthline.com zocdoc.com "
                         "goodrx.com",
    "Housing & Real Estate": "zillow.com redfin.com realtor.com apartments.com trulia.com thumbtack.com",
    "Automotive": "carmax.com cars.com kbb.com edmunds.com tesla.com autotrader.com carvana.com",
    "Jobs & Careers": "linkedin.com indeed.com glassdoor.com monster.com ziprecruiter.com",
    "Education & Courses": "coursera.org udemy.com edx.org khanacademy.org duolingo.com",
    "Software & Developer Tools": "github.com gitlab.com stackoverflow.com huggingface.co pypi.org "
                                  "npmjs.com",
    "Finance & Business": "finance.yahoo.com bloomberg.com nasdaq.com chase.com paypal.com "
                          "investopedia.com coinbase.com",
}
_GENERIC_SITES: dict[str, str] = {
    "Search & Reference": "google.com bing.com duckduckgo.com yahoo.com reddit.com",
    "Movies & TV": "youtube.com",
}

# Scores: a known site outweighs a couple of stray instruction words; words in the host and the URL
# path are stronger clues than words in the instruction.
_KNOWN_SITE, _GENERIC_SITE, _HOST_HIT, _PATH_HIT, _WORD_HIT = 10, 1, 5, 3, 2

_WORD_RE = re.compile(r"[a-z0-9]+")
# Labels that are never a brand or a clue: skipped when matching host labels against brand names.
_NON_BRAND_LABELS = frozenset({"www", "m", "en", "com", "org", "net", "co", "uk", "io", "gov", "edu", "ac"})


def _plurals(word: str) -> tuple[str, ...]:
    if word.endswith(("s", "x", "ch", "sh")):
        return word, word + "es"
    if word.endswith("y") and len(word) > 2 and word[-2] not in "aeiou":
        return word, word[:-1] + "ies"
    return word, word + "s"


def _build_word_table() -> dict[str, int]:
    table: dict[str, int] = {}
    for sub, words in _WORDS.items():
        index = _SUBDOMAINS.index(sub)
        for word in words.split():
            for form in _plurals(word):
                # First subdomain wins for a word listed twice; the order of TAXONOMY breaks ties.
                table.setdefault(form, index)
    return table


def _trie_regex(words: Iterable[str]) -> str:
    """An alternation of `words` factored as a trie, so the regex engine tries one branch per letter."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def render(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + render(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        if "" in node:  # a word ends here and longer ones continue: the rest is optional (greedy)
            return "(?:" + "|".join(branches) + ")?"
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return render(trie)


_WORD_TABLE = _build_word_table()
_WORD_SET = frozenset(_WORD_TABLE)
_HOST_TABLE: dict[str, int] = {word: _SUBDOMAINS.index(sub)
                               for sub, words in _HOST_WORDS.items() for word in words.split()}
_HOST_RE = re.compile(_trie_regex(sorted(_HOST_TABLE, key=len, reverse=True)))
_SITE_TABLE: dict[str, int] = {site: _SUBDOMAINS.index(sub) for sub, sites in _SITES.items()
                               for site in sites.split()}
_GENERIC_TABLE: dict[str, int] = {site: _SUBDOMAINS.index(sub) for sub, sites in _GENERIC_SITES.items()
                                  for site in sites.split()}
# "amazon" in amazon.co.uk or amazon.de: the first label of a two-label known site, when unambiguous.
_BRAND_TABLE: dict[str, int] = {}
for _site, _index in _SITE_TABLE.items():
    if _site.count(".") == 1 and "/" not in _site and len(_site.split(".")[0]) >= 4:
        _BRAND_TABLE.setdefault(_site.split(".")[0], _index)


def is_valid_taxonomy(domain: str, subdomain: str) -> bool:
    """True when `subdomain` is one of `domain`'s subdomains in `TAXONOMY`."""
    return _DOMAIN_OF.get(subdomain) == domain


def _split_url(url: str) -> tuple[str, str]:
    """(host without www. and port, path) of a URL or bare host, lower-cased."""
    text = url.strip().lower()
    scheme_end = text.find("://")
    if scheme_end >= 0:
        text = text[scheme_end + 3:]
    host, _, path = text.partition("/")
    host = host.rpartition("@")[2].partition(":")[0].strip(".")
    if host.startswith("www."):
        host = host[4:]
    return host, path.partition("?")[0].partition("#")[0]


@lru_cache(maxsize=1 << 18)
def _site_scores(website: str) -> tuple[tuple[int, int], ...]:
    """(subdomain index, score) clues from the URL alone; cached: sites repeat across tasks."""
    host, path = _split_url(website)
    scores: dict[int, int] = {}

    def add(index: int, points: int) -> None:
        scores[index] = scores.get(index, 0) + points

    labels = host.split(".") if host else []
    first_path = path.split("/", 2)
    path_key = f"{host}/{'/'.join(first_path[:2])}" if len(first_path) >= 2 else ""
    known = None
    # Most specific first: host + path prefix (google.com/travel/flights), then host suffixes.
    for candidate in (path_key, f"{host}/{first_path[0]}" if first_path[0] else ""):
        if candidate and candidate in _SITE_TABLE:
            known = _SITE_TABLE[candidate]
            break
    if known is None:
        for start in range(max(len(labels) - 1, 0)):
            suffix = ".".join(labels[start:])
            if suffix in _SITE_TABLE:
                known = _SITE_TABLE[suffix]
                break
            if suffix in _GENERIC_TABLE:
                add(_GENERIC_TABLE[suffix], _GENERIC_SITE)
                break
    if known is None:
        for label in reversed(labels[:-1]):
            if label in _BRAND_TABLE and label not in _NON_BRAND_LABELS:
                known = _BRAND_TABLE[label]
                break
    if known is not None:
        add(known, _KNOWN_SITE)
    else:
        # Keywords inside host labels; the TLD counts only for .gov / .edu.
        for label in labels[:-1]:
            for match in _HOST_RE.findall(label):
                add(_HOST_TABLE[match], _HOST_HIT)
        if labels and labels[-1] in ("gov", "edu"):
            add(_HOST_TABLE[labels[-1]], _HOST_HIT)
        elif len(labels) >= 2 and labels[-2] in ("gov", "edu", "ac"):
            add(_HOST_TABLE["edu" if labels[-2] == "ac" else labels[-2]], _HOST_HIT)
    for word in _WORD_SET.intersection(_WORD_RE.findall(path.replace("_", " "))):
        add(_WORD_TABLE[word], _PATH_HIT)
    return tuple(sorted(scores.items()))


def rule_taxonomy(task: Task) -> tuple[str, str]:
    """The ``(domain, subdomain)`` the keyword rules give `task` (deterministic, no I/O)."""
    scores = dict(_site_scores(task.website))
    for word in _WORD_SET.intersection(_WORD_RE.findall(task.task_name.lower())):
        index = _WORD_TABLE[word]
        scores[index] = scores.get(index, 0) + _WORD_HIT
    if not scores:
        return DEFAULT_TAXONOMY
    # Highest score; ties go to the subdomain listed first in TAXONOMY (deterministic).
    best = min(scores, key=lambda index: (-scores[index], index))
    subdomain = _SUBDOMAINS[best]
    return _DOMAIN_OF[subdomain], subdomain


def rule_taxonomies(websites: Sequence[str], names: Sequence[str]) -> list[tuple[str, str]]:
    """`rule_taxonomy` of many tasks at once, given their websites and instructions: the same pairs,
    counted on columns (polars). The URL clues are worked out once per distinct website."""
    import polars as pl  # optional: polars

    if not names:
        return []
    rows = pl.DataFrame({"website": pl.Series(websites, dtype=pl.String)}).with_row_index("row")
    clues = [(website, index, points) for website in rows["website"].unique().to_list()
             for index, points in _site_scores(website)]
    schema = {"website": pl.String, "index": pl.Int64, "points": pl.Int64}
    from_site = rows.join(pl.DataFrame(clues, schema=schema, orient="row"), on="website").drop("website")
    words = (pl.DataFrame({"word": pl.Series(names, dtype=pl.String).str.to_lowercase()
                           .str.extract_all(r"[a-z0-9]+").list.unique()})
             .with_row_index("row").explode("word").filter(pl.col("word").is_in(list(_WORD_SET)))
             .select("row", pl.col("word").replace_strict(_WORD_TABLE, return_dtype=pl.Int64).alias("index"),
                     pl.lit(_WORD_HIT, pl.Int64).alias("points")))
    # Highest score; ties go to the subdomain listed first in TAXONOMY, as in `rule_taxonomy`.
    best = (pl.concat([from_site, words]).group_by("row", "index").agg(pl.col("points").sum())
            .filter(pl.col("points") == pl.col("points").max().over("row"))
            .group_by("row").agg(pl.col("index").min()))
    pairs = [DEFAULT_TAXONOMY] * len(names)
    for row, index in zip(best["row"].to_list(), best["index"].to_list(), strict=True):
        pairs[row] = _DOMAIN_OF[_SUBDOMAINS[index]], _SUBDOMAINS[index]
    return pairs


def _rule_assign(tasks: list[Task]) -> list[Task]:
    """`tasks` with the rules' pair where they have no valid one (columnar, `rule_taxonomies`)."""
    todo = [i for i, task in enumerate(tasks) if not is_valid_taxonomy(task.domain, task.subdomain)]
    pairs = rule_taxonomies([tasks[i].website for i in todo], [tasks[i].task_name for i in todo])
    out = list(tasks)
    for i, pair in zip(todo, pairs, strict=True):
        out[i] = _with_taxonomy(tasks[i], pair)
    return out


# -- LLM -------------------------------------------------------------------------------------------
_SYSTEM_PROMPT = (
    "You classify web-browsing tasks into a fixed taxonomy of domains and subdomains:\n{table}\n\n"
    "Choose the one subdomain that best fits what the task is about (the website is a hint), and its "
    'domain. Reply with JSON only: {{"domain": "...", "subdomain": "..."}}, names copied exactly.'
)

TAXONOMY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "domain": {"type": "string", "enum": list(TAXONOMY)},
        "subdomain": {"type": "string", "enum": list(_SUBDOMAINS)},
    },
    "required": ["domain", "subdomain"],
    "additionalProperties": False,
}


def taxonomy_messages(task: Task) -> list[dict]:
    """The chat messages that ask the LLM to classify `task`."""
    table = "\n".join(f"- {domain}: {', '.join(subs)}" for domain, subs in TAXONOMY.items())
    return [{"role": "system", "content": _SYSTEM_PROMPT.format(table=table)},
            {"role": "user", "content": f"Website: {task.website}\nTask: {task.task_name}"}]


def _parse_taxonomy(reply: Any) -> tuple[str, str]:
    if not isinstance(reply, dict):
        raise ValueError(f"expected an object, got {type(reply).__name__}")
    domain, subdomain = reply.get("domain"), reply.get("subdomain")
    if not isinstance(domain, str) or not isinstance(subdomain, str):
        raise ValueError("'domain' and 'subdomain' must be strings")
    domain, subdomain = domain.strip(), subdomain.strip()
    if not is_valid_taxonomy(domain, subdomain):
        raise ValueError(f"({domain!r}, {subdomain!r}) is not in the taxonomy")
    return domain, subdomain


def _with_taxonomy(task: Task, pair: tuple[str, str]) -> Task:
    if (task.domain, task.subdomain) == pair:
        return task
    if type(task) is Task and hasattr(task, "__dict__"):
        # Fast path (300k tasks in a build): domain and subdomain take no part in the fields that
        # `Task.__post_init__` derives, so copying the fields is the same as `replace` at a
        # fraction of the cost.
        copy = object.__new__(Task)
        copy.__dict__.update(task.__dict__, domain=pair[0], subdomain=pair[1])
        return copy
    return replace(task, domain=pair[0], subdomain=pair[1])


async def aassign_taxonomy(tasks: Iterable[Task], client: LLMClient | None = None, *,
                           progress: bool = False) -> list[Task]:
    """Async `assign_taxonomy`."""
    tasks = list(tasks)
    if client is None:
        return _rule_assign(tasks)
    todo = [i for i, task in enumerate(tasks) if not is_valid_taxonomy(task.domain, task.subdomain)]

    pairs: dict[int, tuple[str, str]] = {}
    fallbacks = 0
    # Tasks with the same text on the same site share one request (and one cache entry).
    by_key: dict[tuple[str, str], list[int]] = {}
    for index in todo:
        by_key.setdefault((tasks[index].task_name, tasks[index].website), []).append(index)

    async def one(key: tuple[str, str], indices: list[int]) -> None:
        nonlocal fallbacks
        task = tasks[indices[0]]
        try:
            pair = await client.complete_json(
                purpose="taxonomy", prompt_version=TAXONOMY_PROMPT_VERSION, messages=taxonomy_messages(task),
                schema=TAXONOMY_SCHEMA, validate=_parse_taxonomy, cache_key=key)
        except LLMReplyInvalid as exc:
            logger.debug("taxonomy of %s falls back to the rules: %s", task.task_id, exc.reason)
            fallbacks += 1
            pair = rule_taxonomy(task)
        for index in indices:
            pairs[index] = pair

    await gather_all([one(key, indices) for key, indices in by_key.items()], label="taxonomy",
                     progress=progress)
    if fallbacks:
        logger.warning("taxonomy: %d of %d LLM replies stayed invalid; used the rules for them",
                       fallbacks, len(by_key))
    return [_with_taxonomy(task, pairs[i]) if i in pairs else task for i, task in enumerate(tasks)]


def assign_taxonomy(tasks: Iterable[Task], client: LLMClient | None = None, *,
                    progress: bool = False) -> list[Task]:
    """Give every task a ``(domain, subdomain)`` from `TAXONOMY`; tasks with a valid pair keep it.

    With a client the LLM classifies (cached; an invalid reply falls back to the rules); without
    one the rules do. Raises `LLMUnavailable` / `LLMRequestRejected` if the endpoint fails.
    """
    if client is None:
        return _rule_assign(list(tasks))
    return run_sync(aassign_taxonomy(tasks, client, progress=progress), client, "aassign_taxonomy")
