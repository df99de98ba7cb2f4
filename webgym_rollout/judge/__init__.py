"""Judges: ``await judge.score(episode) -> JudgeResult`` after an episode has ended.

A judge takes the `Episode` (its `Task`, answer and steps) and builds what its model needs inside.
`judges` holds the result type, the rubric judge (an OpenAI-protocol VLM shown key
screenshots and the visited pages), the programmatic judge (the environment's own reward) and
`make_judge`; `site` the `SiteJudge` (a local-site task checked against the site's ground truth);
`rejudge` scores stored episodes again without browsers; `calibration` measures judges against
labels (``webgym-rollout judge-eval``): `labels` reads them (human-label files or columns, or the
local sites' ground truth a run keeps in ``truth.jsonl``, whose file `truth` writes and reads) and
`metrics` holds the figures (`JudgeMetrics`). May
import `webgym_core`, `webgym_data`, `webgym_rollout.errors`, `webgym_rollout.agent` (how replies
are read), `webgym_sites` (the local sites' facts and checks) and `webgym_rollout.trajectory`; never
a browser.

The names of `judges` are re-exported here, so imports written for the former module
`webgym_rollout.judge` keep working. ``JudgeRequest`` (what a judge took before it took the
episode) is deprecated: the name still works, with a DeprecationWarning, for one release.
"""

from typing import Any

from webgym_rollout.judge import judges as _judges
from webgym_rollout.judge.judges import (
    SYSTEM_PROMPT,
    Judge,
    JudgeRejected,
    JudgeReplyInvalid,
    JudgeResult,
    JudgeSettings,
    JudgeTimeout,
    JudgeUnavailable,
    ProgrammaticJudge,
    RubricJudge,
    cited_steps,
    fact_question,
    grounding_question,
    make_judge,
    parse_verdict,
    reference_question,
    select_key_screenshots,
    task_question,
    visited_pages,
)

__all__ = [
    "Judge",
    "JudgeRejected",
    "JudgeReplyInvalid",
    "JudgeResult",
    "JudgeSettings",
    "JudgeTimeout",
    "JudgeUnavailable",
    "ProgrammaticJudge",
    "RubricJudge",
    "SYSTEM_PROMPT",
    "cited_steps",
    "fact_question",
    "grounding_question",
    "make_judge",
    "parse_verdict",
    "reference_question",
    "select_key_screenshots",
    "task_question",
    "visited_pages",
]


def __getattr__(name: str) -> Any:
    if name == "JudgeRequest":
        return _judges.JudgeRequest  # warns
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
