"""A test helper: play a scripted expert's plan over a site's HTTP routes, as a browser without scripts.

`HttpPlayer` keeps the current page (and every page it loaded: `pages`), reads its forms and controls
(inputs, selects, buttons, links), and turns each `Move` into what a browser does: `Fill` sets a
field's value (and, with ``submit``, submits its form with the default button, the first submit
button, as Enter does), `Choose` picks an option of a select by its value or text, `Press` follows a
link or submits a button's form with the button's ``name=value`` and its ``formaction``, `Goto` loads
a path. A target is found by its ``id``, else its ``name``, as the expert finds it; a move whose
target is missing, disabled or answered with an error status fails the test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urlencode, urljoin, urlsplit

import httpx

from webgym_sites.plans import Answer, Choose, Fill, Goto, Move, Press

__all__ = ["HttpPlayer", "PlayError"]


class PlayError(AssertionError):
    """A move could not be played on the page (its target is missing, disabled, or the site refused)."""


@dataclass
class _Control:
    tag: str
    attrs: dict[str, str | None]
    form: int | None
    text: str = ""
    value: str = ""
    options: list[tuple[str, str]] = field(default_factory=list)
    """A select's options: (value, text)."""

    @property
    def key(self) -> str:
        return self.attrs.get("id") or self.attrs.get("name") or ""

    @property
    def submits(self) -> bool:
        kind = (self.attrs.get("type") or ("submit" if self.tag == "button" else "text")).lower()
        return self.tag in ("button", "input") and kind == "submit"


class _Page(HTMLParser):
    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.forms: list[dict[str, str]] = []
        self.controls: list[_Control] = []
        self._form: int | None = None
        self._open: _Control | None = None
        self._option: list[str] | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "form":
            self.forms.append({"action": named.get("action") or "", "method": (named.get("method") or "get")})
            self._form = len(self.forms) - 1
        elif tag in ("input", "button", "select", "a", "textarea"):
            control = _Control(tag, named, self._form if tag != "a" else None, value=named.get("value") or "")
            self.controls.append(control)
            if tag != "input":
                self._open = control
        elif tag == "option" and self._open is not None and self._open.tag == "select":
            self._option = [named.get("value") or "", "", "selected" if "selected" in named else ""]

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "option" and self._option is not None and self._open is not None:
            value, text, selected = self._option
            self._open.options.append((value, text.strip()))
            if selected or len(self._open.options) == 1:
                self._open.value = value
            self._option = None
        elif self._open is not None and tag == self._open.tag:
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._option is not None:
            self._option[1] += data
        elif self._open is not None:
            self._open.text += data


class HttpPlayer:
    """Plays moves against the site server that `client` (base URL set, redirects followed) talks to."""

    def __init__(self, client: httpx.Client, start_url: str):
        self.client = client
        self.answer = ""
        self.url = self.html = ""
        self.pages: list[str] = []
        """Every page loaded, in order (HTML)."""
        self.page: _Page = _Page("")
        self._load(client.get(start_url))

    def _load(self, response: httpx.Response) -> None:
        if response.status_code != 200:
            raise PlayError(f"{response.request.method} {response.request.url}: HTTP {response.status_code}")
        self.url, self.html, self.page = str(response.url), response.text, _Page(response.text)
        self.pages.append(response.text)

    def find(self, target: str, text: str = "") -> _Control:
        for control in self.page.controls:
            if control.key == target and (not text or text in (control.text.strip(), control.value)):
                return control
        raise PlayError(f"no element {target!r} on {self.url}")

    def _submit(self, form: int | None, button: _Control | None) -> None:
        if form is None:
            raise PlayError(f"{button.key if button else 'field'}: not in a form on {self.url}")
        fields = [(c.attrs["name"], c.value) for c in self.page.controls
                  if c.form == form and c.attrs.get("name") and not c.submits and c.tag != "a"
                  and "disabled" not in c.attrs]
        if button is not None and button.attrs.get("name"):
            fields.append((button.attrs["name"], button.value))
        spec = self.page.forms[form]
        action = urljoin(self.url, (button and button.attrs.get("formaction")) or spec["action"] or self.url)
        method = ((button and button.attrs.get("formmethod")) or spec["method"]).lower()
        if method == "post":
            data: dict[str, list[str]] = {}
            for name, value in fields:
                data.setdefault(name, []).append(value)
            self._load(self.client.post(action, data=data))
        else:
            self._load(self.client.get(urlsplit(action)._replace(query=urlencode(fields)).geturl()))

    def play(self, moves: list[Move]) -> str:
        """Play every move; the answer of the final `Answer` move."""
        for move in moves:
            if isinstance(move, Goto):
                self._load(self.client.get(urljoin(self.url, move.path)))
            elif isinstance(move, Fill):
                control = self.find(move.field)
                if control.tag not in ("input", "textarea"):
                    raise PlayError(f"{move.field}: a <{control.tag}>, not a text field")
                control.value = move.text
                if move.submit:
                    default = next((c for c in self.page.controls if c.form == control.form and c.submits),
                                   None)
                    self._submit(control.form, default)
            elif isinstance(move, Choose):
                control = self.find(move.field)
                chosen = [v for v, text in control.options if move.option in (v, text)]
                if control.tag != "select" or not chosen:
                    raise PlayError(f"{move.field}: no option {move.option!r} on {self.url}")
                control.value = chosen[0]
            elif isinstance(move, Press):
                control = self.find(move.target, move.text)
                if "disabled" in control.attrs:
                    raise PlayError(f"{move.target}: disabled on {self.url}")
                if control.tag == "a":
                    self._load(self.client.get(urljoin(self.url, control.attrs.get("href") or "")))
                elif control.submits:
                    self._submit(control.form, control)
                else:
                    raise PlayError(f"{move.target}: pressing a <{control.tag}> does nothing without scripts")
            elif isinstance(move, Answer):
                self.answer = move.text
        return self.answer
