"""The shop's catalogue and accounts: deterministic by seed, unique names, search and filters."""

from __future__ import annotations

from webgym_sites.accounts import accounts
from webgym_sites.catalogue import CATEGORIES, PRODUCTS_PER_CATEGORY, SearchQuery, catalogue


def test_same_seed_same_catalogue_other_seed_another():
    first, again, other = catalogue(0), catalogue.__wrapped__(0), catalogue(1)
    assert first.products == again.products and first.brands == again.brands
    assert first.products != other.products
    assert len(first.products) == len(CATEGORIES) * PRODUCTS_PER_CATEGORY
    assert len({p.name.lower() for p in first.products}) == len(first.products)
    assert accounts(3) == accounts.__wrapped__(3) != accounts(4)
    assert len({a.email for a in accounts(3)}) == len(accounts(3))


def test_products_are_well_formed():
    for product in catalogue(0).products:
        category = catalogue(0).category(product.category)
        low, high = category.price_range
        assert low * 100 <= product.price_cents <= high * 100 + 99
        assert product.colours and set(product.sizes) <= set(category.sizes)
        assert bool(product.sizes) == bool(category.sizes)
        assert 1.0 <= product.rating <= 5.0 and product.material in category.materials


def test_search_filters_and_sorts():
    shop = catalogue(0)
    found = shop.search(SearchQuery(text="linen shirt", colours=("blue", "navy"), sort="price_asc"))
    assert found, "the seed-0 catalogue has blue or navy linen shirts"
    assert all("linen" in p.text and "shirt" in p.text and {"blue", "navy"} & set(p.colours) for p in found)
    assert [p.price_cents for p in found] == sorted(p.price_cents for p in found)
    ranged = shop.search(SearchQuery(category="mugs", min_price_cents=1000, max_price_cents=2000,
                                     min_rating=4.0, sort="rating"))
    assert ranged and all(p.category == "mugs" and 1000 <= p.price_cents <= 2000 and p.rating >= 4.0
                          for p in ranged)
    assert [p.rating for p in ranged] == sorted((p.rating for p in ranged), reverse=True)
    assert shop.search(SearchQuery(text="no-such-word-anywhere")) == []
    assert len(shop.search(SearchQuery())) == len(shop.products)
