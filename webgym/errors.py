"""The exception tree of `webgym`, the umbrella package: catch at the level you can handle.

Every public exception class of `webgym` is defined here (checked by ``tests/webgym/test_errors.py``);
`webgym.demo` imports `DemoError` from here and still exports it.

::

    WebgymError                    the root of every error webgym itself raises
     └── DemoError (RuntimeError)  ``webgym demo``: the output folder is not the demo's, the size is
                                   unknown, or a stage failed (names it)

The demo also lets the working packages' own errors through (`webgym_data.errors.WebgymDataError`,
`webgym_rl.errors.WebgymRLError`); its command reports each as one line.
"""

from __future__ import annotations

__all__ = ["DemoError", "WebgymError"]


class WebgymError(Exception):
    """Base of every error raised by `webgym` itself."""


class DemoError(WebgymError, RuntimeError):
    """The demo cannot run as asked, or one of its stages failed (the message names it)."""
