"""`LibraryJudge`: an episode of a Larkspur Library task is judged by the site's ground truth.

The judge finds the episode's session in the URLs its steps visited (the kind opened the start URL
with ``?session=<id>``), asks the truth listener what that session reserved, and passes the episode
when it reserved the task's book and nothing else. What the agent answered does not count: the truth
does.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from urllib.parse import parse_qs, urlsplit

from examples.my_site.tasks import book_of
from webgym_rollout.judge import JudgeResult, JudgeUnavailable
from webgym_rollout.trajectory import Episode, Verdict

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the truth is on 127.0.0.1


def session_of(episode: Episode) -> str:
    """The ``session`` query parameter of the first visited URL that carries one ("" if none does)."""
    for step in episode.steps:
        found = parse_qs(urlsplit(step.url).query).get("session")
        if found:
            return found[0]
    return ""


# --8<-- [start:judge]
class LibraryJudge:
    """Reward 1 when the episode's session reserved the task's book and no other, else 0."""

    model_id = "larkspur-truth"

    def __init__(self, truth_url: str):
        self.truth_url = truth_url

    def reserved(self, session: str) -> list[str]:
        """The books `session` reserved, from the truth listener."""
        try:
            with _NO_PROXY.open(f"{self.truth_url}/truth/{session}", timeout=10) as reply:
                return json.load(reply)["reserved"]
        except OSError as exc:  # an infrastructure failure, not the agent's: the runner records it so
            raise JudgeUnavailable(f"the truth of session {session} could not be read: {exc}") from exc

    async def score(self, episode: Episode) -> JudgeResult:
        session, book = session_of(episode), book_of(episode.task)
        reserved = await asyncio.to_thread(self.reserved, session) if session else []
        verdicts = (Verdict("reserved", book in reserved, f"reserved {reserved}, expected {book!r}"),
                    Verdict("nothing_else", set(reserved) <= {book}, f"reserved {reserved}"))
        passed = all(v.passed for v in verdicts)
        return JudgeResult(reward=1.0 if passed else 0.0, verdicts=verdicts, judge_model=self.model_id)
# --8<-- [end:judge]
