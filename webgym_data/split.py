"""Out-of-distribution train/test split by site, and removal of duplicate instructions.

A *site* is a website's registrable domain (``www.amazon.com`` and ``smile.amazon.com`` are both
``amazon.com``), taken from the Public Suffix List bundled with `publicsuffixlist` (no network).
IP addresses, ``localhost`` and non-HTTP environments (``miniwob:...``) are each their own site.

`split_tasks` puts whole sites in the test split until it holds about ``test_size`` tasks,
preferring sites whose tasks fill the (domain, difficulty level) strata the test split still lacks,
so the test split has the same mix as the whole set as far as the sites allow. Decomposed subtasks
always go where their parent goes. The choice depends only on the tasks and the seed.

`dedupe` removes exact duplicates (same normalised instruction on the same site) and near
duplicates: on the same site, token-set Jaccard similarity >= ``threshold`` *and* the same key
terms (`key_terms`: the numbers, the quoted strings and the names in the instruction). The second
condition keeps tasks that differ in what they ask for, however similar their wording: "Find the
'WANDA' dress in size M" and "Find the 'WERTA' dress in size M" (a quoted name), "... under $50"
and "... under $80" (a number), "... flights to Paris" and "... flights to Rome" (a name), while a
reworded copy ("Add to the cart the 'WANDA' dress in size M") keeps its key terms and is still
removed. Near duplicates are found exactly, without comparing all pairs, by prefix filtering (as in
PPJoin): tokens are ordered by global rarity and two sets can only reach the threshold if their
short rare-token prefixes meet; only the pairs found are checked for key terms.

Exceptions (defined in `webgym_data.errors`)::

    WebgymDataError
     └── SplitError   (bad settings, or a fixed assignment that breaks the split rules)
"""

from __future__ import annotations

import ipaddress
import math
import random
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

from webgym_data.errors import SplitError
from webgym_data.schema import Task

__all__ = [
    "DedupeReport",
    "DedupeSettings",
    "SplitError",
    "SplitResult",
    "SplitSettings",
    "dedupe",
    "key_terms",
    "normalise_instruction",
    "normalise_instructions",
    "registrable_domain",
    "site_assignment",
    "split_tasks",
]


# --------------------------------------------------------------------------------------- sites

@lru_cache(maxsize=1)
def _psl():
    from publicsuffixlist import PublicSuffixList  # optional: publicsuffixlist

    return PublicSuffixList()


@lru_cache(maxsize=1 << 20)
def registrable_domain(website: str) -> str:
    """The site a website belongs to: its registrable domain, lower-case.

    IP addresses and single-label hosts (``localhost``) are their own site; a URL without a host
    (``miniwob:click-button``) is its own site.
    """
    text = (website or "").strip()
    if not text:
        return ""
    if "://" not in text:
        if ":" in text.split("/", 1)[0] and not text.split(":", 1)[1][:1].isdigit():
            return text.lower()  # a scheme without a host, e.g. "miniwob:click-button"
        text = "//" + text
    authority = text.partition("//")[2]
    for stop in "/?#":
        authority = authority.partition(stop)[0]
    authority = authority.rpartition("@")[2]
    if "[" in authority:  # IPv6 literal: let urlsplit take it apart
        try:
            host = urlsplit(text).hostname or ""
        except ValueError:
            host = ""
    else:
        host = authority.partition(":")[0]
    host = host.rstrip(".").lower()
    if not host:
        return text.lower()
    if host[-1].isdigit() or ":" in host:  # only these can be IP addresses; skip the costly parse
        try:
            ipaddress.ip_address(host)
            return host
        except ValueError:
            pass
    return _psl().privatesuffix(host) or host


# --------------------------------------------------------------------------------------- dedupe

