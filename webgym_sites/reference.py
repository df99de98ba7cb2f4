"""The reference site: a stateful encyclopedia served at ``/reference/`` by the site server.

Pages (paths below ``/reference``; GET unless marked)::

    /                         home: the search box, a featured article, the kinds, the lists
    /wiki/<id>                an article: tabs (article, talk, history), a watch button, the infobox,
                              prose with links to other articles, tables in collapsible sections
                              (a country's cities and rivers), its categories, "suggest an edit"
    /talk/<id>, /history/<id> the article's talk page and revision history
    /search?q=&page=          full-text search over the articles, ranked, 20 a page, with a "did you
                              mean" link when the text is a near miss of a title
    /categories               every category; /category/<slug>?page= its articles, 40 a page
    /lists/rivers-by-length, /lists/countries-by-population     ranked tables, 50 rows a page
    /random                   a redirect to a random article (the same draws for the same session)
    /watchlist                the watched articles; POST /watchlist/add, /watchlist/remove (field id)
    /edit/<id>                the "suggest an edit" form; POST validates it server-side and shows each
                              field's error, or records the suggestion and redirects to /edits
    /edits                    the session's accepted suggestions

Each session (`webgym_sites.state`) has its own articles read, watchlist, edit
suggestions and random draws (`ReferenceState`); `ReferenceSite.facts` is their ground-truth record
(`ReferenceFacts`). The articles come from the seed (`encyclopedia`), so the same seed serves the
same pages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from webgym_sites.base import PageRequest, PageResponse, Site, esc, layout, pagination
from webgym_sites.encyclopedia import (
    EDITABLE,
    KINDS,
    LABELS,
    YEAR_NOW,
    Article,
    Encyclopedia,
    display,
    encyclopedia,
    parse_number,
)
from webgym_sites.facts import EditFacts, ReferenceFacts
from webgym_sites.state import MAX_VISITED, Session

__all__ = ["CATEGORY_PAGE_SIZE", "LIST_PAGE_SIZE", "SEARCH_PAGE_SIZE", "ReferenceSite", "ReferenceState",
           "validate_edit"]

SEARCH_PAGE_SIZE = 20
CATEGORY_PAGE_SIZE = 40
LIST_PAGE_SIZE = 50
_YEAR_FIELDS = ("founded", "born", "died")
_TEXT_FIELDS = ("currency", "source", "occupation", "industry")
_EDITORS = ("Quillwright", "Marginalia", "Footnote42", "Atlasbound", "Inkwell", "Cartographer7", "Errata",
            "Parsnip", "Gazetteer", "Tidemark")
_CSS = (".infobox{float:right;background:#fff;border:1px solid #bbb;margin:0 0 12px 18px;max-width:340px}"
        ".infobox caption{font-weight:bold;padding:4px}.tabs a,.tabs b{margin-right:14px}"
        "details{margin:10px 0}summary{cursor:pointer;font-weight:bold}.cats{clear:both;border-top:1px solid "
        "#ccc;padding-top:6px}")


@dataclass
class ReferenceState:
    """One session's encyclopedia: the articles read, the watchlist, the edit suggestions."""

    read: list[str] = field(default_factory=list)
    watchlist: list[str] = field(default_factory=list)
    edits: list[EditFacts] = field(default_factory=list)
    random_draws: int = 0


def _int(value: str, default: int) -> int:
    try:
        return int(value)
    except ValueError:
        return default


