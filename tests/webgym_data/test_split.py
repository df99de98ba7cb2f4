"""Sites, deduplication and the out-of-distribution split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webgym_data.decompose import decompose_task
from webgym_data.schema import FactGroup, Task
from webgym_data.split import (
    DedupeSettings,
    SplitError,
    SplitSettings,
    _token_ranks,  # the near-duplicate search's token ids
    dedupe,
    key_terms,
    normalise_instruction,
    registrable_domain,
    site_assignment,
    split_tasks,
)


def task(name: str, website: str, *, facts: int = 1, domain: str = "Shopping", groups: int = 1,
         benchmark: str = "b") -> Task:
    return Task(
        task_id=f"{website}|{name}", task_name=name, website=website, benchmark_name=benchmark, domain=domain,
        evaluator_reference=tuple(FactGroup(str(g), f"group {g}", tuple(f"f{g}.{i}" for i in range(facts)))
                                  for g in range(groups)),
    )


@pytest.mark.parametrize(("website", "site"), [
    ("https://www.amazon.com", "amazon.com"),
    ("https://smile.amazon.com/gp/cart", "amazon.com"),
    ("smile.amazon.com", "amazon.com"),
    ("https://WWW.BBC.CO.UK/news", "bbc.co.uk"),
    ("https://user.github.io/page", "user.github.io"),     # a private suffix: each user is a site
    ("http://127.0.0.1:8000/x", "127.0.0.1"),
    ("127.0.0.2:8000", "127.0.0.2"),
    ("http://localhost:5000", "localhost"),
    ("http://[::1]:80/", "::1"),
    ("miniwob:click-button", "miniwob:click-button"),
])
def test_registrable_domain(website, site):
    assert registrable_domain(website) == site


def test_normalise_instruction():
    assert normalise_instruction("  Find the CHEAPEST laptop!! ") == "find the cheapest laptop"
    assert normalise_instruction("Ｆind — the laptop") == "find the laptop"


def test_dedupe_removes_exact_and_near_duplicates_on_the_same_site_only():
    base = ("find the cheapest red cotton t shirt for men in size large with free delivery today and add "
            "it to the cart")
    tasks = [
        task(base, "https://www.shop.com"),
        task(base.upper() + "!", "https://m.shop.com"),                   # exact after normalising, same site
        task(base.replace("today", "now"), "https://shop.com"),            # near: 20 of 22 tokens shared
        task(base, "https://other.org"),                                    # same text, other site: kept
        task("find the cheapest blue laptop", "https://shop.com"),          # different: kept
    ]
    report = dedupe(tasks)
    assert [t.website for t in report.tasks] == ["https://www.shop.com", "https://other.org",
                                                  "https://shop.com"]
    assert (report.exact, report.near) == (1, 1)
    assert {dup for dup, _ in report.removed} == {tasks[1].task_id, tasks[2].task_id}
    assert all(kept == tasks[0].task_id for _, kept in report.removed)
    # Threshold 1.0 keeps near duplicates, still drops exact ones.
    strict = dedupe(tasks, DedupeSettings(near_threshold=1.0))
    assert (strict.exact, strict.near, len(strict.tasks)) == (1, 0, 4)


def test_dedupe_never_removes_existing_tasks():
    old = [task("buy milk", "https://shop.com"), task("buy milk", "https://www.shop.com")]
    new = [task("Buy milk.", "https://x.shop.com"), task("buy bread", "https://shop.com")]
    report = dedupe(new, existing=old)
    assert [t.task_name for t in report.tasks] == ["buy bread"]
    assert report.exact == 1


VOCABULARY = ("find buy the cheapest red blue laptop shirt book flight hotel paris rome "
              "under dollars with free delivery review rating Paris Rome 50 80 'red'")
words = st.sampled_from(VOCABULARY.split(" "))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(words, min_size=1, max_size=10), st.integers(0, 2)), max_size=40),
       st.sampled_from([0.5, 0.7, 0.9]))
def test_dedupe_matches_brute_force(rows, threshold):
    tasks = [task(" ".join(ws), f"https://s{site}.com") for ws, site in rows]
    tasks = list({t.task_id: t for t in tasks}.values())
    report = dedupe(tasks, DedupeSettings(near_threshold=threshold))
    # Brute force: keep a task unless it is within the threshold of an earlier kept task on its site
    # with the same key terms, or the same text (exact).
    kept: list[Task] = []
    for t in tasks:
        a = set(normalise_instruction(t.task_name).split())
        same_site = [k for k in kept if registrable_domain(k.website) == registrable_domain(t.website)]
        if not any(normalise_instruction(t.task_name) == normalise_instruction(k.task_name)
                   or (len(a & (b := set(normalise_instruction(k.task_name).split()))) / len(a | b)
                       >= threshold and key_terms(t.task_name) == key_terms(k.task_name))
                   for k in same_site):
            kept.append(t)
    assert [t.task_id for t in report.tasks] == [t.task_id for t in kept]


def test_the_near_duplicate_search_in_small_join_batches_finds_the_same(monkeypatch):
    """The search joins a batch of probing texts at a time (bounded memory at a low threshold on a
    large site): batches of a few index entries give the same report as one batch."""
    from webgym_data import split

    tasks = [task(f"find the {colour} {thing} {extra}", f"https://s{i % 3}.com")
             for i, (colour, thing, extra) in enumerate(
                 (c, t, e) for c in ("red", "blue", "green") for t in ("shirt", "laptop", "bag")
                 for e in ("", "today", "with free delivery", "under budget"))]
    whole = dedupe(tasks, DedupeSettings(near_threshold=0.5))
    monkeypatch.setattr(split, "_JOIN_ROWS", 2)
    batched = dedupe(tasks, DedupeSettings(near_threshold=0.5))
    assert whole.near > 0
    assert (batched.tasks, batched.near, batched.removed) == (whole.tasks, whole.near, whole.removed)


def jaccard(a: str, b: str) -> float:
    x, y = set(normalise_instruction(a).split()), set(normalise_instruction(b).split())
    return len(x & y) / len(x | y)


WANDA = "Find the 'WANDA' dress in size M and add it to the cart"
WERTA = "Find the 'WERTA' dress in size M and add it to the cart"


def test_instructions_differing_in_a_quoted_name_are_not_duplicates():
    pair = [task(WANDA, "https://shop.com"), task(WERTA, "https://shop.com")]
    assert len(dedupe(pair).tasks) == 2
    # Even at a threshold the wording passes, the different names keep both.
    assert 0.8 <= jaccard(WANDA, WERTA) < 0.9
    report = dedupe(pair, DedupeSettings(near_threshold=0.8))
    assert (len(report.tasks), report.near) == (2, 0)


@pytest.mark.parametrize(("first", "second"), [
    ("Find a laptop under $500 with 16 GB of RAM, a backlit keyboard, a webcam and free delivery, then "
     "add it to the cart", "Find a laptop under $800 with 16 GB of RAM, a backlit keyboard, a webcam and "
     "free delivery, then add it to the cart"),                                           # a number
    ("Find a laptop under $500 with 16 GB of RAM, a backlit keyboard, a webcam and free delivery, then "
     "add it to the cart", "Find a laptop under $500 with 32 GB of RAM, a backlit keyboard, a webcam and "
     "free delivery, then add it to the cart"),                                           # another number
    ("Book the cheapest direct flight from Boston to Paris leaving next Friday morning with one checked "
     "bag and a window seat", "Book the cheapest direct flight from Boston to Rome leaving next Friday "
     "morning with one checked bag and a window seat"),                                   # a name
    ('Search the catalogue for the album "blue train" on vinyl and report its price, its release year and '
     'its label', 'Search the catalogue for the album "blue moon" on vinyl and report its price, its '
     'release year and its label'),                                     # a quoted title (not capitalised)
])
def test_instructions_differing_in_a_number_name_or_quote_are_kept(first, second):
    assert jaccard(first, second) >= 0.8          # similar enough that wording alone would merge them
    pair = [task(first, "https://shop.com"), task(second, "https://shop.com")]
    assert len(dedupe(pair, DedupeSettings(near_threshold=0.8)).tasks) == 2


@pytest.mark.parametrize("copy", [
    "Add it to the cart: find the 'WANDA' dress in size M",                        # reordered
    "Find the 'WANDA' dress in size M and add it to the cart now",                 # a word more
])
def test_reworded_copies_are_still_near_duplicates(copy):
    report = dedupe([task(WANDA, "https://shop.com"), task(copy, "https://shop.com")],
                    DedupeSettings(near_threshold=0.8))
    assert [t.task_name for t in report.tasks] == [WANDA] and report.near == 1
    long = ("Find a laptop under $500 with 16 GB of RAM, a backlit keyboard, a webcam and free delivery, "
            "then add it to the cart")
    reworded = long.replace("then add it", "and then add it")       # default threshold: 21 of 22 tokens
    kept = dedupe([task(long, "https://s.com"), task(reworded, "https://s.com")]).tasks
    assert [t.task_name for t in kept] == [long]


def test_key_terms_are_numbers_quotes_and_names_not_apostrophes_or_sentence_starts():
    assert key_terms(WANDA) == {"“wanda", "wanda", "m"}
    assert key_terms("Find men's shoes. Add them to the cart, don't wait") == frozenset()
    assert key_terms("I want “Blue Moon” from 1,500 listings rated 4.5") == {
        "“blue moon", "blue", "moon", "#1500", "#4.5"}
    assert key_terms("Find a hotel in Paris") != key_terms("Find a hotel in Rome")


def make_set(n_sites: int = 200, per_site: int = 3) -> list[Task]:
    domains = ["Shopping", "Travel", "Finance", "Health"]
    tasks = []
    for s in range(n_sites):
        for i in range(per_site + s % 3):
            tasks.append(task(f"task {i} on site {s}", f"https://www.site{s}.com",
                              facts=1 + (s + i) % 8, domain=domains[s % 4]))
    return tasks


def test_split_is_by_site_near_the_target_and_stratified():
    tasks = make_set()
    # Two hosts of one site: they must land in the same split.
    tasks += [task("a", "https://smile.site7.com"), task("b", "https://m.site7.com")]
    result = split_tasks(tasks, SplitSettings(test_size=60, seed=1))
    assert len(result.train) + len(result.test) == len(tasks)
    assert not result.test_sites & result.train_sites
    assert 55 <= len(result.test) <= 60
    test_sites = {registrable_domain(t.website) for t in result.test}
    assert not test_sites & {registrable_domain(t.website) for t in result.train}
    # Stratified: every domain is in test, in roughly its share of the whole.
    share = Counter(t.domain for t in result.test)
    assert set(share) == {"Shopping", "Travel", "Finance", "Health"}
    assert max(share.values()) <= 2 * min(share.values())
    levels = Counter(t.difficulty_level for t in result.test)
    assert set(levels) == {"easy", "medium", "hard"}


def test_split_is_deterministic_for_a_seed_and_independent_of_input_order():
    tasks = make_set()
    a = split_tasks(tasks, SplitSettings(test_size=50, seed=3))
    b = split_tasks(list(reversed(tasks)), SplitSettings(test_size=50, seed=3))
    c = split_tasks(tasks, SplitSettings(test_size=50, seed=4))
    assert a.test_sites == b.test_sites
    assert a.test_sites != c.test_sites


def test_a_large_site_never_goes_to_test():
    tasks = make_set(50, 1) + [task(f"big {i}", "https://big.com") for i in range(500)]
    result = split_tasks(tasks, SplitSettings(test_size=60, seed=0))
    assert "big.com" in result.train_sites


def test_subtasks_follow_their_parent():
    parents = [task(f"p{i}", f"https://www.s{i}.org", groups=2, facts=3) for i in range(30)]
    subtasks = [s for p in parents for s in decompose_task(p)]
    # A subtask written with another website still follows its parent.
    subtasks[0] = Task(**{**subtasks[0].__dict__, "website": "https://elsewhere.net"})
    result = split_tasks(parents + subtasks, SplitSettings(test_size=20, seed=0))
    where = {t.task_id: "test" for t in result.test} | {t.task_id: "train" for t in result.train}
    assert result.test
    for sub in subtasks:
        assert where[sub.task_id] == where[sub.parent_task_id]


def test_fixed_sites_keep_their_split():
    tasks = make_set(40, 2)
    first = split_tasks(tasks, SplitSettings(test_size=20, seed=0))
    fixed = site_assignment(first.train, first.test)
    more = [task("new", t.website) for t in first.test[:3]] + [task("fresh", "https://new-site.net")]
    second = split_tasks(more, SplitSettings(test_size=0), fixed=fixed)
    assert {t.task_id for t in second.test} == {t.task_id for t in more[:3]}
    assert [t.task_name for t in second.train] == ["fresh"]


def test_site_assignment_rejects_a_site_in_both_splits():
    with pytest.raises(SplitError, match="shop.com"):
        site_assignment([task("a", "https://www.shop.com")], [task("b", "https://m.shop.com")])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["www.", "m.", ""]), st.integers(1, 9)),
                max_size=120),
       st.integers(0, 60), st.integers(0, 5))
def test_split_properties(rows, test_size, seed):
    tasks = [task(f"t{i}", f"https://{prefix}site{s}.com", facts=f) for i, (s, prefix, f) in enumerate(rows)]
    one = split_tasks(tasks, SplitSettings(test_size=test_size, seed=seed))
    two = split_tasks(tasks, SplitSettings(test_size=test_size, seed=seed))
    train_sites = {registrable_domain(t.website) for t in one.train}
    test_sites = {registrable_domain(t.website) for t in one.test}
    assert not train_sites & test_sites
    assert len(one.test) <= test_size
    assert sorted(t.task_id for t in one.train + one.test) == sorted(t.task_id for t in tasks)
    assert [t.task_id for t in one.test] == [t.task_id for t in two.test]


def test_split_and_dedupe_are_the_same_in_a_fresh_interpreter():
    # String hashing is randomised per process: nothing may depend on set or dict-of-str order.

    code = (
        "import json\n"
        "from tests.webgym_data.test_split import make_set\n"
        "from webgym_data.split import SplitSettings, dedupe, split_tasks\n"
        "tasks = make_set(120, 2)\n"
        "tasks += [type(t)(**{**t.__dict__, 'task_id': t.task_id + 'x'}) for t in tasks[:30]]\n"
        "result = split_tasks(dedupe(tasks).tasks, SplitSettings(test_size=40, seed=2))\n"
        "print(json.dumps(sorted(t.task_id for t in result.test)))\n")
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             check=True, cwd=Path(__file__).resolve().parents[2])
        outputs.add(run.stdout.strip())
    here = split_tasks(dedupe(make_set(120, 2) + [
        Task(**{**t.__dict__, "task_id": t.task_id + "x"}) for t in make_set(120, 2)[:30]]).tasks,
        SplitSettings(test_size=40, seed=2))
    assert outputs == {json.dumps(sorted(t.task_id for t in here.test))}


def test_the_target_is_the_test_size_capped_by_the_fraction_of_all_tasks():
    settings = SplitSettings(test_size=100, max_test_fraction=0.2)
    assert [settings.target(n) for n in (1000, 300, 4, 0)] == [100, 60, 0, 0]
    assert SplitSettings(test_size=0).target(1000) == 0


def test_token_ranks_skip_empty_tokens_and_put_the_rarest_first():
    """Empty texts and doubled spaces give no token (they once sent polars down a path that took
    minutes at the build's size); ranks count texts, rarest first, ties by the token."""
    assert _token_ranks(["b a", "a  c", "", " ", "a b b"]).to_list() == [[1, 2], [0, 2], [], [], [1, 2]]
