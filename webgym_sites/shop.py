"""The shop: a stateful store served at ``/shop/`` by the site server, from a seeded catalogue.

Pages (paths below ``/shop``; GET unless marked)::

    /                      home: categories, top-rated products
    /search                search box, filters (category and brand dropdowns, colour and material
                           checkboxes, price range, minimum rating), sort select, 12 results a page;
                           a price it cannot read (``abc``, ``inf``) is left out and named as wrong
    /category/<slug>       the search page of one category
    /product/<id>          details; colour and size selects, quantity; POST /cart/add
    /cart                  lines with quantity update and remove (POST /cart/update, /cart/remove)
    /signin                sign-in form (POST /signin, then on to ``next``: a path below /shop;
                           POST /signout)
    /account               the signed-in account and its orders
    /checkout              checkout form; POST validates it server-side and shows each field's
                           error, or opens the confirmation modal; POST /checkout/confirm places
                           the order, empties the cart and redirects to /order/<id>
    /order/<id>            the order's confirmation

Each session (`webgym_sites.state`) has its own cart, sign-in, orders and pending
checkout (`ShopState`); `ShopSite.facts` is their ground-truth record (`ShopFacts`). The catalogue
and accounts come from the seed (`catalogue`, `accounts`), so the same seed serves the same pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from webgym_sites.accounts import Account, accounts
from webgym_sites.base import (
    PageRequest,
    PageResponse,
    Site,
    esc,
    layout,
    pagination,
    same_site_path,
)
from webgym_sites.catalogue import (
    CATEGORIES,
    COLOURS,
    SORTS,
    Catalogue,
    Product,
    SearchQuery,
    catalogue,
    format_price,
)
from webgym_sites.checkout import FIELDS, SHIPPING, validate_checkout
from webgym_sites.facts import LineFacts, OrderFacts, ShopFacts
from webgym_sites.state import Session

__all__ = ["MAX_PRICE", "MAX_QUANTITY", "PAGE_SIZE", "ShopSite", "ShopState"]

PAGE_SIZE = 12
"""Search results per page."""
MAX_QUANTITY = 10
"""The most of one line a cart holds."""
MAX_PRICE = 1_000_000
"""The largest price (dollars) a price filter takes."""
_QUANTITY_ERROR = f"The quantity must be a whole number from 1 to {MAX_QUANTITY}."
_PRICE_ERROR = "Enter a price in dollars, like 25 or 19.99."
_RATINGS = {"": "Any rating", "3": "3 stars and up", "4": "4 stars and up", "4.5": "4.5 stars and up"}


@dataclass
class _Line:
    product: Product
    options: dict[str, str]
    quantity: int

    def facts(self) -> LineFacts:
        return LineFacts(product_id=self.product.id, name=self.product.name, options=dict(self.options),
                         quantity=self.quantity, unit_price_cents=self.product.price_cents)


@dataclass
class ShopState:
    """One session's shop: who is signed in, the cart, the orders, a checkout awaiting confirmation."""

    account: Account | None = None
    sign_ins: list[str] = field(default_factory=list)
    cart: list[_Line] = field(default_factory=list)
    orders: list[OrderFacts] = field(default_factory=list)
    pending: dict[str, str] | None = None
    """The validated checkout fields while the confirmation modal is open."""

    @property
    def cart_count(self) -> int:
        return sum(line.quantity for line in self.cart)

    @property
    def subtotal_cents(self) -> int:
        return sum(line.quantity * line.product.price_cents for line in self.cart)


def _int(value: str, default: int | None = None) -> int | None:
    try:
        return int(value)
    except ValueError:
        return default


def _cents(value: str) -> int | None:
    """A price typed in dollars (``19.99``, ``$1,200``) in cents; None when it is not a price
    (``inf``, ``nan``, a negative or absurdly large amount, not a number)."""
    try:
        dollars = float(value.replace("$", "").replace(",", ""))
    except ValueError:
        return None
    return round(dollars * 100) if 0 <= dollars <= MAX_PRICE else None  # NaN fails both comparisons


def _option(value: str, label: str, selected: bool) -> str:
    return f"<option value='{esc(value)}'{' selected' if selected else ''}>{esc(label)}</option>"


def _stars(rating: float) -> str:
    return f"{rating:.1f} / 5"


def _options(line_options: dict[str, str]) -> str:
    return ", ".join(f"{name}: {value}" for name, value in line_options.items()) or "-"


