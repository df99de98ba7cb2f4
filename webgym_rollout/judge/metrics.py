"""`JudgeMetrics`: a judge's pass/fail verdicts against labels, over a set of episodes.

Success is the positive class and the label is the reference. From the four counts (tp, fp, tn,
fn) come agreement (accuracy), precision, recall, F1, specificity, Cohen's kappa, the two success
rates and their gap (judge minus label: positive, the judge is lenient). A ratio whose denominator
is 0 is None (``null`` in JSON, ``-`` in tables): precision when the judge passed nothing, recall
when nothing was a success. Kappa is None when there are no episodes, or when label and judge both
put every episode in one and the same class (chance agreement is then 1: there is nothing to
measure beyond it; their agreement, 1.0, says all there is).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["METRIC_NAMES", "JudgeMetrics"]

METRIC_NAMES = ("agreement", "precision", "recall", "f1", "specificity", "kappa", "label_success_rate",
                "judge_success_rate", "success_rate_gap")
"""The figures `JudgeMetrics.to_dict` writes beside the counts, in order."""


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


@dataclass(frozen=True)
class JudgeMetrics:
    """A judge's verdicts against the labels over a set of episodes (success = positive)."""

    tp: int = 0
    """Both say success."""
    fp: int = 0
    """The judge says success, the label failure."""
    tn: int = 0
    """Both say failure."""
    fn: int = 0
    """The judge says failure, the label success."""

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[bool, bool]]) -> JudgeMetrics:
        """From ``(label, judged)`` pairs."""
        counts = {"tp": 0, "fp": 0, "tn": 0, "fn": 0}
        for label, judged in pairs:
            counts[("t" if label == judged else "f") + ("p" if judged else "n")] += 1
        return cls(**counts)

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.tn + self.fn

    @property
    def agreement(self) -> float | None:
        """Share of the episodes on which the judge and the label agree (accuracy)."""
        return _ratio(self.tp + self.tn, self.n)

    @property
    def accuracy(self) -> float | None:
        """The same as `agreement` (the name ``judge-eval`` gave it first)."""
        return self.agreement

    @property
    def precision(self) -> float | None:
        """Of the judge's passes, the share that are successes (None: it passed none)."""
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        """Of the successes, the share the judge passed (None: there were none)."""
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def f1(self) -> float | None:
        """Harmonic mean of precision and recall, 2tp / (2tp + fp + fn) (None: no success on either side)."""
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    @property
    def specificity(self) -> float | None:
        """Of the failures, the share the judge failed (None: there were none)."""
        return _ratio(self.tn, self.tn + self.fp)

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa, (p_o - p_e) / (1 - p_e): agreement beyond what chance gives with these
        two rates of success. None when there are no episodes, or when label and judge both give
        every episode one and the same class (p_e = 1). Computed in integers: n^2 p_e is exact."""
        n = self.n
        chance = (self.tp + self.fp) * (self.tp + self.fn) + (self.tn + self.fn) * (self.tn + self.fp)
        if n == 0 or chance == n * n:
            return None
        return (n * (self.tp + self.tn) - chance) / (n * n - chance)

    @property
    def label_success_rate(self) -> float | None:
        return _ratio(self.tp + self.fn, self.n)

    @property
    def judge_success_rate(self) -> float | None:
        return _ratio(self.tp + self.fp, self.n)

    @property
    def success_rate_gap(self) -> float | None:
        """Judge minus label success rate (positive: the judge passes more than the labels do)."""
        return _ratio(self.fp - self.fn, self.n)

    def to_dict(self) -> dict[str, Any]:
        """The counts, n and every figure (`METRIC_NAMES`)."""
        return {"n": self.n, "tp": self.tp, "fp": self.fp, "tn": self.tn, "fn": self.fn,
                **{name: getattr(self, name) for name in METRIC_NAMES}}
