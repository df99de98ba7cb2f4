"""Generated shop tasks as rows of the published task schema, the same for the same seeds.

`shop_tasks(count, seed=..., shop_seed=...)` draws `count` tasks for the shop served with
``--shop-seed shop_seed`` from nine templates, taken in turn so that the levels come out about a
third each (the level follows from the fact count: easy 1-3, medium 4-6, hard 7+):

    easy    price          report a named product's price (information seeking: `definite_answer`)
            rating         report a named product's rating and review count (information seeking)
            add            add a named product in a colour (and size) to the cart, and nothing else
    medium  add_quantity   add several of a product with its options, and nothing else
            cheapest       find the cheapest product of a category and brand in a colour; add it alone
            best_rated     name the best-rated product of a category and brand, its rating and price
    hard    checkout       buy a product with options, shipping and a delivery address as a guest
            account        sign in to a given account, then buy a product with options
            two_items      buy two products with their options in one order

Every fact has its check (`webgym_sites.goals`) in ``source.metadata["checks"]``,
beside ``params``: what a session that does the task right does (products, options, quantities,
the search that finds them, the checkout fields, the account), for a scripted expert and the tests.
An answer fact's candidates are the products its listing shows beside the right one (its brand's
products of its category; the search's other results). A task that asks for one cart line or one
order says that nothing else is in the cart (``cart_only``) or that the session placed one order of
those products (``one_order``). A template whose draw has no single right answer (two products tied
for cheapest) draws again.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from webgym_data.schema import Task
from webgym_sites.accounts import accounts
from webgym_sites.catalogue import CATEGORIES, Catalogue, Product, SearchQuery, catalogue
from webgym_sites.checkout import SHIPPING
from webgym_sites.drawing import (
    DEFAULT_BASE_URL,
    Draw,
    Fact,
    SiteRows,
    answer_fact,
    draw_tasks,
)
from webgym_sites.plans import Answer, Choose, Fill, Goto, Move, Press

__all__ = ["BENCHMARK", "DEFAULT_BASE_URL", "TEMPLATES", "expert_moves", "shop_tasks"]

BENCHMARK = "webgym-shop"
"""The `benchmark_name` of the generated rows."""

_NAMES = ("Ava Nilsen", "Ben Okafor", "Chloe Moreau", "Dev Tanaka", "Elin Kowalski", "Farid Haddad",
          "Greta Silva", "Hugo Byrne", "Ines Novak", "Jonas Ferreira")
_STREETS = ("Harbour Road", "Mill Lane", "Station Street", "Church Walk", "Orchard Close", "Quay Street")
_CITIES = ("Bristol", "Leeds", "York", "Bath", "Exeter", "Norwich")
_CARDS = ("4111 1111 1111 1111", "5555 5555 5555 4444", "4012 8888 8888 1881")  # test numbers, Luhn-valid
_LISTING = {"type": "visited_any", "prefixes": ["/shop/search", "/shop/category/"]}
_ROWS = SiteRows(site="shop", benchmark=BENCHMARK, domain="shopping")



def _options(rng: random.Random, product: Product) -> dict[str, str]:
    chosen = {"colour": rng.choice(product.colours)}
    if product.sizes:
        chosen["size"] = rng.choice(product.sizes)
    return chosen


def _described(product: Product, options: dict[str, str]) -> str:
    size = f", size {options['size']}" if "size" in options else ""
    return f"the {product.name} in {options['colour']}{size}"


def _line_facts(where: str, product: Product, options: dict[str, str], quantity: int | None,
                alone: bool = False) -> list[Fact]:
    """Facts that the cart (`where` = ``cart``) or the last order (``order``) has this line; `alone`:
    the cart holds nothing else (the session placed one order, of nothing else)."""
    place = "the cart" if where == "cart" else "the order"
    if not alone:
        first: Fact = (f"{place.capitalize()} contains the {product.name}.",
                       {"type": f"{where}_has", "product_id": product.id})
    elif where == "cart":
        first = (f"The cart holds the {product.name} and nothing else.",
                 {"type": "cart_only", "product_ids": [product.id]})
    else:
        first = (f"The session placed one order, of the {product.name} and nothing else.",
                 {"type": "one_order", "product_ids": [product.id]})
    facts: list[Fact] = [first]
    for name, value in options.items():
        facts.append((f"The {product.name} in {place} has the {name} {value}.",
                      {"type": f"{where}_option", "product_id": product.id, "name": name, "value": value}))
    if quantity is not None:
        facts.append((f"{place.capitalize()} holds {quantity} of the {product.name}.",
                      {"type": f"{where}_quantity", "product_id": product.id, "quantity": quantity}))
    return facts


def _line_params(product: Product, options: dict[str, str], quantity: int) -> dict[str, Any]:
    return {"product_id": product.id, **options, "quantity": quantity}


def _nothing_else(product: Product) -> Fact:
    return "The cart holds nothing else.", {"type": "cart_only", "product_ids": [product.id]}


def _beside(shop: Catalogue, product: Product) -> list[Product]:
    """The products its brand's listing of its category shows beside `product`."""
    listing = shop.search(SearchQuery(category=product.category, brand=product.brand))
    return [p for p in listing if p != product]


