"""The shop's catalogue: a few thousand generated products, the same for the same seed.

`catalogue(seed)` builds (and caches) a `Catalogue`: `PRODUCTS_PER_CATEGORY` products in each of
the `CATEGORIES`, with a generated brand, a material, the colours (and, for clothes and shoes, the
sizes) it comes in, a price, a rating and a review count. Names are unique within a catalogue. No
third-party data: every word comes from the small lists below, drawn with ``random.Random(seed)``.

`Catalogue.search` is what the search page shows: the products matching a query (every word of it
in the product's text) and the filters, in the chosen order.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CATEGORIES", "COLOURS", "PRODUCTS_PER_CATEGORY", "SORTS", "Catalogue", "Category", "Product",
           "SearchQuery", "catalogue", "format_price"]

PRODUCTS_PER_CATEGORY = 250


@dataclass(frozen=True)
class Category:
    slug: str
    title: str
    nouns: tuple[str, ...]
    materials: tuple[str, ...]
    sizes: tuple[str, ...]
    """The sizes its products come in (empty: the category has no sizes)."""
    price_range: tuple[int, int]
    """Lowest and highest price in whole currency units."""


_CLOTHES = ("XS", "S", "M", "L", "XL")
_SHOES = ("38", "39", "40", "41", "42", "43", "44", "45")
CATEGORIES: tuple[Category, ...] = (
    Category("t-shirts", "T-shirts", ("T-shirt", "Tee", "Crew Tee", "V-neck Tee"),
             ("cotton", "organic cotton", "linen", "bamboo"), _CLOTHES, (9, 45)),
    Category("shirts", "Shirts", ("Shirt", "Oxford Shirt", "Flannel Shirt", "Overshirt"),
             ("cotton", "linen", "flannel", "denim"), _CLOTHES, (19, 95)),
    Category("jackets", "Jackets", ("Jacket", "Parka", "Rain Jacket", "Bomber"),
             ("nylon", "wool", "denim", "leather"), _CLOTHES, (39, 320)),
    Category("trousers", "Trousers", ("Chinos", "Jeans", "Joggers", "Cargo Trousers"),
             ("cotton", "denim", "wool", "linen"), _CLOTHES, (25, 140)),
    Category("sneakers", "Sneakers", ("Sneakers", "Runners", "Trainers", "High-tops"),
             ("canvas", "leather", "mesh", "suede"), _SHOES, (35, 210)),
    Category("boots", "Boots", ("Boots", "Chelsea Boots", "Hiking Boots", "Ankle Boots"),
             ("leather", "suede", "rubber", "nubuck"), _SHOES, (49, 280)),
    Category("backpacks", "Backpacks", ("Backpack", "Daypack", "Rolltop Pack", "Laptop Bag"),
             ("nylon", "canvas", "polyester", "leather"), (), (22, 180)),
    Category("mugs", "Mugs", ("Mug", "Travel Mug", "Tumbler", "Cup"),
             ("ceramic", "stoneware", "steel", "glass"), (), (6, 38)),
    Category("lamps", "Lamps", ("Desk Lamp", "Floor Lamp", "Table Lamp", "Reading Light"),
             ("brass", "steel", "oak", "ceramic"), (), (18, 260)),
    Category("headphones", "Headphones", ("Headphones", "Earbuds", "Headset", "On-ear Headphones"),
             ("plastic", "aluminium", "steel", "fabric"), (), (15, 390)),
    Category("watches", "Watches", ("Watch", "Chronograph", "Field Watch", "Dive Watch"),
             ("steel", "titanium", "leather", "ceramic"), (), (29, 650)),
    Category("blankets", "Blankets", ("Blanket", "Throw", "Quilt", "Bedspread"),
             ("wool", "cotton", "fleece", "cashmere"), (), (24, 240)),
)
COLOURS = ("black", "white", "grey", "navy", "blue", "green", "olive", "red", "burgundy", "orange",
           "yellow", "pink", "purple", "brown", "beige")
_ADJECTIVES = ("Classic", "Urban", "Alpine", "Coastal", "Everyday", "Heritage", "Nordic", "Summit", "Breeze",
               "Harbor", "Meadow", "Canyon", "Drift", "Ember", "Frost", "Grove", "Horizon", "Juniper",
               "Lumen", "Maple", "Nimbus", "Orbit", "Pioneer", "Quarry", "Ridge", "Sable", "Tidal",
               "Vale", "Willow", "Zephyr")
_SYLLABLES = ("nor", "vik", "lam", "ber", "tor", "sal", "ka", "ren", "mo", "dal", "fen", "ri", "os", "tal",
              "ven", "ga", "lu", "mar", "quin", "sto")
_BRANDS = 36
SORTS = {"relevance": "Relevance", "price_asc": "Price: low to high", "price_desc": "Price: high to low",
         "rating": "Rating: high to low", "name": "Name: A to Z"}
"""The sort orders of the search page: value -> label."""


def format_price(cents: int) -> str:
    """``$1,234.50`` for 123450 cents."""
    return f"${cents // 100:,}.{cents % 100:02d}"


@dataclass(frozen=True)
class Product:
    id: str
    name: str
    category: str
    """The category's slug."""
    brand: str
    material: str
    colours: tuple[str, ...]
    sizes: tuple[str, ...]
    price_cents: int
    rating: float
    """0.0-5.0 in tenths."""
    reviews: int
    description: str

    @property
    def price(self) -> str:
        return format_price(self.price_cents)

    @property
    def text(self) -> str:
        """What a search matches, lower case."""
        return " ".join((self.name, self.brand, self.category, self.material, *self.colours)).lower()


