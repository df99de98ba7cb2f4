"""What a run did: `RunReport`, and the success rates it and the live progress show."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunReport", "rate"]


def rate(successes: int, trials: int) -> str:
    """``3/8 (38%)``: successes of trials, and the share when there were trials."""
    return f"{successes}/{trials} ({100 * successes / trials:.0f}%)" if trials else f"{successes}/0"



@dataclass(frozen=True)
class RunReport:
    """What a run did (also shown by the CLI)."""

    out: Path
    episodes: int
    """Episodes played and written by this invocation."""
    skipped: int
    """Episodes skipped because the manifest already listed them (resume)."""
    steps: int
    successes: int
    errors: dict[str, int]
    elapsed_s: float
    session_retries: int
    parse_errors: int
    invalid_rows: int = 0
    """Task rows left out as invalid (--skip-invalid; listed in the run's manifest)."""
    internal_errors: int = 0
    """Episodes recorded with ``error:internal``: bugs (of the toolkit or of a policy or judge passed
    in), never infrastructure; the run's log holds their tracebacks."""
    first_internal_error: str = ""
    """The first bug's exception and where it was raised ("" without bugs)."""

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def evaluated(self) -> int:
        """Episodes that say something about the agent (infrastructure failures and bugs left out)."""
        return self.episodes - sum(self.errors.values())

    def success_line(self) -> str:
        """Both success rates: ``success 3/8 (38%) of evaluated episodes; 3/10 (30%) with
        infrastructure failures counted as failures``."""
        return (f"success {rate(self.successes, self.evaluated)} of evaluated episodes; "
                f"{rate(self.successes, self.episodes)} with infrastructure failures counted as failures")
