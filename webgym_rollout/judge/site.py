"""`SiteJudge`: a generated local-site task judged against the site's ground truth, not by a model.

A task from `webgym_sites.shop_tasks` carries one machine check per rubric fact
(`webgym_sites.goals`). The judge finds the task among the tasks it was given by
the request's task id (else by its instruction; a decomposition's subtask is checked on its own fact
groups, which needs its parent among the tasks), reads the episode's session id from the
``session`` parameter of the first visited URL that has one (the toolkit opens the start URL with
``?session=<id>``, `webgym_sites.state.with_session`), asks `facts` for that
session's `SessionFacts` (in-process `SiteServer.facts`, or `TruthClient.facts` for a site server
elsewhere) and checks each fact; a task with a definite answer also needs the final answer to
state it as its answer facts are stated (`answer_holds`: each value and name it holds, and no other
value of those kinds, no other of the task's candidate names). The reward is 1 only if every
criterion passes (`site_verdicts`, which ``webgym-rollout judge-eval`` also applies to stored facts).

A truth read that fails (`TruthUnavailable`: the listener did not answer, or not in time) is an
infrastructure failure of the judge, not a verdict: it is tried again ``truth_retries`` times with
exponential backoff, then `score` raises `JudgeTimeout` (the last try timed out) or
`JudgeUnavailable`, and the runner records the episode as ``error:judge_timeout`` /
``error:judge_unavailable``. The facts are a snapshot (`webgym_sites.router`), so a
request the agent left running does not hold the read up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from webgym_data.schema import Task
from webgym_rollout.errors import JudgeTimeout, JudgeUnavailable
from webgym_rollout.judge.judges import JudgeResult, judged_episode
from webgym_rollout.trajectory.contract import Episode, Verdict
from webgym_sites.answers import answer_holds
from webgym_sites.errors import TruthTimeout, TruthUnavailable
from webgym_sites.facts import SessionFacts
from webgym_sites.goals import answer_names, check_task, task_checks
from webgym_sites.state import session_in

__all__ = ["SiteJudge", "answer_holds", "site_verdicts"]

log = logging.getLogger(__name__)


class SiteJudge:
    """Judges the generated tasks of the local sites by their ground truth. A failed truth read is
    tried again `truth_retries` times, `backoff_s` seconds later, then twice that, and so on."""

    model_id = "site-truth"

    def __init__(self, facts: Callable[[str], SessionFacts], tasks: Iterable[Task], *, truth_retries: int = 3,
                 backoff_s: float = 0.5):
        if truth_retries < 0:
            raise ValueError(f"truth_retries: must be >= 0, got {truth_retries}")
        self._facts = facts
        self.truth_retries, self.backoff_s = truth_retries, backoff_s
        tasks = list(tasks)
        self._by_id = {task.task_id: task for task in tasks}
        self._by_name = {task.task_name: task for task in tasks}

    async def score(self, episode: Episode) -> JudgeResult:
        """The verdicts of the judge's own record of the episode's task (found by its id, else by
        its instruction), checked against the truth of the session the visited URLs name."""
        episode = judged_episode(episode)
        played = episode.task
        task = self._by_id.get(played.task_id) or self._by_name.get(played.task_name)
        if task is None:
            return JudgeResult(0.0, (Verdict("task", False, "not one of the judge's site tasks"),),
                               self.model_id)
        session = session_in([step.url for step in episode.steps])
        if not session:
            return JudgeResult(0.0, (Verdict("session", False, "no visited URL carries ?session="),),
                               self.model_id)
        facts = await self._read_facts(session)
        verdicts = site_verdicts(task, facts, episode.answer, self._by_id.get(task.parent_task_id))
        reward = 1.0 if verdicts and all(v.passed for v in verdicts) else 0.0
        return JudgeResult(reward, tuple(verdicts), self.model_id)

    async def _read_facts(self, session: str) -> SessionFacts:
        """The facts of `session`, the read tried again on `TruthUnavailable`; after the retries,
        `JudgeTimeout` (the last try timed out) or `JudgeUnavailable`, naming the session."""
        for attempt in range(self.truth_retries + 1):
            try:
                return await asyncio.to_thread(self._facts, session)
            except TruthUnavailable as exc:
                if attempt == self.truth_retries:
                    error = JudgeTimeout if isinstance(exc, TruthTimeout) else JudgeUnavailable
                    raise error(f"the truth of session {session} could not be read "
                                f"(after {attempt + 1} attempts): {exc}") from exc
                delay = self.backoff_s * 2 ** attempt
                log.info("the truth of session %s could not be read (%s); retry %d in %.2f s", session, exc,
                         attempt + 1, delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")


def site_verdicts(task: Task, facts: SessionFacts, answer: str, parent: Task | None = None) -> list[Verdict]:
    """One verdict per rubric fact of the generated site task `task` (``fact:<group>:<n>``, checked
    against the session's `facts` and the final `answer`), then ``definite_answer`` when the task
    has one. The episode passes when there is a verdict and every one passed. Raises ValueError
    when the task carries no checks (`task_checks`; a decomposition's subtask needs its `parent`)."""
    results = iter(check_task(task, facts, answer, parent))
    verdicts = []
    for group in task.evaluator_reference:
        for n, text in enumerate(group.facts):
            verdicts.append(Verdict(f"fact:{group.id}:{n}", next(results), text))
    if task.definite_answer:
        names, candidates = answer_names(task_checks(task, parent))
        passed = answer_holds(task.definite_answer, answer, names=names, candidates=candidates)
        verdicts.append(Verdict("definite_answer", passed,
                                f"expected {task.definite_answer!r} in the answer {answer!r}"))
    return verdicts