@dataclass(frozen=True)
class SearchQuery:
    """The search page's fields; empty means "any"."""

    text: str = ""
    category: str = ""
    brand: str = ""
    colours: tuple[str, ...] = ()
    """Any of these colours."""
    materials: tuple[str, ...] = ()
    """Any of these materials."""
    min_price_cents: int | None = None
    max_price_cents: int | None = None
    min_rating: float | None = None
    sort: str = "relevance"


class Catalogue:
    """The products of one seed, by id and in id order."""

    def __init__(self, seed: int, products: Sequence[Product], brands: Sequence[str]):
        self.seed = seed
        self.products = tuple(products)
        self.brands = tuple(brands)
        self.by_id = {p.id: p for p in self.products}
        self.by_name = {p.name.lower(): p for p in self.products}

    def category(self, slug: str) -> Category | None:
        return next((c for c in CATEGORIES if c.slug == slug), None)

    def search(self, query: SearchQuery) -> list[Product]:
        """The products matching `query`, in its sort order (ties by id)."""
        words = query.text.lower().split()
        found = []
        for product in self.products:
            text = product.text
            if words and not all(w in text for w in words):
                continue
            if query.category and product.category != query.category:
                continue
            if query.brand and product.brand != query.brand:
                continue
            if query.colours and not set(query.colours) & set(product.colours):
                continue
            if query.materials and product.material not in query.materials:
                continue
            if query.min_price_cents is not None and product.price_cents < query.min_price_cents:
                continue
            if query.max_price_cents is not None and product.price_cents > query.max_price_cents:
                continue
            if query.min_rating is not None and product.rating < query.min_rating:
                continue
            found.append(product)
        if query.sort == "price_asc":
            found.sort(key=lambda p: (p.price_cents, p.id))
        elif query.sort == "price_desc":
            found.sort(key=lambda p: (-p.price_cents, p.id))
        elif query.sort == "rating":
            found.sort(key=lambda p: (-p.rating, -p.reviews, p.id))
        elif query.sort == "name":
            found.sort(key=lambda p: (p.name, p.id))
        elif words:  # relevance: more query words in the name first
            found.sort(key=lambda p: (-sum(w in p.name.lower() for w in words), p.id))
        return found


def _brand(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 2, 3)))).capitalize()


@functools.lru_cache(maxsize=4)
def catalogue(seed: int) -> Catalogue:
    """The catalogue of `seed` (built once per seed and cached; immutable)."""
    rng = random.Random(f"shop-catalogue:{seed}")
    brands: list[str] = []
    while len(brands) < _BRANDS:
        brand = _brand(rng)
        if brand not in brands and len(brand) >= 4:
            brands.append(brand)
    products, names = [], set()
    for category in CATEGORIES:
        made = 0
        while made < PRODUCTS_PER_CATEGORY:
            brand, material = rng.choice(brands), rng.choice(category.materials)
            noun, adjective = rng.choice(category.nouns), rng.choice(_ADJECTIVES)
            name = f"{brand} {adjective} {material.title()} {noun}"
            if name.lower() in names:
                continue
            names.add(name.lower())
            made += 1
            low, high = category.price_range
            whole = int(low + (high - low) * rng.random() ** 1.6)
            cents = whole * 100 + rng.choice((0, 0, 50, 95, 99))
            colours = tuple(sorted(rng.sample(COLOURS, rng.randint(1, 4)), key=COLOURS.index))
            sizes = category.sizes
            if sizes and rng.random() < 0.3:  # some sizes sold out
                start = rng.randint(0, 1)
                sizes = sizes[start:len(sizes) - rng.randint(0, 1)]
            rating = round(min(5.0, max(1.0, rng.gauss(3.9, 0.7))), 1)
            reviews = int(rng.expovariate(1 / 120))
            description = (f"A {adjective.lower()} {noun.lower()} by {brand}, made of {material}. "
                           f"Available in {', '.join(colours)}.")
            products.append(Product(id=f"P{len(products) + 1:05d}", name=name, category=category.slug,
                                    brand=brand, material=material, colours=colours, sizes=sizes,
                                    price_cents=cents, rating=rating, reviews=reviews,
                                    description=description))
    return Catalogue(seed, products, sorted(brands))