def normalise_instructions(texts: Sequence[str]) -> list[str]:
    """`normalise_instruction` of many texts at once (vectorised with polars)."""
    import polars as pl  # optional: polars

    series = pl.Series(texts, dtype=pl.String).fill_null("")
    return (series.str.normalize("NFKC").str.to_lowercase()
            .str.replace_all(r"[^\w\s]+", " ").str.replace_all(r"\s+", " ").str.strip_chars().to_list())


def normalise_instruction(text: str) -> str:
    """NFKC, lower-case, punctuation-free, single-spaced form of an instruction."""
    return normalise_instructions([text])[0]


# Key terms. Quoted strings: between straight or curly quotes that do not touch a letter outside
# (so the apostrophes of "men's" and "don't" are not quotes). Numbers: digit runs, with their
# thousands separators and decimals ("15,000", "4.5"). Names: capitalised words that do not start a
# sentence (the first word of a sentence is capitalised whatever it is), and "I" is not a name.
_QUOTED = re.compile(r"""(?<![^\W_])(?:'([^'\n]+)'|"([^"\n]+)"|‘([^’\n]+)’|“([^”\n]+)”)(?![^\W_])""")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SENTENCE = re.compile(r"(?:^|[.!?:;]\s+|\n)\W*")
_WORD = re.compile(r"[^\W\d_][\w'’&-]*")


@lru_cache(maxsize=1 << 16)
def key_terms(instruction: str) -> frozenset[str]:
    """What an instruction asks for by name: its numbers, quoted strings and names (capitalised
    words that do not start a sentence), case-folded. Two instructions with different key terms are
    never near duplicates: they differ in the product, place, quantity or quote they ask about.

    >>> sorted(key_terms("Find the 'WANDA' dress in size M and add 2 to the cart"))
    ['#2', 'm', 'wanda', '“wanda']
    """
    text = unicodedata.normalize("NFKC", instruction)
    terms: set[str] = set()
    for match in _QUOTED.finditer(text):
        quoted = next(group for group in match.groups() if group is not None)
        terms.add("“" + " ".join(quoted.casefold().split()))
    terms.update("#" + number.replace(",", "") for number in _NUMBER.findall(text))
    starts = {m.end() for m in _SENTENCE.finditer(text)}
    for word in _WORD.finditer(text):
        if word.start() not in starts and word.group()[0].isupper() and word.group() != "I":
            terms.add(word.group().casefold().rstrip("'’-"))
    return frozenset(terms)


def _token_ranks(texts: Sequence[str]):
    """Each normalised text's distinct tokens as ids ranked by global rarity (rarest = smallest),
    sorted, so a set's prefix is its rarest tokens: a polars list column."""
    import polars as pl  # optional: polars

    lists = pl.Series("tok", texts, dtype=pl.String).str.split(" ").list.unique()
    flat = lists.explode()
    counts = flat.filter(flat != "").value_counts(name="n").sort(["n", "tok"])
    ranks = counts.select("tok", pl.int_range(pl.len(), dtype=pl.Int64).alias("rank"))
    # A join, not `replace_strict` inside `list.eval`: with an empty token anywhere (an empty text,
    # two spaces) polars 1.x took a path per list: 19 s for 20k texts instead of 0.06 s.
    tokens = (pl.DataFrame({"tok": lists}).with_row_index("row").explode("tok")
              .join(ranks, on="tok", how="left", maintain_order="left"))
    return tokens.group_by("row", maintain_order=True).agg(pl.col("rank").drop_nulls().sort())["rank"]


@dataclass(frozen=True)
class DedupeSettings:
    """How duplicate instructions are found."""

    near_threshold: float = 0.9
    """Token-set Jaccard similarity at or above which two instructions on one site with the same
    numbers, quoted strings and names are duplicates (1.0 keeps only exact-duplicate removal)."""

    def __post_init__(self) -> None:
        if not 0 < self.near_threshold <= 1:
            raise SplitError(f"near_threshold: must be in (0, 1], got {self.near_threshold}")


