"""The exception tree of `webgym_sites`: catch at the level you can handle.

Every public exception class of `webgym_sites` is defined here (checked by
``tests/webgym_sites/test_errors.py``); the modules that raise one import it from here and still
export it (``from webgym_sites.truth import TruthUnavailable`` works). `webgym_rollout.errors`
exports them too, where they were defined before the sites had a package of their own. Each class
keeps a ``kind`` (snake_case), as the rollout errors do.

A page that fails is no exception of this tree: the router answers it with a 500 page, so a browser
never reads one episode's bad request as the site being down (`webgym_sites.router`).

::

    SitesError                  the root of every error webgym_sites raises
     └── TruthUnavailable       the truth listener cannot be reached, refused the token or sent no
          │                     facts (`truth.TruthClient`, a fleet's site servers; names the URL;
          │                     the site judge retries, then raises JudgeUnavailable)
          └── TruthTimeout      it did not answer within the client's timeout (the site judge
                                retries, then raises JudgeTimeout)
"""

from __future__ import annotations

__all__ = ["SitesError", "TruthTimeout", "TruthUnavailable"]


class SitesError(Exception):
    """Base of every error raised by `webgym_sites`."""

    kind = "sites_error"


class TruthUnavailable(SitesError):
    """The truth listener of the local sites (`webgym_sites.truth`) cannot be reached, refused the
    token, or answered something that is not a session's facts."""

    kind = "truth_unavailable"


class TruthTimeout(TruthUnavailable):
    """The truth listener did not answer within the client's timeout."""

    kind = "truth_timeout"
