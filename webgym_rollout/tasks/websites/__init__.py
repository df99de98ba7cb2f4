"""Deprecated: the local sites are the `webgym_sites` package now (issue 38); this path goes in 0.4.0.

``webgym_rollout.tasks.websites.<module>`` is ``webgym_sites.<module>`` (the same module, with a
DeprecationWarning on first import), except ``webgym_rollout.tasks.websites.kind``, the site task
kind, which stayed in the rollout package as `webgym_rollout.tasks.site_kind`. The names this
package exported (``from webgym_rollout.tasks.websites import ShopSite``) are those of
`webgym_sites`, with a DeprecationWarning.
"""

from __future__ import annotations

from typing import Any

import webgym_sites
from webgym_rollout.tasks._moved import Forwarder, moved_warning

_EXPORTED = ("EditFacts", "FlightBookingFacts", "HotelBookingFacts", "LineFacts", "OrderFacts",
             "ReferenceFacts", "ReferenceSite", "SessionFacts", "ShopFacts", "ShopSite", "TravelFacts",
             "TravelSite", "TruthClient", "TruthServer", "new_session_id", "with_session")

_MODULES = ("accounts", "answers", "base", "catalogue", "checkout", "drawing", "encyclopedia", "facts",
            "generate", "goals", "plans", "reference", "reference_tasks", "router", "shop", "shop_tasks",
            "shortcuts", "state", "travel", "travel_catalogue", "travel_forms", "travel_tasks", "truth")
"""The modules this package had, each now ``webgym_sites.<module>``."""

Forwarder.install(__name__, {"kind": "webgym_rollout.tasks.site_kind",
                             **{module: f"webgym_sites.{module}" for module in _MODULES}})


def __getattr__(name: str) -> Any:
    if name not in _EXPORTED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    moved_warning(f"{__name__}.{name}", f"webgym_sites.{name}")
    return getattr(webgym_sites, name)