@dataclass
class DedupeReport:
    """What `dedupe` kept and removed."""

    tasks: list[Task]
    exact: int = 0
    near: int = 0
    removed: list[tuple[str, str]] = field(default_factory=list)
    """(removed task id, id of the kept task it duplicates)."""


def dedupe(tasks: Sequence[Task], settings: DedupeSettings = DedupeSettings(), *,
           existing: Sequence[Task] = ()) -> DedupeReport:
    """Drop exact and near-duplicate instructions on the same site, keeping the first seen.

    A task is removed when it is a duplicate of an earlier task that was kept. `existing` tasks
    (an earlier version of the set) come first and are never removed.
    """
    threshold = settings.near_threshold
    everything = [*existing, *tasks]
    n_existing = len(existing)
    report = DedupeReport(tasks=[])

    # Exact duplicates: the same normalised text on the same site. Only the first of each text
    # takes part in the near-duplicate search (identical copies would make it quadratic).
    first_of: dict[tuple[str, str], int] = {}
    copy_of: dict[int, int] = {}
    texts: list[tuple[int, str, str]] = []  # (index, site, normalised text) of first occurrences
    norms = normalise_instructions([t.task_name for t in everything])
    for i, (task, norm) in enumerate(zip(everything, norms, strict=True)):
        key = (registrable_domain(task.website), norm)
        first = first_of.setdefault(key, i)
        if first == i:
            texts.append((i, *key))
        else:
            copy_of[i] = first

    partners = _similar_pairs(texts, threshold) if threshold < 1 else {}
    # Similar wording is not enough: the pair must ask for the same things (`key_terms`).
    partners = {i: same for i, others in partners.items()
                if (same := [j for j in others if key_terms(everything[i].task_name)
                             == key_terms(everything[j].task_name)])}
    kept: set[int] = set()
    for i, task in enumerate(everything):
        if i < n_existing:
            kept.add(i)
            continue
        if i in copy_of:
            first = copy_of[i]
            removed_for = first if first in kept else next(
                (j for j in partners.get(first, ()) if j < first and j in kept), None)
            # A copy of a removed text is removed with it (its kept twin is the same text).
            report.exact += 1
            report.removed.append((task.task_id, everything[removed_for if removed_for is not None
                                                            else first].task_id))
            continue
        earlier = [j for j in partners.get(i, ()) if j < i and j in kept]
        if earlier:
            report.near += 1
            report.removed.append((task.task_id, everything[min(earlier)].task_id))
            continue
        kept.add(i)
        report.tasks.append(task)
    return report


