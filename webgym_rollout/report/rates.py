"""Success rates with confidence intervals, and the test that compares two runs.

`wilson_interval` (the Wilson score interval: inside [0, 1], never empty at 0 or all successes) and
`SuccessRate` (a count with its interval) serve the report and the learning curve; `sign_test` is
the exact two-sided sign test of tasks won against tasks lost (McNemar's exact test when each task
has one attempt).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

__all__ = ["SuccessRate", "sign_test", "wilson_interval"]


def _z(confidence: float) -> float:
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a success rate `successes` / `trials` at `confidence`.

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or `trials`
    successes. With no trials nothing is known: (0, 1)."""
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"successes: must be between 0 and trials ({trials}), got {successes}")
    if trials == 0:
        return 0.0, 1.0
    z = _z(confidence)
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    # Exact at the ends (the formula gives them up to rounding).
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def sign_test(wins: int, losses: int) -> float | None:
    """Exact two-sided sign test: the chance of a split at least as uneven as `wins` : `losses` when
    each is equally likely. None when there is nothing to test (both 0)."""
    n = wins + losses
    if n == 0:
        return None
    # log C(n, i) / 2^n, summed in log space: exact to float precision for any n, and fast.
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
            for i in range(min(wins, losses) + 1)]
    top = max(logs)
    tail = math.exp(top) * math.fsum(math.exp(v - top) for v in logs)
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class SuccessRate:
    """Successes out of trials, with its interval. The trials are the evaluated episodes
    (infrastructure failures left out) or, for the rate that counts those as failures, every
    episode: the caller decides (`webgym_rollout.report.html.RunSummary` holds both)."""

    successes: int
    trials: int
    low: float = 0.0
    """Lower end of the Wilson score interval."""
    high: float = 1.0
    """Upper end of the Wilson score interval."""

    @classmethod
    def of(cls, successes: int, trials: int, confidence: float = 0.95) -> SuccessRate:
        return cls(successes, trials, *wilson_interval(successes, trials, confidence))

    @property
    def rate(self) -> float | None:
        """successes / trials; None without trials."""
        return self.successes / self.trials if self.trials else None

    def percent(self) -> str:
        """``42.0%``, or ``n/a`` without trials."""
        return "n/a" if self.rate is None else f"{self.rate:.1%}"

    def describe(self) -> str:
        """``42.0% [31.2-53.5] (21/50)``, or ``n/a (0/0)``."""
        if not self.trials:
            return "n/a (0/0)"
        return (f"{self.rate:.1%} [{100 * self.low:.1f}-{100 * self.high:.1f}] "
                f"({self.successes}/{self.trials})")

    def as_dict(self) -> dict[str, Any]:
        return {"successes": self.successes, "trials": self.trials, "rate": self.rate,
                "low": self.low, "high": self.high}