class ShopSite(Site):
    """The shop of one catalogue seed."""

    name = "shop"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.catalogue: Catalogue = catalogue(seed)
        self.accounts = {a.email: a for a in accounts(seed)}

    # ------------------------------------------------------------------------------ plumbing

    def new_state(self) -> ShopState:
        return ShopState()

    def facts(self, session: Session) -> ShopFacts | None:
        state: ShopState | None = session.peek_site_state(self.name)
        if state is None:
            return None
        return ShopFacts(seed=self.seed, account=state.account.email if state.account else "",
                         sign_ins=tuple(state.sign_ins), cart=tuple(line.facts() for line in state.cart),
                         orders=tuple(state.orders))

    def handle(self, request: PageRequest) -> PageResponse:
        state: ShopState = request.session.site_state(self.name, self.new_state)
        path, method = request.path, request.method
        if method == "GET":
            if path == "/":
                return self._home(state)
            if path == "/search":
                return self._search(request, state, request.arg("category"))
            if path.startswith("/category/") and self.catalogue.category(path.removeprefix("/category/")):
                return self._search(request, state, path.removeprefix("/category/"))
            if path.startswith("/product/") and path.removeprefix("/product/") in self.catalogue.by_id:
                return self._product(state, self.catalogue.by_id[path.removeprefix("/product/")])
            if path == "/cart":
                return self._cart(state, notice=request.arg("notice"))
            if path == "/signin":
                return self._signin(state, next_page=request.arg("next"))
            if path == "/account":
                return self._account(state)
            if path == "/checkout":
                return self._checkout(state, dict(state.pending or {}), {}, modal=False)
            if path.startswith("/order/"):
                order = next((o for o in state.orders if o.order_id == path.removeprefix("/order/")), None)
                if order is not None:
                    return self._order(state, order)
        elif method == "POST":
            action = {"/cart/add": self._add, "/cart/update": self._update, "/cart/remove": self._remove,
                      "/signin": self._sign_in, "/signout": self._sign_out, "/checkout": self._submit,
                      "/checkout/confirm": self._confirm}.get(path)
            if action is not None:
                return action(request, state)
        return PageResponse(self._page(state, "Not found", "<h1>Page not found</h1>"
                                       f"<p><a href='{self.mount}/'>Back to the shop</a></p>"), status=404)

    def _redirect(self, path: str, **query: str) -> PageResponse:
        return PageResponse(location=f"{self.mount}{path}" + (f"?{urlencode(query)}" if query else ""))

    def _page(self, state: ShopState, title: str, body: str, query: str = "") -> str:
        m = self.mount
        who = (f"<a id='account-link' href='{m}/account'>{esc(state.account.email)}</a>" if state.account
               else f"<a id='signin-link' href='{m}/signin'>Sign in</a>")
        header = (f"<a href='{m}/'><b>Webgym Shop</b></a>"
                  f"<form action='{m}/search' method='get' role='search'>"
                  f"<input id='search' name='q' type='search' placeholder='Search products' "
                  f"aria-label='Search products' value='{esc(query)}'> <button type='submit'>Search</button>"
                  f"</form><a id='cart-link' href='{m}/cart'>Cart ({state.cart_count})</a>{who}")
        return layout(f"{title} - Webgym Shop", header, body)

    def _card(self, product: Product) -> str:
        return (f"<div class='card'><a href='{self.mount}/product/{product.id}'>{esc(product.name)}</a>"
                f"<div class='price'>{product.price}</div><div>{esc(product.brand)} · "
                f"{_stars(product.rating)} ({product.reviews} reviews)</div></div>")

    # --------------------------------------------------------------------------------- pages

    def _home(self, state: ShopState) -> PageResponse:
        links = "".join(f"<li><a href='{self.mount}/category/{c.slug}'>{esc(c.title)}</a></li>"
                        for c in CATEGORIES)
        top = sorted(self.catalogue.products, key=lambda p: (-p.rating, -p.reviews, p.id))[:8]
        body = (f"<h1>Welcome to the Webgym Shop</h1><h2>Categories</h2><ul>{links}</ul>"
                f"<h2>Top rated</h2><div class='grid'>{''.join(self._card(p) for p in top)}</div>")
        return PageResponse(self._page(state, "Home", body))

    def _search(self, request: PageRequest, state: ShopState, category: str) -> PageResponse:
        text = request.arg("q")
        if text:
            request.session.search(self.name, text)
        rating = request.arg("min_rating")
        sort = request.arg("sort") if request.arg("sort") in SORTS else "relevance"
        typed = {name: request.arg(name) for name in ("min_price", "max_price")}
        cents = {name: _cents(value) for name, value in typed.items()}
        errors = {name: _PRICE_ERROR for name, value in typed.items() if value and cents[name] is None}
        query = SearchQuery(text=text, category=category if self.catalogue.category(category) else "",
                            brand=request.arg("brand"), colours=tuple(request.args("colour")),
                            materials=tuple(request.args("material")),
                            min_price_cents=cents["min_price"], max_price_cents=cents["max_price"],
                            min_rating=float(rating) if rating in _RATINGS and rating else None, sort=sort)
        found = self.catalogue.search(query)
        pages = max(1, -(-len(found) // PAGE_SIZE))
        page = min(max(1, _int(request.arg("page"), 1) or 1), pages)
        shown = found[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]
        title = self.catalogue.category(query.category).title if query.category else "Search"
        body = (f"<h1>{esc(title)}</h1>{self._filters(query, rating, typed, errors)}<div class='results'>"
                f"<p id='result-count'>{len(found)} results" + (f" for “{esc(text)}”" if text else "")
                + f" · page {page} of {pages}</p><div class='grid'>{''.join(self._card(p) for p in shown)}"
                f"</div>{self._pagination(request, query, page, pages)}</div>")
        return PageResponse(self._page(state, title, body, query=text))

    def _filters(self, query: SearchQuery, rating: str, typed: dict[str, str], errors: dict[str, str]) -> str:
        def options(items: list[tuple[str, str]], chosen: str) -> str:
            return "".join(_option(v, label, v == chosen) for v, label in items)

        def boxes(name: str, values: list[str], chosen: tuple[str, ...]) -> str:
            return "".join(f"<label><input type='checkbox' name='{name}' value='{esc(v)}'"
                           f"{' checked' if v in chosen else ''}> {esc(v)}</label>" for v in values)

        category = self.catalogue.category(query.category)
        materials = (list(category.materials) if category
                     else sorted({m for c in CATEGORIES for m in c.materials}))
        def price(name: str, label: str, cents: int | None) -> str:
            # A price the filter could not read is shown as typed, with what is wrong with it.
            value = typed[name] if name in errors else "" if cents is None else f"{cents / 100:g}"
            error = f"<p class='error' id='error-{name}'>{esc(errors[name])}</p>" if name in errors else ""
            return f"<label>{label} <input name='{name}' size='6' value='{esc(value)}'></label>{error}"

        return (f"<form class='side' id='filters' action='{self.mount}/search' method='get'>"
                f"<label>Search <input name='q' value='{esc(query.text)}'></label>"
                f"<label>Category <select name='category' id='filter-category'>"
                + options([("", "All categories")] + [(c.slug, c.title) for c in CATEGORIES], query.category)
                + "</select></label><label>Brand <select name='brand' id='filter-brand'>"
                + options([("", "All brands")] + [(b, b) for b in self.catalogue.brands], query.brand)
                + "</select></label><fieldset><legend>Colour</legend>"
                + boxes("colour", list(COLOURS), query.colours)
                + "</fieldset><fieldset><legend>Material</legend>"
                + boxes("material", materials, query.materials) + "</fieldset>"
                + price("min_price", "Min price", query.min_price_cents)
                + price("max_price", "Max price", query.max_price_cents)
                + "<label>Rating <select name='min_rating' id='filter-rating'>"
                + options(list(_RATINGS.items()), rating)
                + "</select></label><label>Sort by <select name='sort' id='sort'>"
                + options(list(SORTS.items()), query.sort)
                + "</select></label><p><button type='submit' id='apply-filters'>Apply</button></p></form>")

    def _pagination(self, request: PageRequest, query: SearchQuery, page: int, pages: int) -> str:
        if pages == 1:
            return ""
        params = [(k, v) for k, vs in request.query.items() if k not in ("page", "session") for v in vs]
        if query.category and not any(k == "category" for k, _ in params):
            params.append(("category", query.category))
        return pagination(lambda number: f"{self.mount}/search?{urlencode(params + [('page', str(number))])}",
                          page, pages)

    def _product(self, state: ShopState, product: Product, errors: dict[str, str] | None = None,
                 chosen: dict[str, str] | None = None) -> PageResponse:
        errors, chosen = errors or {}, chosen or {}

        def select(name: str, label: str, values: tuple[str, ...]) -> str:
            opts = "".join(_option(v, v, chosen.get(name) == v) for v in values)
            error = f"<p class='error' id='error-{name}'>{esc(errors[name])}</p>" if name in errors else ""
            return (f"<label>{label} <select name='{name}' id='option-{name}'>"
                    f"<option value=''>Choose a {name}</option>{opts}</select></label>{error}")

        category = self.catalogue.category(product.category)
        quantity_error = (f"<p class='error' id='error-quantity'>{esc(errors['quantity'])}</p>"
                          if "quantity" in errors else "")
        sizes = select("size", "Size", product.sizes) if product.sizes else ""
        body = (f"<p><a href='{self.mount}/category/{product.category}'>{esc(category.title)}</a></p>"
                f"<h1 id='product-name'>{esc(product.name)}</h1>"
                f"<p class='price' id='product-price'>{product.price}</p>"
                f"<table id='specs'><tr><th>Product code</th><td>{product.id}</td></tr>"
                f"<tr><th>Brand</th><td>{esc(product.brand)}</td></tr>"
                f"<tr><th>Material</th><td>{esc(product.material)}</td></tr>"
                f"<tr><th>Colours</th><td>{esc(', '.join(product.colours))}</td></tr>"
                + (f"<tr><th>Sizes</th><td>{esc(', '.join(product.sizes))}</td></tr>"
                   if product.sizes else "")
                + f"<tr><th>Rating</th><td id='product-rating'>{_stars(product.rating)}</td></tr>"
                f"<tr><th>Reviews</th><td>{product.reviews}</td></tr></table>"
                f"<p>{esc(product.description)}</p>"
                f"<form id='add-to-cart' action='{self.mount}/cart/add' method='post'>"
                f"<input type='hidden' name='product_id' value='{product.id}'>"
                + select("colour", "Colour", product.colours) + sizes
                + f"<label>Quantity <input id='quantity' name='quantity' type='number' min='1' "
                f"max='{MAX_QUANTITY}' value='{esc(chosen.get('quantity', '1'))}'></label>{quantity_error}"
                "<p><button type='submit' id='add-button'>Add to cart</button></p></form>")
        return PageResponse(self._page(state, product.name, body))

    def _cart(self, state: ShopState, notice: str = "") -> PageResponse:
        m = self.mount
        if not state.cart:
            body = f"<h1>Your cart</h1><p id='cart-empty'>Your cart is empty.</p><a href='{m}/'>Shop</a>"
            return PageResponse(self._page(state, "Cart", body))
        rows = "".join(
            f"<tr><td><a href='{m}/product/{line.product.id}'>{esc(line.product.name)}</a></td>"
            f"<td>{esc(_options(line.options))}</td><td>{line.product.price}</td>"
            f"<td><form action='{m}/cart/update' method='post'><input type='hidden' name='line' "
            f"value='{i}'><input name='quantity' type='number' min='1' max='{MAX_QUANTITY}' "
            f"value='{line.quantity}' aria-label='Quantity of line {i + 1}'> "
            "<button>Update</button></form></td>"
            f"<td>{format_price(line.quantity * line.product.price_cents)}</td>"
            f"<td><form action='{m}/cart/remove' method='post'><input type='hidden' name='line' "
            f"value='{i}'><button>Remove</button></form></td></tr>"
            for i, line in enumerate(state.cart))
        body = ((f"<p class='notice'>{esc(notice)}</p>" if notice else "")
                + "<h1>Your cart</h1><table id='cart'><tr><th>Product</th><th>Options</th><th>Price</th>"
                f"<th>Quantity</th><th>Total</th><th></th></tr>{rows}</table>"
                f"<p>Subtotal: <b id='subtotal'>{format_price(state.subtotal_cents)}</b></p>"
                f"<p><a id='checkout-link' href='{m}/checkout'>Proceed to checkout</a></p>")
        return PageResponse(self._page(state, "Cart", body))

    def _signin(self, state: ShopState, error: str = "", email: str = "",
                next_page: str = "") -> PageResponse:
        body = ("<h1>Sign in</h1>" + (f"<p class='error' id='signin-error'>{esc(error)}</p>" if error else "")
                + f"<form id='signin' action='{self.mount}/signin' method='post'>"
                f"<input type='hidden' name='next' value='{esc(next_page)}'>"
                f"<label>Email <input id='email' name='email' type='email' value='{esc(email)}'></label>"
                "<label>Password <input id='password' name='password' type='password'></label>"
                "<p><button type='submit' id='signin-button'>Sign in</button></p></form>")
        return PageResponse(self._page(state, "Sign in", body))

    def _account(self, state: ShopState) -> PageResponse:
        if state.account is None:
            return self._redirect("/signin", next="/account")
        orders = "".join(f"<li><a href='{self.mount}/order/{o.order_id}'>{o.order_id}</a>: "
                         f"{format_price(o.total_cents)}</li>" for o in state.orders
                         if o.account == state.account.email)
        body = (f"<h1>Your account</h1><p>Signed in as <b>{esc(state.account.full_name)}</b> "
                f"({esc(state.account.email)})</p><h2>Orders</h2>"
                f"<ul>{orders or '<li>No orders yet.</li>'}</ul><form action='{self.mount}/signout' "
                "method='post'><button id='signout'>Sign out</button></form>")
        return PageResponse(self._page(state, "Account", body))

    def _checkout(self, state: ShopState, values: dict[str, str], errors: dict[str, str], *,
                  modal: bool) -> PageResponse:
        m = self.mount
        if not state.cart:
            body = f"<h1>Checkout</h1><p id='cart-empty'>Your cart is empty.</p><a href='{m}/'>Shop</a>"
            return PageResponse(self._page(state, "Checkout", body))

        def entry(name: str, label: str, hint: str = "") -> str:
            error = f"<p class='error' id='error-{name}'>{esc(errors[name])}</p>" if name in errors else ""
            value = "" if name == "card_number" else values.get(name, "")
            placeholder = f" placeholder='{hint}'" if hint else ""
            return (f"<label>{label} <input id='{name}' name='{name}' value='{esc(value)}'"
                    f"{placeholder}></label>{error}")

        shipping = "".join(_option(s.value, f"{s.label}: {format_price(s.price_cents)}",
                                   values.get("shipping") == s.value) for s in SHIPPING.values())
        shipping_error = (f"<p class='error' id='error-shipping'>{esc(errors['shipping'])}</p>"
                          if "shipping" in errors else "")
        wrong = ", ".join(FIELDS[name] for name in FIELDS if name in errors)
        summary = (f"<div class='error' id='error-summary' role='alert'>Please correct: {wrong}</div>"
                   if errors else "")
        lines = "".join(f"<li>{line.quantity} × {esc(line.product.name)} ({esc(_options(line.options))})</li>"
                        for line in state.cart)
        body = (f"<h1>Checkout</h1>{summary}<ul id='order-summary'>{lines}</ul>"
                f"<p>Subtotal: {format_price(state.subtotal_cents)}</p>"
                f"<form id='checkout' action='{m}/checkout' method='post'>"
                + entry("full_name", "Full name") + entry("address", "Address") + entry("city", "City")
                + entry("postcode", "Postcode", "AB12 3CD") + entry("card_number", "Card number")
                + entry("card_expiry", "Card expiry", "MM/YY")
                + f"<label>Shipping <select id='shipping' name='shipping'><option value=''>Choose shipping"
                f"</option>{shipping}</select></label>{shipping_error}"
                "<p><button type='submit' id='place-order'>Place order</button></p></form>")
        if modal and state.pending is not None:
            method = SHIPPING[state.pending["shipping"]]
            total = state.subtotal_cents + method.price_cents
            body += (f"<div class='modal-bg'><div class='modal' role='dialog' aria-modal='true' "
                     f"aria-labelledby='confirm-title' id='confirm-dialog'><h2 id='confirm-title'>"
                     f"Confirm your order</h2><p>{state.cart_count} items, shipping {esc(method.label)}, to "
                     f"{esc(state.pending['postcode'])}.</p><p>Total: "
                     f"<b id='confirm-total'>{format_price(total)}</b></p>"
                     f"<form action='{m}/checkout/confirm' method='post'>"
                     "<button type='submit' id='confirm-order'>Confirm order</button> "
                     f"<a id='cancel-order' href='{m}/checkout'>Cancel</a></form></div></div>")
        return PageResponse(self._page(state, "Checkout", body))

    def _order(self, state: ShopState, order: OrderFacts) -> PageResponse:
        lines = "".join(f"<li>{line.quantity} × {esc(line.name)} ({esc(_options(line.options))})</li>"
                        for line in order.lines)
        body = (f"<h1>Thank you for your order</h1><p>Order number <b id='order-id'>{order.order_id}</b></p>"
                f"<ul>{lines}</ul><p>Shipping: {esc(SHIPPING[order.shipping].label)} to "
                f"{esc(order.postcode)}</p>"
                f"<p>Total: <b id='order-total'>{format_price(order.total_cents)}</b></p>")
        return PageResponse(self._page(state, f"Order {order.order_id}", body))

    # ------------------------------------------------------------------------------- actions

    def _add(self, request: PageRequest, state: ShopState) -> PageResponse:
        product = self.catalogue.by_id.get(request.arg("product_id"))
        if product is None:
            return self._redirect("/")
        chosen = {name: request.arg(name) for name in ("colour", "size", "quantity")}
        errors = {}
        if chosen["colour"] not in product.colours:
            errors["colour"] = "Choose a colour."
        if product.sizes and chosen["size"] not in product.sizes:
            errors["size"] = "Choose a size."
        quantity = _int(chosen["quantity"])
        if quantity is None or not 1 <= quantity <= MAX_QUANTITY:
            errors["quantity"] = _QUANTITY_ERROR
        if errors:
            return self._product(state, product, errors, chosen)
        options = {"colour": chosen["colour"]} | ({"size": chosen["size"]} if product.sizes else {})
        for line in state.cart:
            if line.product.id == product.id and line.options == options:
                line.quantity = min(MAX_QUANTITY, line.quantity + quantity)
                break
        else:
            state.cart.append(_Line(product, options, quantity))
        state.pending = None
        return self._redirect("/cart", notice=f"Added {quantity} × {product.name} to your cart.")

    def _line(self, request: PageRequest, state: ShopState) -> int | None:
        index = _int(request.arg("line"))
        return index if index is not None and 0 <= index < len(state.cart) else None

    def _update(self, request: PageRequest, state: ShopState) -> PageResponse:
        index, quantity = self._line(request, state), _int(request.arg("quantity"))
        if index is None:
            return self._redirect("/cart")
        if quantity is None or not 1 <= quantity <= MAX_QUANTITY:
            return self._redirect("/cart", notice=_QUANTITY_ERROR)
        state.cart[index].quantity = quantity
        state.pending = None
        return self._redirect("/cart", notice="Cart updated.")

    def _remove(self, request: PageRequest, state: ShopState) -> PageResponse:
        index = self._line(request, state)
        if index is not None:
            del state.cart[index]
            state.pending = None
        return self._redirect("/cart", notice="Item removed." if index is not None else "")

    def _sign_in(self, request: PageRequest, state: ShopState) -> PageResponse:
        email, password = request.arg("email").lower(), request.arg("password")
        account = self.accounts.get(email)
        next_page = request.arg("next")
        if account is None or account.password != password:
            return self._signin(state, "Unknown email address or wrong password.", email, next_page)
        state.account = account
        state.sign_ins.append(account.email)
        # `next` is a path below the shop (``/account``), read from the form: only a path of this
        # server goes into the redirect (no other host, no header of its own).
        return self._redirect(next_page if same_site_path(next_page) else "/account")

    def _sign_out(self, request: PageRequest, state: ShopState) -> PageResponse:
        state.account = None
        return self._redirect("/")

    def _submit(self, request: PageRequest, state: ShopState) -> PageResponse:
        if not state.cart:
            return self._redirect("/checkout")
        values, errors = validate_checkout({name: request.arg(name) for name in FIELDS})
        if errors:
            state.pending = None
            return self._checkout(state, values, errors, modal=False)
        state.pending = values
        return self._checkout(state, values, {}, modal=True)

    def _confirm(self, request: PageRequest, state: ShopState) -> PageResponse:
        pending = state.pending
        if pending is None or not state.cart:
            return self._redirect("/checkout")
        method = SHIPPING[pending["shipping"]]
        order = OrderFacts(
            order_id=f"WG-{len(state.orders) + 1:04d}", lines=tuple(line.facts() for line in state.cart),
            shipping=method.value, full_name=pending["full_name"], address=pending["address"],
            city=pending["city"], postcode=pending["postcode"], card_last4=pending["card_number"][-4:],
            account=state.account.email if state.account else "",
            total_cents=state.subtotal_cents + method.price_cents)
        state.orders.append(order)
        state.cart.clear()
        state.pending = None
        return self._redirect(f"/order/{order.order_id}")

    def describe(self) -> dict[str, Any]:
        """What the site serves, for logs: seed, products, accounts."""
        return {"site": self.name, "seed": self.seed, "products": len(self.catalogue.products),
                "accounts": len(self.accounts)}
