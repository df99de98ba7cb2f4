"""webgym_data.taxonomy: the table, the keyword rules (on real seed tasks too) and the LLM path."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import free_port
from tests.webgym_data.helpers import llm_settings
from webgym_data.llm import LLMClient, LLMUnavailable
from webgym_data.schema import Task
from webgym_data.taxonomy import (
    DEFAULT_TAXONOMY,
    TAXONOMY,
    assign_taxonomy,
    is_valid_taxonomy,
    rule_taxonomy,
    taxonomy_messages,
)


def make_task(name: str, website: str, **kwargs) -> Task:
    return Task.from_row({"task_name": name, "website": website, "benchmark_name": "test", **kwargs})


def client_for(base_url: str, **overrides) -> LLMClient:
    values = {"model": "scripted", "backoff_s": 0.001, "max_retries": 1}
    values.update(overrides)
    return LLMClient(llm_settings(base_url, **values))


def test_table_has_six_domains_of_four_unique_subdomains():
    assert len(TAXONOMY) == 6
    assert all(len(subs) == 4 for subs in TAXONOMY.values())
    subdomains = [sub for subs in TAXONOMY.values() for sub in subs]
    assert len(set(subdomains)) == 24
    assert is_valid_taxonomy(*DEFAULT_TAXONOMY)
    assert not is_valid_taxonomy("Shopping", "Flights")
    assert not is_valid_taxonomy("", "")


@pytest.mark.parametrize(("name", "website", "expected"), [
    ("Find wireless headphones under $100 with noise canceling", "https://www.amazon.com/",
     ("Shopping", "General Merchandise")),
    ("Find a used Honda Civic", "https://smile.amazon.co.uk/", ("Shopping", "General Merchandise")),
    ("Show the arrival time of flight UA 924", "https://www.flightaware.com/", ("Travel", "Flights")),
    ("Find a one way trip from Boston to Denver next Monday", "https://www.google.com/travel/flights",
     ("Travel", "Flights")),
    ("Book a cheap room near the beach", "https://www.bestbeachhotels.net/", ("Travel", "Lodging")),
    ("Find a vegetarian lasagna recipe with over 100 reviews", "https://www.allrecipes.com/",
     ("Local Services & Lifestyle", "Food & Dining")),
    ("Find the open issue with the most comments in a trending repository", "https://github.com/",
     ("Work, Finance & Education", "Software & Developer Tools")),
    ("Find a 2-bedroom apartment for rent under $2000 near downtown", "https://example-listings.net/",
     ("Local Services & Lifestyle", "Housing & Real Estate")),
    ("Find the next Lakers game and the NBA standings", "https://www.espn.com/",
     ("Entertainment & Media", "Sports")),
    ("Who directed the movie Prometheus?", "https://www.google.com/",
     ("Entertainment & Media", "Movies & TV")),
    ("Find the form to renew a permit", "https://www.dmv.virginia.gov/",
     ("Information & Research", "Government & Public Services")),
    ("Find the tuition of the online data science degree", "https://www.example.edu/",
     ("Work, Finance & Education", "Education & Courses")),
    ("Find the latest paper on protein folding by this author", "https://arxiv.org/",
     ("Information & Research", "Science & Academia")),
    ("Open the first result", "https://www.qwxyzabc.com/", DEFAULT_TAXONOMY),
])
def test_rules_on_real_looking_tasks(name, website, expected):
    assert rule_taxonomy(make_task(name, website)) == expected


def test_rules_on_real_seed_tasks_are_valid_deterministic_and_spread(seeds_dir):
    rows = json.loads((seeds_dir / "online_mind2web" / "Online_Mind2Web.json").read_text())
    tasks = [make_task(r["confirmed_task"], r["website"]) for r in rows]
    first = [rule_taxonomy(t) for t in tasks]
    assert first == [rule_taxonomy(t) for t in tasks]
    assert all(is_valid_taxonomy(domain, sub) for domain, sub in first)
    # A real, varied seed set touches most of the table, not one catch-all bucket.
    assert len({sub for _, sub in first}) >= 18
    assert len({domain for domain, _ in first}) == 6
    assert max(first.count(pair) for pair in set(first)) < len(tasks) / 3
    by_site = {t.website: pair for t, pair in zip(tasks, first, strict=True)}
    assert by_site["https://www.amazon.com/"][0] == "Shopping"
    assert by_site["https://www.imdb.com/"] == ("Entertainment & Media", "Movies & TV")


def test_assign_without_client_keeps_valid_pairs_and_fixes_the_rest():
    kept = make_task("Find a recipe for pancakes", "https://www.amazon.com/",
                     domain="Entertainment & Media", subdomain="Games")
    mismatched = make_task("Find a recipe for pancakes", "https://www.allrecipes.com/",
                           domain="Shopping", subdomain="Flights")
    empty = make_task("Track the flight BA 117", "https://www.flightaware.com/")
    out = assign_taxonomy([kept, mismatched, empty])
    assert out[0] is kept
    assert (out[1].domain, out[1].subdomain) == ("Local Services & Lifestyle", "Food & Dining")
    assert (out[2].domain, out[2].subdomain) == ("Travel", "Flights")
    # Everything else about the task is unchanged.
    assert out[2].to_row() | {"domain": "", "subdomain": ""} == empty.to_row()


def test_llm_reply_is_used_cached_and_valid_tasks_are_not_sent(scripted_openai, tmp_path):
    server = scripted_openai(['{"domain": "Entertainment & Media", "subdomain": "Games"}'])
    tasks = [make_task("Find PlayStation 5 consoles", "https://www.amazon.com/"),
             make_task("Track flight BA 117", "https://www.flightaware.com/",
                       domain="Travel", subdomain="Flights")]
    out = assign_taxonomy(tasks, client_for(server.base_url, cache_dir=tmp_path))
    assert (out[0].domain, out[0].subdomain) == ("Entertainment & Media", "Games")
    assert out[1] is tasks[1]
    assert len(server.requests) == 1
    schema = server.requests[0]["response_format"]["json_schema"]["schema"]
    assert set(schema["properties"]["subdomain"]["enum"]) == {s for subs in TAXONOMY.values() for s in subs}

    again = assign_taxonomy(tasks, client_for(server.base_url, cache_dir=tmp_path))
    assert again == out
    assert len(server.requests) == 1


@pytest.mark.parametrize("reply", ['{"domain": "Shopping", "subdomain": "Flights"}',
                                   '{"domain": "Pets", "subdomain": "Dogs"}', "no json at all"])
def test_llm_reply_outside_the_table_falls_back_to_rules(scripted_openai, reply):
    server = scripted_openai([reply])
    task = make_task("Find a vegetarian lasagna recipe", "https://www.allrecipes.com/")
    (out,) = assign_taxonomy([task], client_for(server.base_url, max_retries=1))
    assert (out.domain, out.subdomain) == rule_taxonomy(task)
    assert len(server.requests) == 2  # asked, asked again, then the rules


def test_llm_endpoint_down_raises_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LLMUnavailable, match=re.escape(url)):
        assign_taxonomy([make_task("Anything at all", "https://www.example.com/")], client_for(url))


def test_prompt_lists_the_whole_table():
    system, user = taxonomy_messages(make_task("Find a hotel", "https://www.booking.com/"))
    for domain, subs in TAXONOMY.items():
        assert domain in system["content"]
        assert all(sub in system["content"] for sub in subs)
    assert "https://www.booking.com" in user["content"] and "Find a hotel" in user["content"]