def _rating_text(product: Product) -> str:
    return f"{product.rating:.1f} out of 5"


def _delivery(rng: random.Random) -> dict[str, str]:
    area, inward = "ABCDEFGHJKLMNPRSTW", "ABDEFGHJLNPQRSTUWXYZ"
    postcode = (f"{rng.choice(area)}{rng.choice(area)}{rng.randint(1, 29)} "
                f"{rng.randint(1, 9)}{rng.choice(inward)}{rng.choice(inward)}")
    return {"full_name": rng.choice(_NAMES), "address": f"{rng.randint(1, 99)} {rng.choice(_STREETS)}",
            "city": rng.choice(_CITIES), "postcode": postcode, "card_number": rng.choice(_CARDS),
            "card_expiry": f"{rng.randint(1, 12):02d}/{rng.randint(27, 31)}",
            "shipping": rng.choice(sorted(SHIPPING))}


def _delivery_text(fields: dict[str, str]) -> str:
    method = SHIPPING[fields["shipping"]].label.split(" (")[0].lower()
    return (f"with {method} shipping to {fields['full_name']}, {fields['address']}, {fields['city']} "
            f"{fields['postcode']}, paying with card {fields['card_number']} "
            f"(expiry {fields['card_expiry']})")


def _order_facts(fields: dict[str, str], names: bool = True) -> list[Fact]:
    facts: list[Fact] = [(f"The order is shipped by {SHIPPING[fields['shipping']].label.split(' (')[0]}.",
                          {"type": "order_field", "name": "shipping", "value": fields["shipping"]}),
                         (f"The order is delivered to the postcode {fields['postcode']}.",
                          {"type": "order_field", "name": "postcode", "value": fields["postcode"]}),
                         (f"The order is delivered in {fields['city']}.",
                          {"type": "order_field", "name": "city", "value": fields["city"]})]
    if names:
        facts.append((f"The order is addressed to {fields['full_name']}.",
                      {"type": "order_field", "name": "full_name", "value": fields["full_name"]}))
    return facts


# ------------------------------------------------------------------------------------ templates

def _price(rng: random.Random, shop: Catalogue) -> Draw:
    product = rng.choice(shop.products)
    others = _beside(shop, product)
    return Draw("price", f"In the Webgym Shop, find the {product.name} and tell me its price.",
                 [("Product found", [(f"The product page of the {product.name} was opened.",
                                      {"type": "visited", "path": f"/shop/product/{product.id}"}),
                                     answer_fact(f"The answer gives the price {product.price}.", "price",
                                                 product.price, [p.price for p in others])])],
                 {"product_id": product.id}, answer=product.price)


def _rating(rng: random.Random, shop: Catalogue) -> Draw:
    product = rng.choice(shop.products)
    rating, reviews, others = _rating_text(product), f"{product.reviews} reviews", _beside(shop, product)
    return Draw("rating", f"How is the {product.name} rated in the Webgym Shop? Give its rating out of 5 "
                           "and its number of reviews.",
                 [("Product found", [(f"The product page of the {product.name} was opened.",
                                      {"type": "visited", "path": f"/shop/product/{product.id}"})]),
                  ("Answer", [answer_fact(f"The answer gives the rating {rating}.", "rating", rating,
                                          [_rating_text(p) for p in others]),
                              answer_fact(f"The answer gives {reviews}.", "number", reviews,
                                          [f"{p.reviews} reviews" for p in others])])],
                 {"product_id": product.id}, answer=f"{rating}, {reviews}")