def validate_edit(article: Article, fields: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The suggest-an-edit form's fields (``field``, ``value``, ``summary``) normalised, and an error
    message per bad field (empty when the suggestion is accepted)."""
    values = {name: " ".join(fields.get(name, "").split()) for name in ("field", "value", "summary")}
    errors: dict[str, str] = {}
    key = values["field"]
    if key not in EDITABLE[article.kind]:
        errors["field"] = "Choose the value to correct."
    if not values["value"]:
        errors["value"] = "Enter the corrected value."
    elif "field" not in errors:
        label = LABELS[key].lower()
        if key in _TEXT_FIELDS:
            if not 2 <= len(values["value"]) <= 60:
                errors["value"] = f"The {label} must be 2 to 60 characters long."
        else:
            bare = values["value"].removesuffix(" km²").removesuffix(" km").removesuffix(" m")
            number = parse_number(bare)
            if number is None:
                errors["value"] = f"The {label} must be a whole number (like 12,345)."
            elif key in _YEAR_FIELDS and not 1000 <= number <= YEAR_NOW:
                errors["value"] = f"The {label} must be a year from 1000 to {YEAR_NOW}."
            elif number <= 0:
                errors["value"] = f"The {label} must be more than 0."
            else:
                values["value"] = str(number)
        current = str(article.values.get(key, "")).casefold()
        if "value" not in errors and values["value"].casefold() == current:
            errors["value"] = f"That is already the {label}."
    if not 10 <= len(values["summary"]) <= 300:
        errors["summary"] = "Explain the correction in 10 to 300 characters."
    return values, errors


class ReferenceSite(Site):
    """The encyclopedia of one seed."""

    name = "reference"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.encyclopedia: Encyclopedia = encyclopedia(seed)

    # ------------------------------------------------------------------------------ plumbing

    def new_state(self) -> ReferenceState:
        return ReferenceState()

    def facts(self, session: Session) -> ReferenceFacts | None:
        state: ReferenceState | None = session.peek_site_state(self.name)
        if state is None:
            return None
        return ReferenceFacts(seed=self.seed, read=tuple(state.read), watchlist=tuple(state.watchlist),
                              edits=tuple(state.edits))

    def handle(self, request: PageRequest) -> PageResponse:
        state: ReferenceState = request.session.site_state(self.name, self.new_state)
        path, method, book = request.path, request.method, self.encyclopedia
        head, _, rest = path.lstrip("/").partition("/")
        article = book.by_id.get(rest)
        if method == "GET":
            if path == "/":
                return self._home(state)
            if head == "wiki" and article is not None:
                state.read.append(article.id)
                del state.read[:-MAX_VISITED]
                return self._article(state, article)
            if head == "talk" and article is not None:
                return self._talk(state, article)
            if head == "history" and article is not None:
                return self._history(state, article)
            if path == "/search":
                return self._search(request, state)
            if path == "/categories":
                return self._categories(state)
            if head == "category" and rest in book.categories:
                return self._category(request, state, rest)
            if path in ("/lists/rivers-by-length", "/lists/countries-by-population"):
                return self._list(request, state, path)
            if path == "/random":
                return self._random(request, state)
            if path == "/watchlist":
                return self._watchlist(request, state)
            if head == "edit" and article is not None:
                return self._edit(state, article, {}, {})
            if path == "/edits":
                return self._edits(state)
        elif method == "POST":
            if path in ("/watchlist/add", "/watchlist/remove"):
                return self._watch(request, state, add=path.endswith("add"))
            if head == "edit" and article is not None:
                return self._suggest(request, state, article)
        body = (f"<h1>No such page</h1><p>The encyclopedia has no page here. <a href='{self.mount}/search'>"
                "Search it</a>.</p>")
        return PageResponse(self._page(state, "Not found", body), status=404)

    def _redirect(self, path: str, **query: str) -> PageResponse:
        return PageResponse(location=f"{self.mount}{path}" + (f"?{urlencode(query)}" if query else ""))

    def _page(self, state: ReferenceState, title: str, body: str, query: str = "") -> str:
        m = self.mount
        header = (f"<a href='{m}/'><b>Webgym Reference</b></a>"
                  f"<form action='{m}/search' method='get' role='search'>"
                  f"<input id='search' name='q' type='search' placeholder='Search the encyclopedia' "
                  f"aria-label='Search the encyclopedia' value='{esc(query)}'> "
                  "<button type='submit' id='search-button'>Search</button></form>"
                  f"<a id='categories-link' href='{m}/categories'>Categories</a>"
                  f"<a id='random-link' href='{m}/random'>Random article</a>"
                  f"<a id='watchlist-link' href='{m}/watchlist'>Watchlist ({len(state.watchlist)})</a>")
        return layout(f"{title} - Webgym Reference", header, f"<style>{_CSS}</style>{body}")

    def _link(self, article_id: str) -> str:
        title = esc(self.encyclopedia.title(article_id))
        return f"<a href='{self.mount}/wiki/{quote(article_id)}'>{title}</a>"

    def _pagination(self, path: str, params: list[tuple[str, str]], page: int, pages: int) -> str:
        return pagination(lambda number: f"{self.mount}{path}?{urlencode(params + [('page', str(number))])}",
                          page, pages)

    @staticmethod
    def _slice(request: PageRequest, items: list, size: int) -> tuple[list, int, int]:
        pages = max(1, -(-len(items) // size))
        page = min(max(1, _int(request.arg("page"), 1)), pages)
        return items[(page - 1) * size:page * size], page, pages

    # --------------------------------------------------------------------------------- pages

    def _home(self, state: ReferenceState) -> PageResponse:
        m, book = self.mount, self.encyclopedia
        featured = random.Random(f"reference-featured:{self.seed}").choice(book.articles)
        kinds = "".join(f"<li><a href='{m}/category/{title.lower()}'>{title}</a> "
                        f"({len(book.categories[title.lower()].members)} articles)</li>"
                        for title in KINDS.values())
        body = (f"<h1>Welcome to the Webgym Reference</h1><p>{len(book.articles):,} articles.</p>"
                f"<h2>Featured article</h2><p id='featured'>{self._link(featured.id)}</p>"
                f"<h2>Browse</h2><ul>{kinds}</ul><h2>Lists</h2><ul>"
                f"<li><a href='{m}/lists/rivers-by-length'>List of rivers by length</a></li>"
                f"<li><a href='{m}/lists/countries-by-population'>List of countries by population</a></li>"
                f"</ul><p><a href='{m}/categories'>All categories</a> · "
                f"<a href='{m}/random'>A random article</a></p>")
        return PageResponse(self._page(state, "Home", body))

    def _tabs(self, article: Article, current: str) -> str:
        m, quoted = self.mount, quote(article.id)
        tabs = [("article", "Article", f"{m}/wiki/{quoted}"), ("talk", "Talk", f"{m}/talk/{quoted}"),
                ("history", "History", f"{m}/history/{quoted}")]
        return "<nav class='tabs' aria-label='Views'>" + "".join(
            f"<b aria-current='page'>{label}</b>" if name == current
            else f"<a id='tab-{name}' href='{href}'>{label}</a>" for name, label, href in tabs) + "</nav>"

    def _value(self, article: Article, key: str) -> str:
        value = article.values[key]
        if isinstance(value, str) and value in self.encyclopedia.by_id:
            return self._link(value)
        return esc(display(key, value))

    def _article(self, state: ReferenceState, article: Article) -> PageResponse:
        m, book = self.mount, self.encyclopedia
        watched = article.id in state.watchlist
        action, button = ("remove", "<button type='submit' id='unwatch-button'>★ Unwatch</button>")
        if not watched:
            action, button = "add", "<button type='submit' id='watch-button'>☆ Watch</button>"
        rows = "".join(f"<tr><th>{LABELS[key]}</th><td id='infobox-{key}'>{self._value(article, key)}</td>"
                       "</tr>" for key in article.infobox_keys)
        prose = "".join("<p>" + "".join(self._link(s.link) if s.link else esc(s.text) for s in paragraph)
                        + "</p>" for paragraph in article.paragraphs)
        cats = " · ".join(f"<a href='{m}/category/{slug}'>{esc(book.categories[slug].title)}</a>"
                          for slug in article.categories)
        body = (self._tabs(article, "article")
                + f"<h1 id='article-title'>{esc(article.title)}</h1>"
                f"<form id='watch' action='{m}/watchlist/{action}' method='post'>"
                f"<input type='hidden' name='id' value='{esc(article.id)}'>{button}</form>"
                f"<table class='infobox' id='infobox'><caption>{esc(article.title)}</caption>{rows}</table>"
                f"<div id='article-text'>{prose}</div>{self._sections(article)}"
                f"<p class='cats' id='categories'>Categories: {cats}</p>"
                f"<p><a id='edit-link' href='{m}/edit/{quote(article.id)}'>Suggest an edit</a></p>")
        return PageResponse(self._page(state, article.title, body))

    def _sections(self, article: Article) -> str:
        """The collapsible sections below the prose: a country's cities and rivers, a city's companies."""
        book = self.encyclopedia

        def table(ident: str, head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
            cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
            heads = "".join(f"<th>{h}</th>" for h in head)
            return f"<table id='{ident}'><tr>{heads}</tr>{cells}</table>"

        sections = []
        if article.kind == "country":
            cities = sorted(book.within("city", article.id), key=lambda c: -int(c.values["population"]))
            rivers = sorted(book.within("river", article.id), key=lambda r: -int(r.values["length_km"]))
            sections.append(("cities", f"Cities ({len(cities)})", True, table(
                "cities-table", ("Rank", "City", "Population", "Founded"),
                [(str(i), self._link(c.id), display("population", c.values["population"]),
                  str(c.values["founded"])) for i, c in enumerate(cities, 1)])))
            sections.append(("rivers", f"Rivers ({len(rivers)})", False, table(
                "rivers-table", ("River", "Length", "Mouth"),
                [(self._link(r.id), display("length_km", r.values["length_km"]),
                  self._link(str(r.values["mouth"]))) for r in rivers])))
        elif article.kind == "city":
            companies = sorted((a for a in book.of_kind("company") if a.values["headquarters"] == article.id),
                               key=lambda a: a.title)
            if companies:
                sections.append(("companies", f"Companies headquartered here ({len(companies)})", False,
                                 "<ul>" + "".join(f"<li>{self._link(c.id)}</li>" for c in companies)
                                 + "</ul>"))
        return "".join(f"<details id='section-{ident}'{' open' if is_open else ''}>"
                       f"<summary>{esc(title)}</summary>{content}</details>"
                       for ident, title, is_open, content in sections)

    def _talk(self, state: ReferenceState, article: Article) -> PageResponse:
        rng = random.Random(f"reference-talk:{self.seed}:{article.id}")
        keys = article.infobox_keys
        comments = "".join(
            f"<li><b>{rng.choice(_EDITORS)}</b>: "
            + rng.choice(("Is the {label} still current? A newer source may differ.",
                          "I checked the {label} against two sources; it agrees.",
                          "Could someone add a citation for the {label}?"))
            .format(label=LABELS[rng.choice(keys)].lower()) + "</li>" for _ in range(rng.randint(1, 3)))
        title = f"Talk: {article.title}"
        body = f"{self._tabs(article, 'talk')}<h1>{esc(title)}</h1><ul id='talk'>{comments}</ul>"
        return PageResponse(self._page(state, title, body))

    def _history(self, state: ReferenceState, article: Article) -> PageResponse:
        rng = random.Random(f"reference-history:{self.seed}:{article.id}")
        days = sorted(rng.sample(range(3_000), rng.randint(2, 6)), reverse=True)
        rows = "".join(f"<tr><td>{YEAR_NOW - 1 - d // 365}-{d % 365 // 31 + 1:02d}-{d % 28 + 1:02d}</td>"
                       f"<td>{rng.choice(_EDITORS)}</td><td>"
                       + ("Created the article" if i == len(days) - 1 else
                          rng.choice(("Copy edit", "Updated the infobox", "Added links", "Fixed a typo")))
                       + "</td></tr>" for i, d in enumerate(days))
        body = (self._tabs(article, "history") + f"<h1>History: {esc(article.title)}</h1>"
                f"<table id='history'><tr><th>Date</th><th>Editor</th><th>Summary</th></tr>{rows}</table>")
        return PageResponse(self._page(state, f"History: {article.title}", body))

    def _search(self, request: PageRequest, state: ReferenceState) -> PageResponse:
        text, book = request.arg("q"), self.encyclopedia
        if text:
            request.session.search(self.name, text)
        found = book.search(text)
        shown, page, pages = self._slice(request, found, SEARCH_PAGE_SIZE)
        suggestion = book.suggest(text)
        href = f"{self.mount}/search?{urlencode({'q': suggestion})}"
        hint = (f"<p id='did-you-mean'>Did you mean <a href='{esc(href)}'>{esc(suggestion)}</a>?</p>"
                if suggestion else "")
        items = "".join(f"<li>{self._link(a.id)} <small>({a.kind})</small></li>" for a in shown)
        count = (f"{len(found)} results for “{esc(text)}” · page {page} of {pages}" if text
                 else "Type some words to search the encyclopedia.")
        body = (f"<h1>Search</h1>{hint}<p id='result-count'>{count}</p><ol id='results' start='"
                f"{(page - 1) * SEARCH_PAGE_SIZE + 1}'>{items}</ol>"
                + self._pagination("/search", [("q", text)], page, pages))
        return PageResponse(self._page(state, "Search", body, query=text))

    def _categories(self, state: ReferenceState) -> PageResponse:
        items = "".join(f"<li><a href='{self.mount}/category/{c.slug}'>{esc(c.title)}</a> "
                        f"({len(c.members)})</li>"
                        for c in sorted(self.encyclopedia.categories.values(), key=lambda c: c.title))
        body = f"<h1>Categories</h1><ul id='categories'>{items}</ul>"
        return PageResponse(self._page(state, "Categories", body))

    def _category(self, request: PageRequest, state: ReferenceState, slug: str) -> PageResponse:
        category = self.encyclopedia.categories[slug]
        shown, page, pages = self._slice(request, list(category.members), CATEGORY_PAGE_SIZE)
        items = "".join(f"<li>{self._link(member)}</li>" for member in shown)
        body = (f"<h1>Category: {esc(category.title)}</h1><p id='result-count'>"
                f"{len(category.members)} articles · page {page} of {pages}</p><ul id='members'>{items}</ul>"
                + self._pagination(f"/category/{slug}", [], page, pages))
        return PageResponse(self._page(state, category.title, body))

    def _list(self, request: PageRequest, state: ReferenceState, path: str) -> PageResponse:
        book = self.encyclopedia
        if path.endswith("rivers-by-length"):
            title, head = "List of rivers by length", ("Rank", "River", "Country", "Length")
            kind, linked, key = "river", "country", "length_km"
        else:
            title, head = "List of countries by population", ("Rank", "Country", "Capital", "Population")
            kind, linked, key = "country", "capital", "population"
        ranked = sorted(book.of_kind(kind), key=lambda a: (-int(a.values[key]), a.title))
        shown, page, pages = self._slice(request, ranked, LIST_PAGE_SIZE)
        first = (page - 1) * LIST_PAGE_SIZE + 1
        rows = "".join(f"<tr><td>{i}</td><td>{self._link(a.id)}</td>"
                       f"<td>{self._link(str(a.values[linked]))}</td>"
                       f"<td>{display(key, a.values[key])}</td></tr>" for i, a in enumerate(shown, first))
        body = (f"<h1>{title}</h1><table id='list'><tr>" + "".join(f"<th>{h}</th>" for h in head)
                + f"</tr>{rows}</table>" + self._pagination(path, [], page, pages))
        return PageResponse(self._page(state, title, body))

    def _random(self, request: PageRequest, state: ReferenceState) -> PageResponse:
        rng = random.Random(f"reference-random:{self.seed}:{request.session.id}:{state.random_draws}")
        state.random_draws += 1
        return self._redirect(f"/wiki/{quote(rng.choice(self.encyclopedia.articles).id)}")

    def _watchlist(self, request: PageRequest, state: ReferenceState) -> PageResponse:
        m, notice = self.mount, ""
        for key, verb in (("added", "Added {} to"), ("removed", "Removed {} from")):
            article = self.encyclopedia.by_id.get(request.arg(key))
            if article is not None:
                said = verb.format(esc(article.title))
                notice = f"<p class='notice' id='notice'>{said} your watchlist.</p>"
        items = "".join(f"<li>{self._link(a)} <form style='display:inline' action='{m}/watchlist/remove' "
                        f"method='post'><input type='hidden' name='id' value='{esc(a)}'>"
                        f"<button type='submit' name='remove' value='{esc(a)}'>Remove</button></form></li>"
                        for a in state.watchlist)
        body = (f"{notice}<h1>Your watchlist</h1>"
                + (f"<ul id='watchlist'>{items}</ul>" if items
                   else "<p id='watchlist-empty'>You are not watching any article.</p>"))
        return PageResponse(self._page(state, "Watchlist", body))

    def _edit(self, state: ReferenceState, article: Article, values: dict[str, str],
              errors: dict[str, str]) -> PageResponse:
        m = self.mount

        def error(name: str) -> str:
            return f"<p class='error' id='error-{name}'>{esc(errors[name])}</p>" if name in errors else ""

        def now(key: str) -> str:
            return esc(display(key, article.values[key])) if key in article.values else "-"

        options = "".join(f"<option value='{key}'{' selected' if values.get('field') == key else ''}>"
                          f"{LABELS[key]} (now {now(key)})</option>" for key in EDITABLE[article.kind])
        summary = (f"<div class='error' id='error-summary-box' role='alert'>Please correct: "
                   f"{', '.join(name for name in ('field', 'value', 'summary') if name in errors)}</div>"
                   if errors else "")
        body = (self._tabs(article, "edit") + f"<h1>Suggest an edit: {esc(article.title)}</h1>{summary}"
                f"<form id='suggest-edit' action='{m}/edit/{quote(article.id)}' method='post'>"
                f"<label>Value to correct <select id='field' name='field'><option value=''>Choose a value"
                f"</option>{options}</select></label>{error('field')}"
                "<label>Corrected value <input id='value' name='value' "
                f"value='{esc(values.get('value', ''))}'></label>{error('value')}<label>Why is it wrong? "
                f"<textarea id='summary' name='summary' rows='3' cols='50'>{esc(values.get('summary', ''))}"
                f"</textarea></label>{error('summary')}"
                "<p><button type='submit' id='submit-edit'>Send the suggestion</button></p></form>")
        return PageResponse(self._page(state, f"Suggest an edit: {article.title}", body))

    def _edits(self, state: ReferenceState) -> PageResponse:
        rows = "".join(f"<tr><td>{self._link(e.article_id)}</td><td>{LABELS[e.field]}</td>"
                       f"<td>{esc(e.value)}</td><td>{esc(e.summary)}</td></tr>" for e in state.edits)
        body = ("<h1>Your edit suggestions</h1>" + (
            f"<p class='notice' id='notice'>Thank you: {len(state.edits)} suggestions sent for review.</p>"
            "<table id='edits'><tr><th>Article</th><th>Value</th><th>Suggested</th><th>Why</th></tr>"
            f"{rows}</table>"
            if rows else "<p id='edits-empty'>You have not suggested any edit.</p>"))
        return PageResponse(self._page(state, "Edit suggestions", body))

    # ------------------------------------------------------------------------------- actions

    def _watch(self, request: PageRequest, state: ReferenceState, *, add: bool) -> PageResponse:
        article = self.encyclopedia.by_id.get(request.arg("id"))
        if article is None:
            return self._redirect("/watchlist")
        if add and article.id not in state.watchlist:
            state.watchlist.append(article.id)
        elif not add and article.id in state.watchlist:
            state.watchlist.remove(article.id)
        return self._redirect("/watchlist", **{"added" if add else "removed": article.id})

    def _suggest(self, request: PageRequest, state: ReferenceState, article: Article) -> PageResponse:
        fields = {name: request.arg(name) for name in ("field", "value", "summary")}
        values, errors = validate_edit(article, fields)
        if errors:
            return self._edit(state, article, values, errors)
        state.edits.append(EditFacts(article_id=article.id, field=values["field"], value=values["value"],
                                     summary=values["summary"]))
        return self._redirect("/edits")

    def describe(self) -> dict[str, Any]:
        """What the site serves, for logs: seed, articles, categories."""
        return {"site": self.name, "seed": self.seed, "articles": len(self.encyclopedia.articles),
                "categories": len(self.encyclopedia.categories)}