def _similar_pairs(texts: Sequence[tuple[int, str, str]], threshold: float) -> dict[int, list[int]]:
    """``index -> indices`` of texts on the same site with token-set Jaccard >= threshold.

    Exact PPJoin-style candidate generation, on columns (polars): sets are visited by increasing
    size (ties in input order); each probes the index with its first ``|x| - ceil(t|x|) + 1``
    tokens (rarest first) and is indexed under its first ``|x| - ceil(2t/(1+t)|x|) + 1`` tokens,
    which is enough because every earlier set is no larger. The probes meet the index in joins;
    candidates pass a size filter, then the exact Jaccard check. Each index's partners come in the
    order a set-by-set search finds them.
    """
    import polars as pl  # optional: polars

    frame = (pl.DataFrame({"site": [site for _, site, _ in texts],
                           "tokens": _token_ranks([text for _, _, text in texts])})
             .with_row_index("k").with_columns(pl.col("k").cast(pl.Int64),
                                               size=pl.col("tokens").list.len().cast(pl.Int64))
             .filter(pl.col("size") > 0))
    size = pl.col("size").cast(pl.Float64)
    probe = _prefixes(frame, pl.col("size") - (threshold * size - 1e-9).ceil().cast(pl.Int64) + 1)
    index_fraction = 2 * threshold / (1 + threshold)
    indexed = (_prefixes(frame, pl.col("size") - (index_fraction * size - 1e-9).ceil().cast(pl.Int64) + 1)
               .rename({"k": "o", "size": "o_size", "pos": "o_pos"}))
    # The join is made a batch of probing sets at a time, each batch meeting at most about
    # _JOIN_ROWS index entries, so a low threshold on a large site cannot exhaust the memory.
    meets = (probe.join(indexed.group_by("site", "token").len(), on=["site", "token"])
             .group_by("k").agg(pl.col("len").sum()).sort("k")
             .select("k", batch=pl.col("len").cum_sum() // _JOIN_ROWS))
    probe = probe.join(meets, on="k")
    parts = [part for _, part in probe.group_by("batch")] or [probe]
    found = (pl.concat([_candidates(part, indexed, frame, threshold) for part in parts])
             .sort("size", "k", "pos", "o_size", "o"))
    pairs: dict[int, list[int]] = defaultdict(list)
    for k, other in zip(found["k"].to_list(), found["o"].to_list(), strict=True):
        a, b = texts[k][0], texts[other][0]
        pairs[a].append(b)
        pairs[b].append(a)
    return pairs


_JOIN_ROWS = 5_000_000


def _candidates(probe, indexed, frame, threshold: float):
    """The pairs of `probe`'s sets and earlier indexed sets that reach `threshold` (k, o, size,
    o_size and the probe position where they first meet)."""
    import polars as pl  # optional: polars

    size = pl.col("size").cast(pl.Float64)
    return (probe.drop("batch").join(indexed, on=["site", "token"])
            .filter((pl.col("o_size") < pl.col("size"))
                    | ((pl.col("o_size") == pl.col("size")) & (pl.col("o") < pl.col("k"))))
            .filter(pl.col("o_size").cast(pl.Float64) >= threshold * size)
            .group_by("k", "o").agg(pl.col("size").first(), pl.col("o_size").first(), pl.col("pos").min())
            .join(frame.select("k", "tokens"), on="k")
            .join(frame.select(pl.col("k").alias("o"), pl.col("tokens").alias("o_tokens")), on="o")
            .with_columns(common=pl.col("tokens").list.set_intersection("o_tokens").list.len())
            .filter(pl.col("common") >= threshold * (size + pl.col("o_size") - pl.col("common")) - 1e-9)
            .select("k", "o", "size", "o_size", "pos"))


def _prefixes(frame, length):
    """One row per token of each set's first `length` tokens: k, site, size, token, pos."""
    import polars as pl  # optional: polars

    return (frame.select("k", "site", "size", pl.col("tokens").list.head(length).alias("token"))
            .explode("token").with_columns(pos=pl.int_range(pl.len()).over("k")))


# --------------------------------------------------------------------------------------- split

@dataclass(frozen=True)
class SplitSettings:
    """How the out-of-distribution test split is chosen."""

    test_size: int = 1167
    """Target number of test tasks (subtasks included); the split gets as close as sites allow."""
    seed: int = 0
    """Seed of the site order; the same tasks and seed always give the same split."""
    max_test_fraction: float = 0.2
    """The test split never takes more than this fraction of all tasks (a small set keeps most of
    its tasks for training even when `test_size` is larger)."""
    max_site_fraction: float = 0.05
    """Sites holding more than this fraction of `test_size` tasks go to test only when the smaller
    sites cannot fill it, so one large site does not dominate the test split."""

    def __post_init__(self) -> None:
        if self.test_size < 0:
            raise SplitError(f"test_size: must be >= 0, got {self.test_size}")
        if not 0 <= self.max_test_fraction <= 1:
            raise SplitError(f"max_test_fraction: must be in [0, 1], got {self.max_test_fraction}")
        if not 0 < self.max_site_fraction <= 1:
            raise SplitError(f"max_site_fraction: must be in (0, 1], got {self.max_site_fraction}")

    def target(self, tasks: int) -> int:
        """How many of `tasks` tasks the test split aims at: `test_size`, capped at
        `max_test_fraction` of them."""
        return min(self.test_size, math.floor(self.max_test_fraction * tasks))


@dataclass
class SplitResult:
    """The two splits and the site each task was assigned by."""

    train: list[Task]
    test: list[Task]
    test_sites: set[str]
    train_sites: set[str]


def split_tasks(tasks: Sequence[Task], settings: SplitSettings = SplitSettings(), *,
                fixed: Mapping[str, str] | None = None) -> SplitResult:
    """Split `tasks` into train and test with no site in both.

    `fixed` maps sites to ``"train"``/``"test"`` that must keep their split (used when extending
    a published version); only the other sites are chosen, and the test split then grows only up
    to ``test_size`` with new sites.
    """
    fixed = dict(fixed or {})
    site_of_website = {w: registrable_domain(w) for w in {t.website for t in tasks}}
    # Subtasks follow their parent, even if their website were written differently.
    parent_site = {t.task_id: site_of_website[t.website] for t in tasks if not t.parent_task_id}
    sites = [parent_site.get(t.parent_task_id, site_of_website[t.website]) if t.parent_task_id
             else site_of_website[t.website] for t in tasks]
    # Counted at C speed on (site, domain, level) triples, then grouped per site. A task without a
    # rubric or a seed label is a stratum of its own ("unknown").
    triples = Counter(zip(sites, (t.domain for t in tasks), (t.difficulty_level for t in tasks),
                          strict=True))
    strata_of_site: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    totals: Counter[tuple[str, str]] = Counter()
    for (site, domain, level), count in triples.items():
        strata_of_site[site][(domain, level)] = count
        totals[(domain, level)] += count

    test_sites = {s for s, where in fixed.items() if where == "test" and s in strata_of_site}
    current: Counter[tuple[str, str]] = Counter()
    for site in test_sites:
        current.update(strata_of_site[site])
    n_test = sum(current.values())
    n_all = len(tasks)
    target = settings.target(n_all)
    if target and n_test < target and n_all:
        wanted = {s: target * c / n_all for s, c in totals.items()}
        # Sites sorted first so the shuffle depends only on the seed, not on the input order.
        candidates = sorted(s for s in strata_of_site if s not in fixed)
        random.Random(settings.seed).shuffle(candidates)
        limit = max(1, math.floor(settings.max_site_fraction * target))
        # Pass 1: small sites whose tasks mostly fill strata the test split lacks; pass 2: any
        # small site that fits; pass 3 (only when small sites run out): any site that fits.
        for strict, capped in ((True, True), (False, True), (False, False)):
            for site in candidates:
                if n_test >= target:
                    break
                counts = strata_of_site[site]
                size = sum(counts.values())
                if site in test_sites or (capped and size > limit) or n_test + size > target:
                    continue
                if strict:
                    useful = sum(min(c, max(0.0, wanted[s] - current[s])) for s, c in counts.items())
                    if useful < 0.5 * size:
                        continue
                test_sites.add(site)
                current.update(counts)
                n_test += size
    in_test = [site in test_sites for site in sites]
    train = [task for task, is_test in zip(tasks, in_test, strict=True) if not is_test]
    test = [task for task, is_test in zip(tasks, in_test, strict=True) if is_test]
    return SplitResult(train=train, test=test, test_sites=test_sites, train_sites=set(sites) - test_sites)


def site_assignment(train: Iterable[Task], test: Iterable[Task]) -> dict[str, str]:
    """``site -> "train"/"test"`` of an existing split; raises `SplitError` if a site is in both."""
    assignment: dict[str, str] = {}
    for name, tasks in (("train", train), ("test", test)):
        for task in tasks:
            site = registrable_domain(task.website)
            if assignment.setdefault(site, name) != name:
                raise SplitError(f"site {site} is in both train and test (task {task.task_id})")
    return assignment
