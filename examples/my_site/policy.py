"""`Librarian`: a scripted policy for the Larkspur Library, honest or not.

It reads the title to reserve from the instruction, clicks through the site by the page's element
list (``click_element``, so it needs no pixel coordinates), reserves, and answers. ``wrong=True``
reserves another book instead: an episode the judge must score 0. A model behind an
OpenAI-compatible endpoint plays the same tasks with ``OpenAIPolicy``.
"""

from __future__ import annotations

import re

from webgym_rollout.actions import AgentAction
from webgym_rollout.agent.policies import PolicyOutput
from webgym_rollout.agent.protocol import Observation

_TITLE = re.compile(r'"([^"]+)"')


# --8<-- [start:policy]
class Librarian:
    """Reserves the instruction's book (or, `wrong`, another one), then answers."""

    observes_elements = True  # the runner reads each page's interactive elements for it

    def __init__(self, *, wrong: bool = False):
        self.wrong = wrong
        self.model_id = "librarian-wrong" if wrong else "librarian"

    async def act(self, observation: Observation) -> PolicyOutput:
        title = _TITLE.search(observation.instruction).group(1)
        texts = [element.text.strip() for element in observation.elements]
        if observation.title.startswith("My reservations"):
            action = AgentAction("answer", text="Reserved.")
        elif "Reserve this book" in texts:
            action = _click(texts, "Reserve this book")
        elif self.wrong and observation.title.startswith("All books"):
            action = _click(texts, next(text for text in texts if text not in (title, "Larkspur Library",
                                                                                "My reservations")))
        elif title in texts and not self.wrong:
            action = _click(texts, title)
        else:
            action = _click(texts, "All books")
        return PolicyOutput.scripted(action, model=self.model_id)
# --8<-- [end:policy]


def _click(texts: list[str], text: str) -> AgentAction:
    """A click on the first element whose text is `text` (elements are numbered from 1)."""
    return AgentAction("click_element", element=texts.index(text) + 1)