def _add(rng: random.Random, shop: Catalogue) -> Draw:
    product = rng.choice(shop.products)
    options = _options(rng, product)
    return Draw("add", f"Add {_described(product, options)} to my cart in the Webgym Shop.",
                 [("Cart", _line_facts("cart", product, options, None, alone=True))],
                 {"lines": [_line_params(product, options, 1)]})


def _add_quantity(rng: random.Random, shop: Catalogue) -> Draw:
    product = rng.choice(shop.products)
    options, quantity = _options(rng, product), rng.randint(2, 5)
    facts = [*_line_facts("cart", product, options, quantity), _nothing_else(product)]
    return Draw("add_quantity", f"Put {quantity} of {_described(product, options)} in my Webgym Shop cart.",
                 [("Cart", facts)], {"lines": [_line_params(product, options, quantity)]})


def _pick(rng: random.Random, shop: Catalogue, sort: str) -> tuple[SearchQuery, list[Product]] | None:
    """A category, brand and colour whose search in `sort` order has a single first product; the
    search's results, that product first."""
    category = rng.choice(CATEGORIES)
    brand = rng.choice([p.brand for p in shop.products if p.category == category.slug])
    colour = rng.choice([c for p in shop.products if p.category == category.slug and p.brand == brand
                         for c in p.colours])
    query = SearchQuery(category=category.slug, brand=brand, colours=(colour,), sort=sort)
    found = shop.search(query)
    key: Callable[[Product], Any] = (lambda p: p.price_cents) if sort == "price_asc" else (lambda p: p.rating)
    if len(found) < 2 or key(found[0]) == key(found[1]):
        return None  # one product, or a tie: no single right answer worth a search
    return query, found


def _query_params(query: SearchQuery) -> dict[str, str]:
    return {"category": query.category, "brand": query.brand, "colour": query.colours[0], "sort": query.sort}


def _cheapest(rng: random.Random, shop: Catalogue) -> Draw | None:
    picked = _pick(rng, shop, "price_asc")
    if picked is None:
        return None
    query, (product, *_) = picked
    colour = query.colours[0]
    options = {"colour": colour} | ({"size": rng.choice(product.sizes)} if product.sizes else {})
    title = next(c.title for c in CATEGORIES if c.slug == query.category)
    size = f" in size {options['size']}" if "size" in options else ""
    return Draw("cheapest", f"Find the cheapest {title.lower()} by {query.brand} that come in {colour} "
                             f"and add one to my cart in {colour}{size}.",
                 [("Search", [("A search or category page of the shop was opened.", _LISTING)]),
                  ("Cart", [*_line_facts("cart", product, options, 1), _nothing_else(product)])],
                 {"search": _query_params(query), "lines": [_line_params(product, options, 1)]})


def _best_rated(rng: random.Random, shop: Catalogue) -> Draw | None:
    picked = _pick(rng, shop, "rating")
    if picked is None:
        return None
    query, (product, *others) = picked
    title = next(c.title for c in CATEGORIES if c.slug == query.category)
    rating = _rating_text(product)
    return Draw("best_rated", f"Which {title.lower()} by {query.brand} available in {query.colours[0]} has "
                               "the best rating in the Webgym Shop? Give its name, rating and price.",
                 [("Search", [("A search or category page of the shop was opened.", _LISTING)]),
                  ("Answer", [answer_fact(f"The answer names the {product.name}.", "name", product.name,
                                          [p.name for p in others]),
                              answer_fact(f"The answer gives the rating {rating}.", "rating", rating,
                                          [_rating_text(p) for p in others]),
                              answer_fact(f"The answer gives the price {product.price}.", "price",
                                          product.price, [p.price for p in others])])],
                 {"search": _query_params(query), "product_id": product.id},
                 answer=f"{product.name}: {rating}, {product.price}")


def _checkout(rng: random.Random, shop: Catalogue) -> Draw:
    product = rng.choice(shop.products)
    options, quantity, fields = _options(rng, product), rng.randint(1, 3), _delivery(rng)
    return Draw("checkout", f"In the Webgym Shop, buy {quantity} of {_described(product, options)} "
                             f"{_delivery_text(fields)}.",
                 [("Order", _line_facts("order", product, options, quantity, alone=True)),
                  ("Delivery", _order_facts(fields))],
                 {"lines": [_line_params(product, options, quantity)], "checkout": fields})


