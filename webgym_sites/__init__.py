"""webgym_sites: the stateful local sites, their generated tasks and the ground truth of each session.

A package of its own below `webgym_rollout` (it imports only `webgym_core` and `webgym_data`):
the sites are pages with per-session state, the tasks are drawn from their worlds, and the truth
is typed records a judge reads, so none of it needs a browser, an agent or a trajectory.

Served by the site server (`webgym_rollout.tasks.sites`) under their mounts (``/shop/``). The
shared base: `state` (sessions keyed by the ``webgym_session`` cookie or a ``?session=`` start-URL
parameter), `base` (request, response, `Site`, page layout), `router` (a raw request to a site's
page), `facts` (the typed ground-truth records), `truth` (the token-guarded listener on its own
port that serves them to the toolkit, never to a page), `serving` (a standard-library HTTP server
on a thread). The shop: `catalogue`, `accounts`, `checkout` (the form's validation) and `shop`
(the pages). The reference site (an encyclopedia): `encyclopedia` (the articles) and `reference`
(the pages). The travel site (``/travel/``): `travel_catalogue` (airports, flights, hotels),
`travel_forms` (the booking forms' validation), `travel` (the pages). The generated tasks:
`shop_tasks`, `travel_tasks`, `reference_tasks` (each site's templates and the expert's plan),
`drawing` (the draw loop and row they share), `goals` (the machine check of each fact), `answers`
(what a final answer states, read as a grader reads it), `plans` (the expert's moves), `generate`
(all sites at once, ``webgym-rollout site-tasks``) and `shortcuts` (the plans of the shortcuts the
judge must refuse). `errors` draws the exception tree (root: `SitesError`).

What stays in `webgym_rollout`: the ``site:<name>`` task kind (`webgym_rollout.tasks.site_kind`: a
fresh session per episode), the site server (`webgym_rollout.tasks.sites`) and the site judge
(`webgym_rollout.judge.site`). The names below import on first use, so ``import webgym_sites`` is
cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from webgym_core.lazy import lazy_exports

_EXPORTS = {
    "EditFacts": "webgym_sites.facts",
    "FlightBookingFacts": "webgym_sites.facts",
    "HotelBookingFacts": "webgym_sites.facts",
    "LineFacts": "webgym_sites.facts",
    "OrderFacts": "webgym_sites.facts",
    "ReferenceFacts": "webgym_sites.facts",
    "ReferenceSite": "webgym_sites.reference",
    "SessionFacts": "webgym_sites.facts",
    "ShopFacts": "webgym_sites.facts",
    "ShopSite": "webgym_sites.shop",
    "SitesError": "webgym_sites.errors",
    "TravelFacts": "webgym_sites.facts",
    "TravelSite": "webgym_sites.travel",
    "TruthClient": "webgym_sites.truth",
    "TruthServer": "webgym_sites.truth",
    "TruthSettings": "webgym_sites.truth",
    "TruthTimeout": "webgym_sites.errors",
    "TruthUnavailable": "webgym_sites.errors",
    "check_task": "webgym_sites.goals",
    "expert_plan": "webgym_sites.generate",
    "new_session_id": "webgym_sites.state",
    "site_tasks": "webgym_sites.generate",
    "with_session": "webgym_sites.state",
}

__all__ = [
    "EditFacts",
    "FlightBookingFacts",
    "HotelBookingFacts",
    "LineFacts",
    "OrderFacts",
    "ReferenceFacts",
    "ReferenceSite",
    "SessionFacts",
    "ShopFacts",
    "ShopSite",
    "SitesError",
    "TravelFacts",
    "TravelSite",
    "TruthClient",
    "TruthServer",
    "TruthSettings",
    "TruthTimeout",
    "TruthUnavailable",
    "check_task",
    "expert_plan",
    "new_session_id",
    "site_tasks",
    "with_session",
]

if TYPE_CHECKING:
    from webgym_sites.errors import SitesError, TruthTimeout, TruthUnavailable
    from webgym_sites.facts import (
        EditFacts,
        FlightBookingFacts,
        HotelBookingFacts,
        LineFacts,
        OrderFacts,
        ReferenceFacts,
        SessionFacts,
        ShopFacts,
        TravelFacts,
    )
    from webgym_sites.generate import expert_plan, site_tasks
    from webgym_sites.goals import check_task
    from webgym_sites.reference import ReferenceSite
    from webgym_sites.shop import ShopSite
    from webgym_sites.state import new_session_id, with_session
    from webgym_sites.travel import TravelSite
    from webgym_sites.truth import TruthClient, TruthServer, TruthSettings

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
