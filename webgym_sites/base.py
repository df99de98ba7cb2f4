"""The shared base of the stateful sites: a request, a response, a `Site`, and the page layout.

A site is mounted at ``/<name>/`` on the site server (`webgym_rollout.tasks.sites`). The server
parses each request under the mount into a `PageRequest` (the path below the mount, the query and
form fields, the session, see `webgym_sites.state`) and calls `Site.handle` with
the session's lock held; the site returns a `PageResponse` (a page or a redirect). `Site.facts`
turns the site's state of a session into its ground-truth record. Pages are plain HTML with inline
CSS and no scripts the server depends on: light to render and to screenshot, and the same bytes
for the same state. A redirect goes only to a path of the same server (`same_site_path`): a target
read from a request (a sign-in's ``next``) never names another host or adds a header.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import quote

from webgym_sites.state import Session

__all__ = ["PageRequest", "PageResponse", "Site", "esc", "layout", "pagination", "same_site_path",
           "website_of"]

# Never in a redirect target: control characters (a CR/LF would end the Location header and start
# another), spaces, and backslashes (browsers read "/\host" as "//host", another host).
_NOT_IN_PATH = re.compile(r"[\x00-\x20\x7f-\x9f\\]")
# What stays as it is in a Location; anything else (non-ASCII included) is percent-encoded as UTF-8.
_PATH_SAFE = "/?&=%#:;@+,!$'()*[]"


def website_of(site: str) -> str:
    """The ``website`` of a site's generated tasks: a name of its own (``http://webgym-shop.test``, under the
    reserved ``.test`` domain, never looked up), because the sites share one host and port, and the
    data's site split (`webgym_data.split`) tells websites apart by their domain. The tasks' start
    URLs are where the site is served."""
    return f"http://webgym-{site}.test"


def esc(value: Any) -> str:
    """`value` as text safe inside HTML and attribute values."""
    return html.escape(str(value), quote=True)


def same_site_path(target: str) -> str | None:
    r"""`target` as a path of this server, fit for a ``Location`` header; None when it is not one.

    It must start with one ``/`` (``//host/`` and ``/\host/`` name another host) and hold no
    control character, space or backslash; non-ASCII characters are percent-encoded (UTF-8), since
    a header is Latin-1. ``/account`` and ``/wiki/São_Paulo?x=1`` pass; ``//evil.test/``,
    ``https://evil.test/``, ``account`` and ``/a\r\nSet-Cookie: x`` do not."""
    if not target.startswith("/") or target.startswith("//") or _NOT_IN_PATH.search(target):
        return None
    try:
        return quote(target, safe=_PATH_SAFE)
    except UnicodeEncodeError:  # a lone surrogate: no character at all
        return None


@dataclass(frozen=True)
class PageRequest:
    """One request to a site."""

    method: str
    """``GET`` or ``POST``."""
    path: str
    """The path below the site's mount, starting with ``/`` (``/search``; the home page is ``/``)."""
    query: dict[str, list[str]]
    form: dict[str, list[str]]
    """The fields of a POSTed ``application/x-www-form-urlencoded`` body (empty for GET)."""
    session: Session

    def arg(self, name: str, default: str = "") -> str:
        """The first value of field `name`, from the form, else the query; stripped."""
        values = self.form.get(name) or self.query.get(name)
        return values[0].strip() if values else default

    def args(self, name: str) -> list[str]:
        """Every non-empty value of field `name` (checkboxes), from the form, else the query."""
        values = self.form.get(name) or self.query.get(name) or []
        return [v.strip() for v in values if v.strip()]


@dataclass(frozen=True)
class PageResponse:
    """A page (`body`) or, when `location` is set, a redirect (303 See Other) to it: a path of this
    server (`same_site_path`; the router answers any other target with a 500, a bug of the site)."""

    body: str = ""
    status: int = 200
    location: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=())


class Site:
    """A stateful site. Subclasses set `name` and implement `handle`, `new_state` and `facts`."""

    name: ClassVar[str]
    """The mount (``shop`` serves ``/shop/...``) and the key of the session's state."""

    @property
    def mount(self) -> str:
        return f"/{self.name}"

    def new_state(self) -> Any:
        """A fresh state object for a session that first reaches this site."""
        raise NotImplementedError

    def handle(self, request: PageRequest) -> PageResponse:
        """Answer one request (the session's lock is held)."""
        raise NotImplementedError

    def facts(self, session: Session) -> Any:
        """The site's ground-truth record of `session`, or None when it never reached the site
        (the session's lock is held)."""
        raise NotImplementedError


_CSS = """body{font:15px/1.4 sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#234;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#fff}main{padding:12px 16px;max-width:1100px}
a{color:#1a4f8b}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
.grid{display:grid;grid-template-columns:repeat(4,1fr);gap:10px}
.card{background:#fff;border:1px solid #ddd;padding:8px}.price{font-weight:bold}
.side{float:left;width:230px;margin-right:16px}.results{overflow:hidden}
.error{color:#b00020;margin:2px 0}.notice{background:#e8f4e8;padding:6px}
label{display:block;margin-top:6px}input,select,button{font:inherit}
.pages a,.pages span{margin-right:6px}
.modal-bg{position:fixed;inset:0;background:rgba(0,0,0,.45);display:flex;align-items:center;
justify-content:center}.modal{background:#fff;padding:20px;min-width:340px;border-radius:4px}"""


def layout(title: str, header: str, body: str) -> str:
    """A whole page: the title, the site's header bar, the body."""
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            f"<style>{_CSS}</style></head>\n<body><header>{header}</header>\n<main>{body}</main></body></html>\n")


def pagination(href: Callable[[int], str], page: int, pages: int) -> str:
    """The page links of a list: previous, the first, the last and two either side of `page`
    (gaps shown as …), next; `href(number)` is a page's URL. "" for a single page."""
    if pages <= 1:
        return ""

    def link(number: int, label: str) -> str:
        return f"<a href='{esc(href(number))}'>{label}</a>"

    numbers = sorted({1, pages, *range(max(1, page - 2), min(pages, page + 2) + 1)})
    parts, last = [], 0
    if page > 1:
        parts.append(link(page - 1, "« Previous"))
    for number in numbers:
        if number > last + 1:
            parts.append("<span>…</span>")
        parts.append(f"<span aria-current='page'><b>{number}</b></span>" if number == page
                     else link(number, str(number)))
        last = number
    if page < pages:
        parts.append(link(page + 1, "Next »"))
    return f"<nav class='pages' aria-label='Pages'>{''.join(parts)}</nav>"