def _account(rng: random.Random, shop: Catalogue) -> Draw:
    account = rng.choice(accounts(shop.seed))
    product = rng.choice(shop.products)
    options, fields = _options(rng, product), _delivery(rng) | {"full_name": account.full_name}
    return Draw("account", f"Sign in to the Webgym Shop as {account.email} (password {account.password}), "
                            f"then buy {_described(product, options)} {_delivery_text(fields)}.",
                 [("Account", [(f"The session signed in as {account.email}.",
                                {"type": "signed_in", "account": account.email}),
                               (f"The order is placed by the account {account.email}.",
                                {"type": "order_field", "name": "account", "value": account.email})]),
                  ("Order", _line_facts("order", product, options, None, alone=True)),
                  ("Delivery", _order_facts(fields, names=False))],
                 {"lines": [_line_params(product, options, 1)], "checkout": fields,
                  "account": {"email": account.email, "password": account.password}})


def _two_items(rng: random.Random, shop: Catalogue) -> Draw | None:
    first, second = rng.sample(shop.products, 2)
    chosen = [(first, {"colour": rng.choice(first.colours)}),
              (second, {"colour": rng.choice(second.colours)})]
    if first.sizes or second.sizes:
        chosen = [(p, o | ({"size": rng.choice(p.sizes)} if p.sizes else {})) for p, o in chosen]
    fields = _delivery(rng)
    wanted = " and ".join(_described(p, o) for p, o in chosen)
    return Draw("two_items", f"In one Webgym Shop order, buy {wanted}, {_delivery_text(fields)}.",
                 [("Order", [*_line_facts("order", first, chosen[0][1], None),
                             *_line_facts("order", second, chosen[1][1], None),
                             ("The session placed one order, holding no other product.",
                              {"type": "one_order", "product_ids": [first.id, second.id]})]),
                  ("Delivery", _order_facts(fields, names=False))],
                 {"lines": [_line_params(p, o, 1) for p, o in chosen], "checkout": fields})


TEMPLATES: dict[str, Callable[[random.Random, Catalogue], Draw | None]] = {
    "price": _price, "add_quantity": _add_quantity, "checkout": _checkout,
    "rating": _rating, "cheapest": _cheapest, "account": _account,
    "add": _add, "best_rated": _best_rated, "two_items": _two_items,
}
"""The templates, in the order `shop_tasks` takes them (easy, medium, hard, easy, ...)."""


def shop_tasks(count: int, *, seed: int = 0, shop_seed: int = 0,
               base_url: str = DEFAULT_BASE_URL) -> list[Task]:
    """`count` distinct tasks for the shop of `shop_seed`, drawn with `seed`; start URLs under
    `base_url` (the site server's, ``http://host:port``)."""
    shop = catalogue(shop_seed)

    def category(draw: Draw) -> str:
        first_line = next(iter(draw.params.get("lines", [])), {})
        product_id = draw.params.get("product_id") or first_line.get("product_id")
        return shop.by_id[product_id].category if product_id else ""

    return draw_tasks(_ROWS, TEMPLATES, shop, count, seed=seed, data_seed=shop_seed, base_url=base_url,
                      subdomain=category)


# ------------------------------------------------------------------------------ the expert's plan

def _add_moves(line: dict[str, Any]) -> list[Move]:
    moves: list[Move] = [Goto(f"/shop/product/{line['product_id']}"), Choose("option-colour", line["colour"])]
    if "size" in line:
        moves.append(Choose("option-size", line["size"]))
    if int(line["quantity"]) != 1:
        moves.append(Fill("quantity", str(line["quantity"])))
    return [*moves, Press("add-button")]


def expert_moves(params: dict[str, Any], task: Task) -> list[Move]:
    """The scripted expert's plan for a shop task (`webgym_sites.plans`)."""
    moves: list[Move] = []
    if "account" in params:
        account = params["account"]
        moves += [Goto("/shop/signin"), Fill("email", account["email"]),
                  Fill("password", account["password"], submit=True)]
    if "search" in params:
        moves.append(Goto("/shop/search?" + urlencode(params["search"])))
    if "product_id" in params:
        moves.append(Goto(f"/shop/product/{params['product_id']}"))
    for line in params.get("lines", []):
        moves += _add_moves(line)
    if "checkout" in params:
        fields = params["checkout"]
        moves.append(Goto("/shop/checkout"))
        moves += [Fill(name, fields[name]) for name in ("full_name", "address", "city", "postcode",
                                                          "card_number", "card_expiry")]
        moves += [Choose("shipping", fields["shipping"]), Press("place-order"), Press("confirm-order")]
    return [*moves, Answer(task.definite_answer or "Done.")]

