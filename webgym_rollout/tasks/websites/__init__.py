"""The stateful local sites: pages with per-session state, and the ground truth of each session.

Served by the site server (`webgym_rollout.tasks.sites`) under their mounts (``/shop/``). The
shared base: `state` (sessions keyed by the ``webgym_session`` cookie or a ``?session=`` start-URL
parameter), `base` (request, response, `Site`, page layout), `router` (a raw request to a site's
page), `facts` (the typed ground-truth records), `truth` (the token-guarded listener on its own
port that serves them to the toolkit, never to a page). The shop: `catalogue`, `accounts`,
`checkout` (the form's validation) and `shop` (the pages). The reference site (an encyclopedia):
`encyclopedia` (the articles) and `reference` (the pages). The travel site (``/travel/``):
`travel_catalogue` (airports, flights, hotels), `travel_forms` (the booking forms' validation),
`travel` (the pages). The generated tasks: `shop_tasks`, `travel_tasks`, `reference_tasks` (each
site's templates and the expert's plan), `drawing` (the draw loop and row they share), `goals` (the
machine check of each fact), `answers` (what a final answer states, read as a grader reads it),
`plans` (the expert's moves), `generate` (all sites at once, ``webgym-rollout site-tasks``),
`shortcuts` (the plans of the shortcuts the judge must refuse) and `kind` (the ``site:<name>`` task
kind: a fresh session per episode). Same imports as `webgym_rollout.tasks`.
"""

from webgym_rollout.tasks.websites.facts import (
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
from webgym_rollout.tasks.websites.reference import ReferenceSite
from webgym_rollout.tasks.websites.shop import ShopSite
from webgym_rollout.tasks.websites.state import new_session_id, with_session
from webgym_rollout.tasks.websites.travel import TravelSite
from webgym_rollout.tasks.websites.truth import TruthClient, TruthServer

__all__ = ["EditFacts", "FlightBookingFacts", "HotelBookingFacts", "LineFacts", "OrderFacts",
           "ReferenceFacts", "ReferenceSite", "SessionFacts", "ShopFacts", "ShopSite", "TravelFacts",
           "TravelSite", "TruthClient", "TruthServer", "new_session_id", "with_session"]
