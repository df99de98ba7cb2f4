"""What a user's source argument names: a local path or a Hub id; and whether a server URL is one.

Commands take a local folder or a Hugging Face Hub id in one argument (``--data``, ``--model``, a
run folder). A name that can only be a path is never sent to the Hub: ``./out/rnu`` is a folder that
is missing, not a repository to look up over the network. `looks_like_path` says which names those
are. `url_problem` says what is wrong with a server URL (``127.0.0.1:8300`` has no scheme), "" when
nothing is.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

__all__ = ["looks_like_path", "url_problem"]

_PATH_STARTS = ("/", "./", "../", "~", ".", "\\")


def looks_like_path(name: str | os.PathLike[str]) -> bool:
    """True for a name that can only be a local path, never a Hub id (``org/name``, ``org/name@rev``
    or a bare ``name``): a `pathlib.Path`, or text that starts with ``/``, ``./``, ``../``, ``~`` or
    ``.``, holds a backslash, ends with a ``/``, or has more than one ``/`` before an ``@revision``."""
    if isinstance(name, os.PathLike):
        return True
    text = str(name)
    if not text:
        return False
    repo = text.partition("@")[0]
    return (text.startswith(_PATH_STARTS) or "\\" in repo or repo.endswith("/") or repo.count("/") > 1
            or (os.sep != "/" and os.sep in repo))


def url_problem(url: str, *, what: str = "URL") -> str:
    """What is wrong with `url` as the address of an HTTP server ("" when nothing): it needs an
    ``http://`` or ``https://`` scheme, a host and, if any, a port number. The message names the
    value and the fix (``127.0.0.1:8300`` -> ``http://127.0.0.1:8300``)."""
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme in ("http", "https") and parts.hostname and port_ok:
        return ""
    if "://" in url and parts.scheme not in ("http", "https"):
        return f"{what} {url!r} has the scheme {parts.scheme!r}; only http:// and https:// are served"
    if "://" not in url:
        return f"{what} {url!r} has no scheme; write it as http://{url}"
    return f"{what} {url!r} is not a server address; write it as http://HOST:PORT"
