"""Reading a ``/metrics`` text the way Prometheus does: through ``prometheus_client``'s parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a Prometheus text, by (sample name, its labels as a frozenset of pairs)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of sample `name` with exactly these labels, or None when the text has none."""
    return samples(text).get((name, frozenset(labels.items())))
